"""The exercise audit: for each of the 15 exercises, two or more independently written correct
solutions in different styles pass, and three typical wrong ones fail with the feedback the task
text and the hints promise (the failing case, the kind of difference, the hint for that mistake)."""

from __future__ import annotations

import functools
import itertools
import math
from collections import deque

import numpy as np
import pytest
import torch

from labkit import set_language
from labkit.labs.exercises import EXERCISES, exercise


@pytest.fixture(autouse=True)
def chinese(monkeypatch, tmp_path):
    monkeypatch.setenv("LABKIT_RESULTS", str(tmp_path))     # attempts are recorded; keep them out of the repo
    set_language("zh")
    yield
    set_language("zh")


# ============================================================== lab 01: kv_bytes_per_token

def kv_product(num_layers, num_kv_heads, head_dim, dtype_bytes):
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes


def kv_prod_as_float(num_layers, num_kv_heads, head_dim, dtype_bytes):
    return float(math.prod([num_layers, num_kv_heads, head_dim, dtype_bytes, 2]))


def kv_by_counting(num_layers, num_kv_heads, head_dim, dtype_bytes):
    total = 0
    for _layer in range(num_layers):
        for _kind in ("K", "V"):
            total += num_kv_heads * head_dim * dtype_bytes
    return total


def kv_only_k(num_layers, num_kv_heads, head_dim, dtype_bytes):
    return num_layers * num_kv_heads * head_dim * dtype_bytes


def kv_in_kib(num_layers, num_kv_heads, head_dim, dtype_bytes):
    return 2 * num_layers * num_kv_heads * head_dim * dtype_bytes / 1024


def kv_numbers_not_bytes(num_layers, num_kv_heads, head_dim, dtype_bytes):
    return 2 * num_layers * num_kv_heads * head_dim


# ============================================================== lab 01: first_fit_allocator

class FirstFitByMarks:
    def __init__(self, num_slots):
        self.used, self.sizes = [False] * num_slots, {}

    def allocate(self, size):
        run = 0
        for i, used in enumerate(self.used):
            run = 0 if used else run + 1
            if run == size:
                start = i - size + 1
                self.used[start:i + 1] = [True] * size
                self.sizes[start] = size
                return start
        return None

    def free(self, start):
        size = self.sizes.pop(start)
        self.used[start:start + size] = [False] * size


class FirstFitByHoles:
    """Keeps the free holes as (start, length), merged on free."""

    def __init__(self, num_slots):
        self.holes, self.regions = [(0, num_slots)], {}

    def allocate(self, size):
        for index, (start, length) in enumerate(self.holes):
            if length >= size:
                self.holes[index:index + 1] = [(start + size, length - size)] if length > size else []
                self.regions[start] = size
                return start
        return None

    def free(self, start):
        merged = sorted(self.holes + [(start, self.regions.pop(start))])
        self.holes = []
        for s, n in merged:
            if self.holes and self.holes[-1][0] + self.holes[-1][1] == s:
                self.holes[-1] = (self.holes[-1][0], self.holes[-1][1] + n)
            else:
                self.holes.append((s, n))


class BestFit(FirstFitByHoles):
    def allocate(self, size):
        fitting = [(length, start, i) for i, (start, length) in enumerate(self.holes) if length >= size]
        if not fitting:
            return None
        length, start, index = min(fitting)
        self.holes[index:index + 1] = [(start + size, length - size)] if length > size else []
        self.regions[start] = size
        return start


class FreeForgets(FirstFitByMarks):
    def free(self, start):
        self.sizes.pop(start)


class FirstFitOneLate(FirstFitByMarks):
    def allocate(self, size):
        start = super().allocate(size)
        return None if start is None else start + 1


# ============================================================== lab 02: block_allocator

