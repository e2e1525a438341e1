"""psr.Context: one psr_context, its calls on host arrays and on PyOpenCL
buffers, behind a lock."""
import contextlib
import ctypes
import sys
import threading
import weakref
from ctypes import byref, c_int, c_size_t, c_void_p
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _api
from . import _convert as cv
from ._errors import InvalidArgument, error_for


@dataclass(frozen=True)
class DeviceInfo:
    """One OpenCL device as psr sees it (psr_device_info)."""
    platform_index: int
    device_index: int
    type: str  # "gpu", "cpu", "accelerator" or "other"
    name: str
    vendor: str
    version: str
    driver_version: str
    opencl_c_version: str
    platform_name: str
    platform_vendor: str
    platform_version: str
    vendor_id: int
    compute_units: int
    max_clock_mhz: int
    preferred_work_group_multiple: int
    max_work_group_size: int
    local_mem_bytes: int
    global_mem_bytes: int
    max_alloc_bytes: int
    capabilities: int  # PSR_CAP_* bits
    platform_handle: int  # cl_platform_id, not retained
    device_handle: int  # cl_device_id, not retained

    @property
    def selector(self):
        """The "P:D" selector of this device."""
        return f"{self.platform_index}:{self.device_index}"

    @property
    def fp64(self):
        return bool(self.capabilities & _api.PSR_CAP_FP64)

    @property
    def fp16(self):
        return bool(self.capabilities & _api.PSR_CAP_FP16)

    @property
    def int64_atomics(self):
        return bool(self.capabilities & _api.PSR_CAP_INT64_ATOMICS)

    @classmethod
    def _of(cls, s):
        d = _api.decode
        return cls(s.platform_index, s.device_index, _api.DEVICE_TYPES.get(s.type, "other"),
                   d(s.name), d(s.vendor), d(s.version), d(s.driver_version),
                   d(s.opencl_c_version), d(s.platform_name), d(s.platform_vendor),
                   d(s.platform_version), s.vendor_id, s.compute_units, s.max_clock_mhz,
                   s.preferred_work_group_multiple, s.max_work_group_size, s.local_mem_bytes,
                   s.global_mem_bytes, s.max_alloc_bytes, s.capabilities, s.platform or 0,
                   s.device or 0)


@dataclass(frozen=True)
class LogprobsResult:
    """psr_logprobs' outputs: per row the token's logprob and rank (1 + the
    tokens with a larger logprob; 0 for a token outside the vocabulary),
    and the top_n ids and logprobs ([rows, top_n])."""
    logprobs: Any
    ranks: Any
    top_ids: Any
    top_logprobs: Any


@dataclass(frozen=True)
class SampleResult:
    """ctx.sample(..., logprobs=N): the tokens with their logprobs."""
    tokens: Any
    logprobs: Any
    ranks: Any
    top_ids: Any
    top_logprobs: Any


# psr_shard_record as a numpy dtype: 16 bytes per row and shard.
SHARD_RECORD = np.dtype([("value", "<u8"), ("token", "<i4"), ("flags", "<u4")])


def combine(records, *, tokens_dtype=np.int32, row_flags=False):
    """The tokens of a sharded sampling (psr_combine_host) from the records
    of every shard, [shards, rows] of SHARD_RECORD (shard s's in row s).
    With row_flags=True returns (tokens, flags)."""
    rec = np.ascontiguousarray(records)
    if rec.dtype != SHARD_RECORD or rec.ndim != 2:
        raise TypeError("records must be a [shards, rows] array of psr.SHARD_RECORD, "
                        f"not {rec.dtype} with shape {rec.shape}")
    tok_np, tok_psr = cv.tokens_dtype_of(tokens_dtype)
    tokens = np.empty(rec.shape[1], dtype=tok_np)
    flags = np.empty(rec.shape[1], dtype=np.uint32)
    a = _api.init_struct(_api.CombineHostArgs)
    a.shards, a.rows = rec.shape
    a.records, a.tokens, a.tokens_dtype = rec.ctypes.data, tokens.ctypes.data, tok_psr
    a.row_flags = flags.ctypes.data
    st = _api.lib().psr_combine_host(None, byref(a))
    if st:
        _raise_global(st)
    return (tokens, flags) if row_flags else tokens


def _raise_global(st):
    raise error_for(st, _api.decode(_api.lib().psr_last_error(None)))


def devices():
    """Every OpenCL device of every platform (psr_device_list, what `psr info`
    lists), in (platform, device) order; [] without any OpenCL platform."""
    lib = _api.lib()
    n = c_size_t(0)
    st = lib.psr_device_list(None, 0, byref(n))
    if st:
        _raise_global(st)
    arr = (_api.DeviceInfoStruct * max(n.value, 1))()
    st = lib.psr_device_list(arr, n.value, byref(n))
    if st:
        _raise_global(st)
    return [DeviceInfo._of(arr[i]) for i in range(min(n.value, len(arr)))]


def select_device(selector=None):
    """The device psr.Context(selector) would pick (psr_device_select)."""
    out = _api.DeviceInfoStruct()
    st = _api.lib().psr_device_select(_selector_bytes(selector), byref(out))
    if st:
        _raise_global(st)
    return DeviceInfo._of(out)


def _selector_bytes(selector):
    if selector is None:
        return None
    if not isinstance(selector, str):
        raise TypeError(f"device: expected a selector string, not {type(selector).__name__}")
    return selector.encode()


def _is_cl(x):
    return type(x).__module__.startswith("pyopencl")


_PYOPENCL = None


