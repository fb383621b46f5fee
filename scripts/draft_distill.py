"""Distil the target into the draft: match the target's next-token distribution on its own answers.

Loss per answer position i (Hinton et al. 2015, "Distilling the Knowledge in a Neural Network";
for drafts: Zhou et al. 2024, "DistillSpec"):

    L_i = - sum_{x in top-K(target) ∩ draft vocab}  p_i(x) * log q_i(x)

p_i is the target's softmax restricted to its top-K tokens that the draft can emit, renormalised;
q_i is the draft's softmax over its own vocabulary. Up to a constant this is KL(p_i || q_i), so the
draft learns the whole ranking, not only the argmax (more signal per token than cross-entropy on
the greedy token, which matters when training text is scarce).

Training runs the draft's layers densely (full causal attention over padded sequences) with the
same math as ``LlamaModel.forward`` over the paged cache; ``check_dense_matches_paged`` verifies
that, so what is trained is what the engine runs.
"""

from __future__ import annotations

import math
from collections import Counter

import torch
import torch.nn.functional as F
from draft_corpus import Sample

from labkit.attention import reference
from labkit.attention.metadata import AttentionMetadata
from labkit.kernels.ops.torch_ops import rms_norm
from labkit.kv.paged_kv import PagedKVCache
from labkit.spec_decode.draft_model import DraftLlama


def choose_vocab(samples: list[Sample], size: int, always: tuple[int, ...]) -> tuple[torch.Tensor, float]:
    """``size`` token ids for the draft head, sorted, and the share of answer tokens they cover.

    ``always`` (e.g. EOS) first, then answer tokens by frequency; if the corpus has fewer distinct
    tokens than ``size``, the rest are the lowest ids, which byte-level BPE assigns to its earliest,
    most frequent merges (a corpus-free guess at what held-out answers will need).
    """
    counts = Counter(t for s in samples for t in s.output_ids)
    ranked = list(dict.fromkeys(list(always) + [t for t, _ in counts.most_common()]))[:size]
    chosen = set(ranked)
    for t in range(size * 2):
        if len(chosen) >= size:
            break
        chosen.add(t)
    covered = sum(c for t, c in counts.items() if t in chosen) / max(1, sum(counts.values()))
    return torch.tensor(sorted(chosen), dtype=torch.long), covered


def dense_forward(model: DraftLlama, input_ids: torch.Tensor, rows: tuple | None = None) -> torch.Tensor:
    """input_ids: [B, T] (sequences start at position 0) -> logits [B, T, draft vocab], or only at
    ``rows = (b, t)`` index tensors -> [R, draft vocab] (the head is the costliest matmul)."""
    T = input_ids.shape[1]
    positions = torch.arange(T)
    x = F.embedding(input_ids, model.embed_tokens)
    for layer in model.layers:
        x = _dense_layer(layer, x, positions, model.rotary)
    if rows is not None:
        x = x[rows]
    x = rms_norm(x, model.norm, model.config.rms_norm_eps)
    return x @ model.lm_head.t()


def _dense_layer(layer, x, positions, rotary):
    B, T, _ = x.shape
    h = rms_norm(x, layer.input_layernorm, layer.eps)
    q, k, v = (h @ layer.qkv_proj.t()).split(layer.split, -1)
    q = rotary(q.reshape(B, T, layer.num_heads, layer.head_dim), positions).transpose(1, 2)
    k = rotary(k.reshape(B, T, layer.num_kv_heads, layer.head_dim), positions).transpose(1, 2)
    v = v.reshape(B, T, layer.num_kv_heads, layer.head_dim).transpose(1, 2)
    attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=layer.head_dim ** -0.5,
                                          enable_gqa=True)             # [B, H, T, D]
    x = x + attn.transpose(1, 2).reshape(B, T, -1) @ layer.o_proj.t()
    gate, up = (rms_norm(x, layer.post_attention_layernorm, layer.eps) @ layer.gate_up_proj.t()).chunk(2, -1)
    return x + (F.silu(gate) * up) @ layer.down_proj.t()


