"""Lab 02 tables. Each takes a measured result and returns a ``Table``; nothing here measures.
Figures are in ``figures.py``."""

from __future__ import annotations

from labkit.i18n import t
from labkit.labs.common.measure import record_verdict
from labkit.labs.common.references import cite, cite_line, percentages
from labkit.labs.lab02_paged_attention.attention_cost import SDPA, IndirectionCost
from labkit.labs.lab02_paged_attention.block_map import BlockMapRun, is_consecutive
from labkit.labs.lab02_paged_attention.block_size import BlockSizePoint
from labkit.labs.lab02_paged_attention.layouts import (
    QUEUE,
    LayoutRun,
    fit_from_record,
    fit_ratio,
    layouts_from_record,
    throughput_verdict,
)
from labkit.labs.lab02_paged_attention.sharing import ForkRun, PrefixRun, ttft_verdict
from labkit.report.tables import Table


def _model(simulated: bool) -> str:
    return t("模拟", "simulated") if simulated else t("真实模型", "real model")


def _yes(value: bool) -> str:
    return t("是", "yes") if value else t("否", "no")


def block_tables_table(run: BlockMapRun, index: int) -> Table:
    """Every request's block table at recorded step ``index``, and whether its blocks are consecutive."""
    event = run.steps[index]
    rows = [[rid, len(table), str(list(table)), _yes(is_consecutive(table))]
            for rid, table in event.block_map.block_tables]
    return Table([t("请求", "request"), t("块数", "blocks"), t("块表（逻辑块 0,1,2… → 物理块）", "block table (logical 0,1,2… → physical)"),
                  t("物理上连续", "physically consecutive")], rows,
                 caption=t(f"第 {event.step} 步的块表（本次运行记录）", f"Block tables at step {event.step} (recorded in this run)"))


def layout_table(runs: list[LayoutRun]) -> Table:
    rows = [[r.label, r.num_requests, r.num_steps, r.mean_running, r.max_running, r.effective_use,
             r.breakdown.reserved_later, r.breakdown.internal, r.breakdown.external, r.breakdown.free, r.waste,
             r.waiting_share, _model(r.simulated)] for r in runs]
    return Table([t("设置", "setting"), t("请求数", "requests"), t("步数", "steps"), t("平均并发", "mean running"),
                  t("最大并发", "max running"), t("存有 K/V %（有效利用）", "holds K/V % (effective use)"),
                  t("预留待用 %", "reserved later %"), t("内部碎片 %", "internal %"), t("外部碎片 %", "external %"),
                  t("空闲 %", "free %"), t("浪费 %", "waste %"), t("有请求排队的步 %", "steps with a request waiting %"),
                  t("模型", "model")], rows,
                 caption=t("KV 池各部分占比（各步平均，本次运行实测）", "KV pool split (mean over steps, measured in this run)"),
                 notes=[t("有效利用 = 存有 K/V 的槽位占整个 KV 池的比例：论文图 2 的口径（分母是整个池，预留、碎片和空闲都在分母里，"
                          "图 2 把外部碎片和空闲合成“External frag. & Others”）。浪费 = 请求占用的槽位里没有存 K/V 的比例"
                          "（分母只是被请求占用的槽位）：两者分母不同，浪费不是 100 − 有效利用。",
                          "effective use = share of the whole KV pool holding K/V: the paper's Fig. 2 measure (the base is "
                          "the whole pool; reservation, fragmentation and free slots are all in it, Fig. 2 lumping external "
                          "fragmentation and free as 'External frag. & Others'). waste = share of the slots requests hold "
                          "that hold no K/V (the base is the held slots only): different bases, so waste is not "
                          "100 − effective use.")])