def _pyopencl():
    global _PYOPENCL
    if _PYOPENCL is not None:
        return _PYOPENCL
    try:
        import pyopencl
        import pyopencl.array
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("psr: this call needs PyOpenCL (pip install pyopencl)") from e
    _PYOPENCL = (pyopencl, pyopencl.array)
    return _PYOPENCL


def _log_trampoline(ref, log):
    """The C log callback: the user's log(level, message), with the
    context's thread marked so that a call back into it raises instead of
    waiting on its own lock (ref: a weak reference, no cycle)."""
    names = {v: k for k, v in _api.PSR_LOG_LEVELS.items()}

    def trampoline(level, message, _user):
        ctx = ref()
        if ctx is not None:
            ctx._log_thread = threading.get_ident()
        try:
            log(names.get(level, str(level)), _api.decode(message))
        except Exception as e:  # an exception cannot cross into C: report it, go on
            print(f"psr: the log callback raised {e!r}", file=sys.stderr)
        finally:
            if ctx is not None:
                ctx._log_thread = None

    return trampoline


class Context:
    """A psr context: psr's own device (``device``: a selector, or None for
    $PSR_DEVICE, else "auto"), or the application's PyOpenCL context and
    queue (``cl_context``, ``cl_queue``; the queue must be in-order).

    Every call holds the context's lock, so one Context may be shared by
    threads (calls then run one at a time). Arguments are numpy arrays (the
    host path: blocking, results as numpy arrays) or PyOpenCL arrays (the
    device path: nothing waits, results as PyOpenCL arrays with an event).
    """

    def __init__(self, device=None, cl_context=None, cl_queue=None, *, cache_dir=None,
                 disk_cache="auto", fp64_policy="error", log=None, log_level="warning",
                 hide_capabilities=0, profiling=False):
        self._ptr = None
        self._lock = threading.Lock()
        self._log_thread = None  # the thread inside the log callback, while it runs
        self._pycl = None  # (pyopencl context, queue), made on first use
        lib = _api.lib()
        opts = _api.init_struct(_api.ContextOptions)
        self._keep = []  # what the C side points at for the context's life
        dev = _selector_bytes(device)
        opts.device = dev
        if cache_dir is not None:
            opts.cache_dir = str(cache_dir).encode()
        for field, table, value in (("disk_cache", _api.PSR_DISK_CACHE, disk_cache),
                                    ("fp64_policy", _api.PSR_FP64_POLICY, fp64_policy),
                                    ("log_level", _api.PSR_LOG_LEVELS, log_level)):
            if value not in table:
                raise cv.bad(field, f"{value!r} is not one of {', '.join(map(repr, table))}")
            setattr(opts, field, table[value])
        opts.hide_capabilities = int(hide_capabilities)
        opts.profiling = 1 if profiling else 0
        if log is not None:
            if not callable(log):
                raise TypeError("log: expected a callable(level, message)")
            cb = _api.LOG_FN(_log_trampoline(weakref.ref(self), log))
            self._keep.append(cb)
            opts.log = ctypes.cast(cb, c_void_p)
        out = c_void_p()
        if cl_context is None and cl_queue is None:
            st = lib.psr_context_create(byref(opts), byref(out))
        else:
            cl, _ = _pyopencl()
            if cl_queue is None:
                cl_queue = cl.CommandQueue(cl_context)
            if not isinstance(cl_queue, cl.CommandQueue):
                raise TypeError(f"cl_queue: expected a pyopencl.CommandQueue, not "
                                f"{type(cl_queue).__name__}")
            if cl_context is None:
                cl_context = cl_queue.context
            if not isinstance(cl_context, cl.Context):
                raise TypeError(f"cl_context: expected a pyopencl.Context, not "
                                f"{type(cl_context).__name__}")
            st = lib.psr_context_create_from_cl(cl_context.int_ptr, cl_queue.device.int_ptr,
                                                cl_queue.int_ptr, byref(opts), byref(out))
            # psr retains them too; these references keep the Python objects
            # (and so what the application sees) alive as long as the context.
            self._pycl = (cl_context, cl_queue)
        if st:
            _raise_global(st)
        self._ptr = out.value
        self._lib = lib
        self._tmpl = {}

    @contextlib.contextmanager
    def _locked(self):
        """The context's lock, refused to its own log callback: psr calls
        the log from inside a call on this context, which holds the lock."""
        if self._log_thread == threading.get_ident():
            raise RuntimeError("psr: the log callback called its own Context; psr calls the log "
                               "from inside a call on that context")
        with self._lock:
            yield

    # ---- life ----
    def close(self):
        """Frees the psr context (psr_context_free); later calls raise."""
        with self._locked():
            if self._ptr:
                self._lib.psr_context_free(self._ptr)
                self._ptr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            if getattr(self, "_ptr", None):
                self.close()
        except Exception:
            pass

    def _check(self):
        if not self._ptr:
            raise InvalidArgument("ctx: this Context is closed")

    def _error(self, st):
        return error_for(st, _api.decode(self._lib.psr_last_error(self._ptr)))

    def _args(self, cls):
        t = self._tmpl.get(cls)
        if t is None:
            t = self._tmpl[cls] = _api.init_struct(cls)
        return cls.from_buffer_copy(t)

    def _call(self, fn, *args):
        """fn(ctx, *args) of libpsr under the context's lock; its error raised."""
        with self._locked():
            self._check()
            st = fn(self._ptr, *args)
            if st:
                raise self._error(st)

    # ---- facts ----
    @property
    def device(self):
        """The context's DeviceInfo (psr_context_device_info)."""
        out = _api.DeviceInfoStruct()
        self._call(self._lib.psr_context_device_info, byref(out))
        return DeviceInfo._of(out)

    @property
    def last_noise(self):
        """The noise the last sampling or verification used ("fp32", "fp64", "wide")."""
        n = c_int(0)
        self._call(self._lib.psr_context_last_noise, byref(n))
        return {v: k for k, v in _api.PSR_NOISE.items()}.get(n.value, str(n.value))

    @property
    def scratch_bytes(self):
        n = c_size_t(0)
        self._call(self._lib.psr_context_scratch_bytes, byref(n))
        return n.value

    def recover(self):
        """After a launch that failed or was abandoned on the device (an
        event with a negative status): the next launches clear the counters
        psr's kernels keep between launches (psr_context_recover)."""
        self._call(self._lib.psr_context_recover)

    @property
    def build_log(self):
        with self._locked():
            self._check()
            return _api.decode(self._lib.psr_context_build_log(self._ptr))

    def _cl_objects(self):
        """The context's (pyopencl.Context, pyopencl.CommandQueue)."""
        if self._pycl is None:
            cl, _ = _pyopencl()
            c, q = c_void_p(), c_void_p()
            with self._locked():
                self._check()
                st = self._lib.psr_context_cl(self._ptr, byref(c), None, byref(q))
                if st:
                    raise self._error(st)
                self._pycl = (cl.Context.from_int_ptr(c.value, retain=True),
                              cl.CommandQueue.from_int_ptr(q.value, retain=True))
        return self._pycl

    @property
    def cl_context(self):
        """The psr context's OpenCL context as a pyopencl.Context: device
        arrays for its calls are made in it."""
        return self._cl_objects()[0]

    @property
    def cl_queue(self):
        """The psr context's in-order queue as a pyopencl.CommandQueue."""
        return self._cl_objects()[1]

    # ---- calls ----

    def sample(self, logits, temperature, seeds, positions, *, drafting=False, noise="fp32",
               method="gumbel", probs=False, top_k=None, top_p=None, min_p=None, logprobs=None,
               raw_logprobs=False, tokens_dtype=np.int32, dtype=None, fast_math=False, out=None,
               row_flags=None, shape=None, wait_for=None):
        """One token per row of logits [rows, vocab] (psr_sample): Gumbel-max
        with vLLM's Philox noise for (seed, position) of each row, or
        method="race", the exponential race (probs=True: the rows are
        probabilities). temperature, seeds and positions are per row, or a
        scalar for every row; temperature 0 is greedy. top_k, top_p, min_p:
        None (off), a scalar for every row, or per row. logprobs=N (0..20)
        also returns the tokens' logprobs, ranks and top N.

        numpy logits: blocking; returns the tokens (np.ndarray), or a
        SampleResult with logprobs=N. PyOpenCL logits: nothing waits;
        returns (tokens, event) or (SampleResult, event) with PyOpenCL
        arrays (out: a preallocated tokens array; row_flags: a uint32
        array that receives the PSR_ROW_* bits)."""
        flags = cv.sample_flags(drafting, method, probs, fast_math)
        noise_v = cv.noise_of(noise)
        tok_np, tok_psr = cv.tokens_dtype_of(tokens_dtype)
        top_n = None if logprobs is None else cv.top_n_of(logprobs)
        if _is_cl(logits):
            return self._sample_device(logits, temperature, seeds, positions, flags, noise_v,
                                       top_k, top_p, min_p, top_n, raw_logprobs, tok_np,
                                       tok_psr, dtype, out, row_flags, shape, wait_for)
        if out is not None or row_flags is not None or wait_for is not None or shape is not None:
            raise TypeError("out, row_flags, shape and wait_for are for PyOpenCL logits")
        a, x, temps, keep = self._host_sample_args(logits, temperature, seeds, positions, flags,
                                                   noise_v, top_k, top_p, min_p, dtype)
        tokens = np.empty(a.rows, dtype=tok_np)
        a.tokens, a.tokens_dtype = tokens.ctypes.data, tok_psr
        self._call(self._lib.psr_sample_host, byref(a))
        del keep
        if top_n is None:
            return tokens
        lp = self.logprobs(x, tokens, temps, top_n=top_n, raw=raw_logprobs,
                           top_k=None if raw_logprobs else top_k,
                           top_p=None if raw_logprobs else top_p,
                           min_p=None if raw_logprobs else min_p, dtype=dtype)
        return SampleResult(tokens, lp.logprobs, lp.ranks, lp.top_ids, lp.top_logprobs)

    def _host_sample_args(self, logits, temperature, seeds, positions, flags, noise_v, top_k,
                          top_p, min_p, dtype):
        """SampleHostArgs for numpy inputs, the logits and temperatures as
        converted, and the arrays the args point into (keep them alive)."""
        x, rows, vocab, stride, pdtype = cv.host_logits(logits, "logits", dtype)
        temps = cv.per_row_float(temperature, "temperature", rows)
        seeds_a = cv.per_row_int(seeds, "seeds", rows)
        pos_a = cv.per_row_int(positions, "positions", rows)
        filt = [cv.filter_value(v, n, rows, k) for v, n, k in
                ((top_k, "top_k", "k"), (top_p, "top_p", "p"), (min_p, "min_p", "p"))]
        a = self._args(_api.SampleHostArgs)
        a.rows, a.vocab, a.row_stride = rows, vocab, stride
        a.logits, a.logits_dtype = x.ctypes.data, pdtype
        a.seeds, a.positions, a.temperatures = seeds_a.ctypes.data, pos_a.ctypes.data, \
            temps.ctypes.data
        _set_filters(a, filt, lambda arr: arr.ctypes.data)
        a.flags, a.noise = flags, noise_v
        return a, x, temps, (x, temps, seeds_a, pos_a, filt)

    def sample_shard(self, logits, temperature, seeds, positions, *, vocab_offset, vocab_total,
                     shard_index, shard_count, drafting=False, noise="fp32", method="gumbel",
                     probs=False, dtype=None, fast_math=False):
        """One shard of a vocabulary split over devices or processes
        (docs/sharded.md): logits [rows, vocab] are the columns
        vocab_offset .. vocab_offset + vocab of a vocab_total vocabulary.
        Returns the shard's records, a numpy array [rows] of SHARD_RECORD;
        psr.combine of every shard's records gives the unsharded tokens.
        Blocking; numpy logits only."""
        flags = cv.sample_flags(drafting, method, probs, fast_math)
        a, _, _, keep = self._host_sample_args(logits, temperature, seeds, positions, flags,
                                               cv.noise_of(noise), None, None, None, dtype)
        records = np.zeros(a.rows, dtype=SHARD_RECORD)
        a.shard_count, a.shard_index = int(shard_count), int(shard_index)
        a.vocab_offset, a.vocab_total = int(vocab_offset), int(vocab_total)
        a.shard_records = records.ctypes.data
        self._call(self._lib.psr_sample_host, byref(a))
        del keep
        return records

    def logprobs_shard(self, logits, tokens, temperature=None, *, vocab_offset, vocab_total,
                       shard_index, shard_count, shard_slot, shard_slots, top_n=0, raw=False,
                       top_k=None, top_p=None, min_p=None, dtype=None):
        """Logprobs across a vocabulary split over devices or processes
        (psr_logprobs_shard_round): one shard, whose logits [rows, vocab]
        are the columns vocab_offset .. vocab_offset + vocab of a vocab_total
        vocabulary; tokens are global ids, temperature, top_n, raw, top_k,
        top_p and min_p as in logprobs(). Its slots of the partials start at
        shard_slot (the sum of psr.logprobs_shard_slots over the shards
        before it) of shard_slots (the sum over all shards). Returns a
        psr.LogprobsShard holding the shard's inputs on the device, which
        runs the filters' rounds (with filters: filter_partial(r, reduced)
        for r < filter_rounds, then filter_apply(reduced)) and the three
        rounds: keys(), partials(keys), finish(partials). numpy logits only."""
        from ._shard_logprobs import open_shard
        return open_shard(self, logits, tokens, temperature, vocab_offset=vocab_offset,
                          vocab_total=vocab_total, shard_index=shard_index,
                          shard_count=shard_count, shard_slot=shard_slot,
                          shard_slots=shard_slots, top_n=top_n, raw=raw, top_k=top_k,
                          top_p=top_p, min_p=min_p, dtype=dtype)

    def logprobs(self, logits, tokens, temperature=None, *, top_n=0, raw=False, top_k=None,
                 top_p=None, min_p=None, dtype=None, shape=None, wait_for=None):
        """The logprobs of sampled tokens (psr_logprobs): per row the token's
        logprob and rank, and the top_n (0..20) ids and logprobs, of
        logits / T (raw=True: of the logits as given; no temperature
        needed) after the filters. Returns a LogprobsResult of numpy arrays,
        or (LogprobsResult, event) of PyOpenCL arrays for PyOpenCL logits."""
        top_n = cv.top_n_of(top_n, "top_n")
        if raw and (top_k is not None or top_p is not None or min_p is not None):
            raise cv.bad("raw", "filters shape processed logprobs only (raw=False)")
        if not raw and temperature is None:
            raise cv.bad("temperature", "required for processed logprobs (raw=False)")
        if _is_cl(logits):
            return self._logprobs_device(logits, tokens, temperature, top_n, raw, top_k, top_p,
                                         min_p, dtype, shape, wait_for)
        x, rows, vocab, stride, pdtype = cv.host_logits(logits, "logits", dtype)
        tok = _host_tokens(tokens, rows)
        temps = None if raw else cv.per_row_float(temperature, "temperature", rows)
        filt = [cv.filter_value(v, n, rows, k) for v, n, k in
                ((top_k, "top_k", "k"), (top_p, "top_p", "p"), (min_p, "min_p", "p"))]
        lp = np.empty(rows, np.float32)
        rk = np.empty(rows, np.int32)
        ids = np.empty((rows, top_n), np.int32)
        tlp = np.empty((rows, top_n), np.float32)
        a = self._args(_api.LogprobsHostArgs)
        a.rows, a.vocab, a.row_stride = rows, vocab, stride
        a.logits, a.logits_dtype = x.ctypes.data, pdtype
        a.temperatures = None if temps is None else temps.ctypes.data
        a.tokens = tok.ctypes.data
        a.tokens_dtype = _api.PSR_TOKENS_I64 if tok.dtype == np.int64 else _api.PSR_TOKENS_I32
        _set_filters(a, filt, lambda arr: arr.ctypes.data)
        a.top_n, a.flags = top_n, _api.PSR_LOGPROBS_RAW if raw else 0
        a.token_logprobs, a.token_ranks = lp.ctypes.data, rk.ctypes.data
        if top_n:
            a.top_ids, a.top_logprobs = ids.ctypes.data, tlp.ctypes.data
        self._call(self._lib.psr_logprobs_host, byref(a))
        return LogprobsResult(lp, rk, ids, tlp)

    def verify(self, target_logits, draft_tokens, cu, seeds, temperatures, positions, *,
               draft_cache=None, method="probabilistic", noise="fp32", max_drafts=None,
               tokens_dtype=np.int32, dtype=None, shape=None, status_out=None, wait_for=None):
        """Speculative decoding's verification (psr_verify), vLLM's rejection
        sampler. Request r owns target rows cu[r] .. cu[r+1]-1: its drafts'
        rows (draft_tokens[row], int32, -1 a placeholder), then its bonus
        row. seeds and temperatures are per request, positions per row.
        draft_cache: optional float32 [requests, k, vocab], the drafts'
        pre-temperature logits (None: one-hot drafts). method:
        "probabilistic" or "greedy". Returns (tokens [R, K+1], num_sampled
        [R]) as numpy arrays, where K = max_drafts (default: the most drafts
        of a request); for PyOpenCL target logits (tokens, num_sampled,
        event) as PyOpenCL arrays (status_out: a uint32 [1] array for the
        PSR_VERIFY_* bits of bad values only the device sees)."""
        if method not in _api.PSR_VERIFY:
            raise cv.bad("method", f"{method!r} is not 'probabilistic' or 'greedy'")
        noise_v = cv.noise_of(noise)
        tok_np, tok_psr = cv.tokens_dtype_of(tokens_dtype)
        if _is_cl(target_logits):
            return self._verify_device(target_logits, draft_tokens, cu, seeds, temperatures,
                                       positions, draft_cache, method, noise_v, max_drafts,
                                       tok_np, tok_psr, dtype, shape, status_out, wait_for)
        if status_out is not None or wait_for is not None or shape is not None:
            raise TypeError("status_out, shape and wait_for are for PyOpenCL target logits")
        x, rows, vocab, stride, pdtype = cv.host_logits(target_logits, "target_logits", dtype)
        cu_a, R, most = cv.check_cu(cu, rows)
        K = _max_drafts(max_drafts, most)
        drafts = cv.per_row_int(draft_tokens, "draft_tokens", rows, np.int32)
        seeds_a = cv.per_row_int(seeds, "seeds", R)
        temps = cv.per_row_float(temperatures, "temperatures", R)
        pos_a = cv.per_row_int(positions, "positions", rows)
        cache, cache_k = _host_cache(draft_cache, R, vocab)
        tokens = np.empty((R, K + 1), tok_np)
        num = np.empty(R, np.int32)
        a = self._args(_api.VerifyHostArgs)
        a.requests, a.cu, a.rows, a.max_drafts, a.vocab = R, cu_a.ctypes.data, rows, K, vocab
        a.target_logits, a.target_dtype, a.target_row_stride = x.ctypes.data, pdtype, stride
        if cache is not None:
            a.draft_cache, a.draft_cache_k = cache.ctypes.data, cache_k
        a.draft_tokens, a.seeds = drafts.ctypes.data, seeds_a.ctypes.data
        a.temperatures, a.positions = temps.ctypes.data, pos_a.ctypes.data
        a.method, a.noise = _api.PSR_VERIFY[method], noise_v
        a.tokens, a.tokens_dtype, a.num_sampled = tokens.ctypes.data, tok_psr, num.ctypes.data
        self._call(self._lib.psr_verify_host, byref(a))
        return tokens, num

    def verify_shard(self, target_logits, draft_tokens, cu, seeds, temperatures, positions, *,
                     vocab_offset, vocab_total, shard_index, shard_count, shard_slot,
                     shard_slots, draft_cache=None, method="probabilistic", noise="fp32",
                     max_drafts=None, tokens_dtype=np.int32, dtype=None):
        """Verification across a vocabulary split over devices or processes
        (psr_verify_shard_round): one shard, whose target logits [rows,
        vocab] are the columns vocab_offset .. vocab_offset + vocab of a
        vocab_total vocabulary, and whose draft_cache (optional) is float32
        [requests, k, vocab] of the same columns. draft_tokens are global
        ids; cu, seeds, temperatures, positions, method, noise, max_drafts
        and tokens_dtype as in verify(). Its slots of the partials start at
        shard_slot (the sum of psr.logprobs_shard_slots over the shards
        before it) of shard_slots (the sum over all shards). Returns a
        psr.VerifyShard holding the shard's inputs on the device, which
        runs the four rounds: keys(), partials(keys), records(partials),
        finish(records). numpy arrays only."""
        from ._shard_verify import open_verify_shard
        return open_verify_shard(self, target_logits, draft_tokens, cu, seeds, temperatures,
                                 positions, vocab_offset=vocab_offset, vocab_total=vocab_total,
                                 shard_index=shard_index, shard_count=shard_count,
                                 shard_slot=shard_slot, shard_slots=shard_slots,
                                 draft_cache=draft_cache, method=method, noise=noise,
                                 max_drafts=max_drafts, tokens_dtype=tokens_dtype, dtype=dtype)

    def lm_head(self, hidden, weights, *, out=None, wait_for=None):
        """logits [B, V] = hidden [B, H] x weights [V, H]^T on the device
        through CLBlast (psr_lm_head), fp32 or fp16 (where the device has
        cl_khr_fp16). PyOpenCL arrays in (numpy arrays are uploaded to the
        context's queue first); returns (logits, event), PyOpenCL arrays.
        Raises psr.NotSupported where CLBlast cannot be loaded."""
        cl, cla = _pyopencl()
        _, queue = self._cl_objects()
        keep = []
        h = _dev_matrix(cla, queue, hidden, "hidden", keep)
        w = _dev_matrix(cla, queue, weights, "weights", keep)
        if h.dtype != w.dtype:
            raise TypeError(f"weights: dtype {w.dtype} is not hidden's {h.dtype}")
        pdtype = cv.psr_dtype_of(h.dtype, None, "hidden")
        if pdtype == _api.PSR_DTYPE_BF16:
            raise TypeError("hidden: the LM head takes float32 or float16, not bf16")
        B, H = h.shape
        V = w.shape[0]
        if w.shape[1] != H:
            raise cv.bad("weights", f"shape {w.shape} is not [vocab, {H}] for hidden {h.shape}")
        res, res_ptr = _dev_out(cla, queue, out, "out", (B, V), h.dtype)
        a = self._args(_api.LmHeadArgs)
        a.batch, a.hidden_size, a.vocab, a.dtype = B, H, V, pdtype
        a.hidden, a.weights, a.logits = _mem_of(h), _mem_of(w), res_ptr
        waits = _set_waits(a, wait_for)
        ev = c_void_p()
        self._call(self._lib.psr_lm_head, byref(a), byref(ev))
        del waits, keep
        return res, _event(cl, ev)

    # ---- the device path ----
    def _device_args(self, cls, logits, dtype, shape):
        """The device path's start: PyOpenCL, the context's queue, and a new
        args struct of cls with the logits' buffer, shape and layout (one
        request per row)."""
        cl, cla = _pyopencl()
        _, queue = self._cl_objects()
        mem, rows, vocab, offset, stride, pdtype = _dev_logits(cl, cla, logits, "logits", dtype,
                                                                shape)
        a = self._args(cls)
        a.rows, a.vocab, a.logits, a.logits_dtype = rows, vocab, mem, pdtype
        a.logits_offset, a.row_stride, a.requests = offset, stride, rows
        return cl, cla, queue, a

    def _sample_device(self, logits, temperature, seeds, positions, flags, noise_v, top_k, top_p,
                       min_p, top_n, raw, tok_np, tok_psr, dtype, out, row_flags, shape,
                       wait_for):
        cl, cla, queue, a = self._device_args(_api.SampleArgs, logits, dtype, shape)
        rows, keep = a.rows, []
        a.temperatures = _dev_in(cl, cla, queue, temperature, "temperature", rows, np.float32,
                                 keep)
        a.seeds = _dev_in(cl, cla, queue, seeds, "seeds", rows, np.int64, keep)
        a.positions = _dev_in(cl, cla, queue, positions, "positions", rows, np.int64, keep)
        filt = _dev_filters(cl, cla, queue, rows, top_k, top_p, min_p, keep)
        _set_filters(a, filt, lambda m: m)
        tokens, a.tokens = _dev_out(cla, queue, out, "out", (rows,), tok_np)
        if row_flags is not None:
            _, a.row_flags = _dev_out(cla, queue, row_flags, "row_flags", (rows,), np.uint32)
        a.flags, a.noise, a.tokens_dtype = flags, noise_v, tok_psr
        waits = _set_waits(a, wait_for)
        ev = c_void_p()
        self._call(self._lib.psr_sample, byref(a), None if top_n is not None else byref(ev))
        if top_n is None:
            return tokens, _event(cl, ev)
        la = self._args(_api.LogprobsArgs)
        la.rows, la.vocab, la.logits, la.logits_dtype = a.rows, a.vocab, a.logits, a.logits_dtype
        la.logits_offset, la.row_stride, la.requests = a.logits_offset, a.row_stride, a.requests
        la.tokens, la.tokens_dtype = a.tokens, tok_psr
        if raw:
            la.flags = _api.PSR_LOGPROBS_RAW
        else:
            la.temperatures = a.temperatures
            _set_filters(la, filt, lambda m: m)
        res, ev = self._logprobs_out(cl, cla, queue, la, rows, top_n)
        del waits, keep
        return SampleResult(tokens, res.logprobs, res.ranks, res.top_ids, res.top_logprobs), ev

    def _logprobs_out(self, cl, cla, queue, la, rows, top_n):
        lp, la.token_logprobs = _dev_out(cla, queue, None, "logprobs", (rows,), np.float32)
        rk, la.token_ranks = _dev_out(cla, queue, None, "ranks", (rows,), np.int32)
        ids = tlp = None
        if top_n:
            ids, la.top_ids = _dev_out(cla, queue, None, "top_ids", (rows, top_n), np.int32)
            tlp, la.top_logprobs = _dev_out(cla, queue, None, "top_logprobs", (rows, top_n),
                                            np.float32)
        la.top_n = top_n
        ev = c_void_p()
        self._call(self._lib.psr_logprobs, byref(la), byref(ev))
        return LogprobsResult(lp, rk, ids, tlp), _event(cl, ev)

    def _logprobs_device(self, logits, tokens, temperature, top_n, raw, top_k, top_p, min_p,
                         dtype, shape, wait_for):
        cl, cla, queue, la = self._device_args(_api.LogprobsArgs, logits, dtype, shape)
        rows, keep = la.rows, []
        if _is_cl(tokens) and getattr(tokens, "dtype", None) == np.int64:
            la.tokens, la.tokens_dtype = _dev_in(cl, cla, queue, tokens, "tokens", rows,
                                                 np.int64, keep), _api.PSR_TOKENS_I64
        else:
            la.tokens = _dev_in(cl, cla, queue, tokens, "tokens", rows, np.int32, keep)
        if raw:
            la.flags = _api.PSR_LOGPROBS_RAW
        else:
            la.temperatures = _dev_in(cl, cla, queue, temperature, "temperature", rows,
                                      np.float32, keep)
            _set_filters(la, _dev_filters(cl, cla, queue, rows, top_k, top_p, min_p, keep),
                         lambda m: m)
        waits = _set_waits(la, wait_for)
        res = self._logprobs_out(cl, cla, queue, la, rows, top_n)
        del waits, keep
        return res

    def _verify_device(self, target, draft_tokens, cu, seeds, temperatures, positions,
                       draft_cache, method, noise_v, max_drafts, tok_np, tok_psr, dtype, shape,
                       status_out, wait_for):
        cl, cla = _pyopencl()
        _, queue = self._cl_objects()
        mem, rows, vocab, offset, stride, pdtype = _dev_logits(cl, cla, target, "target_logits",
                                                                dtype, shape)
        cu_a, R, most = cv.check_cu(cu, rows)
        K = _max_drafts(max_drafts, most)
        keep = [cu_a]
        a = self._args(_api.VerifyArgs)
        a.requests, a.cu, a.rows, a.max_drafts, a.vocab = R, cu_a.ctypes.data, rows, K, vocab
        a.target_logits, a.target_dtype = mem, pdtype
        a.target_offset, a.target_row_stride = offset, stride
        if draft_cache is not None:
            if isinstance(draft_cache, np.ndarray):
                c, _ = _host_cache(draft_cache, R, vocab)
                draft_cache = cla.to_device(queue, c)
                keep.append(draft_cache)
            if not isinstance(draft_cache, cla.Array) or draft_cache.dtype != np.float32 or \
                    draft_cache.ndim != 3 or not draft_cache.flags.c_contiguous:
                raise TypeError("draft_cache: expected a contiguous float32 [requests, k, vocab] "
                                "array")
            if draft_cache.shape[0] != R or draft_cache.shape[2] != vocab:
                raise cv.bad("draft_cache", f"shape {draft_cache.shape} is not [{R}, k, {vocab}]")
            a.draft_cache, a.draft_cache_k = _mem_of(draft_cache), draft_cache.shape[1]
        a.draft_tokens = _dev_in(cl, cla, queue, draft_tokens, "draft_tokens", rows, np.int32,
                                 keep)
        a.seeds = _dev_in(cl, cla, queue, seeds, "seeds", R, np.int64, keep)
        a.temperatures = _dev_in(cl, cla, queue, temperatures, "temperatures", R, np.float32,
                                 keep)
        a.positions = _dev_in(cl, cla, queue, positions, "positions", rows, np.int64, keep)
        a.method, a.noise = _api.PSR_VERIFY[method], noise_v
        tokens, a.tokens = _dev_out(cla, queue, None, "tokens", (R, K + 1), tok_np)
        a.tokens_dtype = tok_psr
        num, a.num_sampled = _dev_out(cla, queue, None, "num_sampled", (R,), np.int32)
        if status_out is not None:
            _, a.status = _dev_out(cla, queue, status_out, "status_out", (1,), np.uint32)
        waits = _set_waits(a, wait_for)
        ev = c_void_p()
        self._call(self._lib.psr_verify, byref(a), byref(ev))
        del waits, keep
        return tokens, num, _event(cl, ev)


