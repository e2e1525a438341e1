#!/usr/bin/env python3
"""The `python` test suite (python/meson.build): pytest over tests/python.
Exits 77 (meson's "skipped") when numpy or pytest cannot be imported;
otherwise pytest's own exit status. Extra arguments go to pytest."""
import os
import sys

try:
    import numpy  # noqa: F401
    import pytest
except ImportError as e:
    print(f"skip: {e}")
    sys.exit(77)

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "-rs", here] + sys.argv[1:]))