def effective_use_lines(runs: tuple[LayoutRun, LayoutRun, LayoutRun], name: str) -> list[str]:
    """Section 3.2's comparison with Fig. 2, on Fig. 2's own measure (token states as a share of the
    whole pool), from the same ``effective_use`` the table prints; (max-length, exact, paged) runs."""
    mx, oracle, paged = runs
    paper_max, paper_oracle = (percentages(cite(f"{s} KV breakdown"))[0] for s in ("Orca(Max)", "Orca(Oracle)"))
    paper_vllm = float(cite("vLLM KV memory holding token states").value.rstrip("%"))
    lines = [t(f"{name}：存有 K/V 占整个 KV 池（论文图 2 的口径）——最大长度预留 {mx.effective_use:.1f}%、恰好预留 "
               f"{oracle.effective_use:.1f}%、分页 {paged.effective_use:.1f}%；论文图 2 同一口径：Orca(Max) {paper_max:.1f}%、"
               f"Orca(Oracle) {paper_oracle:.1f}%、vLLM {paper_vllm:.1f}%。",
               f"{name}: K/V as a share of the whole KV pool (the paper's Fig. 2 measure): max-length reservation "
               f"{mx.effective_use:.1f}%, exact reservation {oracle.effective_use:.1f}%, paged {paged.effective_use:.1f}%; "
               f"Fig. 2 on the same measure: Orca(Max) {paper_max:.1f}%, Orca(Oracle) {paper_oracle:.1f}%, vLLM {paper_vllm:.1f}%.")]
    gap = 100.0 - paged.effective_use
    if paged.effective_use < paper_vllm - 10 and paged.breakdown.free >= 0.8 * gap:
        why = (t(f"分页时只有 {paged.waiting_share:.0f}% 的步有请求在排队：这条轨迹喂不满池子",
                 f"only {paged.waiting_share:.0f}% of the paged steps had a request waiting: this trace does not fill the pool")
               if paged.waiting_share < 50 else
               t(f"分页时 {paged.waiting_share:.0f}% 的步有请求在排队：挡住它们的是别的上限（批上限、token 预算），不是 KV",
                 f"{paged.waiting_share:.0f}% of the paged steps had a request waiting: another limit (batch size, token "
                 "budget) held them back, not KV"))
        lines.append(t(f"分页一行离 vLLM 的 {paper_vllm:.1f}% 远，差的主要是空闲（{paged.breakdown.free:.1f}%），不是浪费"
                       f"（浪费 {paged.waste:.1f}%）；{why}。论文的 {paper_vllm:.1f}% 是在负载把池子占满时量的。",
                       f"The paged row is far from vLLM's {paper_vllm:.1f}%, and what is missing is mostly free slots "
                       f"({paged.breakdown.free:.1f}%), not waste ({paged.waste:.1f}%); {why}. The paper's "
                       f"{paper_vllm:.1f}% was measured with the load keeping the pool full."))
    return lines


def cite_lines(claims: list[tuple[str, str]]) -> list[str]:
    """One line per cited row, Chinese first: ``zh（English claim）：value —— source``."""
    return [cite_line(claim, zh) for claim, zh in claims]


def paper_fit_ratios() -> tuple[float, float]:
    """(vLLM ÷ Orca(Oracle), vLLM ÷ Orca(Max)) average batched requests, from the Fig. 13a row."""
    values = [float(x) for x in cite("Avg batched requests OPT-13B ShareGPT").value.split("/")]
    orca_max, _, oracle, vllm = values
    return vllm / oracle, vllm / orca_max


def fit_table(pairs: list[tuple[LayoutRun, LayoutRun]], verdicts: list | None = None, caption: str | None = None) -> Table:
    """(paged, contiguous) pairs: requests running at once and output tokens per second; ``verdicts``
    (one per pair, section 4's record) mark the throughput ratios, else they are judged here."""
    rows = []
    for i, (paged, contiguous) in enumerate(pairs):
        v = verdicts[i] if verdicts is not None else None
        rows.append([paged.label, contiguous.label, contiguous.max_running, paged.max_running,
                     contiguous.mean_running, paged.mean_running, fit_ratio(paged, contiguous),
                     contiguous.tokens_per_s, paged.tokens_per_s, throughput_cell(paged, contiguous, v), _model(paged.simulated)])
    oracle, orca_max = paper_fit_ratios()
    c = cite("Avg batched requests OPT-13B ShareGPT")
    return Table([t("分页", "paged"), t("连续", "contiguous"), t("连续：最大并发", "contiguous: max running"),
                  t("分页：最大并发", "paged: max running"), t("连续：平均并发", "contiguous: mean running"),
                  t("分页：平均并发", "paged: mean running"), t("平均并发倍数", "mean running ratio"),
                  t("连续：token/秒", "contiguous: tokens/s"), t("分页：token/秒", "paged: tokens/s"),
                  t("吞吐倍数", "throughput ratio"), t("模型", "model")], rows,
                 caption=caption or t("同一个池、同一条轨迹：同时运行的请求数与吞吐（本次运行实测；模拟的时间是虚拟时间）",
                                      "Same pool, same trace: requests running at once and throughput (measured in this run; "
                                      "simulated times are virtual)"),
                 notes=[t("真实模型的吞吐倍数：方括号里是各轮配对的范围，括号里是结论（持平 / 噪声之内 / 机器正忙）；模拟的倍数是精确的。",
                          "Real-model throughput ratios: the brackets give the range over paired rounds, the word the verdict "
                          "(level / within noise / machine busy); simulated ratios are exact."),
                        t(f"论文（{c.source}）：平均批大小 {c.value}（Orca(Max)/Pow2/Oracle/vLLM），即 vLLM 是 "
                          f"Orca(Oracle) 的 {oracle:.1f} 倍、Orca(Max) 的 {orca_max:.1f} 倍。",
                          f"Paper ({c.source}): mean batch {c.value} (Orca(Max)/Pow2/Oracle/vLLM), i.e. vLLM batches "
                          f"{oracle:.1f}x Orca(Oracle) and {orca_max:.1f}x Orca(Max).")])


THROUGHPUT_MARKS = dict(greater=("（分页更快）", " (paged faster)"), less=("（分页更慢）", " (paged slower)"),
                        same=("（持平）", " (level)"))


