"""Host arguments to what the C calls take, checked before any C call.

The rules (docs/python.md, "Arrays in"):
- logits: float32 or float16 numpy arrays are used as they are; bf16 is
  uint16 data with ``dtype="bf16"`` (an array whose dtype is named
  "bfloat16", such as ml_dtypes', is taken as its uint16 bits). Any other
  dtype is refused (a silent cast would change the tokens); a Python list
  is made float32. 2-D [rows, vocab]; 1-D is one row. Rows may be apart
  (a slice of a wider array: row_stride), but each row's elements must be
  adjacent, else the array is copied with np.ascontiguousarray.
- per-row integers (seeds, positions, draft tokens, top_k): any integer
  dtype whose values fit, converted to int64 (int32 for draft tokens and
  top_k); floats are refused.
- per-row reals (temperatures, top_p, min_p): any real dtype, converted to
  float32, as the C API takes them.
- a scalar stands for every row.
"""
import numbers

import numpy as np

from . import _api
from ._errors import InvalidArgument

_LOGIT_DTYPES = {
    "f32": _api.PSR_DTYPE_F32, "float32": _api.PSR_DTYPE_F32,
    "f16": _api.PSR_DTYPE_F16, "float16": _api.PSR_DTYPE_F16,
    "bf16": _api.PSR_DTYPE_BF16, "bfloat16": _api.PSR_DTYPE_BF16,
}
_NP_OF_PSR = {_api.PSR_DTYPE_F32: np.dtype(np.float32), _api.PSR_DTYPE_F16: np.dtype(np.float16),
              _api.PSR_DTYPE_BF16: np.dtype(np.uint16)}


def bad(name, message):
    return InvalidArgument(f"{name}: {message}")


def psr_dtype_of(array_dtype, dtype, name):
    """The psr_dtype of logits whose numpy dtype is array_dtype, with the
    caller's explicit dtype (None, "f32", "f16", "bf16" or a numpy dtype)."""
    array_dtype = np.dtype(array_dtype)
    if dtype is None:
        if array_dtype == np.float32:
            return _api.PSR_DTYPE_F32
        if array_dtype == np.float16:
            return _api.PSR_DTYPE_F16
        if array_dtype.name == "bfloat16":
            return _api.PSR_DTYPE_BF16
        if array_dtype == np.uint16:
            raise TypeError(f"{name}: uint16 data is bf16 only with dtype='bf16'")
        raise TypeError(f"{name}: dtype {array_dtype} is not float32 or float16 (bf16: uint16 "
                        f"data with dtype='bf16'); psr does not cast logits, since that changes "
                        f"the tokens")
    key = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if key not in _LOGIT_DTYPES:
        raise TypeError(f"{name}: dtype={dtype!r} is not 'f32', 'f16' or 'bf16'")
    want = _LOGIT_DTYPES[key]
    ok = array_dtype == _NP_OF_PSR[want] or (want == _api.PSR_DTYPE_BF16 and
                                              array_dtype.name == "bfloat16")
    if not ok:
        raise TypeError(f"{name}: dtype={dtype!r} needs {_NP_OF_PSR[want]} data, not {array_dtype}")
    return want


def host_logits(x, name, dtype=None):
    """(array, rows, vocab, row_stride, psr_dtype) of host logits; the
    array may be a strided view whose rows are each contiguous."""
    if not isinstance(x, np.ndarray):
        if isinstance(x, (list, tuple)):
            x = np.asarray(x, dtype=np.float32)
        else:
            raise TypeError(f"{name}: expected a numpy array (or a PyOpenCL array for the device "
                            f"path), not {type(x).__name__}")
    pdtype = psr_dtype_of(x.dtype, dtype, name)
    if x.dtype.name == "bfloat16":
        x = x.view(np.uint16)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    if x.ndim != 2:
        raise bad(name, f"expected [rows, vocab] (2-D), got shape {x.shape}")
    rows, vocab = x.shape
    if rows == 0 or vocab == 0:
        raise bad(name, f"shape {x.shape} is empty")
    item = x.itemsize
    rows_ok = x.strides[1] == item and x.strides[0] % item == 0 and \
        (rows == 1 or x.strides[0] >= vocab * item)
    if not (rows_ok and x.flags.aligned):
        x = np.ascontiguousarray(x)
    stride = vocab if rows == 1 else x.strides[0] // item
    return x, rows, vocab, stride, pdtype


def _is_scalar(x):
    return isinstance(x, numbers.Number) or (isinstance(x, np.ndarray) and x.ndim == 0) or \
        isinstance(x, np.generic)


