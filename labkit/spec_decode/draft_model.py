"""Draft-model proposer: a small Llama drafts k tokens per request, in the target's process.

The draft is our own ``LlamaModel`` forward with its own paged KV cache (its own
``KVCacheManager`` and ``PagedKVCache``, nothing shared with the target's). The shipped default
(``data/drafts/``, made by ``scripts/train_draft.py``) is cheap in three ways: 2 layers instead of
30; its input embedding *is* the target's (the same tensor, never copied or shipped); its output
head covers only the most frequent answer tokens (``vocab_ids``), so the head costs N x hidden
instead of 49,152 x hidden. A truncated head means q(x) = 0 outside ``vocab_ids``: such tokens are
never drafted, and the rejection sampler stays exact (it only needs q(x) > 0 for drafted x).

One ``propose`` call, for every decoding request at once::

    target tokens   t_0 ... t_{m-1} t_m   (t_m just sampled; target K/V covers t_0 .. t_{m-1})
    draft K/V       |<-- draft_computed -->|   (may lag: new request, preemption, rejected drafts)
    forward 1       catch up on t_{draft_computed} .. t_m (ragged, one pass) -> d_1
    forward 2..k    feed d_{i-1} (one token each, batched)                      -> d_i

After verification the target keeps a accepted drafts and one new token, so draft positions
< num_tokens - 1 hold valid K/V (t_0 .. t_m, d_1 .. d_a); the next call rolls the draft back to
``min(draft_computed, num_tokens - 1)`` and trims its blocks (vLLM's draft runner does the same).

Drafts are greedy for greedy requests; otherwise d_i ~ q_i, where q_i is the draft's logits after
the *same* temperature / top-k / top-p transform as the target's (``labkit.sample.sampler.to_probs``),
drawn with the request's own generator (the sampler's); q_i is handed back in the ``Proposal`` and the
engine gives it to the sampler, which verifies with it.
"""

from __future__ import annotations

import dataclasses
import json
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from labkit.config import EngineConfig, SpecConfig
from labkit.kv.kv_cache_manager import KVCacheManager
from labkit.kv.paged_kv import PagedKVCache
from labkit.model.input_batch import build_from_lists
from labkit.model.llama import LlamaLayer, LlamaModel
from labkit.model.loader import load_model
from labkit.model.model_config import ModelConfig
from labkit.model.quant import quantized_copy
from labkit.model.strategies import choose
from labkit.request import Request
from labkit.sample.sampler import Sampler, to_probs
from labkit.scheduler_output import DECODE, PREFILL, SchedulerOutput
from labkit.spec_decode.proposer import Proposal, draft_budget

DRAFT_DIR = Path(__file__).resolve().parents[2] / "data" / "drafts"
DEFAULT_DRAFT = DRAFT_DIR / "smollm2-135m-draft.safetensors"
DRAFT_FORMAT = "labkit-draft-v1"
TARGET_INT4 = "target-int4"   # draft_model name: the target itself, re-quantised to 4 bits (quant.py)
_INT4_COPIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()   # target model -> its 4-bit copy


class DraftLlama(LlamaModel):
    """A few Llama layers between the target's embedding and a head over ``vocab_ids``.

    ``forward`` is ``LlamaModel.forward`` unchanged; its logits are over the draft vocabulary
    ([rows, len(vocab_ids)]), column j standing for token ``vocab_ids[j]``.
    """

    def __init__(self, cfg: ModelConfig, embed_tokens: nn.Parameter, rotary: nn.Module,
                 lm_head: torch.Tensor, vocab_ids: torch.Tensor):
        nn.Module.__init__(self)   # not LlamaModel.__init__: it would allocate a whole new embedding
        self.config = cfg
        kw = dict(dtype=embed_tokens.dtype, device=embed_tokens.device)
        self.embed_tokens = embed_tokens                        # the target's tensor, shared
        self.layers = nn.ModuleList(LlamaLayer(cfg, kw["dtype"], kw["device"])
                                    for _ in range(cfg.num_hidden_layers))
        self.norm = nn.Parameter(torch.ones(cfg.hidden_size, **kw), requires_grad=False)
        self.lm_head = nn.Parameter(lm_head.to(**kw), requires_grad=False)  # [N, hidden]
        self.rotary = rotary
        self.register_buffer("vocab_ids", vocab_ids.to(device=kw["device"], dtype=torch.long), persistent=False)


