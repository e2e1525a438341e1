"""What the calls in rounds across vocabulary shards share: the argument
checks, DeviceShard, the base of psr.LogprobsShard and psr.VerifyShard, and
FilteredShard, a DeviceShard with the filters' rounds (psr.LogprobsShard's).

The round calls (psr_logprobs_shard_round, psr_verify_shard_round) take
device buffers only, so a shard object uploads its inputs once, into
buffers of the context's OpenCL context (made with libpsr's own OpenCL
library, _api.opencl()), keeps them with the buffers the rounds exchange,
and runs each round under the context's lock: the host arrays the round
reads written in, the call, then what it wrote read back."""
import contextlib
import ctypes
import numbers
from ctypes import byref

import numpy as np

from . import _api
from . import _convert as cv
from ._errors import (FilterRange, InvalidArgument, OpenCLError, OutOfDeviceMemory,
                      OutOfHostMemory, PositionRange, TemperatureRange)


def size_arg(v, name):
    """A non-negative integer argument."""
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
        raise TypeError(f"{name}: expected an integer, not {type(v).__name__}")
    if int(v) < 0:
        raise cv.bad(name, f"{int(v)} is negative")
    return int(v)


def shard_place(**fields):
    """The placement arguments of a shard (vocab_offset, vocab_total,
    shard_index, ...) as non-negative integers, by name; psr checks how
    they fit together at the first round."""
    return {name: size_arg(v, name) for name, v in fields.items()}


def check_temperatures(t, name):
    """psr's host rule, checked before anything reaches the device: each
    temperature is 0 or a positive normal float32."""
    ok = (t == 0) | (np.isfinite(t) & (t >= np.finfo(np.float32).tiny))
    if not ok.all():
        r = int(np.argmin(ok))
        raise TemperatureRange(f"{name}[{r}] = {float(t[r]):g} is not 0 or a positive normal "
                               f"number")


def check_positions(p, name):
    """psr's host rule: each position is in [0, 2^30)."""
    ok = (p >= 0) & (p < _api.PSR_MAX_POSITION)
    if not ok.all():
        r = int(np.argmin(ok))
        raise PositionRange(f"{name}[{r}] = {int(p[r])} is outside [0, 2^30)")


def _cl_fail(call, err, what):
    """The error psr itself raises for an OpenCL failure (psr_cl_status):
    CL_MEM_OBJECT_ALLOCATION_FAILURE and CL_OUT_OF_RESOURCES are out of
    device memory, CL_OUT_OF_HOST_MEMORY out of host memory."""
    cls = {-4: OutOfDeviceMemory, -5: OutOfDeviceMemory, -6: OutOfHostMemory}.get(err, OpenCLError)
    return cls(f"{call} ({what}) failed: OpenCL error {err}")


def _as_bytes(x, name, record=None):
    """x's bytes as a flat uint8 array: bytes-like, a uint8 array, or an
    array of the dtype record (when given)."""
    if isinstance(x, (bytes, bytearray, memoryview)):
        return np.frombuffer(x, np.uint8)
    a = np.asarray(x)
    if a.dtype != np.uint8 and (record is None or a.dtype != record):
        also = f" or {record}" if record is not None else ""
        raise TypeError(f"{name}: expected uint8 bytes{also}, not {a.dtype}")
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def gathered(x, nbytes, name, what, record=None):
    """Every shard's pieces of an exchange as one uint8 array of nbytes:
    one array (or bytes) of them all, or a list of the pieces in order,
    concatenated here. what says how nbytes is made up, for the error."""
    if isinstance(x, (list, tuple)):
        pieces = [_as_bytes(p, name, record) for p in x]
        b = np.concatenate(pieces) if pieces else np.empty(0, np.uint8)
    else:
        b = _as_bytes(x, name, record)
    if b.size != nbytes:
        raise cv.bad(name, f"{b.size} bytes, not {what} = {nbytes} (every shard's, gathered)")
    return b


