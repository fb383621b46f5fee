"""What the labs, the assessment and the benchmarks show and keep, below the course content.

    tables    ``Table``: a table that renders as HTML in a notebook and as text in a terminal
    figures   ``style``, ``COLORS``, ``axis_titles``: one look for every plotly figure
    results   a lab's results summary (``results/labNN.json``): what was measured, answered and checked

The labs (``labkit.labs``) build on these; nothing here imports a lab.
"""