def throughput_cell(paged: LayoutRun, contiguous: LayoutRun, v=None) -> str:
    """The fit table's throughput ratio with what backs it: exact when simulated; for the real model
    the range over the paired rounds and the verdict's word (level / within noise / machine busy).
    ``v``: the pair's recorded verdict (else judged here)."""
    v = v if v is not None else throughput_verdict(paged, contiguous)
    if v.deterministic:
        return f"{v.ratio:.2f}"
    return f"{v.ratio:.2f} [{v.ratio_min:.2f}–{v.ratio_max:.2f}]{v.mark(**THROUGHPUT_MARKS)}"


def prefix_mark(v) -> str:
    """Section 5.1's outcome in one set of words: the sentence, the table mark and the figure title use it."""
    return v.mark(greater=("（缓存后更快）", " (sooner cached)"), less=("（缓存后反而更慢）", " (later cached)"),
                  same=("（持平）", " (level)"))


def _ttft_x(off: PrefixRun, on: PrefixRun) -> float:
    return off.mean_ttft_after_first() / on.mean_ttft_after_first()


def prefix_table(pairs: list[tuple[str, PrefixRun, PrefixRun]], verdicts: dict | None = None) -> Table:
    """Off and on per shared prefix; with ``verdicts`` (name → TTFT off ÷ on verdict) the ratio column
    carries the verdict's mark, the words the sentence uses."""
    rows = []
    for name, off, on in pairs:
        v = (verdicts or {}).get(name)
        rows.append([name, off.prefix_len, on.hit_rate, off.prefill_tokens, on.prefill_tokens,
                     1000 * off.mean_ttft_after_first(), 1000 * on.mean_ttft_after_first(),
                     f"{_ttft_x(off, on):.1f}" + (prefix_mark(v) if v is not None else "")])
    return Table([t("共享前缀", "shared prefix"), t("前缀 token", "prefix tokens"), t("命中率 %", "hit rate %"),
                  t("预填充 token（关）", "prefill tokens (off)"), t("预填充 token（开）", "prefill tokens (on)"),
                  t("TTFT 毫秒（关）", "TTFT ms (off)"), t("TTFT 毫秒（开）", "TTFT ms (on)"),
                  t("TTFT 关 ÷ 开", "TTFT off ÷ on")], rows,
                 caption=t("前缀缓存关与开：同样的请求，一个接一个（真实模型，本次运行实测；TTFT 取第 2 个请求起的平均）",
                           "Prefix caching off and on: the same requests, one after another (real model, measured "
                           "in this run; TTFT is the mean from the 2nd request on)"))


def prefix_line(name: str, off: PrefixRun, on: PrefixRun, v) -> str:
    """One shared prefix: hits and prefill tokens (counted, exact), then TTFT off ÷ on from its verdict."""
    counted = t(f"{name}：命中率 {on.hit_rate:.0f}%，预填充 token 从 {off.prefill_tokens} 降到 {on.prefill_tokens}（计数）。",
                f"{name}: hit rate {on.hit_rate:.0f}%, prefill tokens {off.prefill_tokens} → {on.prefill_tokens} (counted). ")
    return counted + v.sentence(
        greater=("TTFT 关 ÷ 开 = {ratio}：开启前缀缓存后首 token 来得更快",
                 "TTFT off ÷ on = {ratio}: with prefix caching the first token comes sooner"),
        less=("TTFT 关 ÷ 开 = {ratio}：开启前缀缓存后首 token 反而来得更慢",
              "TTFT off ÷ on = {ratio}: with prefix caching the first token came later"),
        same=("TTFT 关 ÷ 开 = {ratio}：开不开前缀缓存，首 token 一样快",
              "TTFT off ÷ on = {ratio}: the first token comes as soon with prefix caching as without"),
        unit=t(" 倍", "×"), digits=1)


def prefix_ttft_lines(prefix: dict[str, tuple[PrefixRun, PrefixRun]], lab: str | None = "02") -> list[str]:
    """Per shared prefix: the hit rate and prefill tokens (counted, exact) and the TTFT off ÷ on,
    rendered from its verdict (request-by-request pairs; recorded in results/lab02.json)."""
    lines = []
    for name, (off, on) in prefix.items():
        v = ttft_verdict(off, on, id=f"prefix_ttft/{name}", name=name)
        if lab is not None:
            record_verdict(lab, v)
        lines.append(prefix_line(name, off, on, v))
    return lines


def prefix_shown(prefix: dict[str, tuple[PrefixRun, PrefixRun]]) -> str:
    """The shared prefix the figure draws: the longest."""
    return max(prefix, key=lambda name: prefix[name][0].prefix_len)


