"""labkit's C kernels on a CPU the tests do not run on: built for aarch64 with Debian's cross compiler
(``gcc-aarch64-linux-gnu``) and run under ``qemu-aarch64`` (``qemu-user``). Every source builds into the
shared library the loader would build there (the product kernels at the loader's flags, the rest at -O0 to
keep the test short) (the generic vectors: NEON through the compiler's own vector
types), and tests/c/kernel_check.c, linked with the product kernels, checks under emulation that a row's
bits do not depend on the row count, the thread count or the walk, that the bf16 product is the fp32
product of the widened operands rounded to bf16, and the fp32 accuracy bound. Skipped, with the reason,
where the cross compiler or qemu is not installed (``apt-get install gcc-aarch64-linux-gnu qemu-user``)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from labkit.kernels import native

CC, QEMU = "aarch64-linux-gnu-gcc", "qemu-aarch64"
CHECK = Path(__file__).resolve().parents[1] / "c" / "kernel_check.c"


@pytest.mark.skipif(shutil.which(CC) is None or shutil.which(QEMU) is None,
                    reason=f"needs {CC} and {QEMU} (Debian: apt-get install gcc-aarch64-linux-gnu qemu-user)")
def test_the_kernels_build_for_aarch64_and_their_products_hold_under_qemu(tmp_path):
    flags = [f for f in native.FLAGS if f != "-shared"]
    checked = ("linear_rows.c", "threads.c")         # run under qemu: the loader's flags; the rest only built, -O0
    for names, opt in ((checked, []), ([n for n in native.SOURCES if n not in checked], ["-O0"])):
        build = subprocess.run([CC, *flags, *opt, "-c", *(str(native.CSRC / name) for name in names)], cwd=tmp_path,
                               capture_output=True, text=True, timeout=300)
        assert build.returncode == 0, build.stderr[-2000:]
    objects = [str(tmp_path / Path(name).with_suffix(".o")) for name in native.SOURCES]
    lib = subprocess.run([CC, "-shared", "-pthread", "-o", "libkernels.so", *objects, "-lm"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert lib.returncode == 0, lib.stderr[-2000:]
    kernels = [str(tmp_path / "linear_rows.o"), str(tmp_path / "threads.o")]
    exe = subprocess.run([CC, *flags, "-static", "-o", "kernel_check", str(CHECK), *kernels, "-lm"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert exe.returncode == 0, exe.stderr[-2000:]
    ran = subprocess.run([QEMU, str(tmp_path / "kernel_check")], capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and "kernel check ok (bf16 product: widened)" in ran.stdout, ran.stdout + ran.stderr
