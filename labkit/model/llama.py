"""Our own Llama forward pass over a paged KV cache.

Tokens arrive flat — ``[num_tokens]`` from many sequences at once — with an explicit
``AttentionMetadata`` saying which sequence each belongs to (no module-global context, so a draft
and a target model can share a process). Each layer::

    x ─ RMSNorm ─ QKV ─ RoPE ─ write K,V via slot_mapping ─ paged attention ─ O ─(+)─ RMSNorm ─ SwiGLU ─(+)

Numerics mirror Hugging Face's ``LlamaForCausalLM`` so greedy output matches token for token. The ops
(products, RMSNorm, SwiGLU) run through ``labkit.kernels.ops``: PyTorch's kernels, or labkit's C kernels
where they give the same bits. This file is the plain algorithm; how a step runs it fastest (RoPE fused
with the K/V write, a whole layer in one C call, compiled halves) is the runner's choice
(``labkit.model.strategies``).
"""

from __future__ import annotations

from types import ModuleType

import torch
import torch.nn.functional as F
from torch import nn

from labkit.attention.metadata import AttentionMetadata
from labkit.kernels.ops import TORCH_OPS, Ops, prepare_forms
from labkit.model.model_config import ModelConfig
from labkit.model.strategies import OP_BY_OP, ForwardStrategy


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
        # sin with its first half negated: rotate_half(x) * sin == roll(x, d/2) * signed_sin, bit for
        # bit (negating a factor negates the rounded product), in one kernel (roll) instead of two (neg, cat).
        half = head_dim // 2
        self.register_buffer("signed_sin", torch.cat((-self.sin[:, :half], self.sin[:, half:]), dim=-1),
                             persistent=False)

        self._last: tuple | None = None   # (positions, dtype, cos, signed sin) of the previous call

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x: [T, heads, head_dim]; positions: [T]."""
        # Every layer (q and k) of one forward pass rotates by the same positions tensor: look the
        # angles up once. Holding the tensor keeps the identity check sound.
        last = self._last
        if last is not None and last[0] is positions and last[1] == x.dtype:
            cos, sin = last[2], last[3]
        else:
            cos = self.cos[positions].to(x.dtype)[:, None, :]
            sin = self.signed_sin[positions].to(x.dtype)[:, None, :]
            self._last = (positions, x.dtype, cos, sin)
        # x * cos + cat(-x2, x1) * sin, with the negation folded into the table.
        return x * cos + torch.roll(x, x.shape[-1] // 2, -1) * sin


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

    def qkv(self, x: torch.Tensor, ops: Ops = TORCH_OPS) -> torch.Tensor:
        """RMSNorm and the fused QKV projection: [T, (heads + 2 kv_heads) * d]."""
        return ops.linear(ops.rms_norm(x, self.input_layernorm, self.eps), self.qkv_proj)

    def attention_input(self, x: torch.Tensor, positions: torch.Tensor, rotary: Rotary, ops: Ops = TORCH_OPS):
        """RMSNorm, the fused QKV projection and RoPE: q [T, heads, d], k and v [T, kv_heads, d]."""
        heads = self.qkv(x, ops).reshape(x.shape[0], -1, self.head_dim)
        # q and k heads sit side by side in the fused output: rotate them in one call.
        qk = rotary(heads[:, :self.num_heads + self.num_kv_heads], positions)
        return qk[:, :self.num_heads], qk[:, self.num_heads:], heads[:, self.num_heads + self.num_kv_heads:]

    def attention_output_and_mlp(self, x: torch.Tensor, attn: torch.Tensor, ops: Ops = TORCH_OPS) -> torch.Tensor:
        """The O projection and residual, then RMSNorm, SwiGLU and the second residual."""
        # x + O(attn) is a new tensor: the input stays as it was.
        x, normed = ops.add_rms_norm(x, ops.linear(attn.reshape(x.shape[0], -1), self.o_proj),
                                     self.post_attention_layernorm, self.eps)
        return x.add_(ops.linear(ops.swiglu(ops.linear(normed, self.gate_up_proj)), self.down_proj))

    def forward(self, x, positions, rotary: Rotary, kv_cache, meta: AttentionMetadata, backend: ModuleType,
                ops: Ops = TORCH_OPS):
        """One layer over the step's tokens x [T, hidden], op by op::

            x ─┬─ RMSNorm ─ QKV ─ RoPE ─ write K,V ─ paged attention ─ O ─(+)─┬─ RMSNorm ─ gate_up ─ SwiGLU ─ down ─(+)─
               └───────────────────────────────────────────────────────────┘  └──────────────────────────────────────┘

        ``kv_cache``: this layer's (key, value) pools; ``backend`` the attention module (``write_kv``,
        ``paged_attention``); ``ops`` the kernels (``labkit.kernels.ops``). The runner may run the same
        arithmetic faster (``labkit.model.strategies``)."""
        key_cache, value_cache = kv_cache
        q, k, v = self.attention_input(x, positions, rotary, ops)
        backend.write_kv(k, v, key_cache, value_cache, meta.slot_mapping)
        attn = backend.paged_attention(q, key_cache, value_cache, meta, self.head_dim ** -0.5)
        return self.attention_output_and_mlp(x, attn, ops)


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
                meta: AttentionMetadata, logits_indices: torch.Tensor, backend: ModuleType,
                strategy: ForwardStrategy = OP_BY_OP) -> torch.Tensor:
        """input_ids, positions: [num_tokens]; returns fp32 logits [len(logits_indices), vocab].
        ``backend`` is the attention module (reference or triton) with write_kv/paged_attention;
        ``strategy`` how the layers run: by default each layer's `LlamaLayer.forward` with PyTorch's ops;
        the runner chooses a faster one with the same bits (``labkit.model.strategies.choose``)."""
        x = F.embedding(input_ids, self.embed_tokens)
        x = strategy.run_layers(self, x, positions, kv_caches, meta, backend)
        x = x.index_select(0, logits_indices)
        ops = strategy.ops
        return ops.linear(ops.rms_norm(x, self.norm, self.config.rms_norm_eps), self.lm_head).float()

    def linear_weights(self) -> list[torch.Tensor]:
        """Every matrix a forward pass multiplies by, in the order it does: qkv, o, gate_up, down per
        layer, then the LM head."""
        return [w for layer in self.layers for w in (layer.qkv_proj, layer.o_proj, layer.gate_up_proj,
                                                      layer.down_proj)] + [self.lm_head]

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

    def tune(self) -> None:
        """Choose the product forms for these weights on this CPU (`labkit.kernels.ops.prepare_forms`: from the
        disk cache, or timed once). Called where an engine is built, after the weights are in place."""
        prepare_forms(self.linear_weights(), self.embed_tokens.dtype, self.embed_tokens.device)
