"""Lab 01 concept check: ten questions, every option explained (``labkit.assess``).

The multiple-choice questions are data, ``quiz.toml`` beside this module: a teacher edits their text
there (each distractor names the misconception it stands for), and ``labkit.assess.bank`` checks and
loads the file. What must be computed stays here and ``questions()`` places it after the question it
follows.

Numeric answers are computed from the formula and the cited shapes here, never typed in, so a
question and the lab's own numbers cannot drift apart. Text is ``{"zh": ..., "en": ...}`` (``_t``)
so a quiz on screen follows ``labkit.set_language``.
"""

from __future__ import annotations

from pathlib import Path

from labkit.assess import Numeric, Quiz
from labkit.assess.bank import from_file, on_own_result
from labkit.labs.lab01_kv_cache.measure import KVShape

LLAMA3_8B = KVShape("Llama-3-8B", 32, 8, 128, 2)       # config.json: 32 layers, 8 KV heads, head_dim 128
OPT_13B = KVShape("OPT-13B", 40, 40, 128, 2)           # Kwon et al. SOSP'23 §3
PAPER_KV_GIB = 12                                       # Kwon et al. Table 1: 12 GB for KV on one A100-40GB

BANK = Path(__file__).with_name("quiz.toml")     # the multiple-choice questions, as data


def _t(zh: str, en: str) -> dict[str, str]:
    return {"zh": zh, "en": en}



def _llama3_bytes() -> Numeric:
    s = LLAMA3_8B
    return Numeric(
        question=_t(f"Llama-3-8B：{s.num_layers} 层、{s.num_kv_heads} 个 KV 头（GQA）、head_dim {s.head_dim}、"
                    "bf16（2 字节）。每个 token 的 KV 缓存是多少字节？",
                    f"Llama-3-8B: {s.num_layers} layers, {s.num_kv_heads} KV heads (GQA), head_dim {s.head_dim}, "
                    "bf16 (2 bytes). KV cache bytes per token?"),
        answer=s.bytes_per_token, unit=_t("字节", "bytes"),
        hint=_t("2（K 和 V）× 层数 × KV 头数 × head_dim × 每个数的字节数。",
                "2 (K and V) × layers × KV heads × head_dim × bytes per number."),
        explanation=_t(f"{s.formula()} = {s.bytes_per_token // 1024} KiB。",
                       f"{s.formula()} = {s.bytes_per_token // 1024} KiB."))


def _gqa_saving() -> Numeric:
    return Numeric(
        question=_t("SmolLM2-135M 有 9 个查询头、3 个 KV 头（分组查询注意力，GQA）。和每个查询头都有自己 K/V 的"
                    "多头注意力（MHA）相比，它的 KV 缓存小几倍？",
                    "SmolLM2-135M has 9 query heads and 3 KV heads (grouped-query attention, GQA). How many times "
                    "smaller is its KV cache than with one K/V per query head (MHA)?"),
        answer=3, tol=0.01, unit=_t("倍", "×"),
        hint=_t("KV 缓存与 KV 头数成正比，与查询头数无关。", "KV bytes scale with the number of KV heads, not query heads."),
        explanation=_t("9 / 3 = 3 倍。Llama-3-8B 是 32 / 8 = 4 倍。", "9 / 3 = 3×. Llama-3-8B: 32 / 8 = 4×."))


def _paper_slots() -> Numeric:
    slots = PAPER_KV_GIB * 2**30 / OPT_13B.bytes_per_token
    return Numeric(
        question=_t(f"vLLM 论文（Kwon et al. SOSP'23，表 1）：一块 A100-40GB 上，13B 模型留给 KV 缓存 {PAPER_KV_GIB} GB。"
                    f"按 OPT-13B 每 token {OPT_13B.bytes_per_token:,} 字节，最多能存多少个 token 的 KV？（单位：千个 token）",
                    f"vLLM paper (Kwon et al. SOSP'23, Table 1): on one A100-40GB a 13B model has {PAPER_KV_GIB} GB "
                    f"for the KV cache. At {OPT_13B.bytes_per_token:,} bytes per OPT-13B token, how many tokens fit? "
                    "(thousands)"),
        answer=round(slots / 1000, 1), rel_tol=0.08, unit=_t("千 token", "thousand tokens"),
        hint=_t("显存字节数 ÷ 每 token 字节数。论文把 GB 按 2^30 字节算。",
                "Memory bytes ÷ bytes per token. The paper counts a GB as 2^30 bytes."),
        explanation=_t(f"12 × 2^30 ÷ 819,200 ≈ {slots:,.0f}，论文表 1 写 15.7K。按 12 × 10^9 算约 14.6K，也算对。",
                       f"12 × 2^30 ÷ 819,200 ≈ {slots:,.0f}; the paper's Table 1 says 15.7K. With 12 × 10^9 you get "
                       "about 14.6K, also accepted."))


def _request_gb() -> Numeric:
    total = 2048 * OPT_13B.bytes_per_token
    return Numeric(
        question=_t("一个 2048 token 的 OPT-13B（fp16）请求，KV 缓存约多少 GB？",
                    "How many GB of KV cache does one 2048-token OPT-13B (fp16) request hold?"),
        answer=round(total / 1e9, 2), rel_tol=0.08, unit="GB",
        hint=_t("2048 × 每 token 字节数（2 × 40 × 40 × 128 × 2）。", "2048 × bytes per token (2 × 40 × 40 × 128 × 2)."),
        explanation=_t(f"2048 × 819,200 = {total:,} 字节 ≈ {total / 1e9:.2f} GB（{total / 2**30:.2f} GiB）；"
                       "vLLM 论文 §3 写作约 1.6 GB。",
                       f"2048 × 819,200 = {total:,} bytes ≈ {total / 1e9:.2f} GB ({total / 2**30:.2f} GiB); "
                       "the vLLM paper (§3) says about 1.6 GB."))


def _own_request_mib(bytes_per_token: float) -> Numeric:
    """On the learner's own measurement (section 3's prediction, measured from the engine's tensors)."""
    tokens = 2048
    mib = bytes_per_token * tokens / 2**20
    return Numeric(
        question=_t(f"你这次运行从引擎的真实张量量出：SmolLM2-135M 每个 token 的 KV 缓存是 {bytes_per_token:,.0f} 字节。"
                    f"一个 {tokens} token 的请求要多少 MiB？",
                    f"Your run measured from the engine's tensors: {bytes_per_token:,.0f} KV bytes per SmolLM2-135M "
                    f"token. How many MiB does a {tokens}-token request hold?"),
        answer=round(mib, 2), rel_tol=0.02, unit="MiB", id="kv-own-request-mib",
        hint=_t("token 数 × 每 token 字节数，再除以 2^20。", "tokens × bytes per token, divided by 2^20."),
        explanation=_t(f"{tokens} × {bytes_per_token:,.0f} ÷ 2^20 ≈ {mib:.2f} MiB。",
                       f"{tokens} × {bytes_per_token:,.0f} ÷ 2^20 ≈ {mib:.2f} MiB."))


def questions() -> list:
    return from_file(BANK, after={"kv-quadratic": [
        _llama3_bytes(), _gqa_saving(), _paper_slots(), _request_gb(),
        *on_own_result("01", "kv-bytes-per-token", _own_request_mib)]})


def quiz() -> Quiz:
    return Quiz(questions(), title=_t("概念检查：KV 缓存与碎片", "Concept check: KV cache and fragmentation"), lab="01")