def check_dense_matches_paged(model: DraftLlama, token_ids: list[int], block_size: int = 16) -> float:
    """Max |dense - paged| logit difference on one sequence (the paged path is what the engine runs)."""
    n = len(token_ids)
    num_blocks = -(-n // block_size)
    cache = PagedKVCache(model.config.num_hidden_layers, num_blocks, block_size,
                         model.config.num_key_value_heads, model.config.head_dim,
                         model.embed_tokens.dtype, "cpu")
    meta = AttentionMetadata.build([n], [n], [list(range(num_blocks))], list(range(n)), block_size)
    ids = torch.tensor(token_ids)
    paged = model(ids, torch.arange(n), cache.layer_caches(block_size), meta, torch.arange(n), reference)
    with torch.no_grad():
        dense = dense_forward(model, ids[None])[0].float()
    return float((dense - paged).abs().max())


# ------------------------------------------------------------------------------------ batches

class DistillData:
    """Answers as training rows: inputs prompt + answer[:-1], soft targets on answer positions."""

    def __init__(self, samples: list[Sample], vocab_ids: torch.Tensor, vocab_size: int):
        self.samples = samples
        self.to_draft = torch.full((vocab_size,), -1, dtype=torch.long)
        self.to_draft[vocab_ids] = torch.arange(len(vocab_ids))

    def batches(self, max_tokens: int, generator: torch.Generator):
        """Shuffled batches of about ``max_tokens`` padded tokens (similar lengths together)."""
        order = torch.randperm(len(self.samples), generator=generator).tolist()
        chunks = [order[i:i + 64] for i in range(0, len(order), 64)]
        batches = []
        for chunk in chunks:
            chunk.sort(key=lambda i: self._length(i))
            batch: list[int] = []
            for i in chunk:
                if batch and (len(batch) + 1) * self._length(i) > max_tokens:
                    batches.append(batch)
                    batch = []
                batch.append(i)
            if batch:
                batches.append(batch)
        perm = torch.randperm(len(batches), generator=generator).tolist()
        return [self.collate([self.samples[j] for j in batches[p]]) for p in perm]

    def _length(self, i: int) -> int:
        s = self.samples[i]
        return len(s.prompt_ids) + len(s.output_ids) - 1

    def collate(self, samples: list[Sample]):
        """(input_ids [B, T], rows (b, t) of answer positions, target ids [R, K], target probs [R, K])."""
        T = max(len(s.prompt_ids) + len(s.output_ids) - 1 for s in samples)
        input_ids = torch.zeros(len(samples), T, dtype=torch.long)
        rows_b, rows_t, tids, tprobs = [], [], [], []
        for b, s in enumerate(samples):
            seq = s.prompt_ids + s.output_ids[:-1]
            input_ids[b, :len(seq)] = torch.tensor(seq)
            P, n = len(s.prompt_ids), len(s.output_ids)
            rows_b += [b] * n
            rows_t += range(P - 1, P - 1 + n)
            ids = self.to_draft[s.top_ids.long()]                             # [n, K], -1 = not drafted
            probs = torch.softmax(s.top_logits.float(), -1) * (ids >= 0)
            tids.append(ids.clamp(min=0))
            tprobs.append(probs / probs.sum(-1, keepdim=True).clamp(min=1e-9))
        return input_ids, torch.tensor(rows_b), torch.tensor(rows_t), torch.cat(tids), torch.cat(tprobs)


def distill_loss(model: DraftLlama, batch) -> tuple[torch.Tensor, float]:
    """Mean soft cross-entropy over answer positions, and the share where argmax q = argmax p."""
    input_ids, rows_b, rows_t, tids, tprobs = batch
    logits = dense_forward(model, input_ids, (rows_b, rows_t)).float()         # [R, N]
    logq = torch.log_softmax(logits, -1)
    loss = -(tprobs * logq.gather(1, tids)).sum(-1).mean()
    agree = (logits.argmax(-1) == tids[:, 0]).float().mean().item()
    return loss, agree


@torch.no_grad()
def calibrate_norm(model: DraftLlama, batch, scales=(1.0, 0.5, 0.35, 0.25, 0.18, 0.125)) -> float:
    """Scale the final norm so the untrained draft's logits are not wildly over-confident.

    The target's final norm expects the residual stream after 30 layers; after 2 layers it makes
    logits far too sharp (initial loss ~17 nats). Picking the best of a few scales on one batch
    starts training near 7 nats instead of spending the first hundred steps on the logit scale.
    """
    base = model.norm.clone()
    losses = {}
    for s in scales:
        model.norm.copy_(base * s)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            losses[s] = distill_loss(model, batch)[0].item()
    best = min(losses, key=losses.get)
    model.norm.copy_(base * best)
    return best


def param_groups(model: DraftLlama, lr: float, norm_lr_mult: float) -> list[dict]:
    """Matrices at ``lr``; RMSNorm gains (O(1) values, where Adam's ~lr-sized steps are tiny) faster."""
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    norms = [p for n, p in named if p.dim() == 1]
    mats = [p for n, p in named if p.dim() > 1]
    return [dict(params=mats, lr=lr, base_lr=lr), dict(params=norms, lr=lr * norm_lr_mult, base_lr=lr * norm_lr_mult)]


def lr_multiplier(step: int, progress: float, warmup: int) -> float:
    """Linear warm-up over ``warmup`` steps, then cosine decay to 0 as ``progress`` goes 0 -> 1.
    (Progress is the larger of steps done and time used, so a time-capped run still decays.)"""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))