def per_row_int(x, name, rows, dtype=np.int64):
    """A 1-D contiguous array of `rows` integers of dtype (int64 or int32)."""
    info = np.iinfo(dtype)
    if _is_scalar(x):
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (numbers.Integral, np.integer)) and \
                not (isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.integer)):
            raise TypeError(f"{name}: expected an integer, not {type(x).__name__}")
        v = int(x)
        if not info.min <= v <= info.max:
            raise bad(name, f"{v} does not fit {np.dtype(dtype).name}")
        return np.full(rows, v, dtype=dtype)
    a = np.asarray(x)
    if not (np.issubdtype(a.dtype, np.integer)) or a.dtype == np.bool_:
        raise TypeError(f"{name}: expected integers, not {a.dtype}")
    if a.ndim != 1 or a.shape[0] != rows:
        raise bad(name, f"expected shape ({rows},), got {a.shape}")
    if a.dtype != dtype and a.size and (int(a.min()) < info.min or int(a.max()) > info.max):
        raise bad(name, f"values outside {np.dtype(dtype).name}")
    return np.ascontiguousarray(a, dtype=dtype)


def per_row_float(x, name, rows):
    """A 1-D contiguous float32 array of `rows` values."""
    if _is_scalar(x):
        if not isinstance(x, (numbers.Real, np.number)) and \
                not (isinstance(x, np.ndarray) and np.issubdtype(x.dtype, np.number)):
            raise TypeError(f"{name}: expected a number, not {type(x).__name__}")
        return np.full(rows, float(x), dtype=np.float32)
    a = np.asarray(x)
    if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        raise TypeError(f"{name}: expected real numbers, not {a.dtype}")
    if a.ndim != 1 or a.shape[0] != rows:
        raise bad(name, f"expected shape ({rows},), got {a.shape}")
    return np.ascontiguousarray(a, dtype=np.float32)


def filter_value(x, name, rows, kind):
    """(all_value, array or None) for a filter: None is off, a scalar is
    one value for every row (the all_* field), an array is per row."""
    if x is None:
        return None, None
    if _is_scalar(x):
        if kind == "k":
            if isinstance(x, (bool, np.bool_)) or not isinstance(x, (numbers.Integral, np.integer)):
                raise TypeError(f"{name}: expected an integer, not {type(x).__name__}")
            v = int(x)
            if not -2**31 <= v < 2**31:
                raise bad(name, f"{v} does not fit a C int")
            return v, None
        if not isinstance(x, (numbers.Real, np.number)):
            raise TypeError(f"{name}: expected a number, not {type(x).__name__}")
        return float(x), None
    if kind == "k":
        return None, per_row_int(x, name, rows, np.int32)
    return None, per_row_float(x, name, rows)


def tokens_dtype_of(dtype, name="tokens_dtype"):
    try:
        d = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name}: {dtype!r} is not np.int32 or np.int64") from None
    if d == np.int32:
        return d, _api.PSR_TOKENS_I32
    if d == np.int64:
        return d, _api.PSR_TOKENS_I64
    raise TypeError(f"{name}: {d} is not np.int32 or np.int64")


def noise_of(noise):
    if noise not in _api.PSR_NOISE:
        raise bad("noise", f"{noise!r} is not 'fp32', 'fp64' or 'wide'")
    return _api.PSR_NOISE[noise]


def sample_flags(drafting, method, probs, fast_math):
    if method not in ("gumbel", "race"):
        raise bad("method", f"{method!r} is not 'gumbel' or 'race'")
    if probs and method != "race":
        raise bad("probs", "probabilities are sampled by the race only (method='race')")
    return ((_api.PSR_SAMPLE_DRAFTING if drafting else 0) |
            (_api.PSR_SAMPLE_RACE if method == "race" else 0) |
            (_api.PSR_SAMPLE_PROBS if probs else 0) |
            (_api.PSR_SAMPLE_FAST_MATH if fast_math else 0))


def top_n_of(n, name="logprobs"):
    if isinstance(n, (bool, np.bool_)) or not isinstance(n, (numbers.Integral, np.integer)):
        raise TypeError(f"{name}: expected an integer 0..{_api.PSR_LOGPROBS_MAX_TOP_N}")
    if not 0 <= int(n) <= _api.PSR_LOGPROBS_MAX_TOP_N:
        raise bad(name, f"{n} is outside 0..{_api.PSR_LOGPROBS_MAX_TOP_N}")
    return int(n)


def check_cu(cu, rows, name="cu"):
    """cu as a contiguous int32 [R + 1] array, with R and the most drafts of
    a request; the layout checked as psr_verify checks it."""
    if _is_scalar(cu) or np.asarray(cu).ndim != 1 or np.asarray(cu).shape[0] < 2:
        raise bad(name, "expected [requests + 1] offsets (at least 2)")
    a = per_row_int(cu, name, np.asarray(cu).shape[0], np.int32)
    d = np.diff(a.astype(np.int64))
    if a[0] != 0:
        raise bad(name, f"cu[0] = {a[0]}, not 0")
    if (d < 1).any():
        r = int(np.argmax(d < 1))
        raise bad(name, f"cu[{r + 1}] = {a[r + 1]} is not above cu[{r}] = {a[r]}: every request "
                        f"has at least its bonus row")
    if a[-1] != rows:
        raise bad(name, f"cu[-1] = {a[-1]}, but the target logits have {rows} rows")
    return a, a.shape[0] - 1, int(d.max()) - 1
