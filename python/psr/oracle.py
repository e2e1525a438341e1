"""psr's host oracle: the kernels' arithmetic in plain C on the CPU, bit for
bit (lib/oracle), so tokens, logprobs and verification results can be
checked without a device. Same arguments and conventions as the Context
calls on numpy arrays, and the same checks (the same psr.Error classes).

Not covered: the race over logits (method="race" without probs=True: the
Gumbel token is the same up to rounding, but the bits are not promised) and
FAST_MATH. fp16 and bf16 logits are widened to float32 first, exactly, as
the kernels read them.
"""
import functools
from ctypes import c_float, c_int, c_int32, c_size_t, c_uint, c_void_p

import numpy as np

from . import _api
from . import _convert as cv
from ._context import LogprobsResult, SampleResult
from ._errors import FilterRange, InvalidArgument, PositionRange, TemperatureRange, TokenRange

_ABI = 1
_P = c_void_p
_PROTOTYPES = {
    "psr_py_oracle_abi": (c_uint, []),
    "psr_py_oracle_filter_threshold": (c_float, [_P, c_size_t, c_float, c_int32, c_float, c_float]),
    "psr_py_oracle_sample": (c_int, [_P, c_size_t, c_size_t, _P, _P, _P, c_int, c_int, c_int, _P, _P,
                                     _P, _P, _P]),
    "psr_py_oracle_logprobs": (c_int, [_P, c_size_t, c_size_t, _P, c_int, _P, _P, _P, _P, c_int, _P,
                                       _P, _P, _P]),
    "psr_py_oracle_verify": (None, [c_size_t, _P, c_size_t, c_size_t, c_size_t, _P, _P, c_size_t, _P,
                                    _P, _P, _P, c_int, c_int, _P, _P]),
}


@functools.lru_cache(maxsize=None)
def _oracle():
    h = _api.load_library(_api.oracle_library_path(), _PROTOTYPES)
    if h.psr_py_oracle_abi() != _ABI:
        raise ImportError("psr.oracle: libpsr_oracle is of another version")
    return h


def _f32_logits(logits, name, dtype):
    """Contiguous float32 [rows, vocab], widened from fp16 or bf16."""
    x, rows, vocab, _, pdtype = cv.host_logits(logits, name, dtype)
    if pdtype == _api.PSR_DTYPE_BF16:
        x = (np.ascontiguousarray(x).astype(np.uint32) << 16).view(np.float32)
    return np.ascontiguousarray(x, dtype=np.float32), rows, vocab, pdtype


def _check_positions(pos, name="positions"):
    bad = (pos < 0) | (pos >= _api.PSR_MAX_POSITION)
    if bad.any():
        i = int(np.argmax(bad))
        raise PositionRange(f"{name}[{i}] = {pos[i]} is outside [0, 2^30)")


def _check_temps(t, name):
    ok = (t == 0) | (np.isfinite(t) & (t >= np.finfo(np.float32).tiny))
    if not ok.all():
        i = int(np.argmax(~ok))
        raise TemperatureRange(f"{name}[{i}] = {t[i]} is not 0 or a positive normal number")


def _filters(rows, top_k, top_p, min_p):
    """Per-row filter arrays (None where off), checked as the host calls do."""
    out = []
    for v, name, kind in ((top_k, "top_k", "k"), (top_p, "top_p", "p"), (min_p, "min_p", "p")):
        all_v, arr = cv.filter_value(v, name, rows, kind)
        if all_v is not None:
            arr = np.full(rows, all_v, np.int32 if kind == "k" else np.float32)
        out.append(arr)
    k, p, m = out
    if p is not None and not ((p > 0) & (p <= 1)).all():
        i = int(np.argmax(~((p > 0) & (p <= 1))))
        raise FilterRange(f"top_p[{i}] = {p[i]} is outside (0, 1]")
    if m is not None and not ((m >= 0) & (m <= 1)).all():
        i = int(np.argmax(~((m >= 0) & (m <= 1))))
        raise FilterRange(f"min_p[{i}] = {m[i]} is outside [0, 1]")
    return k, p, m


def _ptr(a):
    return None if a is None else a.ctypes.data


def sample(logits, temperature, seeds, positions, *, drafting=False, noise="fp32",
           method="gumbel", probs=False, top_k=None, top_p=None, min_p=None, logprobs=None,
           raw_logprobs=False, tokens_dtype=np.int32, dtype=None):
    """The tokens psr.Context.sample draws for the same numpy arguments."""
    flags = cv.sample_flags(drafting, method, probs, False)
    noise_v = cv.noise_of(noise)
    tok_np, _ = cv.tokens_dtype_of(tokens_dtype)
    top_n = None if logprobs is None else cv.top_n_of(logprobs)
    if method == "race" and not probs:
        raise NotImplementedError("psr.oracle: no oracle for the race over logits (use "
                                  "method='gumbel': the same token up to rounding)")
    x, rows, vocab, pdtype = _f32_logits(logits, "logits", dtype)
    if probs and pdtype != _api.PSR_DTYPE_F32:
        raise InvalidArgument("logits: probabilities (probs=True) are float32 only")
    temps = cv.per_row_float(temperature, "temperature", rows)
    seeds_a = cv.per_row_int(seeds, "seeds", rows)
    pos_a = cv.per_row_int(positions, "positions", rows)
    _check_positions(pos_a)
    _check_temps(temps, "temperatures")
    k, p, m = _filters(rows, top_k, top_p, min_p)
    if probs and (k is not None or p is not None or m is not None):
        raise InvalidArgument("top_k, top_p, min_p: not with probabilities (probs=True)")
    tokens = np.empty(rows, np.int32)
    st = _oracle().psr_py_oracle_sample(x.ctypes.data, rows, vocab, temps.ctypes.data,
                                        seeds_a.ctypes.data, pos_a.ctypes.data,
                                        int(bool(flags & _api.PSR_SAMPLE_DRAFTING)), noise_v,
                                        int(probs), _ptr(k), _ptr(p), _ptr(m),
                                        tokens.ctypes.data, None)
    if st:
        raise MemoryError("psr.oracle: out of memory")
    tokens = tokens.astype(tok_np)
    if top_n is None:
        return tokens
    raw = raw_logprobs
    lp = globals()["logprobs"](x, tokens, temps, top_n=top_n, raw=raw,
                               top_k=None if raw else top_k, top_p=None if raw else top_p,
                               min_p=None if raw else min_p)
    return SampleResult(tokens, lp.logprobs, lp.ranks, lp.top_ids, lp.top_logprobs)


