"""Sphinx configuration of the course site (`make book`; scripts/build_book.py stages the sources)."""

project = "labkit — 流式 LLM 推理性能优化 实验室"
author = "labkit"
language = "zh_CN"
# Sphinx's Chinese search needs jieba at build time and a stemmer script it does not ship: search the index
# as words instead (a page error in chromium otherwise).
html_search_language = "en"
extensions = ["myst_nb"]
# The labs arrive executed (scripts/build_book.py runs them in fast mode, each recorded section rendered from a
# quiet recorded bundle, or takes the copies the test suite executed); the site never runs code.
nb_execution_mode = "off"
nb_render_markdown_format = "myst"
myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3
suppress_warnings = ["myst.header"]        # the labs' headings start at level 2 under their titles
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
html_theme = "sphinx_book_theme"
html_title = "labkit 实验室"
html_static_path = ["_static"]
# plotly.js from the plotly package, served with the site: the figures render offline
html_js_files = ["plotly.min.js"]
# Widget outputs become a note on the site (they run only in JupyterLab), so MyST-NB's widget manager, which it
# would load from two CDNs for any notebook that saved widget state, has nothing to draw: none is loaded.
nb_ipywidgets_js = {}
html_theme_options = {"show_toc_level": 2, "use_download_button": True}
