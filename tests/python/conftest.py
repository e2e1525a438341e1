"""Shared fixtures of the Python suite. The package comes from PYTHONPATH
(the meson suite: python/ of the source tree, libraries through
$PSR_LIBRARY and $PSR_ORACLE_LIBRARY) or from site-packages (CI's installed
package). Every test is sized for PoCL on two cores: vocabularies of
1,000-4,096 and a few rows."""
import os

import numpy as np
import pytest

import psr

DATA = os.environ.get("PSR_TEST_DATA") or os.path.join(os.path.dirname(__file__), "..", "data")


@pytest.fixture(scope="session")
def ctx():
    try:
        c = psr.Context()
    except psr.NoDevice:
        pytest.skip("no OpenCL device")
    yield c
    c.close()


@pytest.fixture(scope="session")
def cl():
    return pytest.importorskip("pyopencl")


@pytest.fixture(scope="session")
def cla(cl):
    import pyopencl.array
    return pyopencl.array


def logits(rows, vocab, seed=0, sigma=3.0, dtype=np.float32):
    return (np.random.default_rng(seed).normal(size=(rows, vocab)) * sigma).astype(dtype)


def same(a, b):
    """Bit for bit, any NaN equal to any NaN (as the C tests compare)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind != "f":
        return bool((a == b).all())
    nan = np.isnan(a)
    return bool((nan == np.isnan(b)).all() and a[~nan].tobytes() == b[~nan].tobytes())


def vector_logits(case, row, vocab):
    """tests/common.c's vector_logits: the known-answer rows' logits."""
    i = np.arange(vocab, dtype=np.uint64)
    m = np.uint64(0xFFFFFFFF)
    h = ((i * np.uint64(2654435761)) & m) ^ np.uint64((row * 2246822519) & 0xFFFFFFFF) ^ \
        np.uint64((case * 3266489917) & 0xFFFFFFFF)
    h ^= h >> np.uint64(15)
    h = (h * np.uint64(2246822519)) & m
    h ^= h >> np.uint64(13)
    return ((h >> np.uint64(8)).astype(np.float32) * np.float32(2.0 ** -20) -
            np.float32(8.0)).astype(np.float32)


def load_tsv(name):
    rows = []
    with open(os.path.join(DATA, name)) as f:
        lines = [l.rstrip("\n") for l in f if not l.startswith("#")]
    head = lines[0].split("\t")
    for l in lines[1:]:
        if l.strip():
            rows.append(dict(zip(head, l.split("\t"))))
    return rows
