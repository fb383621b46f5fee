"""Measure, record, then narrate: one typed record per measuring section of a lab.

A lab section that measures something returns a :class:`SectionRecord` — the machine it ran on
(:class:`RunContext`: CPU line, torch's ISA level, threads, cores, load, fast or full mode), the raw
rounds, the computed values and the verdicts — and everything the learner reads about *this run*
(tables, figure titles, verdict sentences, quiz feedback that refers to the run) is rendered from the
record alone, by a pure function. So the same cell can be rendered from a record made on another
CPU, and tests can render it from records where each verdict falls each way.

API (small on purpose)::

    from labkit.labs.common.records import SectionRecord, RunContext, save_record, load_bundle

    rec = SectionRecord(lab="02", section="7-attention-cost", context=RunContext.current(),
                        rounds={"paged": [...], "contiguous": [...]},     # raw per-round numbers
                        values={"context": 512},                          # computed values
                        verdicts={"paged_vs_contiguous": comparison.verdict})
    save_record(rec)                    # beside the learner's results summary (see below)
    rec.verdict("paged_vs_contiguous")  # the Verdict again, rebuilt from the record's JSON
    bundle = load_bundle("data/lab-runs/amd-epyc-avx512-bf16/fast")
    bundle["02"]["7-attention-cost"]    # -> SectionRecord

Rendering convention: every measuring section has a pure function ``render_<section>(record)``
(in the lab's ``views`` module or beside its measurement) returning a :class:`Narration`: the
sentences, the table rows and the figure title the learner reads, and ``claims`` — the outcome
each decides, as ``{claim id: value}`` (e.g. ``{"paging_cost": "same"}``). Tests render every
section from every recorded bundle and from counterfactual records and check that the sentence, the
table and the title agree, and that no static text of the lab states an outcome a record reverses.

Where records go:

- the learner's run: ``<results dir>/records/labNN/<section>.json`` beside the results summary
  (``labkit.report.results.results_dir()``: ``./results`` or ``LABKIT_RESULTS``);
- ``LABKIT_RECORDS=<dir>`` sends them to ``<dir>/labNN/<section>.json`` instead: ``make record``
  uses it to write a *bundle*, one directory per CPU kind and mode
  (``data/lab-runs/<cpu kind>/<fast|full>/``), holding every section's records.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from labkit.report.results import finite

SCHEMA = "labkit-record/1"
MODES = ("fast", "full")
_LAB_ID = re.compile(r"^[0-9]{2}$")
_SECTION_ID = re.compile(r"^[0-9A-Za-z][0-9A-Za-z._-]*$")


# ----------------------------------------------------------------------------- the machine

def cpu_kind(cpu: str | None = None, flags: frozenset[str] | None = None) -> str:
    """A short folder name for a CPU kind, e.g. ``amd-epyc-avx512-bf16`` or
    ``intel-xeon-avx512-no-bf16``: vendor and family words of the model name, torch's ISA level,
    AMX and AVX512_BF16. ``LABKIT_CPU_KIND`` overrides it."""
    override = os.environ.get("LABKIT_CPU_KIND", "").strip()
    if override and cpu is None:
        return _slug(override)
    from labkit.kernels.cpu_features import cpu_flags, describe_cpu

    line = describe_cpu() if cpu is None else cpu
    flags = cpu_flags() if flags is None else flags
    name, _, rest = line.partition(";")
    words = [w for w in re.sub(r"\([^)]*\)", " ", name).replace("CPU", " ").split() if w.isalpha()][:2]
    isa = re.search(r"torch ISA (\S+)", rest)
    parts = [*words, isa.group(1) if isa else "unknown-isa"]
    if "amx_tile" in flags or "; AMX" in line:
        parts.append("amx")
    parts.append("bf16" if ("avx512_bf16" in flags or line.endswith("; AVX512_BF16")) else "no-bf16")
    return _slug("-".join(parts))


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown-cpu"


@dataclass(frozen=True)
class RunContext:
    """Where and how a record was measured. ``load`` is the highest load seen (1-minute average or
    runnable tasks, ``measure.machine_load``); ``busy`` is load above the cores."""

    cpu: str                    # describe_cpu(): model name; torch ISA; AMX; AVX512_BF16
    isa: str                    # torch.backends.cpu.get_cpu_capability()
    threads: int                # torch threads the measurement ran on (LABKIT_THREADS)
    cores: int
    load: float | None
    mode: str                   # "fast" (LABKIT_FAST=1) or "full"
    kind: str = ""              # cpu_kind(): the bundle folder name
    torch: str = ""
    recorded: str = ""          # ISO time, UTC

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        if not isinstance(self.threads, int) or self.threads < 1:
            raise ValueError(f"threads must be a positive integer, got {self.threads!r}")
        if not isinstance(self.cores, int) or self.cores < 1:
            raise ValueError(f"cores must be a positive integer, got {self.cores!r}")

    @property
    def busy(self) -> bool:
        return self.load is not None and self.load > self.cores

    @classmethod
    def current(cls, *, load: float | None = None) -> "RunContext":
        """This machine now (``load`` if the caller measured it, else read now)."""
        import torch

        from labkit.labs.common.measure import cores, describe_machine, machine_load, measure_threads

        return cls(cpu=describe_machine(), isa=str(torch.backends.cpu.get_cpu_capability()),
                   threads=measure_threads(), cores=cores(), load=machine_load() if load is None else load,
                   mode="fast" if os.environ.get("LABKIT_FAST") == "1" else "full", kind=cpu_kind(),
                   torch=torch.__version__,
                   recorded=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    def caption(self) -> str:
        """One line for a table or figure: the CPU, threads, load and mode, in the reader's language."""
        from labkit.i18n import t

        load = "?" if self.load is None else f"{self.load:.1f}"
        mode = t("快速模式", "fast mode") if self.mode == "fast" else t("完整模式", "full mode")
        busy = t("，机器正忙", ", machine busy") if self.busy else ""
        return t(f"{self.cpu}；{self.threads} 个线程；负载 {load}（{self.cores} 个核{busy}）；{mode}",
                 f"{self.cpu}; {self.threads} thread(s); load {load} ({self.cores} cores{busy}); {mode}")


