"""Build an LLMEngine whose forward pass is the cost model: same scheduler, same KV bookkeeping.

Tokens are bytes (a 256-symbol vocabulary): prompts can be text or token ids, and the "model" emits
a deterministic byte stream per request, so runs are reproducible and greedy-equality tests of the
scheduling paths still make sense. Time is virtual: each step advances the clock by the measured
scheduler CPU time plus the simulated model time.
"""

from __future__ import annotations

import zlib

import torch

from labkit import host_clock
from labkit.config import EngineConfig
from labkit.engine import LLMEngine
from labkit.kv import make_kv_manager
from labkit.model.input_batch import build_from_lists, input_builder
from labkit.sample.sampler import Sampler
from labkit.scheduler import make_scheduler
from labkit.scheduler_output import SchedulerOutput
from labkit.sim.cost import HARDWARE, MODELS, HardwareProfile, ModelProfile, step_time
from labkit.spec_decode.factory import make_proposer

SIM_VOCAB = 256
SIM_EOS = 0


class SimClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance_to(self, t: float) -> None:
        self.now = max(self.now, t)


class SimTokenizer:
    """Bytes in, bytes out. Chat templates do not apply."""

    eos_token_ids = (SIM_EOS,)
    vocab_size = SIM_VOCAB
    has_chat_template = False

    def encode(self, text: str) -> list[int]:
        return [b or 1 for b in text.encode("utf-8")]

    def encode_prompt(self, prompt: str, chat: bool = True) -> list[int]:
        return self.encode(prompt)

    def decode(self, token_ids, skip_special_tokens: bool = True) -> str:
        return bytes(t for t in token_ids if t).decode("utf-8", errors="replace")


class SimRunner:
    """Pretends to run the model: returns one-hot logits on a deterministic next byte (all rows in
    one tensor, as the real runner) and records the simulated step time in ``last_model_s``.
    ``last_host_s``: this CPU's wall time inside ``execute`` (the stand-in's own work, which a real
    accelerator step would not contain; host-path measurements leave it out).

    It builds the forward's inputs as the real runner does (``build_input``: the list path or the
    persistent batch) and times that apart (``last_prepare_s``): input preparation is host work a real
    engine does every step, so host-path measurements count it.

    ``overlap`` (async scheduling): the modelled accelerator runs beside the host, so a launch does not
    move the clock; it marks the accelerator busy until ``busy_until`` and the engine waits for that."""

    def __init__(self, model: ModelProfile, hardware: HardwareProfile, clock: SimClock, overlap: bool = False,
                 build_input=None):
        self.model, self.hardware, self.clock, self.overlap = model, hardware, clock, overlap
        self.build_input = build_input or (lambda decision: build_from_lists(decision, 1, "cpu"))
        self.last_model_s = 0.0
        self.last_host_s = 0.0
        self.last_prepare_s = 0.0
        self.busy_until = 0.0

    def execute(self, sched: SchedulerOutput) -> torch.Tensor | None:
        t0 = host_clock.now()
        meta = self.build_input(sched).metadata
        self.last_prepare_s = host_clock.now() - t0
        self.clock.advance_to(self.clock.now + self.last_prepare_s)    # host work before the launch
        query_lens, seq_lens = meta.query_lens_list, meta.seq_lens_list
        self.last_model_s = step_time(self.model, self.hardware, query_lens, seq_lens)
        if self.overlap:
            self.busy_until = self.clock.now + self.last_model_s
        else:
            self.clock.advance_to(self.clock.now + self.last_model_s)   # tokens exist once the forward ends
        # Each logits row's token is fixed by its request and position (a row wanting k rows ends at its seq_len).
        best = [self.next_byte(rid, end - k + i + 1)
                for rid, k, end in zip(sched.request_ids, sched.num_logits, seq_lens) for i in range(k)]
        logits = None
        if best:
            logits = torch.full((len(best), SIM_VOCAB), -1e4)
            logits[torch.arange(len(best)), torch.tensor(best)] = 0.0
        self.last_host_s = host_clock.now() - t0
        return logits

    @staticmethod
    def next_byte(request_id: str, position: int) -> int:
        """A printable letter, fixed by (request, position); never EOS."""
        return 97 + zlib.crc32(f"{request_id}:{position}".encode()) % 26


