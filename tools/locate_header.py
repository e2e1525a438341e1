#!/usr/bin/env python3
"""Print the absolute path at which the C compiler finds a header.

Usage: locate_header.py HEADER CC [CC ARGS...]
Asks the compiler itself (-M), so CPATH and the compiler's own search
directories are honoured. Exits 1 when the header is not found.
"""
import subprocess
import sys


def main():
    header, cc = sys.argv[1], sys.argv[2:]
    probe = f"#include <{header}>\n"
    r = subprocess.run(cc + ["-M", "-x", "c", "-"], input=probe, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(1)
    deps = r.stdout.replace("\\\n", " ").split()
    for d in deps:
        if d.endswith("/" + header):
            print(d)
            return
    sys.exit(1)


if __name__ == "__main__":
    main()