# ---- helpers ----
def _set_filters(a, filt, ptr):
    """The filter fields of an args struct from [(all_value, array), ...]
    for top_k, top_p, min_p."""
    (ak, k), (ap, p), (am, m) = filt
    if ak is not None:
        a.all_top_k = ak
    if ap is not None:
        a.all_top_p = ap
    if am is not None:
        a.all_min_p = am
    if k is not None:
        a.top_k = ptr(k)
    if p is not None:
        a.top_p = ptr(p)
    if m is not None:
        a.min_p = ptr(m)


def _host_tokens(tokens, rows):
    if isinstance(tokens, np.ndarray) and tokens.dtype in (np.int32, np.int64):
        if tokens.ndim != 1 or tokens.shape[0] != rows:
            raise cv.bad("tokens", f"expected shape ({rows},), got {tokens.shape}")
        return np.ascontiguousarray(tokens)
    return cv.per_row_int(tokens, "tokens", rows, np.int64)


def _max_drafts(max_drafts, most):
    if max_drafts is None:
        return most
    K = int(max_drafts)
    if K < most:
        raise cv.bad("max_drafts", f"{K} is below a request's {most} drafts")
    return K


def _host_cache(cache, R, vocab):
    if cache is None:
        return None, 0
    if not isinstance(cache, np.ndarray) or cache.dtype != np.float32:
        raise TypeError("draft_cache: expected a float32 numpy array [requests, k, vocab]")
    if cache.ndim != 3 or cache.shape[0] != R or cache.shape[2] != vocab or cache.shape[1] < 1:
        raise cv.bad("draft_cache", f"shape {cache.shape} is not [{R}, k, {vocab}]")
    return np.ascontiguousarray(cache), cache.shape[1]


