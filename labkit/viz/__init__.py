"""Every figure and widget (all notebooks): the only code that imports matplotlib or ipywidgets."""
