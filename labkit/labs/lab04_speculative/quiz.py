"""Lab 04 concept check: ten questions on speculative decoding, every option explained.

Numeric answers are computed here from ``labkit.spec_decode.theory`` (never typed in), so the
quiz and the lab's formulas cannot drift apart. Text is ``{"zh": ..., "en": ...}``.
"""

from __future__ import annotations

from labkit.assess import Numeric, Ordering, Quiz
from labkit.assess.bank import Row, on_own_result, render
from labkit.spec_decode.theory import expected_speedup, expected_tokens_per_step, optimal_k


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}


ROWS = [
    Row("sd-where-speedup", ("在单个请求、显存带宽受限的解码中，投机解码的加速从哪里来？",
                             "In single-request, memory-bound decoding, where does speculative decoding's speed-up come from?"), [
        ("目标模型一次前向给 k+1 个位置打分，读一遍权重的代价和算 1 个 token 差不多",
         "One target forward scores k+1 positions; reading the weights once costs about what 1 token does",
         "对：解码受限于读权重，验证 k+1 个 token 与解码 1 个 token 读的是同一遍权重；被接受的草稿就是白赚的 token。",
         "Right: decode is bound by reading the weights; verifying k+1 tokens reads them once, like decoding 1; "
         "accepted drafts are tokens gained for free.", ""),
        ("草稿模型替目标模型写出最终输出，目标模型只隔几步抽查一次，查到错再改",
         "The draft model writes the final output; the target spot-checks every few steps and fixes what it finds",
         "每个输出 token 都由目标模型的验证决定（接受、纠正或 bonus），草稿只是提议。",
         "Every output token is decided by the target's verification (accepted, recovered or bonus); drafts only propose.",
         "the draft writes the output"),
        ("投机期间目标模型跳过一部分层，草稿被拒绝时再补算完整的前向",
         "While speculating the target skips some layers and runs its full forward when a draft is rejected",
         "目标模型每次验证都跑完整的前向；跳层是另一类方法（如 self-speculative），不是这里的机制。",
         "The target runs its full forward to verify; skipping layers is a different family of methods.",
         "verification is a partial forward"),
        ("被接受的草稿不再写入 KV 缓存，缓存变小了，所以之后每步的注意力都更快",
         "Accepted drafts are not written to the KV cache, which stays smaller, so every later attention is faster",
         "投机不会让 KV 缓存变小：被接受的 token 照样写入；被拒绝的草稿位置还要回滚。",
         "Speculation does not shrink the KV cache: accepted tokens are written as usual; rejected positions are rolled back.",
         "speculation saves KV memory")]),
    Row("sd-greedy-rule", ("贪心解码（temperature = 0），k = 4：草稿为 A B C D，目标模型在这 5 个位置的 argmax 为 A B X D E。这一步输出什么？",
                           "Greedy, k = 4: drafts A B C D; the target's argmax at the 5 positions is A B X D E. What does this step emit?"), [
        ("A B X", "A B X", "对：接受最长的一致前缀 A B，在第一个不一致处放入目标的 token X，然后停止。",
         "Right: accept the longest agreeing prefix A B, emit the target's X at the first mismatch, stop.", ""),
        ("A B X D E", "A B X D E",
         "X 之后的草稿是以 C 为前提起草的；C 被换成 X，后面的位置就全部作废（D 和 E 都不能用）。",
         "Drafts after the mismatch were conditioned on C; once C becomes X they are void (D and E cannot be used).",
         "later agreeing positions still count"),
        ("A B", "A B", "漏了目标模型自己的 token：每一步至少产出 1 个 token，所以投机不会比普通解码少产出。",
         "Missing the target's own token: every step emits at least one, so speculation never emits fewer tokens.",
         "a rejection emits nothing"),
        ("A B C D E", "A B C D E", "只有全部 k 个草稿都被接受才有 bonus token；这里 C 与 X 不一致。",
         "A bonus token comes only when all k drafts pass; here C disagrees with X.",
         "drafts are accepted unchecked")]),
    Row("sd-rejection-rule", ("采样模式下草稿 token x 被拒绝。下一个 token 应从哪个分布里采？",
                              "In sampling mode draft token x is rejected. Which distribution is the next token drawn from?"), [
        ("normalize(max(0, p − q))", "normalize(max(0, p − q))",
         "对：接受的部分贡献了 min(p, q)，残差 max(0, p − q) 正好补齐到 p（Leviathan 等 2023 附录 A.1）。",
         "Right: acceptance contributes min(p, q); the residual max(0, p − q) tops it up to exactly p (Appendix A.1).", ""),
        ("目标分布 p 本身：被拒绝后就像普通解码那样重新采样", "the target distribution p itself, as in plain decoding",
         "这样 q 与 p 重叠的部分会被算两次，输出分布偏向草稿喜欢的 token（本实验练习的隐藏检验会抓到它）。",
         "That counts the overlap of p and q twice and biases the output towards the draft's favourites (the "
         "exercise's hidden distribution test catches it).",
         "resample from p after a rejection"),
        ("草稿分布 q，再交给目标模型验证一次", "the draft distribution q, verified once more",
         "那样输出就服从草稿模型，不再是目标模型的分布；而且这一步没有再验证的机会。",
         "Then the output would follow the draft, not the target; and this step has no second verification.",
         "the draft proposes again"),
        ("p 去掉 x 之后重新归一化", "p with x removed, renormalised",
         "只有当 q 是点质量（如 n-gram 提议）时，残差才恰好等于“p 去掉 x”；一般的 q 不是。",
         "Only when q is a point mass (as with n-gram drafts) is the residual 'p without x'; not for a general q.",
         "only the rejected token is excluded")]),
    Row("sd-alpha-vs-rate", ("vLLM 报告的接受率 = 接受的草稿数 / 起草数。α = 0.8、每步 k = 4 时，它大约是多少？",
                             "vLLM's acceptance rate = accepted drafts / drafted tokens. With α = 0.8 and k = 4 per step, it is about"), [
        ("0.59", "0.59", "对：(α + α² + α³ + α⁴) / 4 ≈ 0.59。第一次拒绝之后的草稿从未被比较，却计入了分母。",
         "Right: (α + α² + α³ + α⁴)/4 ≈ 0.59. Drafts after the first rejection were never compared, yet count as drafted.", ""),
        ("0.80", "0.80", "那是 α 本身（逐 token 接受概率）；接受率总比它低（k > 1 且 α < 1 时）。",
         "That is α itself (per-token); the acceptance rate is lower whenever k > 1 and α < 1.",
         "the rate equals α"),
        ("0.41", "0.41", "那是 α⁴：四个全被接受的概率，不是接受率。", "That is α⁴, the chance all four pass, not the rate.",
         "the rate is all-accepted probability"),
        ("0.84", "0.84", "那是 (1 + α + … + α⁴)/4 ≈ 3.36/4：把每步的 bonus/纠正 token 也算成了接受的草稿。",
         "That is (1 + α + … + α⁴)/4 ≈ 3.36/4: it counts each step's bonus or recovered token as an accepted draft.",
         "emitted tokens are accepted drafts")]),
    Row("sd-misreading", ("“开了投机解码，输出一定更快。”什么情况下它反而更慢？",
                          "'Speculative decoding always makes output faster.' When is it slower?"), [
        ("多换回的 token 付不起起草与验证的代价时（常猜错、提议者贵、批已满）",
         "When the extra tokens do not pay for drafting and verifying (bad guesses, costly proposer, full batch)",
         "对：加速比 = 每步产出的 token 数 / 每步的代价。每步至少 1 个 token，但每步更贵了（起草 + 验证 k+1 个 token）。"
         "哪类流量上提议者常猜错，取决于提议者：第 4 节的表按本次测量给出；vLLM 博客在高 QPS 下测到 1.4–1.8 倍的变慢。",
         "Right: speed-up = tokens per step / cost per step. Each step still emits ≥ 1 token but costs more (drafting + "
         "verifying k+1 tokens). Which traffic a proposer guesses wrong on depends on the proposer: section 4's table "
         "shows it for this run; the vLLM blog measured 1.4-1.8× slowdowns at high QPS.", ""),
        ("只有在采样（temperature > 0）时才会变慢；贪心解码下投机总是更快",
         "Only when sampling (temperature > 0); under greedy decoding speculation is always faster",
         "贪心也一样：加速比 = 每步 token 数 / 每步代价，与是否采样无关；第 4 节的表全是贪心，看其中低于 1 的行（如果有）。",
         "Greedy too: speed-up = tokens per step / cost per step, sampling or not; section 4's table is all greedy, "
         "look for rows below 1 there (if any).",
         "greedy speculation always wins"),
        ("不会更慢：最坏情况下每步仍产出 1 个 token，和普通解码一样",
         "Never: in the worst case each step still emits 1 token, just like plain decoding",
         "token 数不会少，但每一步更贵：速度 = token 数 / 时间。", "Tokens never drop, but each step costs more: speed = tokens / time.",
         "at least one token per step means no loss"),
        ("草稿模型的参数比目标模型还多时", "When the draft model has more parameters than the target",
         "小草稿也可能得不偿失：n-gram 提议几乎不花时间，α 低时验证 k+1 个 token 的代价照样吃掉收益。",
         "Small drafts can lose too: n-gram drafting is nearly free, yet with a low α verifying k+1 tokens eats the gain.",
         "only a slow draft hurts")]),
    Row("sd-lossless", ("为什么说（正确实现的）投机解码是“无损”的？", "Why is (correctly implemented) speculative decoding 'lossless'?"), [
        ("贪心时输出与普通贪心逐 token 相同；采样时每个 token 恰好服从 p，与草稿好坏无关",
         "Greedy output equals plain greedy token for token; sampled tokens follow exactly p, whatever the draft",
         "对：草稿的质量只影响 α（速度），不影响输出分布。本实验用卡方检验把它量给你看。",
         "Right: the draft's quality changes α (speed), never the output distribution; the lab measures it with a chi-square test.", ""),
        ("因为草稿模型是从目标模型蒸馏出来的，两者的输出分布本来就几乎相同",
         "Because the draft is distilled from the target, so their output distributions are nearly the same anyway",
         "n-gram 提议根本没有模型，照样无损；蒸馏只提高 α。", "n-gram lookup has no model at all and is still lossless; distillation only raises α.",
         "lossless depends on a good draft"),
        ("因为被拒绝的草稿也保留在输出里，信息一个都没有丢",
         "Because rejected drafts are kept in the output too, so no information is lost",
         "被拒绝的草稿会被丢弃，它们的 KV 位置也会回滚（num_computed_tokens 减回去）。",
         "Rejected drafts are discarded and their KV slots rolled back (num_computed_tokens goes back).",
         "rejected drafts stay"),
        ("只在贪心时无损；采样时输出分布会略微偏向草稿，只是偏差小到卡方检验也测不出来",
         "Only greedy is lossless; when sampling the output leans towards the draft, just too little to measure",
         "采样时也精确无损：拒绝采样保证每个输出 token 的分布恰好是 p（附录 A.1），卡方检验测不出偏差是因为没有偏差。",
         "Sampling is exactly lossless too: rejection sampling makes each token's distribution exactly p (Appendix A.1).",
         "sampling is only approximately lossless")]),
    Row("sd-itl", ("同一次投机解码的压测报告里，TPOT 是 4 ms，ITL 是 11 ms。最可能的解释是？",
                   "A benchmark of one speculative run reports TPOT 4 ms and ITL 11 ms. The likeliest explanation?"), [
        ("ITL 是流式块之间的间隔，投机时一块带好几个 token；TPOT 按 token 平均",
         "ITL is the gap between streamed chunks, several tokens each with speculation; TPOT is per token",
         "对：平均 ITL / TPOT = (token 数 − 1) / (块数 − 1)。GPUStack 在 EAGLE3 下测到 TPOT 3.75 ms、ITL 11.05 ms。AIPerf 把 vLLM 的 TPOT 叫作 ITL——先问定义。",
         "Right: mean ITL / TPOT = (tokens − 1) / (chunks − 1). GPUStack measured TPOT 3.75 ms vs ITL 11.05 ms under "
         "EAGLE3. AIPerf calls vLLM's TPOT 'ITL': ask for the definition.", ""),
        ("测量出错了：两者定义相同，同一次运行里应该相等", "A measurement error: the two are defined alike and must be equal in one run",
         "只有每块 1 个 token（不投机）时两者才相等。", "They are equal only when every chunk holds one token (no speculation).",
         "ITL and TPOT are synonyms"),
        ("ITL 把首 token 延迟也算了进去，所以平均值被拉高", "ITL includes the time to first token, which pulls its mean up",
         "两者都不含首 token 延迟（TTFT）。", "Neither includes the time to first token (TTFT).",
         "ITL includes TTFT"),
        ("被拒绝的草稿 token 也计入了 ITL 的间隔统计，每拒绝一次就多出一个间隔，所以 ITL 偏大",
         "Rejected draft tokens are counted in ITL's gaps, one extra gap per rejection, which makes ITL larger",
         "被拒绝的草稿不会流给客户端，不计入任何一项；差别来自一块带几个 token。",
         "Rejected drafts are never streamed and count in neither; the gap comes from tokens per chunk.",
         "rejected drafts are timed")]),
]