def _mem_of(x):
    """The cl_mem of a PyOpenCL array (whole buffers only) or buffer."""
    if hasattr(x, "base_data"):
        if x.offset:
            raise cv.bad("array", "a PyOpenCL array with an offset (a view) cannot be passed "
                                  "as a whole buffer; pass a copy")
        return x.base_data.int_ptr
    return x.int_ptr


def _dev_logits(cl, cla, x, name, dtype, shape):
    """(cl_mem, rows, vocab, offset, row_stride, psr_dtype) of device logits."""
    if isinstance(x, cla.Array):
        if shape is not None:
            raise TypeError(f"shape: only for a pyopencl.Buffer {name}")
        pdtype = cv.psr_dtype_of(x.dtype, dtype, name)
        if x.ndim == 1:
            rows, vocab, item = 1, x.shape[0], x.dtype.itemsize
            ok = x.strides[0] == item
            stride = vocab
        elif x.ndim == 2:
            (rows, vocab), item = x.shape, x.dtype.itemsize
            ok = x.strides[1] == item and x.strides[0] % item == 0 and \
                (rows == 1 or x.strides[0] >= vocab * item)
            stride = vocab if rows == 1 else x.strides[0] // item
        else:
            raise cv.bad(name, f"expected [rows, vocab] (2-D), got shape {x.shape}")
        if rows == 0 or vocab == 0:
            raise cv.bad(name, f"shape {x.shape} is empty")
        if not ok or x.offset % item:
            raise cv.bad(name, "each row's elements must be adjacent in the buffer (rows may be "
                               "apart); pass a copy")
        return x.base_data.int_ptr, rows, vocab, x.offset // item, stride, pdtype
    if isinstance(x, cl.MemoryObject):
        if shape is None or dtype is None:
            raise TypeError(f"{name}: a pyopencl.Buffer needs shape=(rows, vocab) and dtype")
        rows, vocab = (int(v) for v in shape)
        if rows < 1 or vocab < 1:
            raise cv.bad("shape", f"{shape} is empty")
        key = dtype if isinstance(dtype, str) else np.dtype(dtype).name
        if key not in cv._LOGIT_DTYPES:
            raise TypeError(f"dtype={dtype!r} is not 'f32', 'f16' or 'bf16'")
        return x.int_ptr, rows, vocab, 0, vocab, cv._LOGIT_DTYPES[key]
    raise TypeError(f"{name}: expected a numpy or PyOpenCL array, not {type(x).__name__}")


