"""Lab 02: the learner's block allocator, replayed on the lab's workloads next to the engine's pool.

Two replays use only the exercise's interface (``allocate``, ``share``, ``free``,
``copy_on_write``, ``num_free_blocks``):

* ``simulate_paged`` serves a trace as a saturated paged server would (every request queued at the
  start, admitted first come first served while its prompt's blocks can be allocated, one block more
  whenever its last block fills, preempted by recompute when the pool runs dry) and returns the
  step-averaged pool split, to set beside the engine's replay of the same trace;
* ``simulate_fork`` replays one parallel-sampling request (prompt blocks shared n ways, copy on the
  first write into a shared block) and returns blocks per step, which must equal what the engine's
  block tables showed (``sharing.ForkRun``) step for step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from labkit.traces import TraceRequest


class AllocatorError(ValueError):
    """The allocator under test broke a rule; the message says which."""


@dataclass
class _Seq:
    index: int
    prompt_len: int
    output_len: int
    filled: int = 0                                  # slots holding K/V
    table: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class PagedSplit:
    """Step-averaged shares of the pool (%) and requests running at once."""

    used: float
    internal: float
    free: float
    mean_running: float
    num_steps: int
    num_preemptions: int


def _blocks(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


def _grow(allocator, seq: _Seq, num_tokens: int, block_size: int) -> bool:
    """Allocate blocks until ``seq`` holds ``num_tokens`` slots; False (blocks kept) if the pool ran dry."""
    while len(seq.table) < _blocks(num_tokens, block_size):
        block = allocator.allocate()
        if block is None:
            return False
        seq.table.append(block)
    return True


def _release(allocator, seq: _Seq) -> None:
    for block in reversed(seq.table):
        allocator.free(block)
    seq.table, seq.filled = [], 0


def _admit(allocator, queue: list[_Seq], running: list[_Seq], block_size: int) -> None:
    while queue:
        seq = queue[0]
        if allocator.num_free_blocks() < _blocks(seq.prompt_len, block_size):
            return
        if not _grow(allocator, seq, seq.prompt_len, block_size):
            raise AllocatorError(f"allocate() returned None although num_free_blocks() said "
                                 f"{allocator.num_free_blocks()} blocks were free")
        seq.filled = seq.prompt_len
        running.append(queue.pop(0))


def _decode(allocator, queue: list[_Seq], running: list[_Seq], block_size: int) -> int:
    """One decode token per running request (oldest first); preempt the newest when out of blocks."""
    preemptions, i = 0, 0
    while i < len(running):
        seq = running[i]
        if _grow(allocator, seq, seq.filled + 1, block_size):
            seq.filled += 1
            i += 1
            continue
        victim = running.pop()
        _release(allocator, victim)
        queue.insert(0, victim)
        preemptions += 1
    return preemptions


def simulate_paged(allocator_cls, trace: list[TraceRequest], num_blocks: int, block_size: int) -> PagedSplit:
    """Serve ``trace`` with ``allocator_cls(num_blocks)`` (see the module docstring)."""
    allocator = allocator_cls(num_blocks)
    queue = [_Seq(i, r.prompt_len, r.output_len) for i, r in enumerate(trace)]
    running: list[_Seq] = []
    used = internal = running_sum = 0.0
    steps = preemptions = 0
    while queue or running:
        _admit(allocator, queue, running, block_size)
        if not running:
            raise AllocatorError("no request could be admitted into an empty pool: is a freed block "
                                 "returned to the free list?")
        filled = sum(s.filled for s in running)
        held = sum(len(s.table) for s in running) * block_size
        used, internal = used + filled, internal + held - filled
        running_sum, steps = running_sum + len(running), steps + 1
        for seq in [s for s in running if s.filled >= s.prompt_len + s.output_len - 1]:
            running.remove(seq)
            _release(allocator, seq)
        preemptions += _decode(allocator, queue, running, block_size)
    pool = num_blocks * block_size * steps
    return PagedSplit(100 * used / pool, 100 * internal / pool, 100 * (1 - (used + internal) / pool),
                      running_sum / steps, steps, preemptions)


def simulate_fork(allocator_cls, prompt_len: int, n: int, max_tokens: int, block_size: int,
                  num_blocks: int) -> list[tuple[int, int]]:
    """(Σ block-table lengths, blocks held) after each engine step of one ``n``-sample request."""
    if max_tokens < 2:
        raise ValueError(f"max_tokens must be >= 2 (the samples write K/V after the first token), got {max_tokens}")
    allocator = allocator_cls(num_blocks)
    parent: list[int] = []
    for _ in range(_blocks(prompt_len, block_size)):
        parent.append(allocator.allocate())
    for block in parent:
        for _ in range(n - 1):
            allocator.share(block)
    tables = [list(parent) for _ in range(n)]
    steps = [(sum(map(len, tables)), num_blocks - allocator.num_free_blocks())]
    for k in range(2, max_tokens + 1):
        position = prompt_len + k - 2                      # the token whose K/V this step writes
        for table in tables:
            index = position // block_size
            if index == len(table):
                table.append(allocator.allocate())
            else:
                table[index] = allocator.copy_on_write(table[index])
        if k == max_tokens:
            for table in tables:
                for block in reversed(table):
                    allocator.free(block)
            tables = []
        steps.append((sum(map(len, tables)), num_blocks - allocator.num_free_blocks()))
    return steps