class BlocksByDeque:
    def __init__(self, num_blocks):
        self.free_ids, self.counts = deque(range(num_blocks)), [0] * num_blocks

    def allocate(self):
        if not self.free_ids:
            return None
        block = self.free_ids.popleft()
        self.counts[block] = 1
        return block

    def share(self, block):
        self.counts[block] += 1

    def free(self, block):
        self.counts[block] -= 1
        if self.counts[block] == 0:
            self.free_ids.append(block)

    def copy_on_write(self, block):
        if self.counts[block] == 1:
            return block
        new = self.allocate()
        if new is not None:
            self.free(block)
        return new

    def num_free_blocks(self):
        return len(self.free_ids)

    def ref_count(self, block):
        return self.counts[block]


class BlocksByListAndDict:
    def __init__(self, num_blocks):
        self.queue, self.holders = list(range(num_blocks)), {}

    def allocate(self):
        if len(self.queue) == 0:
            return None
        block = self.queue.pop(0)
        self.holders[block] = 1
        return block

    def share(self, block):
        self.holders[block] = self.holders.get(block, 0) + 1

    def free(self, block):
        self.holders[block] -= 1
        if not self.holders[block]:
            del self.holders[block]
            self.queue.append(block)

    def copy_on_write(self, block):
        if self.holders[block] > 1:
            if not self.queue:
                return None
            self.holders[block] -= 1
            return self.allocate()
        return block

    def num_free_blocks(self):
        return len(self.queue)

    def ref_count(self, block):
        return self.holders.get(block, 0)


class BlocksLifo(BlocksByDeque):
    def free(self, block):
        self.counts[block] -= 1
        if self.counts[block] == 0:
            self.free_ids.appendleft(block)


class BlocksFreeIgnoresCount(BlocksByDeque):
    def free(self, block):
        self.counts[block] = 0
        self.free_ids.append(block)


class BlocksAlwaysCopy(BlocksByDeque):
    def copy_on_write(self, block):
        new = self.allocate()
        if new is not None:
            self.free(block)
        return new


# ============================================================== lab 02: slot_mapping

