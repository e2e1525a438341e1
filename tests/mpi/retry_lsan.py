#!/usr/bin/env python3
"""Runs a test command (mpirun of a test) from the root directory, and
again, up to five more times, when LeakSanitizer itself failed.

Under mpirun, LeakSanitizer's tracer, which stops every thread to scan for
leaks at exit, crashed ("Tracer caught signal 11") in about half the runs
whose working directory's path was 16 characters or longer (a build
directory always is), on old and new builds alike, and in none of 8 runs
from a shorter one. So the command runs from "/", its relative paths made
absolute first. A leak report, or any other failure, fails the test at
once."""
import os
import subprocess
import sys

LSAN_FATAL = "LeakSanitizer has encountered a fatal error"


RETRIES = 5


def run(cmd, **kwargs):
    """subprocess.run(cmd, capture_output=True, text=True, **kwargs), again
    (at most RETRIES times) after a failure that LeakSanitizer's own fatal
    error explains."""
    cmd = [os.path.abspath(a) if "/" in a and not os.path.isabs(a) and os.path.exists(a) else a for a in cmd]
    kwargs.setdefault("cwd", "/")
    r = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    for attempt in range(RETRIES):
        if r.returncode == 0 or LSAN_FATAL not in r.stderr:
            break
        print(f"retry_lsan: {LSAN_FATAL}; running again ({attempt + 1} of {RETRIES})", file=sys.stderr)
        r = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    return r


if __name__ == "__main__":
    result = run(sys.argv[1:])
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    sys.exit(result.returncode)
