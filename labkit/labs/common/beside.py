"""Your run beside the recorded ones: one lab's measuring sections, on your machine and on every CPU a
bundle was recorded on, rendered from records alone.

    from labkit.labs.common.beside import show_beside
    show_beside("04")                    # the last expression of a cell draws the tables
    show_beside("04", lang="en")         # or labkit.set_language("en") for every labkit string

For each recorded section of the lab, one row per run: yours (``records/labNN/<section>.json`` beside
your results summary, when you ran that section) and every bundle under ``data/lab-runs/<cpu kind>/<name>/``
and ``../shared/lab-runs/`` (bundles other machines left; a folder there without records is skipped, and
the notes say why). Each row: the CPU line, mode, load, when it was recorded, the section's headline
verdict as a mark (the direction when it is clear, else the hedge: within noise, machine busy) and its
ratio with the rounds' range. Under the tables, a question written from the rows: where one CPU's clear
verdict differs from another's, it asks why (the chapter's point: what the hardware has to move decides
the bottleneck); where they agree, it asks what kind of CPU would reverse them. No outcome is stated
here in advance: every mark and every clause of the question comes from a record.

The course site (``scripts/build_book.py``) executes the labs with ``LABKIT_SITE_BUNDLE`` pointing at a
quiet recorded bundle: :func:`site_record` then hands each section the bundle's record in place of the
build machine's measurement, and says on the page which CPU, mode, load and date the numbers are from.
The site finds a section by its cell's ``save_record(<name>)`` line and rebinds ``<name>`` to
``site_record(<name>)`` right before it; a section whose cell binds its record to a name, saves it, and
reads everything after from that name is replayed whole (a ``save_record(<expression>)`` is not: the site
says so and shows the build machine's run for it).
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from labkit.labs.common.records import SectionRecord, find_bundles, load_bundle, load_record

REPO = Path(__file__).resolve().parents[3]
REPO_RUNS = REPO / "data" / "lab-runs"
SHARED_RUNS = REPO.parent / "shared" / "lab-runs"
SITE_BUNDLE_ENV = "LABKIT_SITE_BUNDLE"      # the course site's switch: a bundle folder
SITE_LOG_ENV = "LABKIT_SITE_LOG"            # where site_record notes which sections it replayed (JSON lines)

Lang = str


def _t(lang: Lang, zh: str, en: str) -> str:
    return zh if lang == "zh" else en


def _language(lang: str | None) -> Lang:
    from labkit.i18n import get_language

    lang = lang or get_language()
    if lang not in ("zh", "en"):
        raise ValueError(f"lang must be 'zh' or 'en', got {lang!r}")
    return lang


# ----------------------------------------------------------------------------- which verdict heads a section

Phrases = tuple[tuple[str, str], tuple[str, str], tuple[str, str]]     # greater, less, same: (zh, en) each


def phrases(*, greater: tuple[str, str], less: tuple[str, str], same: tuple[str, str]) -> Phrases:
    """What a headline verdict's direction means in words, one (zh, en) pair per direction; the
    verdict picks one, so none of them is a finding on its own."""
    return (greater, less, same)


SPECULATION = phrases(greater=("推测解码划算（更快）", "speculation pays (faster)"),
                      less=("推测解码不划算（更慢）", "speculation does not pay (slower)"),
                      same=("推测解码不赚不赔", "speculation breaks even"))
RECOMPUTE = phrases(greater=("不用缓存更费 CPU 时间", "recomputing costs more CPU time"),
                    less=("不用缓存反而更省 CPU 时间", "recomputing costs less CPU time"),
                    same=("用不用缓存一样费时", "recomputing costs the same"))


def section_label(section: str, lang: Lang) -> str:
    """A record's section id as the learner sees it in the notebook: ``4-matrix`` -> "第 4 节（matrix）" /
    "Section 4 (matrix)"."""
    number, _, slug = section.partition("-")
    return _t(lang, f"第 {number} 节" + (f"（{slug}）" if slug else ""), f"Section {number}" + (f" ({slug})" if slug else ""))


def _numbers(name: str) -> tuple[float, ...]:
    return tuple(float(x) for x in re.findall(r"\d+(?:\.\d+)?", name))


def largest(names: list[str]) -> str | None:
    """The name with the largest number in it (``context_512`` over ``context_64``; ``8`` over ``4``)."""
    numbered = [n for n in names if _numbers(n)]
    return max(numbered, key=lambda n: _numbers(n)[-1]) if numbered else None


def preferring(*wanted: str) -> Callable[[list[str]], str | None]:
    def pick(names: list[str]) -> str | None:
        return next((w for w in wanted if w in names), None)
    return pick


@dataclass(frozen=True)
class Headline:
    """How a section's headline verdict is chosen among the names every run recorded (``pick``; the last
    common name when it returns None) and what its direction means in words (``phrases``, else the
    verdict's own claim compared with 1)."""

    pick: Callable[[list[str]], str | None] = lambda names: None
    phrases: Phrases | None = None


HEADLINES: dict[tuple[str, str], Headline] = {
    ("01", "1.1-growing"): Headline(phrases=RECOMPUTE),
    ("01", "1.2-contexts"): Headline(largest, RECOMPUTE),
    ("01", "2-prefill-decode"): Headline(phrases=phrases(
        greater=("预填充一步比解码一步慢", "a prefill step is slower than a decode step"),
        less=("预填充一步反而比解码一步快", "a prefill step is faster than a decode step"),
        same=("预填充一步和解码一步一样快", "prefill and decode steps take the same"))),
    ("02", "5.1-prefix"): Headline(largest, phrases(
        greater=("前缀缓存缩短了首 token 延迟", "prefix caching shortens the TTFT"),
        less=("前缀缓存反而拉长了首 token 延迟", "prefix caching lengthens the TTFT"),
        same=("前缀缓存不改变首 token 延迟", "prefix caching leaves the TTFT as it is"))),
    ("02", "7-indirection"): Headline(largest, phrases(
        greater=("分页注意力比连续的慢", "paged attention is slower than dense"),
        less=("分页注意力比连续的快", "paged attention is faster than dense"),
        same=("分页和连续注意力一样快", "paged and dense attention are as fast"))),
    ("03", "5-scaling"): Headline(preferring("batching"), phrases(
        greater=("批越大，每个 token 越便宜", "bigger batches make tokens cheaper"),
        less=("批越大，每个 token 反而越贵", "bigger batches make tokens dearer"),
        same=("批大小不改变每个 token 的代价", "batch size leaves a token's cost as it is"))),
    ("03", "6-chunked"): Headline(preferring("itl_p99"), phrases(
        greater=("分块压低了解码者的尾延迟", "chunking cuts the decoders' tail latency"),
        less=("分块反而抬高了解码者的尾延迟", "chunking raises the decoders' tail latency"),
        same=("分块不改变解码者的尾延迟", "chunking leaves the tail latency as it is"))),
    # the host path against the small model's accelerator step: where a CPU's host work is the bottleneck
    ("03", "7-host-sweep"): Headline(preferring("SmolLM2-135M / H100")),
    ("03", "7.1-remedies"): Headline(preferring("SmolLM2-135M / H100")),
    ("04", "3-sweep"): Headline(preferring("copy/ngram_k=4"), SPECULATION),
    ("04", "3.1-paying"): Headline(preferring("fp32"), SPECULATION),
    ("04", "4-matrix"): Headline(preferring("copy/ngram_k=4", "code/ngram_k=4"), SPECULATION),
    ("04", "5-batch"): Headline(largest, SPECULATION),
    ("05", "2-ablation"): Headline(preferring("copy/ngram"), SPECULATION),
}


def _section_key(section: str) -> tuple:
    head = section.split("-", 1)[0]
    return tuple(int(x) if x.isdigit() else 0 for x in head.split(".")), section


# ----------------------------------------------------------------------------- runs: yours and the bundles

@dataclass(frozen=True)
class Run:
    """One run of a lab: yours or a bundle's. ``records``: section → record."""

    name: str
    path: Path | None
    records: Mapping[str, SectionRecord]
    mine: bool = False


def bundle_dirs(root: Path) -> dict[str, Path]:
    """``<root>/<cpu kind>/<name>/`` folders holding records: ``{"kind/name": path}``. ``name`` is the mode,
    or the mode and how it was recorded (``fast-busy2``: fast mode beside two busy loops)."""
    return find_bundles(root)


def _shared_skips(root: Path, lang: Lang) -> list[str]:
    if not root.is_dir():
        return [_t(lang, f"{root}：不存在，没有别的机器留下的记录包，跳过。",
                   f"{root}: absent, no bundles from other machines; skipped.")]
    notes = []
    for d in sorted(p for p in root.glob("*/*") if p.is_dir()):
        if not any(d.glob("lab[0-9][0-9]/*.json")):
            where = f"{root}/{d.parent.name}/{d.name}"
            notes.append(_t(lang, f"{where}：只有保存的笔记本，没有记录（record），跳过。",
                            f"{where}: saved notebooks only, no records; skipped."))
    return notes


def default_bundles(lang: Lang = "zh") -> tuple[dict[str, Path], list[str]]:
    """The repo's bundles and the shared ones (``../shared/lab-runs``), and notes on what was skipped."""
    found = bundle_dirs(REPO_RUNS)
    for name, path in bundle_dirs(SHARED_RUNS).items():
        found.setdefault(name if name not in found else f"shared:{name}", path)
    return found, _shared_skips(SHARED_RUNS, lang)


def _as_bundles(bundles: Mapping[str, Any] | Iterable[Any]) -> dict[str, Path]:
    if isinstance(bundles, Mapping):
        return {str(k): Path(v) for k, v in bundles.items()}
    out = {}
    for b in bundles:
        p = Path(b)
        out[f"{p.parent.name}/{p.name}"] = p
    return out


def your_root(results_dir: Path | str | None = None) -> Path:
    """Where your records are: ``<results_dir>/records`` (default: where ``save_record`` writes)."""
    from labkit.labs.common.records import records_dir

    return Path(results_dir) / "records" if results_dir is not None else records_dir()


def your_records(lab: str, results_dir: Path | str | None = None) -> dict[str, SectionRecord]:
    """Your saved records of ``lab``: ``<results_dir>/records/labNN/`` (default: where ``save_record`` writes)."""
    root = your_root(results_dir)
    out = {}
    for f in sorted((root / f"lab{lab}").glob("*.json")):
        try:
            rec = load_record(f)
        except ValueError:
            continue                    # a half-written or foreign file is not your run
        out[rec.section] = rec
    return out


def collect(lab: str, *, results_dir=None, bundles=None, lang: Lang = "zh") -> tuple[list[Run], list[str]]:
    """Your run (when it recorded any section of ``lab``) and every bundle's run of it, with notes on
    what was skipped and why."""
    if not re.fullmatch(r"[0-9]{2}", str(lab)):
        raise ValueError(f"lab must be a two-digit lab number such as '04', got {lab!r}")
    if bundles is None:
        found, notes = default_bundles(lang)
    else:
        found, notes = _as_bundles(bundles), []
    runs: list[Run] = []
    mine, mine_root = your_records(lab, results_dir), your_root(results_dir)
    if results_dir is None and _site_bundle() is not None:
        mine = {}                       # the course site: its records are a bundle's, already among the rows
        notes.append(_t(lang, "这是站点版：没有“你的运行”。在 JupyterLab 里运行本实验（make lab），你的记录会出现在每张表的第一行。",
                        "This is the site: there is no \"your run\". Run this lab in JupyterLab (make lab) and your "
                        "records appear as the first row of each table."))
    if mine:
        runs.append(Run(_t(lang, "你的运行", "your run"), mine_root, mine, mine=True))
    for name, path in found.items():
        if mine and path.resolve() == mine_root.resolve():
            continue                    # make record writes your run into this bundle: shown once, as yours
        try:
            records = load_bundle(path).get(lab, {})
        except (ValueError, FileNotFoundError) as e:
            notes.append(_t(lang, f"{name}：读不出来（{e}），跳过。", f"{name}: unreadable ({e}); skipped."))
            continue
        if not records:
            notes.append(_t(lang, f"{name}：没有实验 {lab} 的记录，跳过。", f"{name}: no records of lab {lab}; skipped."))
            continue
        runs.append(Run(name, path, records))
    return runs, notes


# ----------------------------------------------------------------------------- one section, every run

@dataclass(frozen=True)
class Row:
    run: str
    mine: bool
    cpu: str
    mode: str
    load: str
    busy: bool
    recorded: str
    claim: str
    mark: str
    ratio: str
    verdict: str | None          # the headline verdict's name (None: the section holds counts only)
    direction: str | None
    confidence: str | None
    ratio_value: float | None


def headline_name(lab: str, section: str, records: list[SectionRecord]) -> str | None:
    """The verdict every record of the section is compared on: the registry's pick among the names they
    all hold, else the last of those names; None when they share none (or hold no verdicts)."""
    if not records:
        return None
    common = [n for n in records[0].verdicts if all(n in r.verdicts for r in records[1:])]
    if not common:
        return None
    return HEADLINES.get((lab, section), Headline()).pick(common) or common[-1]


def _mark(v, phrases: Phrases | None, lang: Lang) -> str:
    if v.confidence == "within noise":
        return _t(lang, "？噪声之内", "? within noise")
    if v.confidence == "machine busy":
        return _t(lang, "⚠ 机器正忙", "⚠ machine busy")
    symbol = {"greater": "▲", "less": "▼", "same": "＝"}[v.direction]
    if phrases:
        words = dict(zip(("greater", "less", "same"), phrases))[v.direction]
        return f"{symbol} {_t(lang, *words)}"
    return f"{symbol} " + {"greater": _t(lang, "大于 1", "above 1"), "less": _t(lang, "小于 1", "below 1"),
                           "same": _t(lang, "约等于 1", "about 1")}[v.direction]


def _ratio(v) -> str:
    def f(x):
        return f"{x:.2f}" if x is not None and x == x and abs(x) != float("inf") else "∞"
    span = f"{f(v.ratio_min)}–{f(v.ratio_max)}" if v.ratio_min != v.ratio_max else ""
    return f"{f(v.ratio)}×" + (f" [{span}]" if span else "")


def _row(run: Run, rec: SectionRecord, name: str | None, phrases: Phrases | None, lang: Lang) -> Row:
    c = rec.context
    load = "?" if c.load is None else f"{c.load:.1f}"
    load += _t(lang, f"（{c.cores} 核", f" ({c.cores} cores") + (_t(lang, "，机器正忙）", ", machine busy)") if c.busy else _t(lang, "）", ")"))
    mode = _t(lang, "快速", "fast") if c.mode == "fast" else _t(lang, "完整", "full")
    if name is None:
        return Row(run.name, run.mine, c.cpu, mode, load, c.busy, c.recorded[:16].replace("T", " "),
                   _t(lang, "（本节只有计数，没有计时结论）", "(counts only, no timed verdict)"), "—", "—",
                   None, None, None, None)
    v = rec.verdict(name)
    claim = v.claim[0 if lang == "zh" else 1] or name
    return Row(run.name, run.mine, c.cpu, mode, load, c.busy, c.recorded[:16].replace("T", " "), claim,
               _mark(v, phrases, lang), _ratio(v), name, v.direction, v.confidence, v.ratio)


@dataclass(frozen=True)
class SectionBeside:
    section: str
    rows: tuple[Row, ...]
    missing_yours: bool = False


@dataclass(frozen=True)
class Beside:
    """What :func:`show_beside` shows: one table per section, notes on skipped bundles, the question."""

    lab: str
    lang: Lang
    sections: tuple[SectionBeside, ...]
    notes: tuple[str, ...] = ()
    question: str = ""
    headers: tuple[str, ...] = field(default=())

    def text(self) -> str:
        lines = []
        for s in self.sections:
            lines.append(section_label(s.section, self.lang))
            lines += [" | ".join((r.run, r.cpu, r.mode, r.load, r.recorded, r.claim, r.mark, r.ratio)) for r in s.rows]
            if s.missing_yours:
                lines.append(_t(self.lang, "（你还没有运行这一节）", "(you have not run this section yet)"))
        return "\n".join(lines + list(self.notes) + [self.question])

    __str__ = text

    def _repr_html_(self) -> str:
        cell = "padding:3px 8px;border-bottom:1px solid #e5e5e5;text-align:left"
        parts = []
        for s in self.sections:
            head = "".join(f'<th style="{cell};font-weight:600">{html.escape(h)}</th>' for h in self.headers)
            body = "".join(
                f'<tr style="{"font-weight:600" if r.mine else ""}">' + "".join(
                    f'<td style="{cell}">{html.escape(x)}</td>'
                    for x in (r.run, r.cpu, r.mode, r.load, r.recorded, r.claim, r.mark, r.ratio)) + "</tr>"
                for r in s.rows)
            extra = (f'<div style="font-size:85%;color:#555">{html.escape(_t(self.lang, "你还没有运行这一节：运行上面测量它的格子，再运行本格。", "You have not run this section yet: run its measuring cell above, then this one."))}</div>'
                     if s.missing_yours else "")
            parts.append(f'<table style="border-collapse:collapse;margin:6px 0"><caption style="caption-side:top;'
                         f'text-align:left;font-weight:600;padding:4px 0">{html.escape(section_label(s.section, self.lang))}</caption>'
                         f'<tr>{head}</tr>{body}</table>{extra}')
        notes = "".join(f'<div style="font-size:85%;color:#555">{html.escape(n)}</div>' for n in self.notes)
        return "".join(parts) + notes + f'<p style="font-weight:600">{html.escape(self.question)}</p>'

    def _repr_pretty_(self, printer, cycle: bool) -> None:
        printer.text(self.text())


def _who(r: Row, lang: Lang) -> str:
    if r.mine:
        return _t(lang, f"你的机器（{r.cpu}）", f"your machine ({r.cpu})")
    return _t(lang, f"{r.cpu}（记录包 {r.run}，{r.recorded[:10]}）", f"{r.cpu} (bundle {r.run}, {r.recorded[:10]})")


def _phrase(lab: str, section: str, r: Row, lang: Lang) -> str:
    phrases = HEADLINES.get((lab, section), Headline()).phrases
    if phrases:
        return _t(lang, *dict(zip(("greater", "less", "same"), phrases))[r.direction])
    word = {"greater": _t(lang, "大于 1", "above 1"), "less": _t(lang, "小于 1", "below 1"),
            "same": _t(lang, "约等于 1", "about 1")}[r.direction]
    return _t(lang, f"「{r.claim}」{word}", f"\"{r.claim}\" is {word}")


def question(lab: str, sections: Iterable[SectionBeside], lang: Lang) -> str:
    """The closing question, from the rows: where two runs' clear headline verdicts differ, why; else
    what kind of CPU would reverse them; or what is missing to compare at all."""
    sections = list(sections)
    judged = [(s, [r for r in s.rows if r.confidence == "clear"]) for s in sections]
    for s, clear in judged:
        by_direction: dict[str, Row] = {}
        for r in clear:             # only runs compared on the same verdict (the same size, the same workload)
            if r.verdict == clear[0].verdict:
                by_direction.setdefault(r.direction, r)
        if len(by_direction) >= 2:
            a, b = list(by_direction.values())[:2]
            return _t(lang,
                      f"{section_label(s.section, lang)}：在{_who(a, lang)}上{_phrase(lab, s.section, a, lang)}（{a.ratio}），"
                      f"在{_who(b, lang)}上却{_phrase(lab, s.section, b, lang)}（{b.ratio}）：为什么？"
                      "想一想两台机器每一步要从内存搬多少字节、指令集（AVX512_BF16、AMX）能帮上多少。",
                      f"{section_label(s.section, lang)}: on {_who(a, lang)} {_phrase(lab, s.section, a, lang)} ({a.ratio}), but on "
                      f"{_who(b, lang)} {_phrase(lab, s.section, b, lang)} ({b.ratio}): why? Think about how many "
                      "bytes each step moves from memory on each machine, and what its instruction set "
                      "(AVX512_BF16, AMX) can do about it.")
    cpus = {r.cpu for s in sections for r in s.rows}
    compared = [(s, clear) for s, clear in judged if len([r for r in clear if r.verdict == clear[0].verdict]) >= 2]
    if compared:
        s, clear = compared[0]
        return _t(lang,
                  f"{section_label(s.section, lang)}：这里有明确结论的 {len(clear)} 次运行都是「{_phrase(lab, s.section, clear[0], lang)}」"
                  f"（{len(cpus)} 种 CPU）。换一台内存带宽更低、或没有 AVX512_BF16 / AMX 的 CPU，它会反过来吗？为什么？",
                  f"{section_label(s.section, lang)}: the {len(clear)} runs with a clear verdict here all say \"{_phrase(lab, s.section, clear[0], lang)}\" "
                  f"({len(cpus)} CPU kind(s)). Would a CPU with lower memory bandwidth, or one without "
                  "AVX512_BF16 / AMX, reverse it? Why?")
    return _t(lang, "要比较，至少需要两次有明确结论的运行：运行本实验的测量格（机器空闲时），或加入别的机器录制的记录包"
                    "（data/lab-runs/ 或 ../shared/lab-runs/）。",
              "To compare, at least two runs with a clear verdict are needed: run this lab's measuring cells (on an "
              "idle machine), or add bundles recorded on other machines (data/lab-runs/ or ../shared/lab-runs/).")


def beside(lab: str, *, results_dir=None, bundles=None, lang: str | None = None) -> Beside:
    """The data :func:`show_beside` shows (see the module docstring)."""
    lang = _language(lang)
    lab = str(lab)
    runs, notes = collect(lab, results_dir=results_dir, bundles=bundles, lang=lang)
    names = sorted({s for run in runs for s in run.records}, key=_section_key)
    sections = []
    have_mine = any(run.mine for run in runs)
    for section in names:
        present = [(run, run.records[section]) for run in runs if section in run.records]
        name = headline_name(lab, section, [rec for _, rec in present])
        phrases = HEADLINES.get((lab, section), Headline()).phrases
        rows = tuple(_row(run, rec, name if name is not None else _own_pick(lab, rec), phrases, lang)
                     for run, rec in present)
        sections.append(SectionBeside(section, rows, missing_yours=_site_bundle() is None and not any(r.mine for r in rows)))
    if not have_mine and _site_bundle() is None:
        notes.insert(0, _t(lang, "还没有你自己的记录：运行本实验上面的测量格后，你的运行会出现在每张表的第一行。",
                           "No records of your own yet: once you run this lab's measuring cells above, your run "
                           "appears as the first row of each table."))
    if not runs:
        notes.append(_t(lang, "没有找到任何记录。", "No records found."))
    headers = (_t(lang, "运行", "run"), "CPU", _t(lang, "模式", "mode"), _t(lang, "负载", "load"),
               _t(lang, "录于（UTC）", "recorded (UTC)"), _t(lang, "比较的量", "compared"),
               _t(lang, "结论", "verdict"), _t(lang, "比值 [各轮]", "ratio [rounds]"))
    secs = tuple(sections)
    return Beside(lab, lang, secs, tuple(notes), question(lab, secs, lang), headers)


def _own_pick(lab: str, rec: SectionRecord) -> str | None:
    """Runs that share no verdict name (a different mode sweeps other sizes): each row its own pick, its claim
    printed beside it, so the row says what it compares."""
    names = list(rec.verdicts)
    return (HEADLINES.get((lab, rec.section), Headline()).pick(names) or names[-1]) if names else None


def show_beside(lab: str, *, results_dir=None, bundles=None, lang=None) -> Beside:
    """Your run of ``lab`` beside every recorded bundle, section by section (see the module docstring).
    ``results_dir``: your results folder (default ``./results`` or ``LABKIT_RESULTS``); ``bundles``: bundle
    folders (a list, or ``{name: folder}``) instead of ``data/lab-runs`` and ``../shared/lab-runs``;
    ``lang``: "zh" or "en" for this call (default: ``labkit.set_language``'s)."""
    return beside(lab, results_dir=results_dir, bundles=bundles, lang=lang)


# ----------------------------------------------------------------------------- the course site's switch

def _site_bundle() -> Path | None:
    raw = os.environ.get(SITE_BUNDLE_ENV, "").strip()
    return Path(raw) if raw else None


def bundle_caption(rec: SectionRecord, name: str, lang: Lang) -> str:
    c = rec.context
    mode = _t(lang, "快速模式", "fast mode") if c.mode == "fast" else _t(lang, "完整模式", "full mode")
    load = "?" if c.load is None else f"{c.load:.1f}"
    return _t(lang, f"{c.cpu}；{mode}；负载 {load}（{c.cores} 个核）；录于 {c.recorded[:16].replace('T', ' ')} UTC；记录包 {name}",
              f"{c.cpu}; {mode}; load {load} ({c.cores} cores); recorded {c.recorded[:16].replace('T', ' ')} UTC; bundle {name}")


def site_record(rec: SectionRecord) -> SectionRecord:
    """On the course site (``LABKIT_SITE_BUNDLE`` set): the bundle's record of ``rec``'s section, with a
    printed line naming the CPU, mode, load and date it was recorded on; where the bundle lacks the
    section, holds an older record of it (keys the lab's code now records are missing) or one recorded on a
    busy machine, ``rec`` itself with a line saying it was measured while the site was built. Elsewhere ``rec``."""
    root = _site_bundle()
    if root is None:
        return rec
    lang = _language(None)
    name = f"{root.parent.name}/{root.name}"
    path = root / f"lab{rec.lab}" / f"{rec.section}.json"
    out = load_record(path) if path.exists() else None
    if out is not None and (out.context.busy or out.context.load is None):
        load = "?" if out.context.load is None else f"{out.context.load:.1f}"
        print(_t(lang, f"【站点版】记录包 {name} 里这一节录制时机器正忙或负载不明（负载 {load}，{out.context.cores} 个核），"
                       f"不能代表这台 CPU：下面是构建本站时现场测得的（{rec.context.caption()}）。",
                 f"[Site] Bundle {name} recorded this section on a busy machine or at an unknown load (load {load}, "
                 f"{out.context.cores} cores), which cannot stand for its CPU: below is what the machine building the "
                 f"site measured ({rec.context.caption()})."))
        _log({"lab": rec.lab, "section": rec.section, "replayed": False, "busy_record": True})
        return rec
    stale = _stale(rec, out) if out is not None else []
    if out is not None and stale:
        print(_t(lang, f"【站点版】记录包 {name} 里这一节的记录比本实验的代码旧（缺 {', '.join(stale)}）：下面是构建本站时现场测得的"
                       f"（{rec.context.caption()}）。重新录制记录包（make record）即可。",
                 f"[Site] Bundle {name} holds an older record of this section (no {', '.join(stale)}): below is what the "
                 f"machine building the site measured ({rec.context.caption()}). Re-record the bundle (make record)."))
        _log({"lab": rec.lab, "section": rec.section, "replayed": False, "stale": stale})
        return rec
    if out is not None:
        print(_t(lang, f"【站点版】本节的数字来自录制的记录（不是构建本站时的测量）：{bundle_caption(out, name, lang)}",
                 f"[Site] This section's numbers come from a recorded run, not from the machine that built the site: "
                 f"{bundle_caption(out, name, lang)}"))
        _log({"lab": rec.lab, "section": rec.section, "replayed": True})
        return out
    print(_t(lang, f"【站点版】记录包 {name} 里没有这一节：下面是构建本站时现场测得的（{rec.context.caption()}）。",
             f"[Site] Bundle {name} lacks this section: below is what the machine building the site measured "
             f"({rec.context.caption()})."))
    _log({"lab": rec.lab, "section": rec.section, "replayed": False})
    return rec


def _stale(live: SectionRecord, recorded: SectionRecord) -> list[str]:
    """What the lab's code puts in this section's record that the bundle's record lacks (top-level keys of
    ``values`` and ``rounds``): a bundle recorded before the section's record grew cannot stand in for it."""
    return [f"{part}.{key}" for part in ("values", "rounds")
            for key in getattr(live, part) if key not in getattr(recorded, part)]


def site_load_note() -> str:
    """The line the site's first cell shows instead of the build machine's load: where the numbers are from."""
    root = _site_bundle()
    if root is None:
        return ""
    lang = _language(None)
    name = f"{root.parent.name}/{root.name}"
    records = [r for recs in load_bundle(root).values() for r in recs.values()]
    if not records:
        return ""
    loads = [r.context.load for r in records if r.context.load is not None]
    first = records[0]
    top = f"{max(loads):.1f}" if loads else "?"
    mode = _t(lang, "快速模式", "fast mode") if first.context.mode == "fast" else _t(lang, "完整模式", "full mode")
    return _t(lang, f"本页各测量节的数字录制于 {first.context.cpu}（{first.context.cores} 个核，{mode}，负载至多 {top}，"
                    f"{first.context.recorded[:10]}，记录包 {name}），不是构建本站的机器测的。",
              f"This page's measured sections were recorded on {first.context.cpu} ({first.context.cores} cores, {mode}, "
              f"load at most {top}, {first.context.recorded[:10]}, bundle {name}), not on the machine that built the site.")


def _log(entry: dict) -> None:
    raw = os.environ.get(SITE_LOG_ENV, "").strip()
    if raw:
        with open(raw, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")


def use_site_bundle() -> None:
    """The site's hidden first cell calls this: the lab's first cell then tells where the page's numbers come
    from (:func:`site_load_note`) instead of the build machine's load."""
    if _site_bundle() is None:
        return
    from labkit.labs.common import machine

    machine.load_note = lambda *args, **kwargs: site_load_note()
