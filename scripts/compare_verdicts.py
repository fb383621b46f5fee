"""Compare the verdicts two runs of the labs recorded (e.g. idle and beside busy loops).

    python scripts/time_labs.py --keep-results /tmp/idle
    python scripts/time_labs.py --busy 2 --keep-results /tmp/busy
    python scripts/compare_verdicts.py /tmp/idle /tmp/busy

For every verdict id present in both runs' ``labNN.json`` summaries it prints both directions and
confidences. A *contradiction* is a verdict that is clear in one run and clear in the opposite
direction in the other; a hedged verdict (within noise, machine busy) never contradicts. The exit
status is 1 when there is a contradiction, so the script can gate a release check.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def verdicts(folder: Path) -> dict[tuple[str, str], dict]:
    out = {}
    for path in sorted(folder.glob("lab*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        for key, entry in (data.get("verdicts") or {}).items():
            if isinstance(entry, dict) and "direction" in entry:
                out[(path.stem, key)] = entry
    return out


def contradicts(a: dict, b: dict) -> bool:
    return (a.get("confidence") == "clear" and b.get("confidence") == "clear"
            and a.get("direction") != b.get("direction"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path, help="results folder of the reference run (e.g. idle)")
    parser.add_argument("second", type=Path, help="results folder of the other run (e.g. busy)")
    args = parser.parse_args(argv)
    for folder in (args.first, args.second):
        if not folder.is_dir():
            parser.error(f"{folder}: not a folder of results summaries")
    a, b = verdicts(args.first), verdicts(args.second)
    common = sorted(set(a) & set(b))
    bad = 0
    for key in common:
        x, y = a[key], b[key]
        flag = "CONTRADICTS" if contradicts(x, y) else ""
        bad += bool(flag)
        print(f"{key[0]} {key[1]:<48} {x['direction']:>7} {x['confidence']:<13} {x.get('ratio', float('nan')):7.3f} | "
              f"{y['direction']:>7} {y['confidence']:<13} {y.get('ratio', float('nan')):7.3f} {flag}")
    same = sum(a[k]["direction"] == b[k]["direction"] and a[k]["confidence"] == b[k]["confidence"] for k in common)
    print(f"{len(common)} verdicts in both runs ({len(set(a) - set(b))} only in the first, {len(set(b) - set(a))} "
          f"only in the second); {same} identical; {bad} contradictions")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