def _dev_in(cl, cla, queue, x, name, n, np_dtype, keep):
    """The cl_mem of a per-row input: a PyOpenCL array of np_dtype and
    shape (n,), a buffer (psr checks its size), or host values uploaded."""
    if isinstance(x, cla.Array):
        if x.dtype != np_dtype:
            raise TypeError(f"{name}: a PyOpenCL array of {x.dtype}, not {np.dtype(np_dtype)}")
        if x.shape != (n,):
            raise cv.bad(name, f"expected shape ({n},), got {x.shape}")
        if x.offset:
            raise cv.bad(name, "a PyOpenCL array with an offset (a view) is not a whole "
                               "buffer; pass a copy")
        return x.base_data.int_ptr
    if isinstance(x, cl.MemoryObject):
        return x.int_ptr
    if np.dtype(np_dtype) == np.float32:
        host = cv.per_row_float(x, name, n)
    else:
        host = cv.per_row_int(x, name, n, np_dtype)
    d = cla.to_device(queue, host)
    keep.append(d)
    return d.base_data.int_ptr


def _dev_filters(cl, cla, queue, rows, top_k, top_p, min_p, keep):
    out = []
    for v, name, kind, dt in ((top_k, "top_k", "k", np.int32), (top_p, "top_p", "p", np.float32),
                              (min_p, "min_p", "p", np.float32)):
        if v is None:
            out.append((None, None))
        elif _is_cl(v):
            out.append((None, _dev_in(cl, cla, queue, v, name, rows, dt, keep)))
        else:
            all_v, arr = cv.filter_value(v, name, rows, kind)
            out.append((all_v, None if arr is None else
                        _dev_in(cl, cla, queue, arr, name, rows, dt, keep)))
    return out