def _expected_tokens() -> Numeric:
    alpha, k = 0.8, 4
    value = expected_tokens_per_step(alpha, k)
    return Numeric(
        question=_t(f"α = {alpha}、k = {k}：每次验证步期望产出多少个 token？", f"α = {alpha}, k = {k}: expected tokens per verification step?"),
        answer=round(value, 2), tol=0.01, unit="token",
        hint=_t("(1 − α^(k+1)) / (1 − α) = 1 + α + … + α^k。", "(1 − α^(k+1)) / (1 − α) = 1 + α + … + α^k."),
        explanation=_t(f"1 + 0.8 + 0.64 + 0.512 + 0.4096 = {value:.2f}（Leviathan 等 2023，式 (1)）。",
                       f"1 + 0.8 + 0.64 + 0.512 + 0.4096 = {value:.2f} (Leviathan et al. 2023, Eq. 1)."))


def _speedup() -> Numeric:
    alpha, k, c = 0.8, 4, 0.1
    value = expected_speedup(alpha, k, c)
    return Numeric(
        question=_t(f"同上（α = {alpha}、k = {k}），草稿一步的耗时是目标一步的 c = {c}。按 Leviathan 公式，加速比是多少？",
                    f"As above (α = {alpha}, k = {k}); a draft step costs c = {c} target steps. Leviathan's speed-up?"),
        answer=round(value, 2), tol=0.02, unit="×",
        hint=_t("期望 token 数 / (k·c + 1)。", "expected tokens / (k·c + 1)."),
        explanation=_t(f"{expected_tokens_per_step(alpha, k):.2f} / (4 × 0.1 + 1) = {value:.2f}（定理 3.8）。注意它假设验证 k+1 个 token "
                       "只花一个普通步——本实验在 CPU 上量出这不成立。",
                       f"{expected_tokens_per_step(alpha, k):.2f} / (4 × 0.1 + 1) = {value:.2f} (Theorem 3.8). It assumes "
                       "verifying k+1 tokens costs one plain step, which this lab measures to be false on a CPU."))