def prefix_narration(rec):
    """Section 5.1 rendered from its record alone (``sharing.record_prefix``): the sentences, the table
    rows and the figure's title, all from the same TTFT off ÷ on verdicts."""
    from labkit.labs.common.records import Narration
    from labkit.labs.lab02_paged_attention.sharing import prefix_from_record

    runs = prefix_from_record(rec)
    verdicts = {name: rec.verdict(name) for name in runs}
    table = prefix_table([(name, *pair) for name, pair in runs.items()], verdicts)
    shown = prefix_shown(runs)
    off, on = runs[shown]
    v = verdicts[shown]
    title = t(f"每个请求的首 token 延迟（共享前缀 {off.prefix_len} 个 token，真实模型）：TTFT 关 ÷ 开 = "
              f"{_ttft_x(off, on):.1f} 倍{prefix_mark(v)}",
              f"Time to first token per request (shared prefix of {off.prefix_len} tokens, real model): TTFT off ÷ on = "
              f"{_ttft_x(off, on):.1f}×{prefix_mark(v)}")
    return Narration(tuple(prefix_line(name, *pair, verdicts[name]) for name, pair in runs.items()),
                     tuple(tuple(r) for r in table.rows), title,
                     {f"prefix_shortens_ttft/{name}": f"{x.direction}|{x.confidence}" for name, x in verdicts.items()})


PAPER_OVERHEAD_MAX = 0.26     # data/reference/published-numbers.csv, "PagedAttention kernel overhead": 20-26 %


def indirection_lines(costs: list[IndirectionCost]) -> list[str]:
    """Section 7's conclusions: the outputs agree (max difference), and per context the paged ÷
    dense time rendered from its verdict; the largest overhead is set against the paper's only
    when its verdict is clear (every round beyond the paper's range, or every round within it)."""
    c = cite("PagedAttention kernel overhead")
    worst = max(x.max_abs_diff for x in costs)
    lines = [t(f"两种方式输出的最大差：{worst:.2e}（同样的注意力，只差舍入）",
               f"Largest difference between the two outputs: {worst:.2e} (the same attention, up to rounding)")]
    for x in costs:
        if x.verdict is None:
            continue
        L = x.context_len
        lines.append(x.verdict.sentence(
            greater=(f"上下文 {L}：分页注意力比连续的慢，用时是连续的 {{ratio}}",
                     f"context {L}: paged attention is slower than dense, {{ratio}} its time"),
            less=(f"上下文 {L}：分页注意力反而比连续的快（用时是连续的 {{ratio}}）",
                  f"context {L}: paged attention came out faster than dense ({{ratio}} its time)"),
            same=(f"上下文 {L}：分页注意力和连续的一样快（{{ratio}}）",
                  f"context {L}: paged and dense attention take the same time ({{ratio}})")))
    slowest = max((x for x in costs if x.verdict is not None), key=lambda x: x.overhead, default=None)
    if slowest is not None and slowest.verdict.clear and slowest.verdict.direction == "greater":
        v = slowest.verdict
        if v.ratio_min > 1 + PAPER_OVERHEAD_MAX:
            why = (t("：SDPA 路径先把 K/V 复制到一个临时张量再算，数据被搬了两遍；GPU 内核在块里原地读。",
                     ": the SDPA path first copies K/V into a temporary tensor, moving the data twice; the GPU kernel "
                     "reads in place in the blocks.") if slowest.kernel == SDPA else t("。", "."))
            lines.append(t(f"本机上下文 {slowest.context_len} 时每一轮分页都多花 {100 * (v.ratio_min - 1):.0f}% 以上，超出论文的 "
                           f"20–26%（{c.source}）",
                           f"Here, at context {slowest.context_len}, paged took over {100 * (v.ratio_min - 1):.0f}% more in "
                           f"every round, beyond the paper's 20–26% ({c.source})") + why)
        elif v.ratio_max <= 1 + PAPER_OVERHEAD_MAX:
            lines.append(t(f"本机分页多花的时间（每一轮 {100 * (v.ratio_min - 1):.0f}–{100 * (v.ratio_max - 1):.0f}%）"
                           f"在论文 20–26%（{c.source}）的量级之内。",
                           f"Here paged took {100 * (v.ratio_min - 1):.0f}–{100 * (v.ratio_max - 1):.0f}% more in every "
                           f"round, within the order of the paper's 20–26% ({c.source})."))
    return lines


def fork_table(run: ForkRun) -> Table:
    rows = [[s.step, s.table_blocks, s.distinct_blocks, s.shared_blocks, s.copies, s.saving]
            for s in run.steps if s.table_blocks]
    return Table([t("步", "step"), t("块表长度之和（不共享时要的块）", "Σ table lengths (blocks without sharing)"),
                  t("实际占用的物理块", "physical blocks held"), t("共享块（引用数>1）", "shared blocks (ref>1)"),
                  t("本步写时复制", "copy-on-write this step"), t("节省 %", "saved %")], rows,
                 caption=t(f"并行采样 n={run.n}：提示 {run.prompt_len} 个 token，块大小 {run.block_size}（真实模型，本次运行）",
                           f"Parallel sampling n={run.n}: prompt of {run.prompt_len} tokens, block size "
                           f"{run.block_size} (real model, this run)"))


def block_size_mark(v, ref: int) -> str:
    """Section 6's attention verdict against B = ``ref`` in one set of words: the table mark, the sentence and
    the title use it."""
    return v.mark(greater=(f"（比 B = {ref} 慢）", f" (slower than B = {ref})"),
                  less=(f"（比 B = {ref} 快）", f" (faster than B = {ref})"), same=("（持平）", " (level)"))


