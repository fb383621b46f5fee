"""One copy of the model for a whole class: converted weights in a shared, read-only cache that every
learner's kernel maps instead of copying.

Without it each kernel reads the weights into memory of its own (the fp32 default model is 538 MB,
moved into anonymous huge pages by `huge_pages`), so a server holds one copy per open lab. With
``$LABKIT_SHARED_CACHE`` set to a directory `prepare` filled once (run by the hub's set-up, never by a
learner), the loader maps the model's weight pack (`weight_pack`) from it, and converts nothing: every
process shares the same physical pages, so the weights are in the machine's memory once however many
learners there are. The product forms timed for this CPU are read from it too.

Huge pages for shared memory: the page cache of an ordinary disk file is held in 4 KiB pages, which
costs a one-row weight sweep the TLB misses `huge_pages` removes. `prepare(..., in_memory=True)`
therefore puts the packs on a tmpfs mounted with ``huge=always`` where it may mount one (root), and
every mapping asks for huge pages (``MADV_HUGEPAGE``); `describe` says which the learners get.
Held by tests/model/test_shared_cache.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import torch

from labkit.cache_dir import SHARED_ENV, shared_root
from labkit.kernels import native
from labkit.model.llama import LlamaModel
from labkit.model.loader import LazyTensors, ensure_default_converted, read_model_config
from labkit.model.weight_pack import PACKS, model_tensors, pack_name, use_pack, write_pack

ENV = SHARED_ENV


# ------------------------------------------------------------------------------------- set-up

def _huge_tmpfs(where: Path) -> bool:
    """Mount a tmpfs with huge pages at ``where`` (root only); False where this system refuses."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    where.mkdir(parents=True, exist_ok=True)
    if os.path.ismount(where):
        return "huge=" in _mount_options(where)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "huge=always,mode=0755", "tmpfs", str(where)],
                          capture_output=True, text=True)
    return done.returncode == 0


def _mount_options(where: Path) -> str:
    for line in Path("/proc/mounts").read_text().splitlines():
        fields = line.split()
        if len(fields) > 3 and Path(fields[1]) == where.resolve():
            return fields[3]
    return ""


def prepare(root: Path, progress: bool = True, in_memory: bool = True,
            dtypes: tuple[torch.dtype, ...] = (torch.float32, torch.bfloat16), tune: bool = True) -> Path:
    """Convert the default model into ``root`` and write its weight packs; everything world-readable,
    nothing writable by others. Returns the packs' directory. Run once per machine (and after a reboot
    when the packs live in memory), by whoever owns ``root``: the hub's set-up, never a learner. A pack
    per dtype: fp32 (the labs' default) and bf16 (labs 04 and 05 build bf16 engines too); the 4-bit
    engine (``weights="q4_1"``) and the draft models are still read into each process.

    ``tune`` also times the product forms for this CPU into ``root`` (`linear_forms`, at the learners' thread
    count), which every learner then reads instead of timing them again."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    model_dir = ensure_default_converted(progress=progress, root=root)
    packs = root / PACKS
    huge = in_memory and _huge_tmpfs(packs)
    packs.mkdir(parents=True, exist_ok=True)
    cfg = read_model_config(model_dir / "config.json")
    for dtype in dtypes:
        target = packs / pack_name(model_dir, dtype)
        if target.is_file():
            continue
        net = LlamaModel(cfg, dtype=dtype, device="cpu")
        net.load_hf_state_dict(LazyTensors(sorted(model_dir.glob("*.safetensors"))))
        write_pack(model_tensors(net), target)
        del net
    if tune:
        _tune_into(root, model_dir, cfg, dtypes)
    # the compiler the C kernels were keyed with (built into root/kernels by the tuning), so a learner's process
    # finds that library without running the compiler itself
    native.record_compiler(root / "kernels")
    (packs / "README").write_text("labkit weight packs (labkit.model.shared_cache); "
                                  + ("a huge-page tmpfs: rebuilt by the hub's set-up after a reboot.\n" if huge
                                     else "on disk.\n"))
    for path in [root, *root.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod((mode | 0o444 | (0o111 if path.is_dir() else 0)) & ~0o022)
    return packs


def _tune_into(root: Path, model_dir: Path, cfg, dtypes) -> None:
    """Time the product forms with ``root`` as the cache, the weights mapped from the packs, at the thread
    count the learners' labs compute with (``LABKIT_THREADS``, default 1): other counts are timed by the
    first process that uses them."""
    from labkit.kernels import linear_forms

    saved, threads = os.environ.get("LABKIT_CACHE"), torch.get_num_threads()
    os.environ["LABKIT_CACHE"] = str(root)
    torch.set_num_threads(_learner_threads())
    try:
        for dtype in dtypes:
            net = LlamaModel(cfg, dtype=dtype, device="cpu")
            use_pack(net, root / PACKS / pack_name(model_dir, dtype))
            net.tune()
        linear_forms.forget()
    finally:
        torch.set_num_threads(threads)
        if saved is None:
            os.environ.pop("LABKIT_CACHE", None)
        else:
            os.environ["LABKIT_CACHE"] = saved


def _learner_threads() -> int:
    try:
        return max(1, int(os.environ.get("LABKIT_THREADS", "1")))
    except ValueError:
        return 1


def describe() -> str:
    """One line on where this process's shared weights come from."""
    root = shared_root()
    if root is None:
        return f"{ENV} is not set: each process keeps its own copy of the weights"
    packs = root / PACKS
    where = "a huge-page tmpfs" if "huge=" in _mount_options(packs) else "the file's page cache (4 KiB pages)"
    return f"shared weights from {packs} in {where}"