class DeviceShard:
    """One shard's device buffers and rounds (a subclass names its round
    call in _ROUND, fills its args' buffers with _make_buffers, and sets
    slots, slot_bytes, shard_slot and shard_slots: its partials' layout)."""

    _ROUND = None  # the name of libpsr's round call

    def __init__(self, ctx, args):
        self._ctx, self._a = ctx, args
        self._mems = []
        self._keys = None  # the reduced keys of the last round 1, for the later rounds
        c, q = ctypes.c_void_p(), ctypes.c_void_p()
        ctx._call(ctx._lib.psr_context_cl, byref(c), None, byref(q))
        self._cl_ctx, self._cl_queue = c.value, q.value

    def _make_buffers(self, specs):
        """A device buffer for each (args field, host array to copy in or a
        byte count, what for errors), all of them or none."""
        try:
            for field, src, what in specs:
                setattr(self._a, field, self._buffer(src, what))
        except BaseException:
            self._release()
            raise

    def _buffer(self, src, what):
        host = None if isinstance(src, numbers.Integral) else src
        nbytes = int(src) if host is None else host.nbytes
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
        """Round r of the subclass's round call (_ROUND), as _run runs it."""
        self._run(lambda c: getattr(c._lib, self._ROUND)(c._ptr, byref(self._a), r, None),
                  before, after)

    def _run(self, call, before, after):
        """call(ctx) (a libpsr call, its psr_status returned) under the
        context's lock: the writes of before, the call, then the reads of
        after ([(mem, host array, offset)])."""
        ctx = self._ctx
        with ctx._locked():
            ctx._check()
            if not self._mems:
                raise InvalidArgument(f"shard: this {type(self).__name__} is closed")
            for mem, host, off in before:
                self._copy(True, mem, host, off)
            st = call(ctx)
            if st:
                raise ctx._error(st)
            for mem, host, off in after:
                self._copy(False, mem, host, off)

    def _share(self, r, before, mem, total, offset, nbytes, full):
        """Round r, which writes this shard's nbytes at byte offset of mem
        (total bytes, every shard's place): those bytes as uint8, or with
        full=True the whole of mem with zeros in the other shards' places
        (so that an element-wise maximum or sum of every shard's gives the
        gathered buffer, for transports that only reduce)."""
        if full:  # the other shards' places read back as zeros
            before = list(before) + [(mem, np.zeros(total, np.uint8), 0)]
        out = np.empty(total if full else nbytes, np.uint8)
        self._round(r, before, [(mem, out, 0 if full else offset)])
        return out

    @property
    def partials_bytes(self):
        """The bytes of every shard's slots together: shard_slots x slot_bytes."""
        return self.shard_slots * self.slot_bytes

    def _partials_round(self, keys_mem, keys, n, full):
        """Round 1 with keys (n of them, every shard's reduced) written to
        keys_mem: this shard's slots of the partials, or the whole of them
        with full=True. Keeps the keys for the later rounds."""
        k = cv.per_row_int(keys, "keys", n, np.uint32)
        out = self._share(1, [(keys_mem, k, 0)], self._a.shard_partials, self.partials_bytes,
                          self.shard_slot * self.slot_bytes, self.slots * self.slot_bytes, full)
        self._keys = k.copy()
        return out

    def _gathered_partials(self, partials):
        """Every shard's slots, gathered, as one uint8 array."""
        return gathered(partials, self.partials_bytes, "partials",
                        f"shard_slots x slot_bytes = {self.shard_slots} x {self.slot_bytes}")

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
        with contextlib.suppress(Exception):
            self._release()


# ---- filters across shards (psr_shard_filter_rounds, psr_shard_filter_round) ----

_WORDS = _api.PSR_SHARD_FILTER_WORDS
_FILTER_FIELDS = ("top_k", "top_p", "min_p", "all_top_k", "all_top_p", "all_min_p")