def block_size_table(points: list[BlockSizePoint], verdicts: dict | None = None, ref: int = 16) -> Table:
    """The three measurements per block size; with ``verdicts`` (``B_<size>`` → attention ÷ B = ``ref``) a
    column with each size's ratio and its verdict's mark."""
    headers = [t("块大小 B", "block size B"), t("KV 浪费 %（模拟）", "KV waste % (simulated)"),
               t("平均并发（模拟）", "mean running (simulated)"), t("注意力 毫秒/解码步（本机）", "attention ms per decode step (here)"),
               t("前缀命中率 %（模拟）", "prefix hit rate % (simulated)")]
    rows = [[p.block_size, p.waste, p.mean_running, p.attention_ms, p.prefix_hit_rate] for p in points]
    if verdicts is not None:
        headers.append(t(f"注意力 ÷ B = {ref}（各轮配对）", f"attention ÷ B = {ref} (paired rounds)"))
        for p, row in zip(points, rows):
            v = verdicts.get(f"B_{p.block_size}")
            row.append("1（基准）" if p.block_size == ref and v is None else
                       "—" if v is None else f"{v.ratio:.2f}×" + block_size_mark(v, ref))
    return Table(headers, rows, caption=t("块大小的权衡（同一次运行里测得）", "The block-size trade-off (measured in one run)"))


def block_size_narration(rec):
    """Section 6 rendered from its record alone (``block_size.record_block_sizes``): the table (the
    attention column judged against B = 16 round by round), the sentences and the figure's title."""
    from labkit.labs.common.measure import busy_warning
    from labkit.labs.common.records import Narration
    from labkit.labs.lab02_paged_attention.block_size import points_from_record

    points, ref = points_from_record(rec), rec.values["reference"]
    verdicts = {name: rec.verdict(name) for name in rec.verdicts}
    table = block_size_table(points, verdicts, ref)
    lines = []
    for p in points:
        v = verdicts.get(f"B_{p.block_size}")
        if v is None:
            continue
        B = p.block_size
        lines.append(v.sentence(warn=False,
            greater=(f"块大小 {B}：注意力一步用时是 B = {ref} 的 {{ratio}}，比它慢", f"block size {B}: an attention step takes {{ratio}} B = {ref}'s, slower"),
            less=(f"块大小 {B}：注意力一步用时是 B = {ref} 的 {{ratio}}，比它快", f"block size {B}: an attention step takes {{ratio}} B = {ref}'s, faster"),
            same=(f"块大小 {B}：注意力一步用时与 B = {ref} 持平（{{ratio}}）", f"block size {B}: an attention step takes as long as B = {ref}'s ({{ratio}})")))
    clear = [v for v in verdicts.values() if v.clear]
    differ = [v for v in clear if v.direction != "same"]
    if verdicts and len(clear) == len(verdicts) and not differ:
        changes, title = "no", t(f"：本机注意力时间各块大小与 B = {ref} 持平", f": attention time level with B = {ref} at every size here")
        lines.append(t("注意力时间几乎不随块大小变化：这条 CPU 路径先把 K/V 按槽位逐个收集出来，块大小只影响块表的长度。",
                       "Attention time hardly moves with the block size: this CPU path gathers K/V slot by slot first, "
                       "so the block size only changes how long the block table is."))
    elif differ:
        changes, title = "yes", t(f"：本机注意力时间随块大小变化（与 B = {ref} 比，{len(differ)} 个块大小明确不同）",
                                  f": attention time moves with the block size here ({len(differ)} size(s) clearly differ from B = {ref})")
        lines.append(t("块大小改变了本机注意力的用时：这是这个内核在这台 CPU 上的性质，论文在 GPU 上看到的是小块让内核变慢。",
                       "The block size changes attention time here: a property of this kernel on this CPU; on GPUs the "
                       "paper saw small blocks slow the kernel."))
    else:
        changes, title = "unsure", t("：本机注意力时间分不出块大小的影响（噪声之内或机器正忙）",
                                     ": attention time cannot tell the block sizes apart here (within noise or machine busy)")
        lines.append(t("这次测量分不出块大小对注意力用时的影响：重新运行这几格，看差别是否还在。",
                       "This measurement cannot tell whether the block size changes attention time: rerun these cells."))
    warning = busy_warning(list(verdicts.values()))
    if warning:
        lines.append(warning)
    return Narration(tuple(lines), tuple(tuple(r) for r in table.rows),
                     t("块大小的权衡（虚线：vLLM 的默认 16）", "The block-size trade-off (dotted: vLLM's default 16)") + title,
                     {"block_size_changes_attention": changes,
                      **{f"block_size_attention/{k}": f"{v.direction}|{v.confidence}" for k, v in verdicts.items()}})


