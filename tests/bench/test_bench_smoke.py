"""The benchmarks run end to end (tiny sizes, a 2-layer random model), so they do not rot.

Timings are not checked: these runs take seconds and their numbers mean nothing. What is checked
is that every table is produced with the rows it promises, and the few pure helpers the numbers
rest on (the acceptance estimator, the parity rule) compute what their docstrings say.
"""

from __future__ import annotations

import os

import pytest
import torch

from bench import common, spec
from bench.engine_sections import compare_greedy


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return str(common.tiny_model_dir(tmp_path_factory.mktemp("tiny-bench-model")))


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _titles(sections) -> list[str]:
    return [s.title for s in sections]


def test_cpu_engine_benchmark_prints_batch1_and_batched_tables(tiny_model, capsys):
    from bench import cpu_engine

    sections = cpu_engine.main(["--tiny", "--model", tiny_model, "--batch", "3"])
    assert _titles(sections) == ["Environment",
                                 "Batch 1 (float32): labkit vs transformers generate",
                                 "Batch 3 (float32): labkit vs transformers generate",
                                 "Batch 1 (bfloat16): labkit vs transformers generate",
                                 "Batch 3 (bfloat16): labkit vs transformers generate"]
    for batch1 in (sections[1], sections[3]):
        assert [r[0] for r in batch1.rows] == ["labkit", "transformers generate",
                                               "**ratio labkit / transformers**"]
    # fp32 is the parity dtype: the tokens must agree. (bf16 rounding may legitimately differ.)
    assert any("greedy tokens identical to transformers in 2/2 rounds" in n for n in sections[1].notes)
    assert "python -m bench.cpu_engine --tiny" in capsys.readouterr().out


def test_spec_benchmark_prints_one_row_per_workload_and_k_with_identical_output(tiny_model):
    sections = spec.main(["--tiny", "--model", tiny_model, "--ks", "1,3", "--methods", "ngram,int4",
                          "--workloads", "copy,code", "--dtypes", "float32,bfloat16"])
    assert [s.title.split(" =")[0] for s in sections] == ["Speculative decoding: ngram", "Speculative decoding: int4"] * 2
    assert ["bfloat16 target" in s.title for s in sections] == [False, False, True, True]
    for table in sections:
        assert [(r[0], r[1]) for r in table.rows] == [("copy-heavy editing", "1"), ("copy-heavy editing", "3"),
                                                      ("code", "1"), ("code", "3")]
        assert all(r[-1] == "1/1" for r in table.rows)     # speculative output == plain greedy output


def test_spec_benchmark_reports_a_method_it_cannot_build_as_skipped(tiny_model, monkeypatch):
    def no_draft(*args, **kwargs):
        raise FileNotFoundError("no draft weights here")

    real = spec.make_llm
    monkeypatch.setattr(spec, "make_llm", lambda model, s, config=None: no_draft() if s and s.method == "draft"
                        else real(model, s, config))
    sections = spec.main(["--tiny", "--model", tiny_model, "--ks", "2", "--methods", "ngram,draft",
                          "--workloads", "chat", "--dtypes", "float32"])
    assert _titles(sections)[-1] == "Speculative decoding: skipped methods"
    assert "draft: skipped (FileNotFoundError: no draft weights here)" in sections[-1].rows[0][0]


def test_gpu_benchmark_engine_sections_run_on_cpu_in_smoke_mode(tiny_model):
    from bench import gpu

    sections = gpu.main(["--device", "cpu", "--smoke", "--model", tiny_model,
                         "--only", "environment,parity,throughput,decode,spec"])
    titles = _titles(sections)
    assert titles[:4] == ["Environment", "Greedy parity vs transformers", "Throughput on a heavy-tailed trace",
                          "Decode step time vs batch size"]
    assert titles[4].startswith("Speculative decoding: ngram")
    assert all(row[-1].startswith("pass") for row in sections[1].rows)          # fp32 parity
    assert [r[0] for r in sections[3].rows] == ["1", "2", "4"]