class SimEngine(LLMEngine):
    """An LLMEngine on the virtual clock: each step advances it by scheduler CPU + simulated model time.
    With async scheduling the host's parts advance it as they happen and waiting for the forward moves it
    to the end of the modelled accelerator step: a step costs about max(host, model), not the sum."""

    def __init__(self, **parts):
        super().__init__(**parts)
        # Host work the clock was charged that StepStats.step_s does not carry: input preparation and
        # the step's stats and events (clock.now == sum of step_s + this).
        self.unreported_host_s = 0.0

    @property
    def model_profile(self) -> ModelProfile:
        return self.runner.model

    @property
    def hardware(self) -> HardwareProfile:
        return self.runner.hardware

    def _host_elapsed(self, seconds: float) -> None:
        self.clock.advance_to(self.clock.now + seconds)

    def _await_forward(self, logits):
        """Async: the host waits until the modelled accelerator is done. Sync: the runner moved the clock
        through the forward at launch, so nothing is left to wait for."""
        result = logits.result()          # computed at launch: the accelerator's time is modelled
        if not self.runner.overlap:
            return result, 0.0
        wait_s = max(0.0, self.runner.busy_until - self.clock.now)
        self.clock.advance_to(self.runner.busy_until)
        return result, wait_s

    def step(self):
        """The clock moves by every bit of host work: scheduling, sampling and applying (sync: here;
        async: as each happens), input preparation (the runner, before the launch) and the rest of the
        step (stats, events), here. The stand-in's own work (``last_host_s`` less preparation) is not
        an accelerator's and is left out."""
        self.runner.last_host_s = self.runner.last_prepare_s = 0.0
        t0 = host_clock.now()
        outputs = super().step()
        wall = host_clock.now() - t0
        stats = self.metrics.last
        host = stats.host_s if stats is not None else wall
        rest = max(0.0, wall - host - self.runner.last_host_s)
        self.unreported_host_s += rest + self.runner.last_prepare_s
        if self.config.async_scheduling:
            self.clock.advance_to(self.clock.now + rest)
        else:
            self.clock.advance_to(self.clock.now + host + rest)   # the runner advanced it by preparation + model
        return outputs


def build_sim_engine(config: EngineConfig, model_profile: str = "llama-3-8b",
                     hardware: str | HardwareProfile = "a100-80gb", gpu_memory_utilization: float = 0.9) -> SimEngine:
    """``hardware``: a profile name from ``sim.cost.HARDWARE``, or a ``HardwareProfile`` (e.g. one fitted
    to this CPU)."""
    u = gpu_memory_utilization
    if isinstance(u, bool) or not isinstance(u, (int, float)) or not 0.0 < u <= 1.0:   # NaN fails too
        raise ValueError(f"gpu_memory_utilization must be a number in (0, 1], got {u!r}")
    if model_profile not in MODELS:
        raise ValueError(f"model_profile must be one of {sorted(MODELS)}, got {model_profile!r}")
    if not isinstance(hardware, HardwareProfile) and hardware not in HARDWARE:
        raise ValueError(f"hardware must be a HardwareProfile or one of {sorted(HARDWARE)}, got {hardware!r}")
    if config.speculative is not None and config.speculative.method == "draft":
        raise ValueError("the simulated model has no draft model; use SpecConfig(method='ngram')")
    model = MODELS[model_profile]
    hw = hardware if isinstance(hardware, HardwareProfile) else HARDWARE[hardware]
    max_model_len = config.resolve_max_model_len(1 << 20)
    bytes_per_block = model.kv_bytes_per_token * config.block_size
    if config.num_blocks is not None:
        num_blocks = config.num_blocks
    elif config.kv_cache_bytes is not None:
        num_blocks = config.kv_cache_bytes // bytes_per_block
    else:
        num_blocks = int((hw.memory_bytes * gpu_memory_utilization - model.weight_bytes) // bytes_per_block)
    if num_blocks < 1:
        raise ValueError(f"{model.name} does not fit on {hw.name} with room for a KV cache")
    clock = SimClock()
    kv_manager = make_kv_manager(config, num_blocks, max_model_len)
    proposer = None if config.speculative is None else make_proposer(config.speculative, config, max_model_len)
    runner = SimRunner(model, hw, clock, config.async_scheduling,
                       input_builder(config, max_model_len, kv_manager.meta_block_size))
    return SimEngine(config=config, tokenizer=SimTokenizer(), runner=runner,
                     kv_manager=kv_manager, scheduler=make_scheduler(config, kv_manager, max_model_len),
                     sampler=Sampler(config.seed, config.batched_sampling), proposer=proposer, max_model_len=max_model_len,
                     vocab_size=SIM_VOCAB, clock=clock, simulated=True)
