"""The engine's layering, held by a test: no import cycles between modules, nor between packages but for
the known upward arrows (``UPWARD_ARROWS``, which may only shrink, and is empty); the kernels
(``labkit.kernels``) import nothing above them, while the model and attention import them; the runner and
the model never import the scheduler; the model reaches its kernels only through ``labkit.kernels.ops``;
the engine core never imports widgets; widgets never reach into the scheduler or the KV manager; the
bookkeeping modules import without torch.

Imports are read from the source with ``ast`` (function-local imports included, so a local import
that only dodges a cycle shows up as the cycle it dodges).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "labkit"
TORCH_FREE = ["labkit.request", "labkit.scheduler", "labkit.scheduler.continuous", "labkit.scheduler.static",
              "labkit.scheduler.reference", "labkit.scheduler_output", "labkit.step_report", "labkit.kv", "labkit.kv.slots", "labkit.kv.block_pool", "labkit.kv.kv_cache_manager",
              "labkit.kv.contiguous", "labkit.kv.breakdown", "labkit.kv.snapshot", "labkit.events", "labkit.metrics",
              "labkit.traces", "labkit.outputs", "labkit.config", "labkit.sampling_params", "labkit.input_processor"]
# The model's stack, top to bottom; a layer never imports one above it.
MODEL_STACK = [
    ("labkit.model.llama",),                                    # the Llama: RoPE, its layers, the forward
    ("labkit.model.strategies",),                               # how a step runs the layers (the runner chooses)
    ("labkit.kernels.ops",),                                    # its ops: PyTorch's and labkit's C implementation
    ("labkit.kernels.native", "labkit.kernels.tuning", "labkit.kernels.linear_forms",  # C kernels, product forms,
     "labkit.kernels.invariance", "labkit.kernels.cpu_features"),                      # their gate, the CPU
]
# What labkit.kernels may import of labkit: itself, and where labkit keeps what it builds.
KERNELS_MAY_IMPORT = ("labkit.kernels", "labkit.cache_dir")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def imported_modules(name: str) -> set[str]:
    """labkit modules that module ``name`` imports (``from pkg import sub`` counts as ``pkg.sub``)."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            subs = {f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in MODULES}
            found |= subs or {base}
    return {m for m in found if m in MODULES and m != name}


GRAPH = {name: imported_modules(name) for name in MODULES}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}          # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def violations(importers: str, forbidden: tuple[str, ...]) -> list[str]:
    return [f"{m} imports {dep}" for m, deps in sorted(GRAPH.items())
            if m == importers or m.startswith(importers + ".")
            for dep in sorted(deps) if any(dep == f or dep.startswith(f + ".") for f in forbidden)]