def test_make_bench_runs_every_cpu_benchmark_in_sequence(tiny_model, capsys):
    from bench.__main__ import main

    main(["--tiny", "--model", tiny_model])
    out = capsys.readouterr().out
    assert "# labkit vs transformers on CPU" in out and "# Speculative decoding on CPU" in out
    assert "# baselines\n\n_skipped" in out              # it has no tiny mode
    assert out.index("labkit vs transformers") < out.index("Speculative decoding")


def test_linear_rows_benchmark_times_every_formulation(tiny_model):
    from bench import linear_rows

    sections = linear_rows.main(["--threads", "1", "--rows", "1,2", "--rounds", "1", "--model", tiny_model])
    assert [s.title for s in sections] == ["Weight sweep vs rows, float32, 1 thread(s)",
                                           "Weight sweep vs rows, bfloat16, 1 thread(s)"]
    for section in sections:
        assert [r[0] for r in section.rows] == ["1", "2"]
        assert section.rows[0][-1] in section.headers[1:-1]         # "fastest" names a measured form
        assert "labkit linear()" in section.headers and any(n.startswith("cpu: ") for n in section.notes)
        # the one-row sweeps as shares of a roofline measured in their own rounds, with the target's verdict
        (roof,) = [n for n in section.notes if n.startswith("read roofline")]
        assert "in the same rounds" in roof and "labkit linear()" in roof and ("(met)" in roof or "(not met)" in roof)
    fp32 = sections[0].notes
    assert any("chosen by the probe" in n for n in fp32) and any("exactness gate" in n for n in fp32)


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1" and not torch.cuda.is_available(),
                    reason="the kernel section needs a GPU or Triton's interpreter")
def test_gpu_benchmark_kernel_section_agrees_with_the_reference(tiny_model):
    pytest.importorskip("triton", reason="triton is not installed")
    from bench import gpu

    device = "cuda" if torch.cuda.is_available() else "cpu"
    section = gpu.main(["--device", device, "--smoke", "--only", "attention", "--iters", "1", "--warmup", "0"])[0]
    assert all(float(row[-1]) < 1e-4 for row in section.rows)                  # max abs diff, fp32


# ----------------------------------------------------------------------------- helpers the numbers rest on

def test_the_one_row_read_share_divides_each_round_by_its_own_roofline():
    from bench.linear_rows import read_note

    # 1 GB swept and read per round. Round by round the roofline (the faster read kernel) is 25, 50 and
    # 20 GB/s and labkit's sweep 20, 40 and 10 GB/s: shares 80 %, 80 % and 50 %.
    rounds = [{"labkit linear()": 0.05, "read: sum": 0.04, "read: mv": 0.05},
              {"labkit linear()": 0.025, "read: sum": 0.025, "read: mv": 0.02},
              {"labkit linear()": 0.1, "read: sum": 0.05, "read: mv": 0.1}]
    note = read_note(rounds, 10**9, 10**9, 2, ["labkit linear()"])
    assert note.startswith("read roofline, 2 thread(s), in the same rounds as the one-row sweeps: 25.0 GB/s")
    assert "sum 25.0, mv 20.0" in note                      # each kernel's median rate
    assert "labkit linear() 20.0 GB/s = 80 %" in note and "50–80 % over the rounds" in note
    assert note.endswith("target: at least 85 % (not met)")


def test_acceptance_mle_counts_only_draft_tokens_that_were_compared():
    # Step 1: all 4 drafts accepted (4 trials). Step 2: 1 accepted, then a rejection (2 trials);
    # its last 2 drafts were never compared. Step 3: 2 drafts, first rejected (1 trial).
    assert spec.acceptance_mle([4, 4, 2], [4, 1, 0]) == pytest.approx(5 / 7)
    assert spec.acceptance_rate([4, 4, 2], [4, 1, 0]) == pytest.approx(5 / 10)
    assert spec.acceptance_mle([], []) is None


def test_accepted_over_drafted_underestimates_alpha_for_long_drafts():
    # With alpha = 0.5 and k = 4 on every step, accepted/drafted tends to (a + a^2 + a^3 + a^4)/4.
    gen = torch.Generator().manual_seed(0)
    drafted, accepted = [], []
    for _ in range(20000):
        ok = torch.rand(4, generator=gen) < 0.5
        n = int(ok.int().cumprod(0).sum())
        drafted.append(4)
        accepted.append(n)
    assert spec.acceptance_mle(drafted, accepted) == pytest.approx(0.5, abs=0.01)
    assert spec.acceptance_rate(drafted, accepted) == pytest.approx(0.9375 / 4, abs=0.01)


