"""Logprobs across vocabulary shards on host arrays: psr.LogprobsShard,
one shard's inputs on the device and the three rounds of
psr_logprobs_shard_round, the application moving the bytes between
shards (docs/python.md, "Logprobs across shards").

psr_logprobs_shard_round takes device buffers only, so a LogprobsShard
uploads its shard's logits, temperatures and tokens once, into buffers of
the context's OpenCL context (made with libpsr's own OpenCL library), and
keeps them, with the keys and partials buffers, until close()."""
import ctypes
import numbers
from ctypes import byref

import numpy as np

from . import _api
from . import _convert as cv
from ._context import LogprobsResult, _host_tokens
from ._errors import (InvalidArgument, OpenCLError, OutOfDeviceMemory, OutOfHostMemory,
                      TemperatureRange)

_FILTERS_REFUSED = ("filters across shards need the rounds of psr_shard_filter_round, which "
                    "the Python package does not expose; use the C API (docs/sharded.md)")


def _size(v, name):
    """A non-negative integer argument."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
        raise TypeError(f"{name}: expected an integer, not {type(v).__name__}")
    if int(v) < 0:
        raise cv.bad(name, f"{int(v)} is negative")
    return int(v)


def logprobs_shard_slots(shard_vocab):
    """The slots of the partials a shard of shard_vocab tokens fills
    (psr_logprobs_shard_slots): one per 16,384 tokens, rounded up."""
    return _api.lib().psr_logprobs_shard_slots(_size(shard_vocab, "shard_vocab"))


def logprobs_shard_slot_bytes(rows, top_n):
    """The bytes of one slot for rows rows and top_n top logprobs
    (psr_logprobs_shard_slot_bytes): rows x (12 + 8 top_n), rounded up to 16."""
    rows = _size(rows, "rows")
    top_n = cv.top_n_of(top_n, "top_n")
    n = _api.lib().psr_logprobs_shard_slot_bytes(rows, top_n)
    if n == 0 and rows:
        raise cv.bad("rows", f"{rows} rows are too many for a slot")
    return n


def _check_temperatures(t):
    """psr_logprobs_host's rule, checked before anything reaches the device:
    each temperature is 0 or a positive normal float32."""
    ok = (t == 0) | (np.isfinite(t) & (t >= np.finfo(np.float32).tiny))
    if not ok.all():
        r = int(np.argmin(ok))
        raise TemperatureRange(f"temperature[{r}] = {float(t[r]):g} is not 0 or a positive "
                               f"normal number")


def _cl_fail(call, err, what):
    """The error psr itself raises for an OpenCL failure (psr_cl_status):
    CL_MEM_OBJECT_ALLOCATION_FAILURE and CL_OUT_OF_RESOURCES are out of
    device memory, CL_OUT_OF_HOST_MEMORY out of host memory."""
    cls = {-4: OutOfDeviceMemory, -5: OutOfDeviceMemory, -6: OutOfHostMemory}.get(err, OpenCLError)
    return cls(f"{call} ({what}) failed: OpenCL error {err}")


def _as_bytes(x, name):
    if isinstance(x, (bytes, bytearray, memoryview)):
        return np.frombuffer(x, np.uint8)
    a = np.asarray(x)
    if a.dtype != np.uint8:
        raise TypeError(f"{name}: expected uint8 bytes, not {a.dtype}")
    return np.ascontiguousarray(a).reshape(-1)


class LogprobsShard:
    """One shard of a vocabulary split over devices or processes, for
    logprobs (made by Context.logprobs_shard). Every shard runs the three
    rounds, the application moving the bytes between them:

        keys = shard.keys()            # round 0: uint32 [rows]
        # reduce: every shard's keys, element-wise maximum
        mine = shard.partials(keys)    # round 1: this shard's slots, uint8
        # gather: every shard's slots, in slot order
        result = shard.finish(gathered)  # round 2: a LogprobsResult

    The result is the same on every shard; shards whose first tokens are
    multiples of 16,384 give Context.logprobs' bits on the whole
    vocabulary. Holds device buffers until close() (or the end of a with
    block, or garbage collection)."""

    def __init__(self, ctx, args, inputs, top_n):
        self._ctx, self._a, self._top_n = ctx, args, top_n
        self._mems = []
        self._keys = None  # the reduced keys of the last partials(), for finish()
        self.rows, self.vocab = args.rows, args.vocab
        self.shard_slot, self.shard_slots = args.shard_slot, args.shard_slots
        self.slots = _api.lib().psr_logprobs_shard_slots(args.vocab)
        self.slot_bytes = _api.lib().psr_logprobs_shard_slot_bytes(args.rows, top_n)
        c, q = ctypes.c_void_p(), ctypes.c_void_p()
        ctx._call(ctx._lib.psr_context_cl, byref(c), None, byref(q))
        self._cl_ctx, self._cl_queue = c.value, q.value
        try:
            logits, temps, tokens = inputs
            args.logits = self._buffer(logits.nbytes, logits, "logits")
            if temps is not None:
                args.temperatures = self._buffer(temps.nbytes, temps, "temperature")
            args.tokens = self._buffer(tokens.nbytes, tokens, "tokens")
            rows = args.rows
            args.shard_token_keys = self._buffer(rows * 4, None, "keys")
            args.shard_partials = self._buffer(self.partials_bytes, None, "partials")
            args.token_logprobs = self._buffer(rows * 4, None, "logprobs")
            args.token_ranks = self._buffer(rows * 4, None, "ranks")
            if top_n:
                args.top_ids = self._buffer(rows * top_n * 4, None, "top_ids")
                args.top_logprobs = self._buffer(rows * top_n * 4, None, "top_logprobs")
        except BaseException:
            self._release()
            raise

    @property
    def partials_bytes(self):
        """The bytes of every shard's slots together: shard_slots x slot_bytes."""
        return self.shard_slots * self.slot_bytes

    def _buffer(self, nbytes, host, what):
        err = ctypes.c_int32(0)
        flags = _api.CL_MEM_READ_WRITE | (_api.CL_MEM_COPY_HOST_PTR if host is not None else 0)
        mem = _api.opencl().clCreateBuffer(self._cl_ctx, flags, nbytes,
                                           None if host is None else host.ctypes.data,
                                           byref(err))
        if err.value or not mem:
            raise _cl_fail("clCreateBuffer", err.value, f"{nbytes} bytes for {what}")
        self._mems.append(mem)
        return mem

    def _copy(self, write, mem, host, offset=0):
        """A blocking write of host into mem (or read of mem into host) at offset."""
        cl = _api.opencl()
        fn = cl.clEnqueueWriteBuffer if write else cl.clEnqueueReadBuffer
        err = fn(self._cl_queue, mem, 1, offset, host.nbytes, host.ctypes.data, 0, None, None)
        if err:
            raise _cl_fail("clEnqueueWriteBuffer" if write else "clEnqueueReadBuffer", err,
                           f"{host.nbytes} bytes")

    def _round(self, r, before, after):
        """Round r under the context's lock: the writes of before, the call,
        then the reads of after ([(mem, host array, offset)])."""
        ctx = self._ctx
        with ctx._locked():
            ctx._check()
            if not self._mems:
                raise InvalidArgument("shard: this LogprobsShard is closed")
            for mem, host, off in before:
                self._copy(True, mem, host, off)
            st = ctx._lib.psr_logprobs_shard_round(ctx._ptr, byref(self._a), r, None)
            if st:
                raise ctx._error(st)
            for mem, host, off in after:
                self._copy(False, mem, host, off)

    def keys(self):
        """Round 0: this shard's keys of the sampled tokens, uint32 [rows].
        Reduce every shard's keys by element-wise maximum (np.maximum,
        MPI.MAX, ReduceOp.MAX) and pass the result to partials()."""
        out = np.empty(self.rows, np.uint32)
        self._round(0, [], [(self._a.shard_token_keys, out, 0)])
        return out

    def partials(self, keys, *, full=False):
        """Round 1 with keys, every shard's keys reduced: this shard's slots
        of the partials, uint8 [slots x slot_bytes], which belong at byte
        shard_slot x slot_bytes of the gathered partials. full=True returns
        the whole partials instead, [shard_slots x slot_bytes] with zeros in
        the other shards' slots: then an element-wise maximum (or sum) of
        every shard's gives the gathered partials, as the keys' reduction."""
        k = cv.per_row_int(keys, "keys", self.rows, np.uint32)
        writes = [(self._a.shard_token_keys, k, 0)]
        if full:  # the other shards' slots read back as zeros
            writes.append((self._a.shard_partials, np.zeros(self.partials_bytes, np.uint8), 0))
        out = np.empty(self.partials_bytes if full else self.slots * self.slot_bytes, np.uint8)
        self._round(1, writes, [(self._a.shard_partials, out,
                                 0 if full else self.shard_slot * self.slot_bytes)])
        self._keys = k.copy()
        return out

    def finish(self, partials):
        """Round 2: the logprobs from every shard's slots gathered, as uint8
        [shard_slots x slot_bytes] bytes (or a list of the shards' pieces in
        slot order, concatenated here), with the reduced keys the last
        partials() took. Returns a LogprobsResult like Context.logprobs',
        the same on every shard."""
        if self._keys is None:
            raise InvalidArgument("finish: round 2 needs this shard's round 1 first: call "
                                  "partials(keys) with the reduced keys")
        if isinstance(partials, (list, tuple)):
            pieces = [_as_bytes(p, "partials") for p in partials]
            p = np.concatenate(pieces) if pieces else np.empty(0, np.uint8)
        else:
            p = _as_bytes(partials, "partials")
        if p.size != self.partials_bytes:
            raise cv.bad("partials", f"{p.size} bytes, not shard_slots x slot_bytes = "
                                     f"{self.shard_slots} x {self.slot_bytes} = "
                                     f"{self.partials_bytes} (every shard's slots gathered)")
        rows, n = self.rows, self._top_n
        lp, rk = np.empty(rows, np.float32), np.empty(rows, np.int32)
        ids, tlp = np.empty((rows, n), np.int32), np.empty((rows, n), np.float32)
        a = self._a
        reads = [(a.token_logprobs, lp, 0), (a.token_ranks, rk, 0)]
        if n:
            reads += [(a.top_ids, ids, 0), (a.top_logprobs, tlp, 0)]
        self._round(2, [(a.shard_token_keys, self._keys, 0), (a.shard_partials, p, 0)], reads)
        return LogprobsResult(lp, rk, ids, tlp)

    # ---- life ----
    def _release(self):
        mems, self._mems = self._mems, []
        if mems:
            cl = _api.opencl()
            for m in mems:
                cl.clReleaseMemObject(m)

    def close(self):
        """Releases the shard's device buffers; later rounds raise."""
        with self._ctx._locked():
            self._release()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self._release()
        except Exception:
            pass


