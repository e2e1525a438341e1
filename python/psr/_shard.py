"""What the calls in rounds across vocabulary shards share: the argument
checks, and DeviceShard, the base of psr.LogprobsShard and psr.VerifyShard.

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
from ._errors import (InvalidArgument, OpenCLError, OutOfDeviceMemory, OutOfHostMemory,
                      PositionRange, TemperatureRange)


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
        """Round r under the context's lock: the writes of before, the call,
        then the reads of after ([(mem, host array, offset)])."""
        ctx = self._ctx
        with ctx._locked():
            ctx._check()
            if not self._mems:
                raise InvalidArgument(f"shard: this {type(self).__name__} is closed")
            for mem, host, off in before:
                self._copy(True, mem, host, off)
            st = getattr(ctx._lib, self._ROUND)(ctx._ptr, byref(self._a), r, None)
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
