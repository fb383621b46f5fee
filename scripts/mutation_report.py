"""The kill rate per module of the last ``make mutation`` run, read from mutmut's result files.

    .venv/bin/python scripts/mutation_report.py [--survivors] [--markdown]

mutmut keeps one ``mutants/<source path>.meta`` JSON file per mutated module, mapping each mutant's
name to the exit code of the tests run against it (1 or 3: a test failed, the mutant is killed; 0: every
test passed, it survived; 33 or 5: no test calls the mutated function; 36 or SIGXCPU: a time-out,
which counts as killed: the mutant made the tests spin past mutmut's CPU-time limit, an endless loop;
SIGKILL: stopped from outside, e.g. a run that waited past a wall-clock limit, counted apart as "hung"
because a wait can be the test set-up's and not the mutant's). The rate is killed / (every mutant
that was checked). ``--survivors`` lists the surviving mutants' names, which
``mutmut show NAME`` prints as a diff; docs/mutation.md says why each one that is left is equivalent.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

KILLED = {1, 3, 36, 24, -24, 152, 255}           # a failing test, pytest's internal error, a CPU time-out
HUNG = {-9, 137}
SURVIVED = {0}
NO_TESTS = {5, 33}


def outcome(code: int | None) -> str:
    if code is None:
        return "not checked"
    if code in KILLED:
        return "killed"
    if code in SURVIVED:
        return "survived"
    if code in NO_TESTS:
        return "no tests"
    if code in HUNG:
        return "hung"
    return "other"


def read(mutants: Path) -> dict[str, dict[str, int | None]]:
    """{module path: {mutant name: exit code}} for every ``.meta`` file under ``mutants``."""
    out = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        module = meta.relative_to(mutants).as_posix()[: -len(".meta")]
        out[module] = json.loads(meta.read_text())["exit_code_by_key"]
    return out


def table(results: dict[str, dict[str, int | None]]) -> list[list[str]]:
    rows = []
    total: Counter = Counter()
    for module, codes in results.items():
        count = Counter(outcome(c) for c in codes.values())
        total.update(count)
        rows.append([module, *_cells(count)])
    rows.append(["all", *_cells(total)])
    return rows


def _cells(count: Counter) -> list[str]:
    checked = count["killed"] + count["survived"] + count["no tests"] + count["hung"] + count["other"]
    rate = f"{count['killed'] / checked:.1%}" if checked else "-"
    return [str(sum(count.values())), str(count["killed"]), str(count["survived"]), str(count["no tests"]),
            str(count["hung"]), str(count["not checked"]), rate]


HEADERS = ["module", "mutants", "killed", "survived", "no tests", "hung", "not checked", "kill rate"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", type=Path, default=Path("mutants"))
    parser.add_argument("--survivors", action="store_true", help="list every surviving mutant")
    parser.add_argument("--markdown", action="store_true", help="a markdown table")
    args = parser.parse_args()
    results = read(args.mutants)
    if not results:
        raise SystemExit(f"no mutmut results under {args.mutants}/: run `make mutation` first")
    rows = table(results)
    if args.markdown:
        print("| " + " | ".join(HEADERS) + " |")
        print("|" + "---|" * len(HEADERS))
        for row in rows:
            print("| " + " | ".join(row) + " |")
    else:
        widths = [max(len(r[i]) for r in [HEADERS, *rows]) for i in range(len(HEADERS))]
        for row in [HEADERS, *rows]:
            print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    if args.survivors:
        for module, codes in results.items():
            for name, code in sorted(codes.items()):
                if outcome(code) in ("survived", "no tests", "hung"):
                    print(f"{outcome(code):9} {name}")


if __name__ == "__main__":
    main()