def test_parity_rule_allows_a_near_tie_only_at_the_first_divergence():
    top5 = [[1, 9, 8, 7, 6], [2, 9, 8, 7, 6], [3, 5, 8, 7, 6]]
    assert compare_greedy([1, 2, 3], top5, [1, 2, 3], top5) == ("none", "pass (identical)")
    near = [[1, 9, 8, 7, 6], [2, 9, 8, 7, 6], [5, 3, 8, 7, 6]]
    assert compare_greedy([1, 2, 3], top5, [1, 2, 5], near) == ("2", "pass (near-tie)")
    far = [[1, 9, 8, 7, 6], [2, 9, 8, 7, 6], [4, 0, 8, 7, 6]]
    assert compare_greedy([1, 2, 3], top5, [1, 2, 4], far)[1].startswith("FAIL")


def test_baselines_real_part_runs_in_both_dtypes_with_all_three_systems(tiny_model):
    from bench import baselines

    sections = baselines.main(tiny=True, parts=("real",), model=tiny_model, dtypes=("float32", "bfloat16"))
    assert [s.title.split(":")[0] for s in sections] == ["Real model on this CPU (float32)",
                                                        "Real model on this CPU (bfloat16)"]
    for section in sections:
        assert [r[0] for r in section.rows] == ["labkit, continuous batching", "labkit, static batching",
                                                "transformers generate, static padded batches"]
    assert sections[0].rows[1][-1] == "100%"        # fp32: static batching emits continuous's tokens


def test_load_memory_benchmark_measures_both_systems_in_fresh_processes(tiny_model):
    from bench import load_memory

    (section,) = load_memory.main(["--tiny", "--model", tiny_model])
    assert [r[0] for r in section.rows] == ["labkit", "transformers"]
    for row in section.rows:
        base, steady, peak = float(row[2]), float(row[4]), float(row[5])
        assert 0 < base <= steady <= peak        # torch's own, then the model on top, peak last
    assert any("cpu:" in n for n in section.notes)


@pytest.mark.parametrize("per_op", [False, True])
def test_decode_profile_splits_a_step_into_its_stages(tiny_model, per_op):
    from contextlib import nullcontext

    from bench import decode_profile
    from labkit.kernels import native
    from labkit.kernels.tuning import fp32
    from labkit.kernels.tuning.forms import Form

    # The probe times the C kernel against F.linear on the tiny model's small shapes and may keep either (the
    # choice is cached per machine); a layer runs as one C call only on the C kernel's form, so fix it here.
    with fp32.forced(Form.NATIVE) if native.available() else nullcontext():
        env, table = decode_profile.main(["--batch", "2", "--steps", "2", "--rounds", "1", "--model", tiny_model]
                                         + (["--per-op"] if per_op else []))
    assert [r[0] for r in table.rows] == list(decode_profile.STAGES) + ["step, with the stage timers",
                                                                       "step, plain (no timers)"]
    stage = {r[0]: float(r[1]) for r in table.rows}
    stubbed = {r[0]: r[2] for r in table.rows}
    if per_op:
        assert stage["whole layer (one C call)"] == 0
        assert stage["layer matmuls"] > 0 and stage[decode_profile.NORM] > 0 and stage["paged attention"] > 0
    else:       # decode steps run each layer as one C call (where the C kernels build)
        assert (stage["whole layer (one C call)"] > 0) == native.available()
    assert stubbed["layer matmuls"] == "(stubbed)" and float(stubbed[decode_profile.NORM]) > 0   # the stubbed arm still norms
    # the stages, "other" and "outside" add up to the timed step
    assert abs(sum(stage[s] for s in decode_profile.STAGES) - stage["step, with the stage timers"]) < 0.05