def filter_values(top_k, top_p, min_p, rows):
    """[(all value, per-row array), ...] for top_k, top_p and min_p (None:
    off, a scalar for every row, or per row), with psr's host rule checked
    before anything reaches the device: each top-p in (0, 1], each min-p
    in [0, 1] (psr.FilterRange naming the entry; every top-k is valid)."""
    filt = [cv.filter_value(v, n, rows, k) for v, n, k in
            ((top_k, "top_k", "k"), (top_p, "top_p", "p"), (min_p, "min_p", "p"))]
    for (one, arr), name, low, ok in (
            (filt[1], "top_p", "(0", lambda x: (x > 0) & (x <= 1)),
            (filt[2], "min_p", "[0", lambda x: (x >= 0) & (x <= 1))):
        if one is not None and not ok(np.float32(one)):
            raise FilterRange(f"{name} = {one:g} is outside {low}, 1]")
        if arr is not None and not ok(arr).all():
            r = int(np.argmin(ok(arr)))
            raise FilterRange(f"{name}[{r}] = {float(arr[r]):g} is outside {low}, 1]")
    return filt


def filter_specs(args, filt):
    """The all_* values of filt set in args, and the buffers of its
    per-row arrays, as _make_buffers takes them."""
    specs = []
    for (one, arr), name in zip(filt, ("top_k", "top_p", "min_p")):
        if one is not None:
            setattr(args, "all_" + name, one)
        if arr is not None:
            specs.append((name, arr, name))
    return specs


