"""Every figure and widget (all notebooks): the only code that imports matplotlib or ipywidgets.

In a kernel, importing any of these modules makes every figure display with its alternative text, also the
figures a notebook draws itself (labkit.viz.alt.show_alt_text_in_outputs).
"""

from labkit.viz.alt import show_alt_text_in_outputs

show_alt_text_in_outputs()