def paged_vs_contiguous_mark(v) -> str:
    """Section 7's outcome in one set of words: the sentence, the table mark and the figure title use it."""
    return v.mark(greater=("（分页更慢）", " (paged slower)"), less=("（分页更快）", " (paged faster)"),
                  same=("（持平）", " (level)"))


def indirection_mark(cost: IndirectionCost) -> str:
    return paged_vs_contiguous_mark(cost.verdict) if cost.verdict else ""


def indirection_title(costs: list[IndirectionCost]) -> str:
    """The figure's title, stating what the last context measured (the same verdict the sentence renders)."""
    last = costs[-1]
    found = (t(f"：上下文 {last.context_len} 时分页 ÷ 连续 = {last.paged_s / last.dense_s:.2f}×{indirection_mark(last)}",
               f": paged ÷ dense = {last.paged_s / last.dense_s:.2f}× at context {last.context_len}{indirection_mark(last)}")
             if last.verdict else "")
    return t(f"间接寻址：{last.num_seqs} 个序列的一个解码步（所有层，本机 CPU）",
             f"Indirection: one decode step of {last.num_seqs} sequences (all layers, this CPU)") + found


def indirection_narration(rec):
    """Section 7 rendered from its record alone (``attention_cost.record_indirection``)."""
    from labkit.labs.common.records import Narration
    from labkit.labs.lab02_paged_attention.attention_cost import costs_from_record

    costs = costs_from_record(rec)
    table = indirection_table(costs)
    claims = {f"paging_cost/context_{c.context_len}": f"{c.verdict.direction}|{c.verdict.confidence}"
              for c in costs if c.verdict is not None}
    return Narration(tuple(indirection_lines(costs)), tuple(tuple(r) for r in table.rows), indirection_title(costs),
                     claims)


def indirection_table(costs: list[IndirectionCost]) -> Table:
    rows = [[c.num_seqs, c.context_len, c.block_size, 1000 * c.dense_s, 1000 * c.paged_s,
             f"{c.overhead:+.1f}" + indirection_mark(c), f"{c.max_abs_diff:.1e}"] for c in costs]
    c = cite("PagedAttention kernel overhead")
    kernel = costs[0].kernel if costs else SDPA
    return Table([t("序列数", "sequences"), t("上下文", "context"), t("块大小", "block size"),
                  t(f"连续（{kernel}）毫秒/步", f"dense ({kernel}) ms/step"), t(f"分页（{kernel}）毫秒/步", f"paged ({kernel}) ms/step"),
                  t("分页 ÷ 连续 − 1（%）", "paged ÷ dense − 1 (%)"), t("输出最大差", "max output difference")], rows,
                 caption=t("间接寻址：同样的 K/V，一个线程，CPU 时间，交替多轮取最快（本机 CPU 实测）",
                           "Indirection: same K/V, one thread, CPU time, interleaved rounds, fastest kept "
                           "(measured on this CPU)"),
                 notes=[t(f"论文：{c.value}（{c.source}，CUDA 内核对 FasterTransformer）。",
                          f"Paper: {c.value} ({c.source}, CUDA kernel vs FasterTransformer).")])


def throughput_sentence(paged: LayoutRun, contiguous: LayoutRun, where: str, id: str = "") -> str:
    """Paged over contiguous throughput, rendered from its verdict (exact when simulated); with
    ``id`` the verdict is recorded in results/lab02.json."""
    v = throughput_verdict(paged, contiguous, id)
    if id:
        record_verdict("02", v)
    return throughput_line(v, where)


def throughput_line(v, where: str) -> str:
    """Paged over contiguous throughput from its verdict (section 4's record)."""
    return v.sentence(greater=(f"{where}：吞吐（输出 token/秒）分页是连续的 {{ratio}}", f"{where}: paged throughput is {{ratio}} contiguous's"),
                      same=(f"{where}：吞吐（输出 token/秒）分页与连续持平（{{ratio}}）", f"{where}: paged throughput is level with contiguous ({{ratio}})"),
                      less=(f"{where}：吞吐分页只有连续的 {{ratio}}——分页反而更慢", f"{where}: paged throughput is only {{ratio}} contiguous's: paged came out slower"))