def _dev_out(cla, queue, out, name, shape, np_dtype):
    """(array, cl_mem) of an output: the caller's PyOpenCL array, checked,
    or a new one on the context's queue."""
    if out is None:
        arr = cla.empty(queue, shape, np_dtype)
        return arr, arr.base_data.int_ptr
    if not isinstance(out, cla.Array):
        raise TypeError(f"{name}: expected a PyOpenCL array, not {type(out).__name__}")
    if out.dtype != np_dtype:
        raise TypeError(f"{name}: a PyOpenCL array of {out.dtype}, not {np.dtype(np_dtype)}")
    if out.shape != tuple(shape) or not out.flags.c_contiguous or out.offset:
        raise cv.bad(name, f"expected a whole contiguous array of shape {tuple(shape)}, got "
                           f"{out.shape}")
    return out, out.base_data.int_ptr


def _dev_matrix(cla, queue, x, name, keep):
    if isinstance(x, np.ndarray):
        if x.dtype not in (np.float32, np.float16):
            raise TypeError(f"{name}: dtype {x.dtype} is not float32 or float16")
        x = cla.to_device(queue, np.ascontiguousarray(x))
        keep.append(x)
    if not isinstance(x, cla.Array):
        raise TypeError(f"{name}: expected a PyOpenCL or numpy array, not {type(x).__name__}")
    if x.ndim != 2 or 0 in x.shape:
        raise cv.bad(name, f"expected a non-empty 2-D array, got shape {x.shape}")
    if not x.flags.c_contiguous or x.offset:
        raise cv.bad(name, "expected a whole contiguous array (row-major, packed)")
    return x


def _set_waits(a, wait_for):
    if not wait_for:
        return None
    evs = list(wait_for)
    arr = (c_void_p * len(evs))(*[e.int_ptr for e in evs])
    a.num_events_in_wait_list = len(evs)
    a.event_wait_list = ctypes.addressof(arr)
    return arr


def _event(cl, ev):
    """The call's cl_event as a pyopencl.Event that owns the reference psr
    handed over (not retained again)."""
    return cl.Event.from_int_ptr(ev.value, retain=False) if ev.value else None