def slots_comprehension(block_tables, seq_ids, positions, block_size):
    return [block_tables[s][p // block_size] * block_size + p % block_size for s, p in zip(seq_ids, positions)]


def slots_as_tensor(block_tables, seq_ids, positions, block_size):
    pos = torch.tensor(positions)
    blocks = torch.tensor([block_tables[s][p // block_size] for s, p in zip(seq_ids, positions)])
    return blocks * block_size + pos % block_size


def slots_as_tuple(block_tables, seq_ids, positions, block_size):
    out = ()
    for s, p in zip(seq_ids, positions):
        logical, offset = divmod(p, block_size)
        out += (block_tables[s][logical] * block_size + offset,)
    return out


def slots_without_block_size(block_tables, seq_ids, positions, block_size):
    return [block_tables[s][p // block_size] + p % block_size for s, p in zip(seq_ids, positions)]


def slots_logical(block_tables, seq_ids, positions, block_size):
    return list(positions)


def slots_one_per_sequence(block_tables, seq_ids, positions, block_size):
    return [table[0] * block_size for table in block_tables]


# ============================================================== lab 02: prefix_hash

def hashes_loop(token_ids, block_size):
    keys, parent = [], None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start:start + block_size])))
        keys.append(parent)
    return keys


def hashes_reduce(token_ids, block_size):
    blocks = [tuple(token_ids[i:i + block_size]) for i in range(0, len(token_ids) // block_size * block_size, block_size)]
    return tuple(functools.reduce(lambda keys, block: keys + [hash((keys[-1] if keys else None, block))], blocks, []))


def hashes_unchained(token_ids, block_size):
    return [hash((None, tuple(token_ids[i:i + block_size]))) for i in range(0, len(token_ids) // block_size * block_size, block_size)]


def hashes_with_partial(token_ids, block_size):
    keys, parent = [], None
    for start in range(0, len(token_ids), block_size):
        parent = hash((parent, tuple(token_ids[start:start + block_size])))
        keys.append(parent)
    return keys


def hashes_of_lists(token_ids, block_size):
    keys, parent = [], None
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, token_ids[start:start + block_size]))
        keys.append(parent)
    return keys


# ============================================================== lab 03: schedule_step

def step_literal(running, waiting, max_num_batched_tokens, max_num_seqs):
    """The task text read literally: every running request gets min(need, budget), 0 included."""
    budget, out = max_num_batched_tokens, {}
    for r in running:
        out[r.request_id] = min(r.num_tokens - r.num_computed_tokens, budget)
        budget -= out[r.request_id]
    admitted = 0
    for r in waiting:
        if budget == 0 or len(running) + admitted >= max_num_seqs:
            break
        out[r.request_id] = min(r.num_tokens - r.num_computed_tokens, budget)
        budget -= out[r.request_id]
        admitted += 1
    return out


def step_queue_style(running, waiting, max_num_batched_tokens, max_num_seqs):
    left = max_num_batched_tokens
    plan = {}
    queue = deque(waiting)
    for r in running:
        if left:
            plan[r.request_id] = take = min(left, r.num_tokens - r.num_computed_tokens)
            left -= take
    while queue and left > 0 and len(running) + len(plan) - sum(r.request_id in plan for r in running) < max_num_seqs:
        r = queue.popleft()
        plan[r.request_id] = take = min(left, r.num_tokens - r.num_computed_tokens)
        left -= take
    return plan


def step_ignores_budget(running, waiting, max_num_batched_tokens, max_num_seqs):
    out = {r.request_id: r.num_tokens - r.num_computed_tokens for r in running}
    for r in waiting[:max(0, max_num_seqs - len(running))]:
        out[r.request_id] = r.num_tokens - r.num_computed_tokens
    return out


def step_ignores_max_num_seqs(running, waiting, max_num_batched_tokens, max_num_seqs):
    return step_literal(running, waiting, max_num_batched_tokens, 10 ** 6)


def step_forgets_cached_tokens(running, waiting, max_num_batched_tokens, max_num_seqs):
    budget, out = max_num_batched_tokens, {}
    for r in list(running) + list(waiting)[:max(0, max_num_seqs - len(running))]:
        if budget == 0:
            break
        out[r.request_id] = min(r.num_tokens, budget)
        budget -= out[r.request_id]
    return out


# ============================================================== lab 03: static_occupancy

def occupancy_loop(output_lens, max_num_seqs):
    busy = total = 0
    for start in range(0, len(output_lens), max_num_seqs):
        batch = output_lens[start:start + max_num_seqs]
        busy += sum(o - 1 for o in batch)
        total += max_num_seqs * (max(batch) - 1)
    return 100.0 * busy / total if total else 0.0


def occupancy_numpy(output_lens, max_num_seqs):
    lens = np.array(output_lens)
    padded = np.ones(-(-len(lens) // max_num_seqs) * max_num_seqs, dtype=int)
    padded[:len(lens)] = lens
    steps = padded.reshape(-1, max_num_seqs) - 1
    total = (steps.max(axis=1) * max_num_seqs).sum()
    return float(100 * steps.sum() / total) if total else 0.0


def occupancy_fraction(output_lens, max_num_seqs):
    return occupancy_loop(output_lens, max_num_seqs) / 100


def occupancy_without_empty_slots(output_lens, max_num_seqs):
    busy = total = 0
    for start in range(0, len(output_lens), max_num_seqs):
        batch = output_lens[start:start + max_num_seqs]
        busy += sum(o - 1 for o in batch)
        total += len(batch) * (max(batch) - 1)
    return 100.0 * busy / total if total else 0.0


def occupancy_mean_of_batches(output_lens, max_num_seqs):
    ratios = []
    for start in range(0, len(output_lens), max_num_seqs):
        batch = output_lens[start:start + max_num_seqs]
        if max(batch) > 1:
            ratios.append(sum(o - 1 for o in batch) / (max_num_seqs * (max(batch) - 1)))
    return 100.0 * sum(ratios) / len(ratios) if ratios else 0.0


# ============================================================== lab 03: preemption_victims

def victims_reversed(running, free_blocks, blocks_needed):
    victims, recompute = [], 0
    for request_id, computed, blocks in reversed(running):
        if free_blocks >= blocks_needed:
            break
        victims.append(request_id)
        recompute += computed
        free_blocks += blocks
    return victims, recompute


def victims_as_list_pair(running, free_blocks, blocks_needed):
    """The issue's case: [victims, n] instead of (victims, n); the text allows both."""
    stack, victims = list(running), []
    while stack and free_blocks < blocks_needed:
        request = stack.pop()
        victims.append(request)
        free_blocks += request[2]
    return [[r[0] for r in victims], sum(r[1] for r in victims)]


def victims_oldest_first(running, free_blocks, blocks_needed):
    return victims_reversed(list(reversed(running)), free_blocks, blocks_needed)


def victims_count_blocks(running, free_blocks, blocks_needed):
    victims, freed = victims_reversed(running, free_blocks, blocks_needed)
    return victims, sum(b for rid, _c, b in running if rid in victims)


def victims_one_too_many(running, free_blocks, blocks_needed):
    victims, recompute = [], 0
    for request_id, computed, blocks in reversed(running):
        victims.append(request_id)
        recompute += computed
        free_blocks += blocks
        if free_blocks >= blocks_needed:
            break
    return victims, recompute


# ============================================================== lab 04: greedy_verify

def greedy_loop(draft_token_ids, target_token_ids):
    out = []
    for i, draft in enumerate(draft_token_ids):
        if draft != target_token_ids[i]:
            return out + [target_token_ids[i]]
        out.append(draft)
    return out + [target_token_ids[len(draft_token_ids)]]


def greedy_takewhile(draft_token_ids, target_token_ids):
    agree = len(list(itertools.takewhile(lambda pair: pair[0] == pair[1], zip(draft_token_ids, target_token_ids))))
    return tuple(target_token_ids[:agree + 1])


def greedy_no_target_token(draft_token_ids, target_token_ids):
    out = []
    for draft, target in zip(draft_token_ids, target_token_ids):
        if draft != target:
            break
        out.append(draft)
    return out


def greedy_keeps_later_matches(draft_token_ids, target_token_ids):
    out = [d if d == t else t for d, t in zip(draft_token_ids, target_token_ids)]
    return out + [target_token_ids[-1]]


def greedy_bonus_always(draft_token_ids, target_token_ids):
    return greedy_loop(draft_token_ids, target_token_ids) + ([target_token_ids[-1]] if draft_token_ids != target_token_ids[:-1] else [])


# ============================================================== lab 04: rejection_verify

def rejection_reference_style(draft_token_ids, draft_probs, target_probs, rng):
    out = []
    for i, x in enumerate(draft_token_ids):
        p, q = target_probs[i], draft_probs[i]
        if rng.random() < min(1.0, p[x] / q[x]):
            out.append(x)
            continue
        return out + rng.choices(range(len(p)), weights=[max(0.0, a - b) for a, b in zip(p, q)])
    return out + rng.choices(range(len(target_probs[-1])), weights=target_probs[-1])


def rejection_by_cumulative(draft_token_ids, draft_probs, target_probs, rng):
    """Its own sampler (inverse CDF) and a tuple result."""
    def draw(weights):
        u, acc = rng.random() * sum(weights), 0.0
        for token, w in enumerate(weights):
            acc += w
            if u < acc and w > 0:
                return token
        return max(range(len(weights)), key=lambda j: weights[j])
    out = ()
    for i, x in enumerate(draft_token_ids):
        p, q = target_probs[i], draft_probs[i]
        if rng.random() * q[x] >= p[x]:
            return out + (draw([max(0.0, a - b) for a, b in zip(p, q)]),)
        out += (x,)
    return out + (draw(target_probs[len(draft_token_ids)]),)


def rejection_accepts_all(draft_token_ids, draft_probs, target_probs, rng):
    return list(draft_token_ids) + rng.choices(range(len(target_probs[-1])), weights=target_probs[-1])


def rejection_resamples_from_p(draft_token_ids, draft_probs, target_probs, rng):
    out = []
    for i, x in enumerate(draft_token_ids):
        p, q = target_probs[i], draft_probs[i]
        if rng.random() < min(1.0, p[x] / q[x]):
            out.append(x)
            continue
        return out + rng.choices(range(len(p)), weights=p)
    return out + rng.choices(range(len(target_probs[-1])), weights=target_probs[-1])


def rejection_no_bonus(draft_token_ids, draft_probs, target_probs, rng):
    out = rejection_reference_style(draft_token_ids, draft_probs, target_probs, rng)
    return out[:len(draft_token_ids)] if len(out) == len(draft_token_ids) + 1 and out[:-1] == list(draft_token_ids) else out


# ============================================================== lab 04: expected_tokens_per_step

def tokens_sum(alpha, k):
    return sum(alpha ** i for i in range(k + 1))


def tokens_closed_form(alpha, k):
    return float(k + 1) if alpha == 1 else (1 - alpha ** (k + 1)) / (1 - alpha)


def tokens_running_product(alpha, k):
    total, chance = 0.0, 1.0
    for _ in range(k + 1):
        total += chance
        chance *= alpha
    return total


def tokens_off_by_one(alpha, k):
    return sum(alpha ** i for i in range(1, k + 1))


def tokens_closed_form_unguarded(alpha, k):
    return (1 - alpha ** (k + 1)) / (1 - alpha)


def tokens_all_accepted_only(alpha, k):
    return alpha ** k * (k + 1)


# ============================================================== lab 04: best_k

def best_k_max(alpha, c, k_max=16):
    speedups = [sum(alpha ** i for i in range(k + 1)) / (k * c + 1) for k in range(k_max + 1)]
    return speedups.index(max(speedups))


def best_k_loop(alpha, c, k_max=16):
    best, best_speedup = 0, 1.0
    tokens = 1.0
    for k in range(1, k_max + 1):
        tokens += alpha ** k
        if tokens / (k * c + 1) > best_speedup:
            best, best_speedup = k, tokens / (k * c + 1)
    return best


def best_k_from_one(alpha, c, k_max=16):
    return max(range(1, k_max + 1), key=lambda k: sum(alpha ** i for i in range(k + 1)) / (k * c + 1))


def best_k_wrong_formula(alpha, c, k_max=16):
    return max(range(k_max + 1), key=lambda k: (k * alpha + 1) / (k * c + 1))


def best_k_returns_speedup(alpha, c, k_max=16):
    return max(sum(alpha ** i for i in range(k + 1)) / (k * c + 1) for k in range(k_max + 1))


# ============================================================== lab 04: ngram_propose

def ngram_scan_back(token_ids, k, n):
    if len(token_ids) <= n:
        return []
    suffix = token_ids[-n:]
    for start in range(len(token_ids) - n - 1, -1, -1):
        if token_ids[start:start + n] == suffix:
            return token_ids[start + n:start + n + k]
    return []


def ngram_by_windows(token_ids, k, n):
    windows = [tuple(token_ids[i:i + n]) for i in range(len(token_ids) - n)]
    if len(token_ids) <= n or tuple(token_ids[-n:]) not in windows:
        return ()
    start = len(windows) - 1 - windows[::-1].index(tuple(token_ids[-n:]))
    return tuple(token_ids[start + n:start + n + k])


def ngram_earliest(token_ids, k, n):
    suffix = token_ids[-n:]
    for start in range(0, len(token_ids) - n):
        if token_ids[start:start + n] == suffix:
            return token_ids[start + n:start + n + k]
    return []


def ngram_ignores_k(token_ids, k, n):
    out = ngram_scan_back(token_ids, len(token_ids), n)
    return out[:k + 1] if len(out) > k else out


def ngram_includes_match_end(token_ids, k, n):
    if len(token_ids) <= n:
        return []
    suffix = token_ids[-n:]
    for start in range(len(token_ids) - n - 1, -1, -1):
        if token_ids[start:start + n] == suffix:
            return token_ids[start + n - 1:start + n - 1 + k]
    return []


# ============================================================== lab 05: goodput_p99

def _p99_interpolated(values):
    xs = sorted(values)
    pos = (len(xs) - 1) * 0.99
    lo = math.floor(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)


def goodput_loops(requests, duration_s, ttft_ms, tpot_ms):
    tpots, good = [], 0
    for r in requests:
        if not r["success"]:
            continue
        tpot = None
        if r["output_tokens"] > 1:
            tpot = 1000 * (r["e2el_s"] - r["ttft_s"]) / (r["output_tokens"] - 1)
            tpots.append(tpot)
        if 1000 * r["ttft_s"] <= ttft_ms and (tpot is None or tpot <= tpot_ms):
            good += 1
    return good / duration_s, (_p99_interpolated(tpots) if tpots else None)


def goodput_numpy(requests, duration_s, ttft_ms, tpot_ms):
    ok = [r for r in requests if r["success"]]
    tpot = {id(r): (r["e2el_s"] - r["ttft_s"]) * 1e3 / (r["output_tokens"] - 1) for r in ok if r["output_tokens"] >= 2}
    good = sum(r["ttft_s"] * 1e3 <= ttft_ms and tpot.get(id(r), 0.0) <= tpot_ms for r in ok)
    p99 = float(np.percentile(list(tpot.values()), 99)) if tpot else None
    return [good / duration_s, p99]


def goodput_counts_failures(requests, duration_s, ttft_ms, tpot_ms):
    goodput, p99 = goodput_loops([{**r, "success": True} for r in requests], duration_s, ttft_ms, tpot_ms)
    return goodput, goodput_loops(requests, duration_s, ttft_ms, tpot_ms)[1]


def goodput_nearest_rank(requests, duration_s, ttft_ms, tpot_ms):
    goodput, _ = goodput_loops(requests, duration_s, ttft_ms, tpot_ms)
    tpots = sorted(1000 * (r["e2el_s"] - r["ttft_s"]) / (r["output_tokens"] - 1)
                   for r in requests if r["success"] and r["output_tokens"] > 1)
    return goodput, (tpots[min(len(tpots) - 1, math.ceil(0.99 * len(tpots)) - 1)] if tpots else None)


def goodput_drops_one_token_replies(requests, duration_s, ttft_ms, tpot_ms):
    kept = [r for r in requests if r["output_tokens"] > 1]
    return goodput_loops(kept, duration_s, ttft_ms, tpot_ms)


# ============================================================== lab 05: pick_config

def pick_filter_max(table, max_memory_mib, max_tpot_p99_ms):
    fits = [r for r in table if r["memory_mib"] <= max_memory_mib and r["tpot_p99_ms"] is not None
            and r["tpot_p99_ms"] <= max_tpot_p99_ms]
    return max(fits, key=lambda r: r["tokens_per_cpu_s"])["variant"] if fits else None


def pick_sorted(table, max_memory_mib, max_tpot_p99_ms):
    for row in sorted(table, key=lambda r: -r["tokens_per_cpu_s"]):
        tpot = row["tpot_p99_ms"]
        if row["memory_mib"] <= max_memory_mib and tpot is not None and tpot <= max_tpot_p99_ms:
            return row["variant"]
    return None


def pick_strict(table, max_memory_mib, max_tpot_p99_ms):
    fits = [r for r in table if r["memory_mib"] < max_memory_mib and r["tpot_p99_ms"] is not None
            and r["tpot_p99_ms"] < max_tpot_p99_ms]
    return max(fits, key=lambda r: r["tokens_per_cpu_s"])["variant"] if fits else None


def pick_returns_row(table, max_memory_mib, max_tpot_p99_ms):
    fits = [r for r in table if r["memory_mib"] <= max_memory_mib and r["tpot_p99_ms"] is not None
            and r["tpot_p99_ms"] <= max_tpot_p99_ms]
    return max(fits, key=lambda r: r["tokens_per_cpu_s"]) if fits else None


def pick_slowest(table, max_memory_mib, max_tpot_p99_ms):
    fits = [r for r in table if r["memory_mib"] <= max_memory_mib and r["tpot_p99_ms"] is not None
            and r["tpot_p99_ms"] <= max_tpot_p99_ms]
    return min(fits, key=lambda r: r["tokens_per_cpu_s"])["variant"] if fits else None


# ============================================================== the audit table

CORRECT = {
    "kv_bytes_per_token": [kv_product, kv_prod_as_float, kv_by_counting],
    "first_fit_allocator": [FirstFitByMarks, FirstFitByHoles],
    "block_allocator": [BlocksByDeque, BlocksByListAndDict],
    "slot_mapping": [slots_comprehension, slots_as_tensor, slots_as_tuple],
    "prefix_hash": [hashes_loop, hashes_reduce],
    "schedule_step": [step_literal, step_queue_style],
    "static_occupancy": [occupancy_loop, occupancy_numpy],
    "preemption_victims": [victims_reversed, victims_as_list_pair],
    "greedy_verify": [greedy_loop, greedy_takewhile],
    "rejection_verify": [rejection_reference_style, rejection_by_cumulative],
    "expected_tokens_per_step": [tokens_sum, tokens_closed_form, tokens_running_product],
    "best_k": [best_k_max, best_k_loop],
    "ngram_propose": [ngram_scan_back, ngram_by_windows],
    "goodput_p99": [goodput_loops, goodput_numpy],
    "pick_config": [pick_filter_max, pick_sorted],
}

# (exercise, wrong answer, failure kind, words the message must hold, the hint it must show or None)
WRONG = [
    ("kv_bytes_per_token", kv_only_k, "wrong", ["既要存 K，也要存 V"], "提示 2/2"),
    ("kv_bytes_per_token", kv_in_kib, "wrong", ["单位应当是字节"], None),
    ("kv_bytes_per_token", kv_numbers_not_bytes, "wrong", ["期望：23040", "dtype_bytes"], "提示 2/2"),
    ("first_fit_allocator", BestFit, "wrong", ["✗"], "提示 2/3"),
    ("first_fit_allocator", FreeForgets, "wrong", ["free(", "✓"], "提示 2/3"),
    ("first_fit_allocator", FirstFitOneLate, "wrong", ["allocate(4) → 期望 0，得到 1  ✗"], "提示 2/3"),
    ("block_allocator", BlocksLifo, "wrong", ["✗"], "提示 1/3"),
    ("block_allocator", BlocksFreeIgnoresCount, "wrong", ["✗"], "提示 2/3"),
    ("block_allocator", BlocksAlwaysCopy, "wrong", ["copy_on_write"], "提示 3/3"),
    ("slot_mapping", slots_without_block_size, "wrong", ["slot = block_table[pos // block_size] * block_size"], "提示 2/2"),
    ("slot_mapping", slots_logical, "wrong", ["块表给出的是物理块号"], "提示 2/2"),
    ("slot_mapping", slots_one_per_sequence, "wrong", ["每个 token 返回一个槽位"], None),
    ("prefix_hash", hashes_unchained, "wrong", ["要把父块的键串进来"], "提示 2/2"),
    ("prefix_hash", hashes_with_partial, "wrong", ["最后一个不满的块"], "提示 1/2"),
    ("prefix_hash", hashes_of_lists, "error", ["TypeError", "unhashable"], None),
    ("schedule_step", step_ignores_budget, "wrong", ["超过了 max_num_batched_tokens"], "提示 2/3"),
    ("schedule_step", step_ignores_max_num_seqs, "wrong", ["max_num_seqs 限制了新接纳的请求数"], "提示 3/3"),
    ("schedule_step", step_forgets_cached_tokens, "wrong", ["✗"], "提示 1/3"),
    ("static_occupancy", occupancy_fraction, "wrong", ["返回百分数"], None),
    ("static_occupancy", occupancy_without_empty_slots, "wrong", ["最后一批不满"], "提示 3/3"),
    ("static_occupancy", occupancy_mean_of_batches, "wrong", ["✗"], "提示 2/3"),
    ("preemption_victims", victims_oldest_first, "wrong", ["抢占最后接纳的一个"], "提示 1/2"),
    ("preemption_victims", victims_count_blocks, "wrong", ["重算的 token 数不对"], "提示 2/2"),
    ("preemption_victims", victims_one_too_many, "wrong", ["够用：不抢占"], "提示 1/2"),
    ("greedy_verify", greedy_no_target_token, "wrong", ["全部接受 + bonus"], "提示 1/2"),
    ("greedy_verify", greedy_keeps_later_matches, "wrong", ["第一个就不一致"], "提示 2/2"),
    ("greedy_verify", greedy_bonus_always, "wrong", ["第一个就不一致"], "提示 2/2"),
    ("rejection_verify", rejection_accepts_all, "wrong", ["p(x) = 0"], None),
    ("rejection_verify", rejection_resamples_from_p, "wrong", ["总变差距离"], "提示 3/3"),
    ("rejection_verify", rejection_no_bonus, "wrong", ["bonus 来自 p[k]"], None),
    ("expected_tokens_per_step", tokens_off_by_one, "wrong", ["少了 1"], "提示 1/2"),
    ("expected_tokens_per_step", tokens_closed_form_unguarded, "error", ["ZeroDivisionError", "(1 - alpha)"], None),
    ("expected_tokens_per_step", tokens_all_accepted_only, "wrong", ["少了 1"], "提示 1/2"),
    ("best_k", best_k_from_one, "wrong", ["不投机最好"], "提示 2/2"),
    ("best_k", best_k_wrong_formula, "wrong", ["✗"], "提示 1/2"),
    ("best_k", best_k_returns_speedup, "wrong", ["✗"], "提示 1/2"),
    ("ngram_propose", ngram_earliest, "wrong", ["取最近的一次"], "提示 1/2"),
    ("ngram_propose", ngram_ignores_k, "wrong", ["✗"], "提示 2/2"),
    ("ngram_propose", ngram_includes_match_end, "wrong", ["✗"], "提示 1/2"),
    ("goodput_p99", goodput_counts_failures, "wrong", ["失败的请求不算"], "提示 1/3"),
    ("goodput_p99", goodput_nearest_rank, "wrong", ["插值"], "提示 3/3"),
    ("goodput_p99", goodput_drops_one_token_replies, "wrong", ["只有 1 个输出 token"], "提示 2/3"),
    ("pick_config", pick_strict, "wrong", ["540 MiB"], "提示 1/2"),
    ("pick_config", pick_returns_row, "wrong", ["✗"], "提示 2/2"),
    ("pick_config", pick_slowest, "wrong", ["✗"], "提示 2/2"),
]


def test_every_exercise_is_audited_with_two_correct_and_three_wrong_answers():
    assert set(CORRECT) == set(EXERCISES)
    assert all(len(answers) >= 2 for answers in CORRECT.values())
    wrong_per_exercise = {name: sum(w[0] == name for w in WRONG) for name in EXERCISES}
    assert all(n >= 3 for n in wrong_per_exercise.values()), wrong_per_exercise


@pytest.mark.parametrize("name, answer", [(n, a) for n, answers in CORRECT.items() for a in answers],
                         ids=lambda v: v if isinstance(v, str) else v.__name__)
def test_an_independently_written_correct_answer_passes(name, answer):
    result = exercise(name).check(answer)
    assert result.passed, result.message


@pytest.mark.parametrize("name, answer, kind, words, hint", WRONG,
                         ids=[f"{w[0]}-{w[1].__name__}" for w in WRONG])
def test_a_typical_wrong_answer_gets_the_feedback_for_its_mistake(name, answer, kind, words, hint):
    result = exercise(name).check(answer)
    assert not result.passed and result.failure.kind == kind, result.message
    for word in words:
        assert word in result.message, result.message
    if hint is None:
        assert result.hint is None or "提示" not in result.message.split("\n\n")[-1], result.message
    else:
        assert hint in (result.hint or ""), result.message


def test_no_hint_is_the_solution():
    """A hint points at the idea; it never holds the code that solves the exercise."""
    for name in EXERCISES:
        for hint in exercise(name).hints:
            for text in hint.values():
                assert "return " not in text and "range(" not in text and "sum(" not in text, (name, text)
