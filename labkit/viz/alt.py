"""Alternative text for every figure: what a screen reader says, and what the site shows in an image's `alt`.

A picture says nothing to a reader who cannot see it. Every plotting function in labkit.viz is wrapped in
`with_alt_text(lead)`: after it draws, the Figure gets an alternative text made of the function's own
sentence (`lead`, what kind of figure it is) and a description read back from what was drawn: each
panel's title and axis labels, each named line with its number of points and its first and last values,
the bars with their labels and lengths, a heatmap's size and range. The numbers are the figure's own, so
the text cannot drift from the picture.

How the text reaches a notebook's saved output: IPython lets a display formatter return (data, metadata);
`show_alt_text_in_outputs` wraps the PNG formatter for Figures so that a figure with an alternative
text is displayed with the metadata `{"image/png": {"alt": text}}`. Jupyter saves that metadata in the
.ipynb beside the PNG, and nbconvert's HTML templates (and the course site, labkit.course.site) write it
into `<img alt="...">`. It is installed the first time a figure gets a text inside a kernel, so importing
labkit changes nothing; outside IPython it does nothing.

    >>> fig, ax = plt.subplots(); ax.bar(["a", "b"], [0.7, 0.3]); ax.set_title("Next token")
    >>> set_alt_text(fig, "Bar chart of two tokens")
    >>> alt_text(fig)
    'Bar chart of two tokens. Next token: 2 bars: a 0.7, b 0.3.'
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import numpy as np
from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.figure import Figure, SubFigure
from matplotlib.image import AxesImage

ALT_ATTRIBUTE = "labkit_alt_text"  # where a Figure keeps its text (matplotlib has no field of its own for it)
MAX_LINES = 6  # lines described one by one; more are counted
MAX_BARS = 8  # bars named one by one; more are counted


def number(value: float) -> str:
    """A short, readable number: 0.7, 1,234, 3.1e-05."""
    value = float(value)
    if value != value:
        return "no value"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def figure_of(drawn: object) -> Figure | None:
    """The Figure behind what a plotting function returned: a Figure, an Axes, or a sequence of Axes."""
    if isinstance(drawn, SubFigure):
        return drawn.figure
    if isinstance(drawn, Figure):
        return drawn
    if isinstance(drawn, Axes):
        return drawn.figure
    if isinstance(drawn, np.ndarray):
        drawn = drawn.ravel().tolist()
    if isinstance(drawn, (list, tuple)):
        for item in drawn:
            if (found := figure_of(item)) is not None:
                return found
    return None


def tick_names(ax: Axes, horizontal: bool) -> dict[float, str]:
    """Categorical tick positions -> their labels, on the axis that names the bars."""
    axis = ax.yaxis if horizontal else ax.xaxis
    labels = [label.get_text() for label in axis.get_ticklabels()]
    return {float(tick): text for tick, text in zip(axis.get_ticklocs(), labels) if text}


def nearest_name(names: dict[float, str], position: float) -> str:
    """The label of the tick nearest `position`, if it is within half a tick's spacing (grouped bars sit
    beside their tick), else ''."""
    if not names:
        return ""
    ticks = sorted(names)
    spacing = min((b - a for a, b in zip(ticks, ticks[1:])), default=1.0)
    nearest = min(ticks, key=lambda tick: abs(tick - position))
    return names[nearest] if abs(nearest - position) < spacing / 2 else ""


def describe_bars(ax: Axes, bars: BarContainer) -> str:
    """'3 bars: ' and each bar's label and length (the first MAX_BARS), e.g. "'Paris' 0.82"."""
    patches = list(bars.patches)
    horizontal = (
        bool(patches)
        and all(p.get_height() < 1 and p.get_width() != 0 for p in patches)
        and len({round(p.get_x(), 9) for p in patches}) == 1
        and len({round(p.get_y(), 9) for p in patches}) > 1
    )
    names = tick_names(ax, horizontal)
    parts = []
    for patch in patches[:MAX_BARS]:
        position = (
            patch.get_y() + patch.get_height() / 2 if horizontal else patch.get_x() + patch.get_width() / 2
        )
        length = patch.get_width() if horizontal else patch.get_height()
        name = nearest_name(names, position)
        parts.append(f"{name} {number(length)}".strip())
    more = f", and {len(patches) - MAX_BARS} more" if len(patches) > MAX_BARS else ""
    label = bars.get_label()
    named = f"{label}: " if label and not label.startswith("_") else ""
    return f"{named}{len(patches)} bars: {', '.join(parts)}{more}"


def describe_line(line) -> str:
    """ "measured: 6 points, x 1 to 32, y 12.5 to 3.1" for one named line."""
    xs, ys = np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)
    if xs.size == 0:
        return ""
    return (
        f"{line.get_label()}: {xs.size} points, x {number(xs[0])} to {number(xs[-1])}, "
        f"y {number(ys[0])} to {number(ys[-1])}"
    )


