"""EngineConfig(compile=True): the torch.compile'd layer halves serve the same greedy text.

Slow (Inductor compiles for ~20-60 s on a 2-core CPU), so one short prompt; the bit-exact
guarantees (parity with transformers, speculative equality) are tested on the eager path."""

import pytest

from labkit import LLM, EngineConfig, SamplingParams


def test_compile_is_a_checked_bool():
    with pytest.raises(ValueError, match="compile"):
        EngineConfig(compile="yes")


def test_compiled_layers_give_the_eager_greedy_tokens():
    pytest.importorskip("torch._inductor")
    params = SamplingParams(temperature=0.0, max_tokens=12)
    prompt = "The capital of France is"
    eager = LLM(config=EngineConfig(device="cpu", dtype="float32"), progress=False)
    compiled = LLM(config=EngineConfig(device="cpu", dtype="float32", compile=True), progress=False)
    assert compiled.engine.runner.pieces is not None and eager.engine.runner.pieces is None
    assert compiled.generate(prompt, params)[0].token_ids == eager.generate(prompt, params)[0].token_ids
