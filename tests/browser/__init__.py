"""Browser tests: JupyterLab and the slide decks in a headless Chromium."""