def test_decode_profile_runs_the_q4_1_model():
    from bench import decode_profile

    env, table = decode_profile.main(["--weights", "q4_1", "--steps", "2", "--rounds", "1"])
    stage = {r[0]: float(r[1]) for r in table.rows}
    assert stage["layer matmuls"] + stage["whole layer (one C call)"] > 0 and stage["LM head matmul"] > 0
    assert any(r[0] == "weights" and r[1].startswith("q4_1") for r in env.rows)
    assert abs(sum(stage[s] for s in decode_profile.STAGES) - stage["step, with the stage timers"]) < 0.05
    with pytest.raises(SystemExit):
        decode_profile.parse_args(["--weights", "q4_1", "--dtype", "bfloat16"])


def test_prefill_attention_benchmark_prints_one_row_per_length(tiny_model):
    from bench import prefill_attention

    sections = prefill_attention.main(["--tiny", "--model", tiny_model])
    table = sections[-1]
    assert [r[0] for r in table.rows] == ["8", "24"]
    assert all(float(r[3]) > 0 and r[4].endswith("x") for r in table.rows)


def test_bf16_forms_benchmark_times_each_offered_form_and_names_the_choice(tiny_model):
    from bench import bf16_forms
    from labkit.kernels import linear_forms as lf

    env, table = bf16_forms.main(["--tiny", "--model", tiny_model])
    assert any(r[0] == "bf16 form the engine chose" for r in env.rows)
    assert [r[0] for r in table.rows] == [name for name in bf16_forms.ARMS if name in lf.bf16_offered()]
    assert all(float(r[1].split()[0]) > 0 for r in table.rows)


def test_shared_weights_benchmark_maps_the_pack_and_gets_the_same_tokens():
    from bench import shared_weights

    sections = shared_weights.main(["--batch", "2", "--steps", "2", "--rounds", "2", "--on-disk"])
    table = sections[-1]
    assert [row[0] for row in table.rows] == ["2"]
    assert table.rows[0][-1] == "yes" and float(table.rows[0][3]) > 0
    assert any("file's page cache" in note for note in table.notes)


def test_a_form_this_cpu_cannot_pack_is_left_out_with_the_reason(monkeypatch):
    """oneDNN packs bf16 weights only with AVX-512BW/VL/DQ or AVX-NE-CONVERT: on an AVX2-only CPU the
    benchmark must time the other forms and say why this one is missing, not die."""
    from bench import linear_rows

    def refuse(w, batch):
        raise RuntimeError("mkldnn_reorder_linear_weight: bf16 path needs the cpu support avx_ne_convert\nmore")

    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: True)
    monkeypatch.setattr(torch.ops.mkldnn, "_reorder_linear_weight", refuse, raising=False)
    forms, notes = linear_rows.extra_forms([torch.ones(4, 8, dtype=torch.bfloat16)])
    assert "oneDNN prepacked" not in forms and "x @ Wᵀ, transposed copy" in forms
    assert notes == ["oneDNN prepacked: not measured for bfloat16 on this CPU (mkldnn_reorder_linear_weight: "
                     "bf16 path needs the cpu support avx_ne_convert)"]


def test_isa_levels_runs_the_amx_row_only_where_the_cpu_has_amx(monkeypatch):
    """The ``amx`` row is labkit's AVX512_BF16 build against PyTorch with oneDNN allowed AMX: offered by
    default only on an AMX CPU, and asked for by name elsewhere it says why it did not run."""
    from bench import isa_levels
    from labkit.kernels import cpu_features, native

    assert isa_levels.LABKIT["amx"] == "avx512bf16" and isa_levels.ONEDNN["amx"] == "AVX512_CORE_AMX"
    assert all(isa_levels.LABKIT[level] == level for level in isa_levels.LEVELS if level != "amx")
    monkeypatch.setattr(native, "forced_isa", lambda: None)       # every labkit level builds here
    for amx in (True, False):
        monkeypatch.setattr(cpu_features, "has_amx", lambda amx=amx: amx)
        assert ("amx" in isa_levels.available_levels()) is amx
    sections = isa_levels.run(isa_levels.parse_args(["--levels", "amx"]))
    assert [s.title for s in sections] == ["Environment", "ISA level amx: not run"]
    assert "no AMX" in sections[1].rows[0][0]
