"""Reproduce the default draft model in ``data/drafts/`` with one command (see its README).

    nice -n 15 env PYTHONPATH=. .venv/bin/python scripts/train_draft.py --regenerate   # ~40 min here

1. generate: for 18 minutes the target (SmolLM2-135M-Instruct) answers chat prompts with labkit's
   batched engine; the top-32 target logits of every answer token are kept (``draft_corpus.py``).
2. distil: for 14 minutes a 2-layer draft that reuses the target's frozen token embedding (input)
   and rows of it as its head (the most frequent answer tokens) learns the target's next-token
   distribution (``draft_distill.py``), printing held-out agreement as it goes; fp16 weights are
   saved to ``data/drafts/``.
3. measure: greedy decoding, batch 1, same process, on ``load_prompts("chat", split="heldout")``:
   acceptance at k = 1, 2, 4 and the speed-up over plain decoding.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from draft_corpus import Sample, generate_corpus  # noqa: E402
from draft_distill import (  # noqa: E402
    DistillData,
    calibrate_norm,
    check_dense_matches_paged,
    choose_vocab,
    dense_forward,
    distill_loss,
    lr_multiplier,
    param_groups,
)
from draft_prompts import make_prompts  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

from labkit import LLM, EngineConfig, SamplingParams, SpecConfig  # noqa: E402
from labkit.model.loader import (
    cache_root,  # noqa: E402
    load_model,  # noqa: E402
)
from labkit.spec_decode.draft_model import DEFAULT_DRAFT, draft_from_target_layers, save_draft  # noqa: E402
from labkit.traces import load_prompts  # noqa: E402


def build_jobs(num_self_made: int, max_tokens: int, sampled_share: float, seed: int
               ) -> list[tuple[str, SamplingParams]]:
    """Chat-train prompts (greedy + two sampled answers each) and self-made prompts (greedy,
    a share sampled at temperature 0.7), shuffled so a time-limited run stays balanced."""
    rng = random.Random(seed)
    train = load_prompts("chat", split="train")
    exclude = tuple(load_prompts("chat", split="heldout"))
    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens)

    def sampled():
        return SamplingParams(temperature=0.7, max_tokens=max_tokens, seed=rng.randrange(1 << 30))

    jobs = [(p, greedy) for p in train] + [(p, sampled()) for p in train for _ in range(2)]
    for prompt in make_prompts(num_self_made, seed=seed, exclude=exclude):
        jobs.append((prompt, sampled() if rng.random() < sampled_share else greedy))
    rng.shuffle(jobs)
    return jobs


def load_or_generate_corpus(args) -> list[Sample]:
    path = Path(args.corpus) if args.corpus else cache_root() / "draft-corpus" / (
        f"chat-{args.num_prompts}-{args.max_tokens}-{args.seed}.pt")
    if path.is_file() and not args.regenerate:
        print(f"corpus: reusing {path} (pass --regenerate to rebuild it)")
        return [Sample(**d) for d in torch.load(path)]
    jobs = build_jobs(args.num_prompts, args.max_tokens, args.sampled_share, args.seed)
    t0 = time.perf_counter()
    samples = generate_corpus(jobs, top_k=args.teacher_top_k, time_limit_s=args.gen_minutes * 60)
    n_tok = sum(len(s.output_ids) for s in samples)
    print(f"corpus: {len(samples)} answers, {n_tok} answer tokens in {time.perf_counter() - t0:.0f} s")
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save([vars(s) for s in samples], path)
    return samples


# ------------------------------------------------------------------------------------ distil

def split_corpus(samples: list[Sample], val_share: float, seed: int) -> tuple[list[Sample], list[Sample]]:
    order = list(range(len(samples)))
    random.Random(seed).shuffle(order)
    n_val = max(1, int(len(samples) * val_share))
    return [samples[i] for i in order[n_val:]], [samples[i] for i in order[:n_val]]


def make_draft(target, train: list[Sample], args):
    eos = tuple(t for t in (target.config.eos_token_id if isinstance(target.config.eos_token_id, list)
                            else [target.config.eos_token_id]) if t is not None)
    vocab_ids, covered = choose_vocab(train, args.vocab, always=eos)
    print(f"draft vocabulary: {len(vocab_ids)} tokens, covering {100 * covered:.1f}% of training answer tokens")
    draft = draft_from_target_layers(target, args.init_layers, vocab_ids)
    err = check_dense_matches_paged(draft, train[0].prompt_ids + train[0].output_ids[:40])
    if err > 1e-3:
        raise RuntimeError(f"training forward disagrees with the engine's paged forward (max diff {err})")
    return draft


def trainable(draft) -> list[torch.nn.Parameter]:
    params = [p for n, p in draft.named_parameters() if n not in ("embed_tokens", "lm_head")]
    for p in params:
        p.requires_grad_(True)
    return params


def distil(draft, train: list[Sample], val: list[Sample], heldout, args) -> dict:
    """AdamW on the draft's layers and norms; the shared embedding and the head stay frozen.
    Stops at ``args.steps`` or ``args.train_minutes``, whichever comes first."""
    size = draft.config.vocab_size
    batches = DistillData(train, draft.vocab_ids, size)
    val_batches = DistillData(val, draft.vocab_ids, size).batches(args.batch_tokens, torch.Generator())
    print(f"final-norm scale at init: {calibrate_norm(draft, val_batches[0])}")
    trainable(draft)
    opt = torch.optim.AdamW(param_groups(draft, args.lr, args.norm_lr_mult), betas=(0.9, 0.98), weight_decay=0.0)
    gen, queue, step, t0 = torch.Generator().manual_seed(args.seed), [], 0, time.perf_counter()
    bar = tqdm(total=args.steps, desc="distil", unit="step")
    while (progress := max(step / args.steps, (time.perf_counter() - t0) / (60 * args.train_minutes))) < 1:
        queue = queue or batches.batches(args.batch_tokens, gen)
        loss, agree = train_step(draft, opt, queue.pop(), lr_multiplier(step, progress, args.warmup))
        step += 1
        bar.update(1)
        bar.set_postfix(loss=f"{loss.item():.3f}", agree=f"{agree:.2f}")
        if step % args.eval_every == 0:
            bar.write(f"step {step}: agreement (teacher forcing) on held-out corpus answers "
                      f"{val_agreement(draft, val_batches):.3f}, on held-out chat {heldout_agreement(draft, heldout):.3f}")
    bar.close()
    for p in draft.parameters():
        p.requires_grad_(False)
    return dict(steps=step, train_s=round(time.perf_counter() - t0), batch_tokens=args.batch_tokens,
                val_agreement=round(val_agreement(draft, val_batches), 4),
                heldout_chat_agreement=round(heldout_agreement(draft, heldout), 4))


def train_step(draft, opt: torch.optim.Optimizer, batch, lr_mult: float) -> tuple[torch.Tensor, float]:
    for group in opt.param_groups:
        group["lr"] = group["base_lr"] * lr_mult
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, agree = distill_loss(draft, batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for g in opt.param_groups for p in g["params"]], 1.0)
    opt.step()
    return loss, agree


def heldout_answers(max_tokens: int) -> list[tuple[list[int], list[int]]]:
    """The fp32 target's greedy answers to the held-out chat prompts (what the draft must guess)."""
    outs = LLM(progress=False).generate(load_prompts("chat", split="heldout"),
                                        SamplingParams(temperature=0.0, max_tokens=max_tokens))
    return [(o.prompt_token_ids, o.token_ids) for o in outs]