# ------------------------------------------------------------------------------------ loading

def draft_config(target: ModelConfig, meta: dict) -> ModelConfig:
    """The draft's hyper-parameters: the target's, overridden by the file's ``config``."""
    unknown = sorted(set(meta) - {f.name for f in dataclasses.fields(ModelConfig)})
    if unknown:
        raise ValueError(f"draft config has unknown fields {unknown}")
    return dataclasses.replace(target, **meta)


def build_draft(target: LlamaModel, layers: dict[str, torch.Tensor], meta: dict,
                vocab_ids: torch.Tensor, lm_head: torch.Tensor | None = None) -> DraftLlama:
    """A ``DraftLlama`` on the target's device and dtype from per-layer tensors
    (``layers.{i}.{name}`` and ``norm``) and the draft vocabulary."""
    cfg = draft_config(target.config, meta)
    if cfg.hidden_size != target.config.hidden_size:
        raise ValueError(f"draft hidden_size must equal the target's {target.config.hidden_size} "
                         f"(it shares the embedding), got {cfg.hidden_size}")
    head = target.embed_tokens.detach()[vocab_ids.long()] if lm_head is None else lm_head
    model = DraftLlama(cfg, target.embed_tokens, target.rotary, head, vocab_ids)
    own = {n: p for n, p in model.named_parameters() if n not in ("embed_tokens", "lm_head")}
    missing = sorted(set(own) - set(layers))
    if missing:
        raise ValueError(f"draft weights are missing {missing[:4]}{' ...' if len(missing) > 4 else ''}")
    with torch.no_grad():
        for name, param in own.items():
            param.copy_(layers[name])
    return model


def draft_from_target_layers(target: LlamaModel, layer_ids: list[int], vocab_ids: torch.Tensor) -> DraftLlama:
    """A draft whose layers start as copies of the target's layers ``layer_ids`` and whose final
    norm is the target's (the starting point that distillation then trains)."""
    layers = {f"layers.{i}.{name}": p for i, src in enumerate(layer_ids)
              for name, p in target.layers[src].named_parameters()}
    layers["norm"] = target.norm
    return build_draft(target, layers, {"num_hidden_layers": len(layer_ids)}, vocab_ids)


def save_draft(path: str | Path, model: DraftLlama, info: dict) -> None:
    """Write a draft in labkit's format: fp16 layers + norm, int32 vocab ids, JSON metadata.
    The embedding and head come from the target at load time, so they are not stored."""
    from safetensors.torch import save_file

    tensors = {n: p.detach().half().cpu().contiguous() for n, p in model.named_parameters()
               if n not in ("embed_tokens", "lm_head")}
    tensors["vocab_ids"] = model.vocab_ids.to(torch.int32).cpu()
    c = model.config
    meta = dict(num_hidden_layers=c.num_hidden_layers, intermediate_size=c.intermediate_size,
                num_attention_heads=c.num_attention_heads, num_key_value_heads=c.num_key_value_heads,
                head_dim=c.head_dim, hidden_size=c.hidden_size)
    save_file(tensors, str(path), metadata={"format": DRAFT_FORMAT, "config": json.dumps(meta),
                                            "info": json.dumps(info)})


