"""The ctypes mirrors of psr.h's structs against the C compiler: a C program
prints every field's offset and size and every struct's size, and each must
equal what ctypes computes. Needs a C compiler and psr's headers
($PSR_INCLUDE: the source include/ and the build's include/, ':'-separated)."""
import ctypes
import os
import shutil
import subprocess

import pytest

import psr
from psr import _api


def _include_dirs():
    dirs = [d for d in os.environ.get("PSR_INCLUDE", "").split(":") if d]
    if not dirs or not any(os.path.exists(os.path.join(d, "psr", "psr.h")) for d in dirs):
        pytest.skip("psr's headers not found: set PSR_INCLUDE")
    return dirs


def _program():
    lines = ["#include <psr/psr.h>", "#include <stddef.h>", "#include <stdio.h>",
             "int main(void) {"]
    for cname, cls in _api.MIRRORS.items():
        lines.append(f'    printf("{cname} . %zu %zu\\n", sizeof({cname}), _Alignof({cname}));')
        for field, _ in cls._fields_:
            lines.append(f'    printf("{cname} {field} %zu %zu\\n", offsetof({cname}, {field}), '
                         f'sizeof((({cname} *)0)->{field}));')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


def test_struct_layouts_match_psr_h(tmp_path):
    dirs = _include_dirs()
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    src = tmp_path / "layout.c"
    src.write_text(_program())
    exe = tmp_path / "layout"
    cmd = [cc, "-std=c11", "-o", str(exe), str(src)] + [f"-I{d}" for d in dirs]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    seen = 0
    for line in out.splitlines():
        cname, field, a, b = line.split()
        cls = _api.MIRRORS[cname]
        if field == ".":
            assert ctypes.sizeof(cls) == int(a), f"sizeof({cname})"
            assert ctypes.alignment(cls) == int(b), f"_Alignof({cname})"
        else:
            desc = getattr(cls, field)
            assert (desc.offset, desc.size) == (int(a), int(b)), f"{cname}.{field}"
        seen += 1
    assert seen == sum(len(c._fields_) + 1 for c in _api.MIRRORS.values())


def test_init_calls_accept_the_mirrors():
    for cls in _api.INITS:
        s = _api.init_struct(cls)
        assert s.struct_size == ctypes.sizeof(cls)


def test_version_matches_the_library():
    v = psr.version()
    major, minor, patch = (int(p) for p in v.split("."))
    assert psr.version_number() == major * 10000 + minor * 100 + patch