def _best_k() -> Numeric:
    alpha, c = 0.6, 0.2
    k = optimal_k(alpha, c)
    return Numeric(
        question=_t(f"α = {alpha}、c = {c}：按 Leviathan 公式，最优的 k 是多少？（0 表示不投机）",
                    f"α = {alpha}, c = {c}: by Leviathan's formula, which k is best? (0 = do not speculate)"),
        answer=k, tol=0, unit="",
        hint=_t("对 k = 0, 1, 2, … 逐个算 (1 + α + … + α^k) / (k·c + 1)。", "Compute (1 + α + … + α^k) / (k·c + 1) for k = 0, 1, 2, …"),
        explanation=_t(f"k = 0…4 的加速比：{', '.join(f'{expected_speedup(alpha, j, c):.3f}' for j in range(5))}；最大在 k = {k}。"
                       "α 不高、草稿又不便宜时，多起草只是多花钱。",
                       f"Speed-ups for k = 0..4: {', '.join(f'{expected_speedup(alpha, j, c):.3f}' for j in range(5))}; "
                       f"the largest is at k = {k}. With a modest α and a costly draft, more drafts only cost more."))


OWN_STEP_COST = 1.5      # a stated "if", not a measurement: the question is about reading the learner's own τ


def _own_speedup(tokens_per_step: float) -> Numeric:
    """On the learner's own run (section 2's prediction ``ngram-tokens-per-step``): speed-up from τ."""
    answer = tokens_per_step / OWN_STEP_COST
    return Numeric(
        question=_t(f"你在第 2 节测得：n-gram、k = 4、抄写式编辑，每个解码步平均产出 {tokens_per_step:.2f} 个 token。"
                    f"如果一个投机步的耗时是普通解码步的 {OWN_STEP_COST} 倍，端到端的加速比约是多少？",
                    f"In section 2 you measured: n-gram, k = 4, copy-style edits, {tokens_per_step:.2f} tokens per decode "
                    f"step on average. If a speculative step takes {OWN_STEP_COST}× a plain decode step, what is the "
                    "end-to-end speed-up, roughly?"),
        answer=round(answer, 2), rel_tol=0.03, unit=_t("倍", "×"), id="sd-own-speedup",
        hint=_t("普通解码每步 1 个 token；加速比 = 每步产出的 token 数 ÷ 每步的相对代价。",
                "Plain decoding yields 1 token per step; speed-up = tokens per step ÷ the step's relative cost."),
        explanation=_t(f"{tokens_per_step:.2f} ÷ {OWN_STEP_COST} ≈ {answer:.2f}：多产出的 token 先要付清每步多花的时间。",
                       f"{tokens_per_step:.2f} ÷ {OWN_STEP_COST} ≈ {answer:.2f}: the extra tokens must first pay for "
                       "the costlier step."))


