"""Threads: one Context shared by threads (its lock serialises the calls,
psr.h's rule for a context), and one Context per thread."""
import threading

import psr
from conftest import logits

X = logits(4, 1200, seed=40)


def _run(c, i, out, errors):
    try:
        for j in range(8):
            out[(i, j)] = c.sample(X, 0.9, [i, j, 1, 2], j)
    except Exception as e:  # pragma: no cover - reported below
        errors.append(e)


def _check(out):
    for (i, j), tokens in out.items():
        assert (tokens == psr.oracle.sample(X, 0.9, [i, j, 1, 2], j)).all()


def _run_all(threads):
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_one_context_two_threads(ctx):
    out, errors = {}, []
    _run_all([threading.Thread(target=_run, args=(ctx, i, out, errors)) for i in range(2)])
    assert not errors and len(out) == 16
    _check(out)


def test_a_context_per_thread():
    out, errors = {}, []

    def own(i):
        with psr.Context() as c:
            _run(c, i, out, errors)

    _run_all([threading.Thread(target=own, args=(i,)) for i in range(2)])
    assert not errors and len(out) == 16
    _check(out)


def test_log_callback_calling_its_context():
    """A log callback that calls back into its own Context gets an error
    instead of waiting forever on the lock the running call holds."""
    seen = []

    def log(level, message):
        try:
            c.scratch_bytes
        except RuntimeError as e:
            seen.append(str(e))

    with psr.Context(log=log, log_level="debug") as c:
        c.sample(X, 0.9, [1, 2, 3, 4], 0)  # builds or loads a program: logs at debug
    assert seen and "log callback" in seen[0]
