"""Regenerate docs/performance.md from the benchmark reports `make bench` saved under bench/reports/.

    .venv/bin/python scripts/performance_page.py            # writes docs/performance.md
    .venv/bin/python scripts/performance_page.py --check    # exit 1 if the page is not what the files give

One section per CPU kind (a folder of bench/reports/, named from the CPU line every report prints), each
benchmark's latest report in it as `make bench` printed it: its tables, its CPU line, date and command.
A new run on the same CPU kind replaces the old report; superseded figures live in git history.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "reports"
PAGE = REPO / "docs" / "performance.md"

INTRO = """# Performance

Every figure here was measured by a benchmark in `bench/` on the CPU named above its tables, and
is regenerated from the saved reports by one command: `make bench` runs the benchmarks and saves each
report under `bench/reports/<CPU kind>/`, then `scripts/performance_page.py` writes this page. (Single
benchmarks save too when run with `LABKIT_BENCH_RESULTS=bench/reports`.) How the numbers are taken:

- Speed-ups are ratios against a baseline run in the same process, interleaved in rounds, with the median
  and the range shown; never a fixed timing. On one thread the clock is the process CPU time (another
  program on the machine does not count); on more, the wall clock.
- Each report prints the CPU line (model name, PyTorch's vector ISA, AMX, AVX512_BF16), the thread count,
  the load average and the exact command. Your machine will differ: run the command.
- The labs measure on one thread; a script of your own uses every core (see `bench.llama_cpp_peer
  --threads 1,cores`).
- Other CPU kinds on one machine: `bench.isa_levels` builds labkit's C kernels for each instruction-set
  level the CPU can run (`LABKIT_ISA`: generic, AVX2, AVX-512 without and with AVX512_BF16) and times each
  in its own process, one table per level with its CPU line. That is each level's code on this machine's
  caches and memory, not another machine's speed.

"""


# The benchmarks name the tracker issue behind a target ("target (issue 30):"); the page is for readers.
ISSUE_NOTE = re.compile(r"\s*\(issues? \d+(?:(?:, | and )\d+)*(?:, [^)]*)?\)")


def demote(text: str) -> str:
    """A report's headings one level down for the page (its title a level-3 heading), issue notes out."""
    out = []
    for line in text.splitlines():
        line = ISSUE_NOTE.sub("", line)
        out.append("##" + line if line.startswith("#") else line)
    return "\n".join(out).strip() + "\n"


PEER_TABLE = re.compile(r"^#+ Batch-(\d+) decode, (\d+) thread\(s\)")
# ... and in the report of `bench.llama_cpp_peer --isa`, each table under its forced level
LEVEL_TABLE = re.compile(r"^#+ LABKIT_ISA=(\w+): Batch-(\d+) decode, (\d+) thread\(s\)")
PRECISIONS = ("fp32", "bf16", "q4_1")


def peer_ratios(report: str) -> list[tuple[str, str, dict[str, str]]]:
    """From a `bench.llama_cpp_peer` report: (batch, threads, {precision: "labkit / llama.cpp" ratio}) per table."""
    return _ratios(report, PEER_TABLE)


def level_ratios(report: str) -> list[tuple[str, str, str, dict[str, str]]]:
    """From a `bench.llama_cpp_peer --isa` report: (level, batch, threads, {precision: ratio or "absent"})."""
    return _ratios(report, LEVEL_TABLE)


def _ratios(report: str, pattern: re.Pattern) -> list[tuple]:
    """Each table ``pattern`` heads: its heading's groups, then {precision: the labkit row's last cell}."""
    rows, current = [], None
    for line in report.splitlines():
        heading = pattern.match(line)
        if heading:
            current = (*heading.groups(), {})
            rows.append(current)
        elif current and line.startswith("| labkit "):
            cells = [c.strip() for c in line.strip("|").split("|")]
            precision = cells[0].removeprefix("labkit ")
            if precision in PRECISIONS and cells[-1]:
                current[-1][precision] = cells[-1]
    return [row for row in rows if row[-1]]


def headline(kinds: list[Path]) -> str:
    """The summary the README points to: labkit ÷ llama.cpp at the same precision, per CPU kind, taken from
    each kind's saved `bench.llama_cpp_peer` report (its full tables follow below)."""
    lines = ["## Headline results", "",
             "Decode tokens/s of labkit divided by llama.cpp's at the same precision, same weights and prompts, "
             "greedy (above 1.00x labkit is faster). Each row comes from the `bench.llama_cpp_peer` report of that "
             "CPU kind below, which has the command, the date, the rounds and the range. A row \"forced LABKIT_ISA=level\" "
             "is labkit's C kernels built for that instruction-set level on that CPU (`bench.llama_cpp_peer --isa`), "
             "against the llama.cpp build its report names (\"absent\": none without AVX-512 was given).", "",
             "| CPU | batch | threads | fp32 | bf16 | q4_1 |", "|---|---|---|---|---|---|"]
    rows = []
    for kind in kinds:
        report = kind / "llama_cpp_peer.md"
        if report.is_file():
            text = report.read_text(encoding="utf-8")
            rows += [_row(_measured_on(text, kind.name), *table) for table in peer_ratios(text)]
    for kind in kinds:           # labkit's C kernels forced to each instruction-set level on that CPU
        for report in sorted(kind.glob("llama_cpp_peer_isa*.md")):   # one per run, named by its levels
            text = report.read_text(encoding="utf-8")
            cpu = _measured_on(text, kind.name)
            rows += [_row(f"{cpu}; forced LABKIT_ISA={level}", *table) for level, *table in level_ratios(text)]
    return "\n".join(lines + rows) + "\n" if rows else ""


def _measured_on(report: str, default: str) -> str:
    """The CPU a saved report names in its ``measured <date> on: <cpu>`` line."""
    return next((line.split("on: ", 1)[1] for line in report.splitlines() if line.startswith("measured ")), default)


def _row(cpu: str, batch: str, threads: str, ratios: dict[str, str]) -> str:
    return f"| {cpu} | {batch} | {threads} | " + " | ".join(ratios.get(p, "—") for p in PRECISIONS) + " |"


def page() -> str:
    parts = [INTRO]
    kinds = sorted(p for p in RESULTS.iterdir() if p.is_dir()) if RESULTS.is_dir() else []
    if not kinds:
        parts.append("No saved reports yet: run `make bench`.\n")
    summary = headline(kinds)
    if summary:
        parts.append(summary)
    for kind in kinds:
        reports = sorted(kind.glob("*.md"))
        first = reports[0].read_text(encoding="utf-8") if reports else ""
        cpu = next((line.split("on: ", 1)[1] for line in first.splitlines() if line.startswith("measured ")), kind.name)
        parts.append(f"## {cpu}\n")
        for report in reports:
            parts.append(demote(report.read_text(encoding="utf-8")))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="exit 1 if docs/performance.md is out of date")
    args = p.parse_args(argv)
    text = page()
    if args.check:
        current = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
        if current != text:
            print("docs/performance.md is not what bench/reports/ gives: run scripts/performance_page.py")
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(REPO)} from {sum(1 for _ in RESULTS.rglob('*.md'))} reports")
    return 0


if __name__ == "__main__":
    sys.exit(main())
