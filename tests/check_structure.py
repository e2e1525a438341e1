#!/usr/bin/env python3
"""Checks the rules the tree keeps (docs/design.md, "Rules of the tree"):
functions of at most 80 lines in lib/, tools/ and cl/; kernels of at most
16 parameters; tools/ includes no internal header of lib/ but the oracle's
and check's; lib/'s layers include only downward; no two files of lib/
include each other's layer in a cycle. Usage: check_structure.py SOURCE_ROOT
[--report] (--report lists every function over the limit and exits 0)."""
import os
import re
import sys

MAX_LINES = 80
# Functions kept whole on purpose, each with the measurement that keeps it
# so; a new entry needs one too.
LONG_ALLOWED = {}
MAX_PARAMS = 16
# Which layers each layer may include (besides itself and cl/'s shared header).
LAYERS = {"runtime": set(), "ops": {"runtime", "oracle"}, "oracle": set(), "check": {"ops", "runtime", "oracle"}}


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def functions(path):
    """(name, first line, line count) of every function defined at file level:
    a line at column 0 that opens a body '{' at column 0 after a signature."""
    lines = strip_comments(open(path, encoding="utf-8", errors="replace").read()).split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i] == "{":
            j = i - 1
            while j >= 0 and lines[j].strip() and not lines[j].rstrip().endswith((";", "}")) and \
                    not re.match(r"\s*#", lines[j]) and not (lines[j] and lines[j][0].isalpha() and "(" in lines[j]):
                j -= 1
            sig = " ".join(l.strip() for l in lines[max(j, 0):i])
            name = re.findall(r"(\w+)\s*\(", sig)
            end = i + 1
            while end < len(lines) and lines[end] != "}":
                end += 1
            if name and "=" not in sig.split("(")[0]:
                out.append((name[0], i, end - i + 1, sig))
            i = end
        i += 1
    return out


def expand_macros(src):
    """Object-like macros (one level) in a kernel's parameter list, so that
    a list spelled through a macro counts its real parameters."""
    macros = dict(re.findall(r"^[ \t]*#define[ \t]+(\w+)[ \t]+((?:[^\n]*\\\n)*[^\n]*)", src, flags=re.M))
    return {k: v.replace("\\\n", " ") for k, v in macros.items()}


def kernel_params(path):
    src = strip_comments(open(path, encoding="utf-8", errors="replace").read())
    macros = expand_macros(src)
    for m in re.finditer(r"(?:__kernel|\bkernel)\s+(?:__attribute__\s*\(\(.*?\)\)\s*)?void\s+(\w+)\s*\(", src, re.S):
        i, depth = m.end(), 1
        while i < len(src) and depth:
            depth += {"(": 1, ")": -1}.get(src[i], 0)
            i += 1
        params = re.sub(r"\b\w+\b", lambda w: macros.get(w.group(0), w.group(0)), src[m.end():i - 1]).strip()
        yield m.group(1), 0 if params in ("", "void") else params.count(",") + 1


def sources(root, folder, exts):
    for base, _, files in os.walk(os.path.join(root, folder)):
        for f in sorted(files):
            if f.endswith(exts):
                yield os.path.join(base, f)


def main():
    root = sys.argv[1]
    report = "--report" in sys.argv
    problems = []
    for folder in ("lib", "tools", "cl"):
        for path in sources(root, folder, (".c", ".cl")):
            rel = os.path.relpath(path, root)
            for name, line, count, _ in functions(path):
                if count > MAX_LINES and (rel, name) not in LONG_ALLOWED:
                    problems.append(f"{rel}:{line + 1}: {name} is {count} lines (at most {MAX_LINES})")
    for path in sources(root, "cl", (".cl", ".h")):
        for name, n in kernel_params(path):
            if n > MAX_PARAMS:
                problems.append(f"{os.path.relpath(path, root)}: kernel {name} takes {n} parameters "
                                f"(at most {MAX_PARAMS})")
    for path in sources(root, "tools", (".c", ".h")):
        for inc in re.findall(r'#include\s+"([^"]+)"', open(path).read()):
            if "/" in inc or inc in ("internal.h", "runtime.h", "ops.h"):
                problems.append(f"{os.path.relpath(path, root)} includes lib's internal \"{inc}\"")
    for layer, allowed in LAYERS.items():
        for path in sources(root, os.path.join("lib", layer), (".c", ".h")):
            for inc in re.findall(r'#include\s+"(\w+)/', open(path).read()):
                if inc != layer and inc not in allowed:
                    problems.append(f"{os.path.relpath(path, root)}: the {layer} layer includes {inc}/")
    for p in problems:
        print(p)
    if report:
        return 0
    print(f"{len(problems)} problem(s)" if problems else "the tree keeps its rules")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