def questions() -> list:
    where_speedup, greedy_rule, rejection_rule, alpha_vs_rate, misreading, lossless, itl = render(ROWS)
    return [where_speedup, greedy_rule, rejection_rule, _expected_tokens(), _speedup(), _best_k(),
            *on_own_result("04", "ngram-tokens-per-step", _own_speedup), alpha_vs_rate, misreading, lossless, itl]


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：投机解码", "Concept check: speculative decoding"), lab="04")


# ----------------------------------------------------------------------------- checks inside the lab's sections

def step_order() -> Ordering:
    """The order of what happens in one speculative decoding step of this engine."""
    return Ordering(
        question=_t("把投机解码一步里发生的事排成先后顺序（用 ▲ ▼ 移动，再检查）：",
                    "Put what happens in one speculative decoding step in order (move with ▲ ▼, then check):"),
        items=[
            _t("提议者（n-gram 或草稿模型）起草 k 个 token", "The proposer (n-gram or draft model) drafts k tokens"),
            _t("目标模型一次前向处理“最后一个 token + k 个草稿”，得到 k + 1 个位置的分布，并把它们的 K/V 写进缓存",
               "The target model runs one forward pass over the last token plus the k drafts: k + 1 distributions, "
               "their K/V written to the cache"),
            _t("从第一个草稿起逐个比较，接受到第一个不一致为止（采样器的 `_verify`）",
               "Compare the drafts one by one from the first, accepting up to the first mismatch (the sampler's `_verify`)"),
            _t("在第一个不一致处放上目标模型自己的 token（全部接受时再多给一个 bonus token）",
               "At the first mismatch, emit the target model's own token (if all are accepted, one bonus token)"),
            _t("调度器把 `num_computed_tokens` 减回“接受的草稿 + 1”：被拒草稿写进缓存的 K/V 作废（回滚）",
               "The scheduler sets `num_computed_tokens` back to accepted drafts + 1: the rejected drafts' K/V is dropped "
               "(rolled back)"),
        ],
        reasons=[
            _t("一切从草稿开始：目标模型这一步要验证的就是它们。", "Everything starts from the drafts: they are what the step verifies."),
            _t("目标模型这次前向的输入就是草稿：没有草稿，前向只能算一个位置，那就是普通解码。"
               "（目标模型并不先自己生成、再让草稿来对答案。）",
               "The drafts are the forward pass's input: without them it computes one position, which is plain decoding. "
               "(The target does not generate first and let the drafts check against it.)"),
            _t("比较要用目标模型在每个位置给出的分布（贪心时是 argmax），它们来自那次前向：前向之前无从比较。",
               "Comparing needs the target's distribution at each position (its argmax when greedy), which comes from "
               "that forward pass: nothing can be compared before it."),
            _t("修正 token 放在第一个不一致的位置上：要先比较出这个位置，才知道放在哪里、前面接受了几个草稿。",
               "The correction goes at the first mismatch: the comparison must find that position first."),
            _t("回滚多少取决于接受了几个草稿，要等比较和修正结束才知道；被拒草稿的 K/V 是前向时写进去的，所以回滚一定在最后。",
               "How much to roll back depends on how many drafts were accepted, known only after comparing; the rejected "
               "drafts' K/V was written by the forward pass, so the rollback comes last."),
        ],
        explanation=_t("每步至少产出 1 个 token（修正或 bonus），最多 k + 1 个；因为每个输出 token 都经目标模型的分布认可，输出与普通解码相同。",
                       "Each step yields at least 1 token (the correction or the bonus) and at most k + 1; every token "
                       "output is the target's own choice, so the output equals plain decoding."),
        id="sd-step-order")


def section_checks() -> list:
    """The questions this lab asks inside its sections (shown by their own cells, not in ``quiz()``)."""
    return [step_order()]


def step_order_check() -> Quiz:
    return Quiz([step_order()], title=_t("排序：投机解码的一步", "Order: one speculative decoding step"), lab="04",
                id="sd-step-order")