def logprobs(logits, tokens, temperature=None, *, top_n=0, raw=False, top_k=None, top_p=None,
             min_p=None, dtype=None):
    """What psr.Context.logprobs returns for the same numpy arguments."""
    top_n = cv.top_n_of(top_n, "top_n")
    if raw and (top_k is not None or top_p is not None or min_p is not None):
        raise cv.bad("raw", "filters shape processed logprobs only (raw=False)")
    if not raw and temperature is None:
        raise cv.bad("temperature", "required for processed logprobs (raw=False)")
    x, rows, vocab, _ = _f32_logits(logits, "logits", dtype)
    tok = cv.per_row_int(tokens, "tokens", rows, np.int64)
    tok = np.where((tok >= 0) & (tok < vocab), tok, -1).astype(np.int32)
    temps = None
    if not raw:
        temps = cv.per_row_float(temperature, "temperature", rows)
        _check_temps(temps, "temperatures")
    k, p, m = _filters(rows, top_k, top_p, min_p)
    lp = np.empty(rows, np.float32)
    rk = np.empty(rows, np.int32)
    ids = np.empty((rows, top_n), np.int32)
    tlp = np.empty((rows, top_n), np.float32)
    _oracle().psr_py_oracle_logprobs(x.ctypes.data, rows, vocab, _ptr(temps), int(raw),
                                     tok.ctypes.data, _ptr(k), _ptr(p), _ptr(m), top_n,
                                     lp.ctypes.data, rk.ctypes.data, ids.ctypes.data,
                                     tlp.ctypes.data)
    return LogprobsResult(lp, rk, ids, tlp)


def verify(target_logits, draft_tokens, cu, seeds, temperatures, positions, *, draft_cache=None,
           method="probabilistic", noise="fp32", max_drafts=None, tokens_dtype=np.int32,
           dtype=None):
    """What psr.Context.verify returns for the same numpy arguments:
    (tokens [R, K+1], num_sampled [R])."""
    if method not in _api.PSR_VERIFY:
        raise cv.bad("method", f"{method!r} is not 'probabilistic' or 'greedy'")
    noise_v = cv.noise_of(noise)
    tok_np, _ = cv.tokens_dtype_of(tokens_dtype)
    x, rows, vocab, _ = _f32_logits(target_logits, "target_logits", dtype)
    cu_a, R, most = cv.check_cu(cu, rows)
    K = most if max_drafts is None else int(max_drafts)
    if K < most:
        raise cv.bad("max_drafts", f"{K} is below a request's {most} drafts")
    drafts = cv.per_row_int(draft_tokens, "draft_tokens", rows, np.int32)
    seeds_a = cv.per_row_int(seeds, "seeds", R)
    temps = cv.per_row_float(temperatures, "temperatures", R)
    pos_a = cv.per_row_int(positions, "positions", rows)
    cache, cache_k = None, 0
    if draft_cache is not None:
        cache = np.asarray(draft_cache)
        if cache.dtype != np.float32:
            raise TypeError("draft_cache: expected a float32 array [requests, k, vocab]")
        if cache.ndim != 3 or cache.shape[0] != R or cache.shape[2] != vocab or \
                cache.shape[1] < most:
            raise cv.bad("draft_cache", f"shape {cache.shape} is not [{R}, k >= {most}, {vocab}]")
        cache, cache_k = np.ascontiguousarray(cache), cache.shape[1]
    _check_positions(pos_a)
    _check_temps(temps, "temperatures")
    is_draft = np.ones(rows, bool)
    is_draft[cu_a[1:] - 1] = False
    bad = is_draft & ((drafts < -1) | (drafts >= vocab))
    if bad.any():
        i = int(np.argmax(bad))
        raise TokenRange(f"draft_tokens[{i}] = {drafts[i]} is outside [-1, {vocab})")
    tokens = np.empty((R, K + 1), np.int32)
    num = np.empty(R, np.int32)
    _oracle().psr_py_oracle_verify(R, cu_a.ctypes.data, rows, K, vocab, x.ctypes.data,
                                   _ptr(cache), cache_k, drafts.ctypes.data, seeds_a.ctypes.data,
                                   temps.ctypes.data, pos_a.ctypes.data,
                                   int(method == "greedy"), noise_v, tokens.ctypes.data,
                                   num.ctypes.data)
    return tokens.astype(tok_np), num


def filter_threshold(logits, temperature, *, top_k=0, top_p=1.0, min_p=0.0):
    """The filter threshold of one fp32 row: a token is kept iff its scaled
    logit (logit / T) is at least this (-inf: nothing removed)."""
    x = np.ascontiguousarray(logits, dtype=np.float32)
    if x.ndim != 1 or x.size == 0:
        raise cv.bad("logits", "expected one non-empty row")
    return float(_oracle().psr_py_oracle_filter_threshold(x.ctypes.data, x.size,
                                                          float(temperature), int(top_k),
                                                          float(top_p), float(min_p)))
