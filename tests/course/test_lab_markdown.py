"""Every markdown cell of every notebook under labs/ renders as its author meant it (CommonMark).

- Bold next to Chinese full-width punctuation: ``**“连续”**`` is not a CommonMark emphasis (the
  flanking rule), so JupyterLab prints the asterisks. Write ``<b>…</b>`` there.
- Diagrams in fenced code blocks are ASCII only: CJK characters are two columns wide in most fonts
  and one in others, so a diagram mixing them with Latin text misaligns somewhere.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

LABS = Path(__file__).resolve().parents[2] / "labs"
NOTEBOOKS = sorted(p for p in LABS.rglob("*.ipynb") if ".ipynb_checkpoints" not in p.parts)
MATH = re.compile(r"\$\$.*?\$\$|\$[^$\n]+\$", re.S)     # MathJax, not markdown: * means multiply there


def markdown_cells(path: Path) -> list[tuple[int, str]]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [(i, "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def literal_asterisks(source: str) -> list[str]:
    """Text runs that would show ``**`` after rendering (outside code and math)."""
    tokens = MarkdownIt("commonmark").parse(MATH.sub("", source))
    found = []
    for token in tokens:
        for child in token.children or ():
            if child.type == "text" and "**" in child.content:
                found.append(child.content)
    return found


def test_the_checks_catch_what_they_look_for():
    assert literal_asterisks("说清楚**“连续预留”**布局") and not literal_asterisks("说清楚<b>“连续预留”</b>布局")
    assert not literal_asterisks("**学习目标**：做完本实验") and not literal_asterisks("`a**b`")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(LABS).as_posix())
def test_bold_renders_next_to_chinese_punctuation(path):
    bad = [(i, text) for i, source in markdown_cells(path) for text in literal_asterisks(source)]
    assert bad == [], f"literal ** would show (use <b>…</b>): {bad}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.relative_to(LABS).as_posix())
def test_diagrams_are_ascii_only(path):
    md = MarkdownIt("commonmark")
    bad = []
    for i, source in markdown_cells(path):
        for token in md.parse(source):
            if token.type in ("fence", "code_block") and not token.content.isascii():
                lines = [line for line in token.content.splitlines() if not line.isascii()]
                bad.append((i, lines))
    assert bad == [], f"non-ASCII characters in diagrams (they misalign): {bad}"