def load_draft(path: str | Path | None, target: LlamaModel) -> DraftLlama | LlamaModel:
    """None -> the shipped default; ``"target-int4"`` -> a 4-bit copy of the target; a labkit draft
    file; or a local HF Llama directory (a full model with its own embedding; it must use the
    target's tokenizer/vocabulary)."""
    if path == TARGET_INT4:
        if target not in _INT4_COPIES:       # quantising takes seconds: once per target per process
            _INT4_COPIES[target] = quantized_copy(target)
        return _INT4_COPIES[target]
    path = DEFAULT_DRAFT if path is None else Path(path).expanduser()
    if not path.exists():
        hint = " (run scripts/train_draft.py to rebuild the default)" if path == DEFAULT_DRAFT else ""
        raise FileNotFoundError(f"draft_model {str(path)!r} does not exist{hint}")
    if path.is_dir():
        return _load_hf_draft(path, target)
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        header = f.metadata() or {}
        if header.get("format") != DRAFT_FORMAT:
            raise ValueError(f"{path} is not a labkit draft (format {header.get('format')!r}, "
                             f"expected {DRAFT_FORMAT!r})")
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    vocab_ids = tensors.pop("vocab_ids")
    return build_draft(target, tensors, json.loads(header["config"]), vocab_ids, tensors.pop("lm_head", None))


def _load_hf_draft(path: Path, target: LlamaModel) -> LlamaModel:
    model, cfg, _, _ = load_model(str(path), target.embed_tokens.device, target.embed_tokens.dtype,
                                  progress=False)
    model.tune()
    if cfg.vocab_size != target.config.vocab_size:
        raise ValueError(f"draft vocab_size must equal the target's {target.config.vocab_size} "
                         f"(same tokenizer), got {cfg.vocab_size}")
    return model


# ------------------------------------------------------------------------------------ proposing

@dataclass
class DraftStats:
    """What the draft cost so far (for measuring c, the draft's cost relative to the target)."""

    num_calls: int = 0
    num_forwards: int = 0
    num_drafted: int = 0
    time_s: float = 0.0


@dataclass
class _Slot:
    """One request's part of a draft forward: feed ``token_ids`` at positions from ``start``."""

    request: Request
    start: int
    token_ids: list[int]
    num_drafts: int


