"""psr: LLM token sampling on any OpenCL device, from Python.

ctypes over libpsr's public C API (include/psr/psr.h); no compiled
extension. The package bundles libpsr and the host oracle's library; a
build tree is used instead through $PSR_LIBRARY and $PSR_ORACLE_LIBRARY.
docs/python.md is the guide.

    import numpy as np, psr
    with psr.Context() as ctx:
        tokens = ctx.sample(logits, temperature=0.8, seeds=seeds, positions=positions)
    assert (tokens == psr.oracle.sample(logits, 0.8, seeds, positions)).all()
"""
from . import _api
from ._context import (SHARD_RECORD, Context, DeviceInfo, LogprobsResult, SampleResult, combine,
                       devices, select_device)
from ._shard_logprobs import LogprobsShard, logprobs_shard_slot_bytes, logprobs_shard_slots
from ._shard_verify import VerifyShard, verify_shard_slot_bytes
from ._errors import (BadSelector, BufferOverlap, BufferTooSmall, BuildFailed, CacheIOError,
                      CollectiveError, DeviceNotFound, Error, FilterRange, ForeignBuffer,
                      Fp64Unsupported, InvalidArgument, NoDevice, NotSupported, NullArgument,
                      OpenCLError, OutOfDeviceMemory, OutOfHostMemory, PositionRange, ShardMismatch,
                      StructSize, TemperatureRange, TokenRange)

__all__ = [
    "Context", "DeviceInfo", "LogprobsResult", "SampleResult", "devices", "select_device",
    "combine", "SHARD_RECORD", "LogprobsShard", "logprobs_shard_slots",
    "logprobs_shard_slot_bytes", "VerifyShard", "verify_shard_slot_bytes",
    "version", "version_number", "features", "has_clblast", "oracle",
    "Error", "NullArgument", "InvalidArgument", "OutOfHostMemory", "NoDevice", "BadSelector",
    "DeviceNotFound", "OpenCLError", "BuildFailed", "Fp64Unsupported", "CacheIOError",
    "BufferTooSmall", "PositionRange", "TemperatureRange", "TokenRange", "NotSupported",
    "FilterRange", "StructSize", "ForeignBuffer", "BufferOverlap", "OutOfDeviceMemory",
    "ShardMismatch", "CollectiveError",
    "MAX_POSITION", "MAX_TOP_N", "LOGPROBS_SHARD_BLOCK", "LOGPROBS_MAX_SLOTS",
]

MAX_POSITION = _api.PSR_MAX_POSITION
MAX_TOP_N = _api.PSR_LOGPROBS_MAX_TOP_N
LOGPROBS_SHARD_BLOCK = _api.PSR_LOGPROBS_SHARD_BLOCK  # shards starting on multiples: exact bits
LOGPROBS_MAX_SLOTS = _api.PSR_LOGPROBS_MAX_SLOTS


def version():
    """The loaded libpsr's version, "MAJOR.MINOR.PATCH"."""
    return _api.decode(_api.lib().psr_version())


def version_number():
    """MAJOR * 10000 + MINOR * 100 + PATCH of the loaded libpsr."""
    return _api.lib().psr_version_number()


def features():
    """psr_features(): PSR_FEATURE_* bits of the optional parts this process can use."""
    return _api.lib().psr_features()


def has_clblast():
    """Whether the LM head can run here (CLBlast loads)."""
    return bool(features() & _api.PSR_FEATURE_CLBLAST)


def __getattr__(name):
    if name == "oracle":  # loaded on first use: it needs libpsr_oracle
        import importlib
        return importlib.import_module(".oracle", __name__)
    raise AttributeError(f"module 'psr' has no attribute {name!r}")