class FilteredShard(DeviceShard):
    """A DeviceShard whose call may filter (top-k, top-p, min-p). Across
    shards a filter needs each row's threshold over the whole vocabulary
    first: the rounds of psr_shard_filter_round, 0 .. filter_rounds, the
    application reducing every shard's partials between them; they leave
    the thresholds in a shard_filter_state buffer that the shard's args
    name. The subclass's args (with rows, vocab, logits, logits_dtype,
    row_stride, temperatures, the filter fields and the shard fields, as
    psr_logprobs_args has them) are set, their buffers made, before
    _open_filters; its rounds call _need_filters first."""

    filter_rounds = 0  # the exchanges the filters need; 0 without filters

    def __init__(self, ctx, args):
        super().__init__(ctx, args)
        self._sa = None  # the filters' psr_sample_args
        # The next filter round this shard runs: 0 .. filter_rounds, and
        # filter_rounds + 1 once the last reduction is applied.
        self._filter_next = 0

    def _open_filters(self):
        """The filters' sample args, their state and exchange buffers, and
        filter_rounds (psr_shard_filter_rounds, which checks the args)."""
        a, ctx = self._a, self._ctx
        try:
            sa = ctx._args(_api.SampleArgs)
            sa.rows, sa.vocab, sa.requests = a.rows, a.vocab, a.rows
            sa.logits, sa.logits_dtype, sa.row_stride = a.logits, a.logits_dtype, a.row_stride
            sa.temperatures = a.temperatures
            for f in _FILTER_FIELDS + ("shard_count", "shard_index", "vocab_offset", "vocab_total"):
                setattr(sa, f, getattr(a, f))
            state = self._buffer(a.rows * _api.PSR_SHARD_FILTER_STATE_BYTES, "shard_filter_state")
            sa.shard_filter_state = a.shard_filter_state = state
            n = ctypes.c_size_t(0)
            ctx._call(ctx._lib.psr_shard_filter_rounds, byref(sa), byref(n))
            if n.value:
                words = a.rows * _WORDS * 8
                self._partial_mem = self._buffer(words, "the filters' partial")
                self._reduced_mem = self._buffer(words, "the filters' reduced partials")
        except BaseException:
            self._release()
            raise
        self._sa, self.filter_rounds = sa, n.value

    def filter_partial(self, r, reduced=None):
        """Round r (0 .. filter_rounds - 1) of the filters: this shard's
        partial, uint64 [rows, 256]. Reduce every shard's partial of the
        round element-wise, round 0's by maximum (np.maximum, MPI.MAX) and
        every later round's by sum (MPI.SUM), and pass the result as
        reduced to the next round: filter_partial(r + 1, reduced), or
        filter_apply(reduced) after round filter_rounds - 1. Round 0 takes
        no reduced and starts the rounds (again, at any time); the others
        follow in order."""
        r = size_arg(r, "r")
        n = self._filters_on("filter_partial")
        if r >= n:
            raise cv.bad("r", f"{r} is not a round with a partial: those are 0 .. {n - 1}; "
                              f"filter_apply(reduced) takes round {n - 1}'s reduction")
        if r == 0:
            if reduced is not None:
                raise cv.bad("reduced", "round 0 takes none: its partial starts the rounds")
            red = None
        else:
            self._filter_order("filter_partial", r)
            red = self._reduced(reduced, r)
        out = np.empty((self._a.rows, _WORDS), np.uint64)
        self._filter_round(r, red, [(self._partial_mem, out, 0)])
        return out

    def filter_apply(self, reduced):
        """The last round of the filters (round filter_rounds), which only
        applies: reduced is the sum of every shard's partial of round
        filter_rounds - 1. Then this shard's logprobs rounds may run."""
        n = self._filters_on("filter_apply")
        self._filter_order("filter_apply", n)
        self._filter_round(n, self._reduced(reduced, n), [])

    def _filters_on(self, call):
        """filter_rounds, or InvalidArgument for a shard without filters."""
        if not self.filter_rounds:
            raise InvalidArgument(f"{call}: this {type(self).__name__} has no filters "
                                  f"(filter_rounds is 0): there are no filter rounds to run")
        return self.filter_rounds

    def _filter_order(self, call, r):
        """InvalidArgument unless round r (> 0) is this shard's next."""
        nxt, n = self._filter_next, self.filter_rounds
        if r == nxt:
            return
        if nxt == 0:
            why = "start with filter_partial(0)"
        elif nxt > n:
            why = "the rounds are complete (filter_apply ran); filter_partial(0) starts them again"
        elif r < nxt:
            why = (f"round {r} already ran and the rounds go in order: round {nxt} is next "
                   f"(filter_partial(0) starts them again)")
        else:
            why = f"round {nxt} is next" + ("" if nxt < n else ": filter_apply(reduced)")
        raise InvalidArgument(f"{call}: round {r} takes round {r - 1}'s partials reduced, and "
                              f"this shard has not run round {r - 1} last: {why}")

    def _reduced(self, reduced, r):
        """The reduction the app passes to round r, as uint64 [rows x 256]."""
        rows, how = self._a.rows, "maximum" if r == 1 else "sum"
        need = (f"round {r} takes the element-wise {how} of every shard's "
                f"filter_partial({r - 1}), uint64 [{rows}, {_WORDS}]")
        if reduced is None:
            raise cv.bad("reduced", f"None: {need}")
        a = np.asarray(reduced)
        if a.dtype == np.bool_ or not np.issubdtype(a.dtype, np.integer):
            raise TypeError(f"reduced: expected integers (uint64), not {a.dtype}")
        if a.shape not in ((rows, _WORDS), (rows * _WORDS,)):
            raise cv.bad("reduced", f"shape {a.shape}: {need}")
        return cv.per_row_int(a.reshape(-1), "reduced", rows * _WORDS, np.uint64)

    def _filter_round(self, r, reduced, after):
        """Round r of psr_shard_filter_round with reduced (rounds > 0)
        written first. A round that fails leaves the rounds to start again."""
        n = self.filter_rounds
        fa = self._ctx._args(_api.ShardFilterArgs)
        fa.sample, fa.round = ctypes.addressof(self._sa), r
        fa.reduced = self._reduced_mem if r else None
        fa.partial = self._partial_mem if r < n else None
        before = [] if reduced is None else [(self._reduced_mem, reduced, 0)]
        self._filter_next, self._keys = 0, None  # the state changes: later rounds again
        self._run(lambda c: c._lib.psr_shard_filter_round(c._ptr, byref(fa), None), before, after)
        self._filter_next = r + 1

    def _need_filters(self, call):
        """InvalidArgument unless the filters' rounds are complete."""
        n, nxt = self.filter_rounds, self._filter_next
        if n and nxt != n + 1:
            where = "none ran" if nxt == 0 else f"round {nxt} of 0 .. {n} is next"
            raise InvalidArgument(
                f"{call}: the filters' rounds are not complete ({where}): run "
                f"filter_partial(r, reduced) for r = 0 .. {n - 1}, then filter_apply(reduced), "
                f"first")
