"""Show labkit's own source, highlighted, with its file and line numbers (labs, exercise solutions).

    show_source(BlockPool.allocate)
"""

from __future__ import annotations

import html
import inspect
import os
from typing import Any

from IPython.display import HTML, display

from labkit.i18n import t

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _display_path(path: str) -> str:
    path = os.path.abspath(path)
    return os.path.relpath(path, _REPO_ROOT) if path.startswith(_REPO_ROOT + os.sep) else path


def _highlight(source: str, first_line: int) -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:                       # pygments ships with JupyterLab; plain text otherwise
        return f"<pre>{html.escape(source)}</pre>"
    formatter = HtmlFormatter(noclasses=True, linenos="inline", linenostart=first_line, style="default")
    return highlight(source, PythonLexer(), formatter)


def source_html(obj: Any) -> str:
    """HTML of ``obj``'s source (function, class, method or module), titled with file and lines."""
    lines, first = inspect.getsourcelines(obj)
    first = max(first, 1)
    path = _display_path(inspect.getsourcefile(obj) or "?")
    where = t(f"{path}，第 {first}–{first + len(lines) - 1} 行", f"{path}, lines {first}–{first + len(lines) - 1}")
    return (f'<div style="border:1px solid #ddd;border-radius:4px;margin:4px 0;overflow-x:auto">'
            f'<div style="background:#f5f5f5;padding:2px 8px;font-size:85%;color:#555">{html.escape(where)}</div>'
            f'<div style="padding:0 8px;font-size:90%">{_highlight("".join(lines), first)}</div></div>')


def show_source(obj: Any) -> None:
    """Display the source of a labkit function or class with syntax highlighting."""
    display(HTML(source_html(obj)))
