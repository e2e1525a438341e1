#!/usr/bin/env python3
"""Runs a test command (mpirun of a test) and runs it again, up to three
more times, when LeakSanitizer itself failed: its tracer, which stops
every thread to scan for leaks at exit, sometimes crashes under mpirun
("Tracer caught signal 11"), on one CI host twice in a row. A leak
report, or any other failure, fails the test at once."""
import subprocess
import sys

LSAN_FATAL = "LeakSanitizer has encountered a fatal error"


RETRIES = 3


def run(cmd, **kwargs):
    """subprocess.run(cmd, capture_output=True, text=True, **kwargs), again
    (at most RETRIES times) after a failure that LeakSanitizer's own fatal
    error explains."""
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
