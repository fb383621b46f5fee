"""Our own Llama forward pass over a paged KV cache.

Tokens arrive flat — ``[num_tokens]`` from many sequences at once — with an explicit
``AttentionMetadata`` saying which sequence each belongs to (no module-global context, so a draft
and a target model can share a process). Each layer::

    x ─ RMSNorm ─ QKV ─ RoPE ─ write K,V via slot_mapping ─ paged attention ─ O ─(+)─ RMSNorm ─ SwiGLU ─(+)

Numerics mirror Hugging Face's ``LlamaForCausalLM`` so greedy output matches token for token.
"""

from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from labkit.attention.metadata import AttentionMetadata
from labkit.model.config import ModelConfig

# Which CPU matmul to use for a [T, in] x [in, out] linear, by row count T (`python -m bench.linear_rows`
# measures both dtypes and prints the CPU it ran on).
# fp32: F.linear is fastest for 1-6 rows (at 2-6 rows (W @ xᵀ)ᵀ took up to 2x longer), while for 8-14
# rows (W @ xᵀ)ᵀ was 1.1-1.7x faster (about equal at 16); above 16 rows both cost the same.
# bf16 with AMX: (W @ xᵀ)ᵀ stays flat from 2 to 16 rows (25-28 ms a sweep) where F.linear takes 39-47 ms,
# and one row through either form takes 38-63 ms: so a single bf16 row is computed as two copies of
# itself (the duplicate costs nothing; each output row is bit-identical whatever the row count).
# bf16 without AMX (AVX-512 only) that trick costs: one padded row took 1.1 ms per 1536x576 matrix
# against 0.1 ms with F.linear. It is kept on every CPU because speculative decoding's bf16 output
# must equal plain bf16 greedy output bit for bit, and F.linear is not row-invariant there (a K=1536
# product differs at 7, 8, 9, 11, 12, 14, 15 and 17 rows from the same row alone; with F.linear
# everywhere a k=4 speculative run left plain greedy output at token 42).
_MM_ROWS = {torch.float32: range(7, 17), torch.bfloat16: range(2, 17)}
_MM_PAD_ONE_ROW = {torch.bfloat16}


def linear(x: torch.Tensor, weight) -> torch.Tensor:
    """x: [T, in], weight: [out, in] (a tensor, or a module such as ``quant.Int4Linear``) -> [T, out]."""
    if not isinstance(weight, torch.Tensor):
        return weight(x)
    if x.device.type == "cpu":
        rows = x.shape[0]
        if rows in _MM_ROWS.get(x.dtype, ()):
            return torch.mm(weight, x.t()).t()
        if rows == 1 and x.dtype in _MM_PAD_ONE_ROW:
            # One row costs more than two here: compute the row twice and keep one copy.
            return torch.mm(weight, x.expand(2, -1).t()).t()[:1]
    return F.linear(x, weight)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x²) + eps), in fp32 like Hugging Face's LlamaRMSNorm.

    fp32 input takes torch's fused kernel (one op instead of six; bit-identical to the written-out
    form, which tests/test_model_ops.py checks); other dtypes upcast as Hugging Face does."""
    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        return torch.rms_norm(x, weight.shape, weight, eps)
    # Hugging Face: normalise in fp32, round to the input dtype, then scale by the weight.
    return weight * torch.rms_norm(x.to(torch.float32), weight.shape, None, eps).to(x.dtype)


class Rotary(nn.Module):
    """RoPE (Su et al. 2021): rotate each (i, i + d/2) pair of q and k by angle pos * θ^(-2i/d)."""

    def __init__(self, head_dim: int, theta: float, max_positions: int, device):
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device)
                                    .float() / head_dim))
        freqs = torch.arange(max_positions, device=device).float()[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)                 # [max_positions, head_dim]
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

        self._last: tuple | None = None   # (positions, dtype, cos, sin) of the previous call

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [T, heads, head_dim]; positions: [T]."""
        # Every layer (q and k) of one forward pass rotates by the same positions tensor: look the
        # angles up once. Holding the tensor keeps the identity check sound.
        last = self._last
        if last is not None and last[0] is positions and last[1] == x.dtype:
            cos, sin = last[2], last[3]
        else:
            cos = self.cos[positions].to(x.dtype)[:, None, :]
            sin = self.sin[positions].to(x.dtype)[:, None, :]
            self._last = (positions, x.dtype, cos, sin)
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin


class LlamaLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype, device):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_attention_heads, cfg.num_key_value_heads, d
        self.eps = cfg.rms_norm_eps
        q_out, kv_out = self.num_heads * d, self.num_kv_heads * d
        kw = dict(dtype=dtype, device=device)
        self.input_layernorm = nn.Parameter(torch.ones(h, **kw), requires_grad=False)
        self.qkv_proj = nn.Parameter(torch.empty(q_out + 2 * kv_out, h, **kw), requires_grad=False)
        self.o_proj = nn.Parameter(torch.empty(h, q_out, **kw), requires_grad=False)
        self.post_attention_layernorm = nn.Parameter(torch.ones(h, **kw), requires_grad=False)
        self.gate_up_proj = nn.Parameter(torch.empty(2 * cfg.intermediate_size, h, **kw), requires_grad=False)
        self.down_proj = nn.Parameter(torch.empty(h, cfg.intermediate_size, **kw), requires_grad=False)
        self.split = (q_out, kv_out, kv_out)

    def forward(self, x, positions, rotary: Rotary, kv_cache, meta: AttentionMetadata, backend: ModuleType):
        T = x.shape[0]
        residual = x
        qkv = linear(rms_norm(x, self.input_layernorm, self.eps), self.qkv_proj)
        # q and k heads sit side by side in the fused output: rotate them in one call.
        qk = rotary(qkv[:, :self.split[0] + self.split[1]].reshape(T, -1, self.head_dim), positions)
        q, k = qk[:, :self.num_heads], qk[:, self.num_heads:]
        v = qkv[:, self.split[0] + self.split[1]:].reshape(T, self.num_kv_heads, self.head_dim)
        key_cache, value_cache = kv_cache
        backend.write_kv(k, v, key_cache, value_cache, meta.slot_mapping)
        attn = backend.paged_attention(q, key_cache, value_cache, meta, self.head_dim ** -0.5)
        x = residual + linear(attn.reshape(T, -1), self.o_proj)
        gate, up = linear(rms_norm(x, self.post_attention_layernorm, self.eps), self.gate_up_proj).chunk(2, -1)
        return x + linear(F.silu(gate) * up, self.down_proj)


def decode_weight_bytes(model: nn.Module) -> int:
    """Weight bytes one batch-1 decode step reads: every parameter once (a tied embedding is the LM
    head; an untied one is only looked up, one row a token, and not counted), plus the packed bytes
    of quantised linears (modules with an ``nbytes()``, e.g. ``quant.Int4Linear``)."""
    tied = getattr(model, "lm_head", None) is getattr(model, "embed_tokens", None)
    total = sum(p.numel() * p.element_size() for name, p in model.named_parameters()
                if name != "embed_tokens" or tied)
    return total + sum(m.nbytes() for m in model.modules() if hasattr(m, "nbytes"))


class LlamaModel(nn.Module):
    def __init__(self, cfg: ModelConfig, dtype=torch.float32, device="cpu"):
        super().__init__()
        self.config = cfg
        kw = dict(dtype=dtype, device=device)
        self.embed_tokens = nn.Parameter(torch.empty(cfg.vocab_size, cfg.hidden_size, **kw), requires_grad=False)
        self.layers = nn.ModuleList(LlamaLayer(cfg, dtype, device) for _ in range(cfg.num_hidden_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size, **kw), requires_grad=False)
        self.lm_head = (self.embed_tokens if cfg.tie_word_embeddings else
                        nn.Parameter(torch.empty(cfg.vocab_size, cfg.hidden_size, **kw), requires_grad=False))
        self.rotary = Rotary(cfg.head_dim, cfg.rope_theta, cfg.max_position_embeddings, device)

    @torch.inference_mode()
    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, kv_caches: list,
                meta: AttentionMetadata, logits_indices: torch.Tensor, backend: ModuleType) -> torch.Tensor:
        """input_ids, positions: [num_tokens]; returns fp32 logits [len(logits_indices), vocab].
        ``backend`` is the attention module (reference or triton) with write_kv/paged_attention."""
        x = F.embedding(input_ids, self.embed_tokens)
        for layer, kv_cache in zip(self.layers, kv_caches):
            x = layer(x, positions, self.rotary, kv_cache, meta, backend)
        x = rms_norm(x.index_select(0, logits_indices), self.norm, self.config.rms_norm_eps)
        return linear(x, self.lm_head).float()

    def load_hf_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        """Copy HF Llama weights in, fusing q/k/v and gate/up projections."""
        def take(name):
            return sd[name].to(self.embed_tokens.dtype)

        with torch.no_grad():
            self.embed_tokens.copy_(take("model.embed_tokens.weight"))
            self.norm.copy_(take("model.norm.weight"))
            if not self.config.tie_word_embeddings:
                self.lm_head.copy_(take("lm_head.weight"))
            for i, layer in enumerate(self.layers):
                p = f"model.layers.{i}."
                layer.input_layernorm.copy_(take(p + "input_layernorm.weight"))
                layer.post_attention_layernorm.copy_(take(p + "post_attention_layernorm.weight"))
                layer.qkv_proj.copy_(torch.cat([take(p + f"self_attn.{n}_proj.weight") for n in "qkv"]))
                layer.o_proj.copy_(take(p + "self_attn.o_proj.weight"))
                layer.gate_up_proj.copy_(torch.cat([take(p + "mlp.gate_proj.weight"), take(p + "mlp.up_proj.weight")]))
                layer.down_proj.copy_(take(p + "mlp.down_proj.weight"))