@torch.no_grad()
def heldout_agreement(draft, answers) -> float:
    """Share of answer tokens where the draft's argmax, given the true prefix, is the target's token."""
    hits = total = 0
    for prompt_ids, output_ids in answers:
        seq = torch.tensor(prompt_ids + output_ids[:-1])[None]
        rows = (torch.zeros(len(output_ids), dtype=torch.long), torch.arange(len(prompt_ids) - 1, seq.shape[1]))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            pred = draft.vocab_ids[dense_forward(draft, seq, rows).argmax(-1)]
        hits += int((pred == torch.tensor(output_ids)).sum())
        total += len(output_ids)
    return hits / max(1, total)


@torch.no_grad()
def val_agreement(draft, batches) -> float:
    hits = total = 0
    for batch in batches:
        input_ids, rows_b, rows_t, tids, _ = batch
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = dense_forward(draft, input_ids, (rows_b, rows_t))
        hits += int((logits.argmax(-1) == tids[:, 0]).sum())
        total += len(rows_b)
    return hits / max(1, total)


# ------------------------------------------------------------------------------------ measure

def measure(path: Path, k: int, max_tokens: int) -> dict:
    """Greedy, batch 1, same process: plain decoding vs the draft proposer on held-out chat."""
    prompts = load_prompts("chat", split="heldout")
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    plain = LLM(progress=False)
    spec = LLM(progress=False, config=EngineConfig(speculative=SpecConfig(
        method="draft", num_speculative_tokens=k, draft_model=str(path))))
    for llm in (plain, spec):                                  # warm up
        llm.generate(prompts[0], SamplingParams(temperature=0.0, max_tokens=4))
    spec.engine.reset_metrics()
    t_plain = t_spec = 0.0
    identical = True
    for prompt in tqdm(prompts, desc=f"measure (k={k}, batch 1)", unit="prompt"):
        t = time.perf_counter()
        ref = plain.generate(prompt, params)[0].token_ids
        t_plain += time.perf_counter() - t
        t = time.perf_counter()
        out = spec.generate(prompt, params)[0].token_ids
        t_spec += time.perf_counter() - t
        identical &= out == ref
    stats = spec.engine.stats()
    return dict(k=k, acceptance_rate=stats["spec_decode_acceptance_rate"],
                mean_acceptance_length=stats["spec_decode_mean_acceptance_length"],
                accepted_per_pos=stats["spec_decode_num_accepted_tokens_per_pos"],
                plain_s=t_plain, spec_s=t_spec, speedup=t_plain / t_spec, identical=identical,
                draft_s=spec.engine.proposer.stats.time_s)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-prompts", type=int, default=1780, help="self-made prompts to answer")
    ap.add_argument("--max-tokens", type=int, default=192, help="max answer length")
    ap.add_argument("--sampled-share", type=float, default=0.25, help="self-made answers sampled at T=0.7")
    ap.add_argument("--teacher-top-k", type=int, default=32, help="target logits kept per token")
    ap.add_argument("--gen-minutes", type=float, default=18.0, help="stop generating after this long")
    ap.add_argument("--corpus", default=None, help="corpus file (default: in the labkit cache)")
    ap.add_argument("--regenerate", action="store_true", help="ignore a cached corpus")
    ap.add_argument("--only-corpus", action="store_true", help="stop after generating the corpus")
    ap.add_argument("--vocab", type=int, default=8192, help="draft head size (most frequent tokens)")
    ap.add_argument("--init-layers", type=int, nargs="+", default=[0, 1],
                    help="target layers the draft's layers start from (their count = draft depth)")
    ap.add_argument("--steps", type=int, default=2600, help="optimizer steps")
    ap.add_argument("--train-minutes", type=float, default=14.0, help="stop training after this long")
    ap.add_argument("--batch-tokens", type=int, default=2048, help="padded tokens per batch")
    ap.add_argument("--lr", type=float, default=2e-3, help="peak lr of the weight matrices")
    ap.add_argument("--norm-lr-mult", type=float, default=10.0, help="RMSNorm gains learn this much faster")
    ap.add_argument("--warmup", type=int, default=40)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--val-share", type=float, default=0.03, help="corpus answers kept out of training")
    ap.add_argument("--k", type=int, nargs="+", default=[1, 2, 4], help="k values for the measurement")
    ap.add_argument("--no-measure", action="store_true", help="skip the in-engine measurement")
    ap.add_argument("--measure-only", metavar="DRAFT", help="only measure this draft file")
    ap.add_argument("--measure-tokens", type=int, default=128, help="max_tokens per held-out prompt")
    ap.add_argument("--out", default=str(DEFAULT_DRAFT), help="where to write the draft")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)   # leave the other core to whoever shares the machine
    torch.manual_seed(args.seed)
    t_start = time.perf_counter()
    if args.measure_only:
        for k in args.k:
            print(f"held-out chat, greedy, batch 1: {measure(Path(args.measure_only), k, args.measure_tokens)}")
        return
    samples = load_or_generate_corpus(args)
    if args.only_corpus:
        return
    target = load_model(None, torch.device("cpu"), torch.float32, progress=False)[0]
    train, val = split_corpus(samples, args.val_share, args.seed)
    draft = make_draft(target, train, args)
    report = distil(draft, train, val, heldout_answers(args.measure_tokens), args)
    info = dict(target="SmolLM2-135M-Instruct", init_layers=args.init_layers, vocab=len(draft.vocab_ids),
                corpus_answers=len(train), corpus_tokens=sum(len(s.output_ids) for s in train), **report)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    save_draft(out, draft, info)
    print(f"saved {out} ({out.stat().st_size / 1e6:.1f} MB): {info}")
    if not args.no_measure:
        for k in args.k:
            print(f"held-out chat, greedy, batch 1: {measure(out, k, args.measure_tokens)}")
    print(f"total wall time {(time.perf_counter() - t_start) / 60:.1f} min")


if __name__ == "__main__":
    main()