def summary_table(paged: LayoutRun, contiguous: LayoutRun, prefix: tuple[PrefixRun, PrefixRun], fork: ForkRun,
                  paper_like: tuple[LayoutRun, LayoutRun] | None = None, prefix_verdict=None) -> Table:
    """The numbers to remember; ``paper_like`` (paged, max-length contiguous) on the paper's workload;
    ``prefix_verdict`` (section 5.1's record) marks the TTFT ratio as section 5.1's table does."""
    off, on = prefix
    rows = [] if paper_like is None else [
        [t("论文的负载：存有 K/V 占整个池（图 2 口径），连续（最大长度预留）→ 分页",
           "the paper's workload: K/V share of the whole pool (Fig. 2 measure), contiguous (max-length) → paged"),
         f"{paper_like[1].effective_use:.1f} % → {paper_like[0].effective_use:.1f} %"
         + t(f"（分页另有 {paper_like[0].breakdown.free:.0f} % 空闲）", f" (paged: {paper_like[0].breakdown.free:.0f} % free)"),
         paper_like[0].label]]
    rows += [
        [t("KV 浪费：连续（最大长度预留）→ 分页", "KV waste: contiguous (max-length reservation) → paged"),
         f"{contiguous.waste:.1f} % → {paged.waste:.1f} %", paged.label],
        [t("同一个池里同时运行的请求数（分页 ÷ 连续）", "requests running at once in one pool (paged ÷ contiguous)"),
         f"{fit_ratio(paged, contiguous):.1f} ×", paged.label],
        [t("共享前缀：TTFT 关 ÷ 开", "shared prefix: TTFT off ÷ on"),
         f"{_ttft_x(off, on):.1f} ×" + (prefix_mark(prefix_verdict) if prefix_verdict is not None else ""),
         t("真实模型", "real model")],
        [t(f"并行采样 n={fork.n}：写时复制省下的 KV 块", f"parallel sampling n={fork.n}: KV blocks saved by sharing"),
         f"{fork.mean_saving():.0f} %", t("真实模型", "real model")],
    ]
    return Table([t("要记住的数", "number to remember"), t("本次测得", "measured here"), t("来自", "from")], rows)


# ----------------------------------------------------------------------------- sections 3 and 4 from their records

BLOG_WASTE = 4.0        # vLLM blog: "under 4%" waste with paging
MAX_WASTE = 60.0        # vLLM blog: existing systems waste 60-80 %
PAPER_LIKE = "ShareGPT 式"       # the paper-scale trace built to the paper's ShareGPT lengths


def trace_name(key: str) -> str:
    return t("ShareGPT 式", "ShareGPT-like") if key == PAPER_LIKE else key


def _yes_no(value: bool) -> str:
    return "yes" if value else "no"


def layouts_narration(rec):
    """Section 3 rendered from its record alone (``layouts.record_layouts``): the table of pool splits, the
    sentences set against the vLLM blog and the paper's Fig. 2, the tail bound, and the figure's title.
    The splits are counted, so the claims are the same on every CPU; they are still read from the record."""
    from labkit.labs.common.records import Narration

    small, paper = layouts_from_record(rec)
    conv_max, _, conv_paged = paper["conv"]
    under, over = conv_paged.waste < BLOG_WASTE, conv_max.waste > MAX_WASTE
    real_paged = [runs[1] for runs in small.values()]
    worst_tail = max(r.max_tail_slots for r in [conv_paged, *real_paged])
    bound = conv_paged.block_size - 1
    lines = [t(f"模拟对话轨迹：分页浪费 {conv_paged.waste:.1f}%，" + ("低于" if under else "没有低于") + f" {BLOG_WASTE:g}%（vLLM 博客：under 4%）；"
               f"连续最大长度预留浪费 {conv_max.waste:.1f}%，" + ("高于" if over else "没有高于") + f" {MAX_WASTE:g}%。",
               f"Simulated conversation trace: paging wastes {conv_paged.waste:.1f}%, " + ("under" if under else "not under")
               + f" {BLOG_WASTE:g}% (vLLM blog: under 4%); max-length reservation wastes {conv_max.waste:.1f}%, "
               + ("over" if over else "not over") + f" {MAX_WASTE:g}%.")]
    for kind, (contiguous, paged) in small.items():
        lines.append(t(f"真实模型（CPU 规模）{kind} 轨迹：连续预留 {contiguous.waste:.1f}% → 分页 {paged.waste:.1f}%；"
                       f"模拟（论文规模）同一种轨迹分页 {paper[kind][2].waste:.1f}%。",
                       f"Real model (CPU scale), {kind} trace: contiguous {contiguous.waste:.1f}% → paged {paged.waste:.1f}%; "
                       f"simulated at paper scale, paged {paper[kind][2].waste:.1f}%.") if kind in paper else
                     t(f"真实模型 {kind} 轨迹：连续预留 {contiguous.waste:.1f}% → 分页 {paged.waste:.1f}%。",
                       f"Real model, {kind} trace: contiguous {contiguous.waste:.1f}% → paged {paged.waste:.1f}%."))
    if PAPER_LIKE in paper:
        lines += effective_use_lines(tuple(paper[PAPER_LIKE]), t("模拟 ShareGPT 式轨迹（论文的负载）",
                                                                 "Simulated ShareGPT-like trace (the paper's load)"))
    lines.append(t(f"分页时，任何一步里一个请求的未填槽位最多 {worst_tail} 个，块大小 {bound + 1}：最多只浪费最后一块的尾部（≤ {bound}）——"
                   + ("成立。" if worst_tail <= bound else "不成立！请检查。"),
                   f"Paged: at most {worst_tail} unfilled slots per request in any step, block size {bound + 1}: only the last "
                   f"block's tail is wasted (≤ {bound}): " + ("holds." if worst_tail <= bound else "does NOT hold! Check.")))
    runs = [r for rs in small.values() for r in rs] + [r for rs in paper.values() for r in rs]
    table = layout_table(runs)
    title = t(f"KV 池里的槽位都去哪了（各步平均）：模拟对话轨迹浪费 连续最大长度预留 {conv_max.waste:.1f}% → 分页 {conv_paged.waste:.1f}%",
              f"Where the KV pool's slots went (mean over steps): simulated conversation waste, max-length reservation "
              f"{conv_max.waste:.1f}% → paged {conv_paged.waste:.1f}%")
    return Narration(tuple(lines), tuple(tuple(r) for r in table.rows), title,
                     {"paged_waste_under_blog": _yes_no(under), "max_waste_over_60": _yes_no(over),
                      "tail_within_block": _yes_no(worst_tail <= bound),
                      **{f"paged_wastes_less/{k}": _yes_no(p.waste < c.waste) for k, (c, p) in small.items()}})


