"""Each C entry point's ctypes signature has one owner: its definition in ``labkit/kernels/csrc/*.c``.

``native.prototypes`` reads every ``labkit_*`` definition and ``native.bind`` gives the loaded library
those signatures, so a prototype cannot drift from its binding. These tests hold the reading itself:
every function the built library exports is read (a few exist only on some instruction sets), each parameter kind maps to its ctypes type, a
parameter kind with no mapping is refused by name, and the forward declarations that
``decode_layer.c`` makes of other files' functions agree with their definitions.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess

import pytest

from labkit.kernels import native

VP, I64, I32, F32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_float


def test_the_reader_maps_each_parameter_kind():
    text = ("static inline float helper(const float *x) { return *x; }\n"
            "void labkit_demo(const float *x, bf16 *y, int64_t T,\n               float eps, int bf) {\n}\n"
            "int labkit_version(void) { return 6; }\n"
            "NO_CONTRACT void labkit_fused(const void *gu, int64_t I) {\n}\n"
            "void labkit_declared(const float *x);\n")
    assert native.prototypes({"demo.c": text}) == {"labkit_demo": (None, [VP, VP, I64, F32, I32]),
                                                   "labkit_version": (I32, []), "labkit_fused": (None, [VP, I64])}


def test_a_parameter_kind_without_a_ctypes_type_is_refused_by_name():
    with pytest.raises(ValueError, match="uint64_t n"):
        native.prototypes({"bad.c": "void labkit_bad(const float *x, uint64_t n) {\n}\n"})


def test_the_known_entry_points_have_their_signatures():
    table = native.prototypes()
    assert table["labkit_linear_rows_f32"] == (None, [VP, VP, VP, I64, I64, I64])
    assert table["labkit_rms_norm"] == (None, [VP, VP, VP, I64, I64, F32, I64, I32])
    assert table["labkit_decode_attention_f32"][0] is I32
    assert len(table["labkit_decode_layer"][1]) == 27 and len(table["labkit_decode_layer_q4"][1]) == 32


@pytest.mark.skipif(not native.available() or shutil.which("nm") is None,
                    reason="needs labkit's built C library and nm")
def test_every_function_the_library_exports_is_read_from_its_definition():
    path = native.library_file()
    out = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True, check=True)
    exported = {line.split()[-1] for line in out.stdout.splitlines() if line.split()[-2:-1] == ["T"]}
    ours = {name for name in exported if name.startswith("labkit_")}
    assert len(ours) >= 15 and ours <= set(native.prototypes())     # some are compiled for some CPUs only


def test_the_shared_header_declares_what_the_definitions_define_and_no_file_redeclares():
    """Kernels that call each other share ``kernels.h``; every file defining one of its functions
    includes it, so the compiler checks each declaration against its definition, and no file carries
    a private copy of a prototype (a mismatch there is undefined behaviour no compiler reports)."""
    header = (native.CSRC / "kernels.h").read_text(encoding="utf-8")
    proto = re.compile(r"^(void|int)\s+(labkit_\w+)\s*\(([^)]*)\)\s*;", re.MULTILINE)
    declared = {name: native.prototypes({"d.c": f"{ret} {name}({params}) {{\n}}\n"})[name]
                for ret, name, params in proto.findall(header)}
    assert len(declared) >= 8
    table = native.prototypes()
    assert {name: table[name] for name in declared} == declared
    for source in sorted(native.CSRC.glob("*.c")):
        text = source.read_text(encoding="utf-8")
        assert not proto.findall(text), f"{source.name} re-declares a kernel: include kernels.h instead"
        defines = {name for name in declared if re.search(rf"^\w[\w\s\*]*\b{name}\s*\([^;]*\)\s*\{{", text, re.MULTILINE)}
        if defines:
            assert '#include "kernels.h"' in text, f"{source.name} defines {sorted(defines)} without including kernels.h"
    assert '#include "kernels.h"' in (native.CSRC / "decode_layer.c").read_text(encoding="utf-8")
