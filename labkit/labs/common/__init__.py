"""Helpers every lab uses (labs/README.md lists them):

    from labkit.labs.common import FAST, fast, predict, show_source, once, cite, Table, style, COLORS
"""

from labkit.labs.common.display import FAST, fast, predict, show_source
from labkit.labs.common.lazy import once
from labkit.labs.common.machine import memory_budget
from labkit.labs.common.references import cite
from labkit.report.figures import COLORS, style
from labkit.report.tables import Table

__all__ = ["COLORS", "FAST", "Table", "cite", "fast", "memory_budget", "once", "predict", "show_source", "style"]