def test_the_parser_sees_the_engine_wiring():
    # guards the test itself: a parser that found nothing would make every check below pass
    assert "labkit.scheduler" in GRAPH["labkit.builder"] and "labkit.engine" in GRAPH["labkit.builder"]
    assert "labkit.events" in GRAPH["labkit.engine"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_there_are_no_import_cycles_inside_labkit():
    assert find_cycle(GRAPH) is None


def package_graph() -> dict[str, set[str]]:
    """The import graph with each module folded into its top-level package (``labkit.kv.slots`` -> ``labkit.kv``)."""
    def package(name: str) -> str:
        return ".".join(name.split(".")[:2])

    graph: dict[str, set[str]] = {package(m): set() for m in GRAPH}
    for name, deps in GRAPH.items():
        graph[package(name)] |= {package(d) for d in deps} - {package(name)}
    return graph


# The package pairs that import each other today, by the arrow of each that runs up the house (none since
# the C kernels left model/ for labkit/kernels, below both the model and attention). None may be added.
UPWARD_ARROWS: set[tuple[str, str]] = set()


def test_no_new_import_loop_between_packages():
    """Folded into top-level packages, the import graph has no cycle once the known upward arrows are
    taken out: no new pair of packages importing each other, and no longer loop through three or more."""
    graph = package_graph()
    assert all(b in graph[a] for a, b in UPWARD_ARROWS)      # a fixed arrow must leave this list
    pruned = {a: {b for b in deps if (a, b) not in UPWARD_ARROWS} for a, deps in graph.items()}
    assert find_cycle(pruned) is None, find_cycle(pruned)


@pytest.mark.parametrize("importers", ["labkit.model", "labkit.attention", "labkit.kernels", "labkit.sample"])
def test_the_compute_side_never_imports_the_scheduler(importers):
    assert violations(importers, ("labkit.scheduler",)) == []


@pytest.mark.parametrize("depth", range(1, len(MODEL_STACK)))
def test_the_models_stack_never_imports_upward(depth):
    above = tuple(m for layer in MODEL_STACK[:depth] for m in layer)
    assert [v for importers in MODEL_STACK[depth] for v in violations(importers, above)] == []


def test_the_model_reaches_its_kernels_only_through_ops():
    """``llama.py`` is the model: which kernel runs an op is decided in ``labkit.kernels.ops``, not there.
    Of the kernels it imports that interface alone (not ``native``, the tuning, nor ``ops``' own modules)."""
    assert "labkit.kernels.ops" in GRAPH["labkit.model.llama"]
    found = violations("labkit.model.llama", ("labkit.kernels",))
    assert [v for v in found if not v.endswith(" imports labkit.kernels.ops")] == []


def test_the_kernels_import_nothing_above_them():
    """``labkit.kernels`` (the C sources, their loader, the tuning, the ops) sits below the model and the
    attention backends, which import it; it imports no other part of labkit: not the model, attention, the
    scheduler, the engine, nor anything above them."""
    assert "labkit.kernels.native" in GRAPH["labkit.attention.cpu_batched"]      # the arrows run downward
    assert "labkit.kernels.native" in GRAPH["labkit.model.quant"]
    assert "labkit.cache_dir" in GRAPH["labkit.kernels.native"]                 # the parser sees the package
    others = {".".join(m.split(".")[:2]) for m in MODULES if m.startswith("labkit.")} - set(KERNELS_MAY_IMPORT)
    assert {"labkit.model", "labkit.attention", "labkit.scheduler", "labkit.engine", "labkit.llm"} <= others
    assert violations("labkit.kernels", tuple(sorted(others))) == []
    # nor the package labkit itself (its __init__ reaches the engine through ``LLM``)
    assert [m for m, deps in GRAPH.items() if (m + ".").startswith("labkit.kernels.") and "labkit" in deps] == []


@pytest.mark.parametrize("importers", ["labkit.scheduler", "labkit.kv", "labkit.engine", "labkit.model",
                                       "labkit.kernels", "labkit.attention", "labkit.sample", "labkit.spec_decode", "labkit.llm",
                                       "labkit.builder", "labkit.sim", "labkit.events", "labkit.metrics"])
def test_the_engine_never_imports_widgets_or_labs(importers):
    assert violations(importers, ("labkit.widgets", "labkit.labs", "labkit.assess")) == []


def test_nothing_below_the_labs_imports_them():
    """The course content (``labkit.labs``: lab helpers, measurements, quizzes) sits on top: the engine, the
    assessment, the benchmarks, the server, the widgets and the reports never import it."""
    below = sorted({m.split(".")[1] for m in MODULES if "." in m} - {"labs"})     # packages and modules
    assert {"assess", "serve_bench", "report", "widgets", "serve", "engine"} <= set(below)
    found = [v for name in below for v in violations(f"labkit.{name}", ("labkit.labs",))]
    found += [f"labkit imports {d}" for d in sorted(GRAPH["labkit"]) if d.startswith("labkit.labs")]
    assert found == []


def test_widgets_only_observe():
    """Widgets read events and the values events carry (``labkit.kv.snapshot``: the KV manager's frozen
    reports), never the scheduler, the KV manager, the engine or the model."""
    found = violations("labkit.widgets", ("labkit.scheduler", "labkit.kv", "labkit.engine", "labkit.model"))
    assert [v for v in found if not v.endswith(" imports labkit.kv.snapshot")] == []


def test_the_bookkeeping_imports_without_torch():
    blocker = ("import sys\n"
               "class NoTorch:\n"
               "    def find_spec(self, name, path=None, target=None):\n"
               "        if name == 'torch' or name.startswith('torch.'):\n"
               "            raise ImportError('torch is blocked in this test')\n"
               "sys.meta_path.insert(0, NoTorch())\n"
               f"import {', '.join(TORCH_FREE)}\n"
               "assert 'torch' not in sys.modules\n")
    result = subprocess.run([sys.executable, "-c", blocker], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]


def test_code_names_rules_and_tests_not_tracker_issues_or_documents_outside_the_repository():
    """A comment states the rule and names the test that holds it: no tracker issue numbers ("issue 38"),
    and no references to design documents a reader of the repository does not have ("DESIGN §5")."""
    import re
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    files = [p for d in ("labkit", "bench", "tests", "scripts") for p in (repo / d).rglob("*")
             if p.suffix in (".py", ".c", ".h", ".ipynb") and ".ipynb_checkpoints" not in p.parts]
    pattern = re.compile(r"\b[Ii]ssues? \d+\b|DESIGN §|DESIGN\.md|STYLE\.md")
    allowed = {"scripts/performance_page.py"}        # it removes such notes from benchmark reports
    found = [f"{p.relative_to(repo)}:{n}: {line.strip()[:80]}" for p in files
             if str(p.relative_to(repo)) not in allowed and p != Path(__file__).resolve()
             for n, line in enumerate(p.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if pattern.search(line)]
    assert not found, found
