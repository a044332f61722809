"""nbconvert settings for `make slides`: decks that load every script, style and font from slides/vendor/,
without the worked solutions.

The packages come from the npm registry (see SLIDE_PACKAGES in the Makefile), unpacked once into
slides/vendor/NAME-VERSION/; the URLs below are relative to the decks, which are written to slides/.

    jupyter nbconvert --config slides/offline_decks.py --to slides --output-dir slides notebooks/*.ipynb
"""

VENDOR = "vendor"

c = get_config()  # noqa: F821  (nbconvert provides get_config when it loads this file)
c.SlidesExporter.template_file = "slides/template/offline_deck.html.j2"
c.SlidesExporter.reveal_theme = "white"  # its fonts ship with reveal.js ('simple' imports Google Fonts)
c.SlidesExporter.reveal_url_prefix = f"{VENDOR}/reveal.js-4.0.2"
c.SlidesExporter.require_js_url = f"{VENDOR}/requirejs-2.3.7/require.js"
c.SlidesExporter.jquery_url = f"{VENDOR}/jquery-2.2.4/dist/jquery.min.js"
c.SlidesExporter.mathjax_url = f"{VENDOR}/mathjax-2.7.9/MathJax.js?config=TeX-AMS_CHTML-full,Safe"
c.SlidesExporter.font_awesome_url = f"{VENDOR}/font-awesome-4.7.0/css/font-awesome.css"
c.SlidesExporter.widget_renderer_url = f"{VENDOR}/jupyter-widgets-html-manager-1.0.15/dist/embed-amd.js"
# Worked solutions (cells tagged `solution`, see labkit.course.solutions) never reach a deck.
c.TagRemovePreprocessor.enabled = True
c.TagRemovePreprocessor.remove_cell_tags = {"solution"}