# ----------------------------------------------------------------------------- verdicts as JSON

def verdict_to_dict(verdict) -> dict[str, Any]:
    """A ``measure.Verdict`` as plain JSON (tuples become lists)."""
    return _plain(dataclasses.asdict(verdict))


def verdict_from_dict(data: Mapping[str, Any]):
    """The ``measure.Verdict`` saved by :func:`verdict_to_dict`; unknown keys are an error naming them."""
    from labkit.labs.common.measure import Verdict

    names = {f.name for f in dataclasses.fields(Verdict)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"verdict record has unknown field(s) {unknown}")
    return Verdict.from_entry(data)


# ----------------------------------------------------------------------------- the record

@dataclass(frozen=True)
class SectionRecord:
    """What one measuring section measured. ``rounds``: the raw per-round numbers (name → list);
    ``values``: the computed values the section shows; ``verdicts``: name → ``measure.Verdict`` (or
    its dict). Everything JSON-serialisable; :meth:`to_json` / :meth:`from_json` round-trip."""

    lab: str
    section: str
    context: RunContext
    rounds: Mapping[str, Any] = field(default_factory=dict)
    values: Mapping[str, Any] = field(default_factory=dict)
    verdicts: Mapping[str, Any] = field(default_factory=dict)
    schema: str = SCHEMA

    def __post_init__(self):
        if not isinstance(self.lab, str) or not _LAB_ID.match(self.lab):
            raise ValueError(f"lab must be a two-digit lab number such as '01', got {self.lab!r}")
        if not isinstance(self.section, str) or not _SECTION_ID.match(self.section):
            raise ValueError(f"section must be an id of letters, digits, '.', '_' or '-', got {self.section!r}")
        if not isinstance(self.context, RunContext):
            raise TypeError(f"context must be a RunContext, got {type(self.context).__name__}")
        # store verdicts as dicts so that a record is plain data, equal after a JSON round trip
        object.__setattr__(self, "verdicts", {k: v if isinstance(v, Mapping) else verdict_to_dict(v)
                                              for k, v in self.verdicts.items()})
        object.__setattr__(self, "rounds", _plain(dict(self.rounds)))
        object.__setattr__(self, "values", _plain(dict(self.values)))

    def verdict(self, name: str):
        """The named verdict as a ``measure.Verdict``."""
        if name not in self.verdicts:
            raise KeyError(f"record {self.lab}/{self.section} has no verdict {name!r}; it has {sorted(self.verdicts)}")
        return verdict_from_dict(self.verdicts[name])

    @property
    def busy(self) -> bool:
        return self.context.busy or any(v.get("confidence") == "machine busy" for v in self.verdicts.values())

    def to_dict(self) -> dict[str, Any]:
        return {"schema": self.schema, "lab": self.lab, "section": self.section,
                "context": dataclasses.asdict(self.context), "rounds": self.rounds, "values": self.values,
                "verdicts": self.verdicts}

    def to_json(self) -> str:
        return json.dumps(finite(self.to_dict()), ensure_ascii=False, indent=1, allow_nan=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SectionRecord":
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a labkit section record (schema {data.get('schema')!r}, expected {SCHEMA!r})")
        ctx = data.get("context")
        if not isinstance(ctx, Mapping):
            raise ValueError("section record has no 'context' object")
        return cls(lab=data["lab"], section=data["section"], context=RunContext(**ctx),
                   rounds=data.get("rounds") or {}, values=data.get("values") or {},
                   verdicts=data.get("verdicts") or {})

    @classmethod
    def from_json(cls, text: str) -> "SectionRecord":
        return cls.from_dict(json.loads(text))

    def replace(self, **changes) -> "SectionRecord":
        """A copy with fields changed (tests build counterfactual records this way)."""
        return dataclasses.replace(self, **changes)

    def with_verdict(self, name: str, **changes) -> "SectionRecord":
        """A copy whose verdict ``name`` has fields changed (e.g. ``direction="less"``)."""
        verdicts = dict(self.verdicts)
        verdicts[name] = {**verdicts[name], **_plain(changes)}
        verdict_from_dict(verdicts[name])       # still a valid verdict
        return dataclasses.replace(self, verdicts=verdicts)


@dataclass(frozen=True)
class Narration:
    """What a section's renderer returns: everything the learner reads about the run."""

    sentences: tuple[str, ...] = ()
    rows: tuple[tuple[Any, ...], ...] = ()
    title: str = ""
    claims: Mapping[str, str] = field(default_factory=dict)   # outcome id -> value decided by the record

    @property
    def text(self) -> str:
        return "\n".join(self.sentences)


# ----------------------------------------------------------------------------- saving and loading

def records_dir() -> Path:
    """``LABKIT_RECORDS`` (a bundle folder) if set, else ``records/`` beside the results summary."""
    configured = os.environ.get("LABKIT_RECORDS", "").strip()
    if configured:
        return Path(configured)
    from labkit.report.results import results_dir

    return results_dir() / "records"


def record_path(lab: str, section: str, root: Path | None = None) -> Path:
    return (root or records_dir()) / f"lab{lab}" / f"{section}.json"


def save_record(rec: SectionRecord, root: Path | str | None = None) -> Path | None:
    """Write ``rec`` atomically to ``<root>/labNN/<section>.json`` (root: :func:`records_dir`).
    Returns the path, or None when the folder cannot be written (a read-only workspace must not
    stop a lab)."""
    path = record_path(rec.lab, rec.section, Path(root) if root is not None else None)
    text = rec.to_json()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        return None
    return path


def load_record(path: Path | str) -> SectionRecord:
    path = Path(path)
    try:
        return SectionRecord.from_json(path.read_text(encoding="utf-8"))
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{path}: {e}") from e


def load_bundle(path: Path | str) -> dict[str, dict[str, SectionRecord]]:
    """Every record under a bundle folder: ``{lab: {section: SectionRecord}}``. A file that is not a
    record is an error naming the file (a bundle in the repo must be whole)."""
    root = Path(path)
    if not root.is_dir():
        raise FileNotFoundError(f"no bundle folder at {root}")
    bundle: dict[str, dict[str, SectionRecord]] = {}
    for file in sorted(root.glob("lab[0-9][0-9]/*.json")):
        rec = load_record(file)
        if f"lab{rec.lab}" != file.parent.name or rec.section != file.stem:
            raise ValueError(f"{file}: holds record {rec.lab}/{rec.section}, not what its path says")
        bundle.setdefault(rec.lab, {})[rec.section] = rec
    return bundle


def find_bundles(*roots: Path | str) -> dict[str, Path]:
    """Bundle folders ``<root>/<cpu kind>/<mode>/`` holding at least one record: ``{"kind/mode": path}``. The
    folder may also say how it was recorded after the mode: ``fast-busy2`` (beside two busy loops)."""
    found: dict[str, Path] = {}
    for root in roots:
        root = Path(root)
        if not root.is_dir():
            continue
        for mode_dir in sorted(root.glob("*/*")):
            if (mode_dir.is_dir() and mode_dir.name.split("-", 1)[0] in MODES
                    and any(mode_dir.glob("lab[0-9][0-9]/*.json"))):
                found[f"{mode_dir.parent.name}/{mode_dir.name}"] = mode_dir
    return found


# ----------------------------------------------------------------------------- JSON helpers

def _plain(value: Any) -> Any:
    """Tuples as lists, numpy/torch scalars as numbers, dataclasses as dicts: plain JSON values."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if type(value).__name__ == "Verdict":
            return verdict_to_dict(value)
        return _plain(dataclasses.asdict(value))
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        return value.item()
    return value
