#!/usr/bin/env python3
"""Runs a test command (mpirun of a test) and runs it once more when
LeakSanitizer itself failed: its tracer, which stops every thread to scan
for leaks at exit, sometimes crashes under mpirun ("Tracer caught signal
11"). A leak report, or any other failure, fails the test at once."""
import subprocess
import sys

LSAN_FATAL = "LeakSanitizer has encountered a fatal error"


def run(cmd, **kwargs):
    """subprocess.run(cmd, capture_output=True, text=True, **kwargs), once
    more after a failure that LeakSanitizer's own fatal error explains."""
    r = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if r.returncode != 0 and LSAN_FATAL in r.stderr:
        print(f"retry_lsan: {LSAN_FATAL}; running once more", file=sys.stderr)
        r = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    return r


if __name__ == "__main__":
    result = run(sys.argv[1:])
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    sys.exit(result.returncode)