def fit_lines(pairs: dict[str, tuple[LayoutRun, LayoutRun]]) -> list[str]:
    """Section 4.1: the measured concurrency ratios beside the paper's (all counted)."""
    lines = []
    for kind in dict.fromkeys(k.split("/")[1] for k in pairs if k.startswith("paper/")):
        mx, orc = pairs.get(f"paper/{kind}/max"), pairs.get(f"paper/{kind}/oracle")
        if mx and orc:
            lines.append(t(f"模拟 {trace_name(kind)}：平均并发 分页 ÷ 最大长度预留 = {fit_ratio(*mx):.1f} 倍，分页 ÷ 恰好预留 = {fit_ratio(*orc):.1f} 倍",
                           f"Simulated {trace_name(kind)}: mean running, paged ÷ max-length = {fit_ratio(*mx):.1f}×, "
                           f"paged ÷ exact = {fit_ratio(*orc):.1f}×"))
    if QUEUE in pairs:
        lines.append(t(f"真实模型、排满的队列：平均并发 分页 ÷ 连续 = {fit_ratio(*pairs[QUEUE]):.1f} 倍",
                       f"Real model, full queue: mean running, paged ÷ contiguous = {fit_ratio(*pairs[QUEUE]):.1f}×"))
    return lines


def fit_narration(rec):
    """Section 4 rendered from its record alone (``layouts.record_fit``): the table (throughput ratios
    marked by their recorded verdicts), the sentences and the table's title (what the full queue measured)."""
    from labkit.labs.common.records import Narration

    pairs = fit_from_record(rec)
    verdicts = {name: rec.verdict(name) for name in pairs}
    oracle_ratio, max_ratio = paper_fit_ratios()
    lines = []
    for kind in dict.fromkeys(k.split("/")[1] for k in pairs if k.startswith("paper/")):
        mx, orc = pairs.get(f"paper/{kind}/max"), pairs.get(f"paper/{kind}/oracle")
        if mx and orc:
            lines.append(t(f"模拟 {trace_name(kind)}：分页时平均同时运行的请求数是最大长度预留的 {fit_ratio(*mx):.1f} 倍、"
                           f"恰好预留的 {fit_ratio(*orc):.1f} 倍",
                           f"Simulated {trace_name(kind)}: paged runs {fit_ratio(*mx):.1f}× as many requests at once as "
                           f"max-length reservation, {fit_ratio(*orc):.1f}× exact reservation"))
    lines.append(t(f"论文（ShareGPT）：vLLM 是 Orca(Max) 的 {max_ratio:.1f} 倍、Orca(Oracle) 的 {oracle_ratio:.1f} 倍。",
                   f"Paper (ShareGPT): vLLM batches {max_ratio:.1f}× Orca(Max), {oracle_ratio:.1f}× Orca(Oracle)."))
    if "paper/conv/max" in pairs:
        lines.append(throughput_line(verdicts["paper/conv/max"], t("模拟对话轨迹", "simulated conversation trace")))
    queue = pairs.get(QUEUE)
    if queue is not None:
        lines.append(throughput_line(verdicts[QUEUE], t("真实模型、排满的队列", "real model, full queue")))
    title = t("同一个池、同一条轨迹：同时运行的请求数与吞吐（本次运行实测；模拟的时间是虚拟时间）",
              "Same pool, same trace: requests running at once and throughput (measured in this run; simulated times are virtual)")
    if queue is not None:
        v = verdicts[QUEUE]
        title += t(f"——排满的队列：平均并发 {fit_ratio(*queue):.1f} 倍，吞吐 {v.ratio:.2f}×{v.mark(**THROUGHPUT_MARKS)}",
                   f": full queue, {fit_ratio(*queue):.1f}× running, throughput {v.ratio:.2f}×{v.mark(**THROUGHPUT_MARKS)}")
    table = fit_table(list(pairs.values()), [verdicts[n] for n in pairs], caption=title)
    claims = {f"paged_throughput/{n}": f"{v.direction}|{v.confidence}" for n, v in verdicts.items()}
    claims.update({f"paged_fits_more/{n}": _yes_no(fit_ratio(*pair) > 1.05) for n, pair in pairs.items()})
    return Narration(tuple(lines), tuple(tuple(r) for r in table.rows), title, claims)
