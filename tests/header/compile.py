#!/usr/bin/env python3
"""Compiles sources that include psr's public headers first, with warnings
as errors, in one language standard and at one CL_TARGET_OPENCL_VERSION
("unset": the application defines none). Compile-only: nothing is linked
or run. Usage (tests/header/meson.build):
  compile.py --lang c|c++ --std STD --target unset|120|200|300
             [-I DIR]... --source FILE... -- COMPILER [ARGS...]"""
import argparse
import os
import subprocess
import sys
import tempfile

# The strictest set each language takes from the OpenCL headers and psr's.
WARNINGS = {
    "c": ["-pedantic", "-Wall", "-Wextra", "-Werror", "-Wstrict-prototypes",
          "-Wmissing-prototypes"],
    "c++": ["-pedantic", "-Wall", "-Wextra", "-Werror"],
}


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit("compile.py: no -- COMPILER")
    split = argv.index("--")
    p = argparse.ArgumentParser()
    p.add_argument("--lang", choices=sorted(WARNINGS), required=True)
    p.add_argument("--std", required=True)
    p.add_argument("--target", required=True)
    p.add_argument("-I", dest="includes", action="append", default=[])
    p.add_argument("--source", nargs="+", required=True)
    args = p.parse_args(argv[:split])
    compiler = argv[split + 1:]

    flags = ["-x", args.lang, "-std=" + args.std] + WARNINGS[args.lang]
    if args.target != "unset":
        flags.append("-DCL_TARGET_OPENCL_VERSION=" + args.target)
    flags += ["-I" + d for d in args.includes]
    failed = 0
    with tempfile.TemporaryDirectory() as tmp:
        for src in args.source:
            cmd = compiler + flags + ["-c", src, "-o", os.path.join(tmp, "out.o")]
            r = subprocess.run(cmd, capture_output=True, text=True)
            # The OpenCL headers say which target they default to: a note, not a failure.
            print(("ok    " if r.returncode == 0 else "FAIL  ") + " ".join(cmd))
            if r.returncode != 0:
                print(r.stdout + r.stderr)
                failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