def open_shard(ctx, logits, tokens, temperature, *, vocab_offset, vocab_total, shard_index,
               shard_count, shard_slot, shard_slots, top_n, raw, top_k, top_p, min_p, dtype):
    """Context.logprobs_shard's work: the host arguments checked and
    converted, then a LogprobsShard."""
    top_n = cv.top_n_of(top_n, "top_n")
    for v, name in ((top_k, "top_k"), (top_p, "top_p"), (min_p, "min_p")):
        if v is not None:
            raise cv.bad(name, _FILTERS_REFUSED)
    if not raw and temperature is None:
        raise cv.bad("temperature", "required for processed logprobs (raw=False)")
    sizes = {n: _size(v, n) for n, v in (
        ("vocab_offset", vocab_offset), ("vocab_total", vocab_total),
        ("shard_index", shard_index), ("shard_count", shard_count), ("shard_slot", shard_slot),
        ("shard_slots", shard_slots))}
    if not 1 <= sizes["shard_slots"] <= _api.PSR_LOGPROBS_MAX_SLOTS:
        raise cv.bad("shard_slots", f"{sizes['shard_slots']} is outside 1 .. "
                                    f"{_api.PSR_LOGPROBS_MAX_SLOTS} (PSR_LOGPROBS_MAX_SLOTS)")
    x, rows, vocab, _, pdtype = cv.host_logits(logits, "logits", dtype)
    x = np.ascontiguousarray(x)  # the shard's columns alone go to the device
    tok = _host_tokens(tokens, rows)
    temps = None
    if not raw:
        temps = cv.per_row_float(temperature, "temperature", rows)
        _check_temperatures(temps)
    a = ctx._args(_api.LogprobsArgs)
    a.rows, a.vocab, a.row_stride, a.requests = rows, vocab, vocab, rows
    a.logits_dtype, a.top_n = pdtype, top_n
    a.tokens_dtype = _api.PSR_TOKENS_I64 if tok.dtype == np.int64 else _api.PSR_TOKENS_I32
    a.flags = _api.PSR_LOGPROBS_RAW if raw else 0
    for n, v in sizes.items():
        setattr(a, n, v)
    return LogprobsShard(ctx, a, (x, temps, tok), top_n)
