"""Shared fixtures. The default model loads once per session (weights are cached per process)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

# No test times anything (speed is measured in benchmarks): Hypothesis' per-example deadline would fail a
# correct property on a busy machine, so it is off for every property, not only where a file says so.
settings.register_profile("labkit", deadline=None)
settings.load_profile("labkit")

# Triton's interpreter must be chosen before triton is first imported anywhere in the session;
# on a CUDA machine the compiled kernels are tested instead.
import torch  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
# Under pytest-xdist with two or more workers (make test on two cores) each worker runs torch on one
# thread: two processes of two threads each would oversubscribe the cores.
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    torch.set_num_threads(1)
os.environ.setdefault("LABKIT_FAST", "1")
# Labs record their verdicts in results/labNN.json (labkit.report.results): never in the repository.
os.environ.setdefault("LABKIT_RESULTS", tempfile.mkdtemp(prefix="labkit-test-results-"))

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


def pytest_configure(config):
    import torch

    torch.manual_seed(0)


# The longest files first. Under `--dist loadfile` (make test) pytest-xdist hands whole files to the
# workers in collection order, so a long file collected late keeps one worker busy at the end while the
# other idles: the notebooks (about 4.5 minutes together), the transformers-serve runs (3), the browser
# files. Longest first is the classic fix for such a schedule; the other files keep their order.
LONG_FIRST = ("test_notebooks.py", "test_hub.py", "test_bench_transformers_serve.py", "test_browser.py", "test_scheduler_random.py",
              "test_spec_engine.py", "test_batch_invariance.py", "test_form_invariance.py", "test_browser_kinds.py", "test_bench_smoke.py",
              "test_loader.py", "test_browser_lab02.py", "test_browser_progress.py", "test_shared_cache.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))      # stable: files stay whole, in order


@pytest.fixture(scope="session")
def llm():
    from labkit import LLM

    return LLM(progress=False)


@pytest.fixture(scope="session")
def tokenizer(llm):
    return llm.tokenizer


@pytest.fixture(scope="session")
def model_dir(llm):
    return llm.engine.model_dir


@pytest.fixture(scope="session")
def hf_model(model_dir):
    import torch
    from transformers import LlamaForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = LlamaForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32, attn_implementation="sdpa")
    model.generation_config.eos_token_id = None   # run to max_new_tokens, like ignore_eos=True
    model.generation_config.pad_token_id = 2
    return model.eval()


@pytest.fixture(scope="session")
def shared_dir():
    if not SHARED.is_dir():
        pytest.skip(f"{SHARED} is absent (a fresh clone has no ../shared): the real trace lives there")
    return SHARED
