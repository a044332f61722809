"""The course's colour-blind-safe colours: Okabe and Ito's eight, which stay apart for the commonest
colour-vision deficiencies (red-green: deuteranopia, protanopia) and in grey print.

matplotlib's default tab10 puts red beside green; a figure that tells two things apart by that pair alone
(kept vs finished, overhead vs KV cache, a red cross on a green cell) loses the difference for about one man
in twelve. Figures that need named colours take them from here; a difference that matters is also drawn
by shape or line style where it can be (dashed, crossed, a marker).

    >>> ax.plot(xs, ys, color=VERMILLION, ls="--")
"""

ORANGE = "#E69F00"
SKY_BLUE = "#56B4E9"
BLUISH_GREEN = "#009E73"
YELLOW = "#F0E442"
BLUE = "#0072B2"
VERMILLION = "#D55E00"
REDDISH_PURPLE = "#CC79A7"
BLACK = "#000000"
OKABE_ITO = (ORANGE, SKY_BLUE, BLUISH_GREEN, YELLOW, BLUE, VERMILLION, REDDISH_PURPLE, BLACK)
# For lines and points on a white background told apart by colour alone: yellow (too pale) left out.
ON_WHITE = (BLUE, ORANGE, BLUISH_GREEN, VERMILLION, REDDISH_PURPLE, SKY_BLUE, BLACK)


def series_colour(index: int) -> str:
    """The colour of the index-th series of a figure (0, 1, ...), repeating after seven."""
    return ON_WHITE[index % len(ON_WHITE)]