def describe_axes(ax: Axes) -> str:
    """One panel in words: its title, its axes and what is drawn on it."""
    head = ax.get_title() or ax.get_title(loc="left")
    axes = [
        f"{name} axis: {label}" for name, label in (("x", ax.get_xlabel()), ("y", ax.get_ylabel())) if label
    ]
    parts = [", ".join(axes)] if axes else []
    named_lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    parts += [text for text in map(describe_line, named_lines[:MAX_LINES]) if text]
    if len(named_lines) > MAX_LINES:
        parts.append(f"{len(named_lines) - MAX_LINES} more lines")
    unnamed = len(ax.get_lines()) - len(named_lines)
    if unnamed and not named_lines:
        parts.append(f"{unnamed} line{'s' if unnamed > 1 else ''}")
    parts += [describe_bars(ax, bars) for bars in ax.containers if isinstance(bars, BarContainer)]
    for image in (artist for artist in ax.get_images() if isinstance(artist, AxesImage)):
        values = np.asarray(image.get_array(), dtype=float)
        parts.append(
            f"a heatmap of {values.shape[0]} by {values.shape[1]} cells, values "
            f"{number(np.nanmin(values))} to {number(np.nanmax(values))}"
        )
    points = sum(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets"))
    if points and not ax.get_images():
        parts.append(f"{points} marked points")
    body = "; ".join(part for part in parts if part)
    return f"{head}: {body}" if head and body else head or body


def describe_figure(fig: Figure) -> str:
    """Every visible panel of `fig` described, panel after panel (colour bars left out)."""
    panels = [ax for ax in fig.get_axes() if ax.get_visible() and ax.get_label() != "<colorbar>"]
    described = [text for text in map(describe_axes, panels) if text]
    if fig.get_suptitle():
        described.insert(0, fig.get_suptitle())
    return ". ".join(described)


def set_alt_text(drawn: Figure | Axes, lead: str) -> Figure:
    """Give the figure behind `drawn` its alternative text: `lead` (what kind of figure it is), then what
    was drawn (describe_figure); returns the Figure. Displayed in a kernel, the PNG carries it as `alt`.

        >>> fig = set_alt_text(ax, "Line chart of the decode time against the batch size")
    """
    if not isinstance(lead, str) or not lead.strip():
        raise ValueError(f"lead must be a non-empty sentence saying what the figure shows, got {lead!r}.")
    fig = figure_of(drawn)
    if fig is None:
        raise TypeError(f"drawn must be a matplotlib Figure or Axes, got {type(drawn).__name__}.")
    details = describe_figure(fig)
    text = f"{lead.rstrip('.')}. {details}." if details else f"{lead.rstrip('.')}."
    setattr(fig, ALT_ATTRIBUTE, text.replace("..", "."))
    show_alt_text_in_outputs()
    return fig


def alt_text(fig: Figure) -> str | None:
    """The alternative text `set_alt_text` gave `fig`, or None."""
    return getattr(fig, ALT_ATTRIBUTE, None)


def with_alt_text(lead: str) -> Callable[[Callable], Callable]:
    """Decorate a plotting function so that the figure it returns (or draws on) gets an alternative text
    that starts with `lead`. The function is marked (`.alt_text_lead`) so a test can find every one.

        >>> @with_alt_text("Bar chart of each step's share of the time")
        ... def plot_breakdown(shares): ...
    """

    def decorate(plot: Callable) -> Callable:
        @functools.wraps(plot)
        def plot_with_alt_text(*args, **kwargs):
            drawn = plot(*args, **kwargs)
            if figure_of(drawn) is not None:
                set_alt_text(drawn, lead)
            return drawn

        plot_with_alt_text.alt_text_lead = lead
        return plot_with_alt_text

    return decorate


def fallback_alt_text(fig: Figure) -> str | None:
    """The text of a figure drawn without labkit.viz (a notebook's own plt.subplots()): what was drawn, after
    the lead "Figure"; None when nothing is described (an empty figure).

        >>> fig, ax = plt.subplots(); ax.bar(["a", "b"], [0.7, 0.3]); ax.set_title("Next token")
        >>> fallback_alt_text(fig)
        'Figure. Next token: 2 bars: a 0.7, b 0.3.'
    """
    details = describe_figure(fig)
    return f"Figure. {details}." if details else None


def png_with_alt(render_png: Callable[[Figure], object]) -> Callable[[Figure], object]:
    """Wrap IPython's PNG formatter for Figures: a figure returns (png, {"alt": ...}), with the text
    set_alt_text gave it or, for a figure made outside labkit.viz, fallback_alt_text."""

    def render(fig: Figure):
        png = render_png(fig)
        text = alt_text(fig) or fallback_alt_text(fig)
        if png is None or not text:
            return png
        data, metadata = png if isinstance(png, tuple) else (png, {})  # retina PNGs come with their size
        return data, {**metadata, "alt": text}

    render.labkit_alt = True
    return render


def show_alt_text_in_outputs(formats: Iterable[str] = ("image/png",)) -> bool:
    """In a kernel, make Figures display with their alternative text in the output's metadata; True when
    it is (or already was) in place, False outside IPython or before matplotlib's inline backend is set."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    if shell is None:
        return False
    import matplotlib.pyplot as plt

    if Figure not in shell.display_formatter.formatters["image/png"].type_printers and not plt.get_fignums():
        plt.switch_backend(plt.get_backend())  # pyplot sets up its backend, and its formatter, at the first
        # figure; with no figure open yet (switching closes them all), set it up now so there is one to wrap
    installed = True
    for mime in formats:
        formatter = shell.display_formatter.formatters[mime]
        current = formatter.lookup_by_type(Figure) if Figure in formatter.type_printers else None
        if current is None:
            installed = False
        elif not getattr(current, "labkit_alt", False):
            formatter.for_type(Figure, png_with_alt(current))
    return installed
