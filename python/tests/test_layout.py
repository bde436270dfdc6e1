"""The ctypes declarations against the C header: every struct's size and
every field's offset and size, and every enum value, as the system C
compiler computes them from include/fmha_splitk/fmha_splitk.h."""
import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fmha_splitk import _abi

REPO = Path(__file__).resolve().parents[2]
HEADER_DIR = Path(os.environ.get("FMHA_SPLITK_INCLUDE_DIR", REPO / "include"))


def _c_program():
    lines = ["#include <fmha_splitk/fmha_splitk.h>", "#include <stddef.h>", "#include <stdio.h>",
             "int main(void) {"]
    for struct, c_name in _abi.C_STRUCT_NAMES.items():
        lines.append(f'  printf("{c_name} %zu\\n", sizeof({c_name}));')
        for field, _ in struct._fields_:
            lines.append(f'  printf("{c_name}.{field} %zu %zu\\n", offsetof({c_name}, {field}), '
                         f'sizeof((({c_name} *)0)->{field}));')
    for enum_type, prefix in _abi.C_ENUM_PREFIXES.items():
        for member in enum_type:
            lines.append(f'  printf("{prefix}{member.name} %lld\\n", (long long)({prefix}{member.name}));')
    lines += ["  return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    """name -> numbers printed by a C program compiled against the header."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler (cc) to check the struct layouts with"
    assert (HEADER_DIR / "fmha_splitk" / "fmha_splitk.h").is_file(), f"no header under {HEADER_DIR}"
    folder = tmp_path_factory.mktemp("layout")
    source = folder / "layout.c"
    source.write_text(_c_program())
    program = folder / "layout"
    subprocess.run([compiler, "-std=c99", "-Wall", "-Werror", f"-I{HEADER_DIR}", str(source), "-o", str(program)],
                   check=True)
    output = subprocess.run([str(program)], check=True, capture_output=True, text=True).stdout
    return {name: tuple(int(x) for x in rest) for name, *rest in (line.split() for line in output.splitlines())}


@pytest.mark.parametrize("struct", list(_abi.C_STRUCT_NAMES), ids=list(_abi.C_STRUCT_NAMES.values()))
def test_struct_layout_matches_the_header(c_layout, struct):
    c_name = _abi.C_STRUCT_NAMES[struct]
    assert ctypes.sizeof(struct) == c_layout[c_name][0], c_name
    for field, _ in struct._fields_:
        descriptor = getattr(struct, field)
        assert (descriptor.offset, descriptor.size) == c_layout[f"{c_name}.{field}"], f"{c_name}.{field}"


@pytest.mark.parametrize("enum_type", list(_abi.C_ENUM_PREFIXES), ids=lambda e: e.__name__)
def test_enum_values_match_the_header(c_layout, enum_type):
    prefix = _abi.C_ENUM_PREFIXES[enum_type]
    for member in enum_type:
        assert int(member) == c_layout[f"{prefix}{member.name}"][0], f"{prefix}{member.name}"


def test_versioned_dlpack_struct_has_the_dlpack_1_layout():
    # Not in Debian's DLPack 0.6 header: the offsets of the DLPack 1.x
    # specification on LP64 (version, manager_ctx, deleter, flags, dl_tensor).
    offsets = [getattr(_abi.DLManagedTensorVersioned, f).offset for f, _ in _abi.DLManagedTensorVersioned._fields_]
    assert offsets == [0, 8, 16, 24, 32]
    assert ctypes.sizeof(_abi.DLManagedTensorVersioned) == 32 + ctypes.sizeof(_abi.DLTensor)


@pytest.mark.parametrize("struct", [s for s in _abi.C_STRUCT_NAMES if s._fields_[0][0] == "struct_size"],
                         ids=lambda s: _abi.C_STRUCT_NAMES[s])
def test_new_struct_is_what_the_init_macro_makes(struct):
    # FMHA_SPLITK_STRUCT_INIT: struct_size = sizeof, every other byte zero.
    value = _abi.new_struct(struct)
    assert value.struct_size == ctypes.sizeof(struct)
    raw = ctypes.string_at(ctypes.addressof(value), ctypes.sizeof(struct))
    size_bytes = ctypes.sizeof(ctypes.c_size_t)
    assert raw[size_bytes:] == bytes(len(raw) - size_bytes)


def test_package_version_is_the_repository_version():
    import fmha_splitk
    assert fmha_splitk.__version__ == (REPO / "VERSION").read_text().strip()
    assert fmha_splitk.version() == fmha_splitk.__version__
    major, minor, patch = (int(x) for x in fmha_splitk.version().split("."))
    assert fmha_splitk.version_code() == major * 10000 + minor * 100 + patch
    assert major == _abi.ABI_MAJOR