class DraftModelProposer:
    """Proposes up to k tokens per decoding request with a small draft model (see module doc)."""

    def __init__(self, spec: SpecConfig, config: EngineConfig, runner, target_kv, sampler: Sampler,
                 max_model_len: int, vocab_size: int):
        self.k, self.max_model_len = spec.num_speculative_tokens, max_model_len
        self.device, self.backend, self.sampler = runner.device, runner.backend, sampler
        self.model = load_draft(spec.draft_model, runner.model)
        self.vocab_ids = getattr(self.model, "vocab_ids", None)   # None: full vocabulary
        self.vocab_size = vocab_size
        cfg, block_size = self.model.config, config.block_size
        num_blocks = spec.draft_num_blocks or self.default_num_blocks(config, target_kv.capacity_tokens())
        self.kv = KVCacheManager(num_blocks, block_size)
        self.kv_cache = PagedKVCache(cfg.num_hidden_layers, num_blocks, block_size, cfg.num_key_value_heads,
                                     cfg.head_dim, self.model.embed_tokens.dtype, self.device)
        self.num_computed: dict[str, int] = {}
        self.stats = DraftStats()

    def default_num_blocks(self, config: EngineConfig, target_capacity_tokens: int) -> int:
        """As many token slots as the target's pool, plus per sequence the k - 1 draft tokens the
        draft holds beyond the target and a partly filled block."""
        bs = config.block_size
        per_seq = 1 + -(-self.k // bs)
        return -(-target_capacity_tokens // bs) + config.max_num_seqs * per_seq

    def forget(self, request_id: str) -> None:
        """Release a request's draft K/V (finished, aborted or preempted by the target)."""
        self.kv.free(request_id)
        self.num_computed.pop(request_id, None)

    def propose(self, requests: list[Request]) -> dict[str, Proposal]:
        t0 = time.perf_counter()
        slots = []
        for req in requests:
            slot = self._catch_up_slot(req, draft_budget(req, self.k, self.max_model_len))
            if slot is not None:
                slots.append(slot)
        proposals = self._draft(slots) if slots else {}
        self.stats.num_calls += 1
        self.stats.time_s += time.perf_counter() - t0
        return proposals

    def _catch_up_slot(self, req: Request, k: int) -> _Slot | None:
        """Roll back to K/V the target confirmed, reserve room for the catch-up tokens plus k - 1
        drafts. Returns None (no drafts this step) when k is 0 or the draft's pool is full."""
        if k == 0:
            return None
        rid = req.request_id
        start = min(self.num_computed.get(rid, 0), req.num_tokens - 1)
        self.kv.trim(rid, start)
        if self.kv.allocate_slots(rid, start, req.num_tokens - start + k - 1) is None:
            self.forget(rid)          # give the space back to the others; start afresh later
            return None
        self.num_computed[rid] = start
        return _Slot(req, start, req.all_token_ids[start:], k)

    def _draft(self, slots: list[_Slot]) -> dict[str, Proposal]:
        """k_max forwards: the ragged catch-up pass, then one token per still-drafting request."""
        drafts: dict[str, list[int]] = {s.request.request_id: [] for s in slots}
        probs: dict[str, list[torch.Tensor]] = {s.request.request_id: [] for s in slots}
        for i in range(max(s.num_drafts for s in slots)):
            live = [s for s in slots if s.num_drafts > i]
            logits = self._forward(live)                       # [len(live), draft vocab]
            argmax = self._to_full_ids(logits.argmax(-1)).tolist()
            for slot, row, best in zip(live, logits, argmax):
                req = slot.request
                token, q = (best, None) if req.sampling_params.greedy else self._sample(req, row)
                drafts[req.request_id].append(token)
                if q is not None:
                    probs[req.request_id].append(q)
                self.num_computed[req.request_id] = slot.start + len(slot.token_ids)
                slot.start, slot.token_ids = slot.start + len(slot.token_ids), [token]
        self.stats.num_drafted += sum(slot.num_drafts for slot in slots)
        return {rid: Proposal(tokens, torch.stack(probs[rid]) if probs[rid] else None)   # q: [k, vocab]
                for rid, tokens in drafts.items()}

    def _forward(self, slots: list[_Slot]) -> torch.Tensor:
        """One ragged forward of the draft; logits of each slot's last token. Its inputs come from the
        target's input builder (``build_from_lists``), one row per slot, over the draft's own KV manager."""
        step = SchedulerOutput(self.kv.block_size)
        for s in slots:
            rid = s.request.request_id
            kind = DECODE if len(s.token_ids) == 1 else PREFILL
            step.add_row(rid, s.token_ids, s.start, self.kv.block_table(rid), kind, num_logits=1)
        inp = build_from_lists(step, self.kv.block_size, self.device)
        self.stats.num_forwards += 1
        caches = self.kv_cache.layer_caches(self.kv.block_size)
        strategy = choose(self.model, inp.input_ids, inp.metadata, caches, self.backend)    # as the target's runner
        return self.model(inp.input_ids, inp.positions, caches, inp.metadata, inp.logits_indices, self.backend, strategy)

    def _to_full_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids if self.vocab_ids is None else self.vocab_ids[draft_ids]

    def _sample(self, req: Request, row: torch.Tensor) -> tuple[int, torch.Tensor]:
        """d ~ q for a sampling request: q is the draft row spread over the full vocabulary (0
        outside ``vocab_ids``) after the request's temperature / top-k / top-p."""
        full = row if self.vocab_ids is None else (
            row.new_full((self.vocab_size,), float("-inf")).index_copy_(0, self.vocab_ids, row))
        q = to_probs(full[None], req.sampling_params)[0]      # [vocab]
        token = int(torch.multinomial(q.cpu(), 1, generator=self.sampler.generator(req.request_id)))
        return token, q
