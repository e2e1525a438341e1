"""psr's errors: one exception class per psr_status (include/psr/psr.h)."""


class Error(Exception):
    """A psr call failed. ``status`` is the psr_status number, ``name`` its
    C name (``PSR_ERR_...``) and ``detail`` psr's own message
    (psr_last_error), which names the argument involved."""

    status = -1
    name = "PSR_ERR_UNKNOWN"

    def __init__(self, detail, status=None, name=None):
        if status is not None:
            self.status = status
        if name is not None:
            self.name = name
        self.detail = detail
        super().__init__(f"{self.name}: {detail}" if detail else self.name)


class NullArgument(Error):
    status, name = 1, "PSR_ERR_NULL_ARGUMENT"


class InvalidArgument(Error, ValueError):
    status, name = 2, "PSR_ERR_INVALID_ARGUMENT"


class OutOfHostMemory(Error, MemoryError):
    status, name = 3, "PSR_ERR_OUT_OF_HOST_MEMORY"


class NoDevice(Error):
    status, name = 4, "PSR_ERR_NO_DEVICE"


class BadSelector(Error, ValueError):
    status, name = 5, "PSR_ERR_BAD_SELECTOR"


class DeviceNotFound(Error, LookupError):
    status, name = 6, "PSR_ERR_DEVICE_NOT_FOUND"


class OpenCLError(Error):
    status, name = 7, "PSR_ERR_OPENCL"


class BuildFailed(Error):
    status, name = 8, "PSR_ERR_BUILD_FAILED"


class Fp64Unsupported(Error):
    status, name = 9, "PSR_ERR_FP64_UNSUPPORTED"


class CacheIOError(Error, OSError):
    status, name = 10, "PSR_ERR_CACHE_IO"


class BufferTooSmall(Error, ValueError):
    status, name = 11, "PSR_ERR_BUFFER_TOO_SMALL"


class PositionRange(Error, ValueError):
    status, name = 12, "PSR_ERR_POSITION_RANGE"


class TemperatureRange(Error, ValueError):
    status, name = 13, "PSR_ERR_TEMPERATURE"


class TokenRange(Error, ValueError):
    status, name = 14, "PSR_ERR_TOKEN_RANGE"


class NotSupported(Error):
    status, name = 15, "PSR_ERR_NOT_SUPPORTED"


class FilterRange(Error, ValueError):
    status, name = 16, "PSR_ERR_FILTER_RANGE"


class StructSize(Error):
    status, name = 17, "PSR_ERR_STRUCT_SIZE"


class ForeignBuffer(Error, ValueError):
    status, name = 18, "PSR_ERR_FOREIGN_BUFFER"


class BufferOverlap(Error, ValueError):
    status, name = 19, "PSR_ERR_BUFFER_OVERLAP"


class OutOfDeviceMemory(Error, MemoryError):
    status, name = 20, "PSR_ERR_OUT_OF_DEVICE_MEMORY"


class ShardMismatch(Error, ValueError):
    status, name = 21, "PSR_ERR_SHARD_MISMATCH"


class CollectiveError(Error):
    status, name = 22, "PSR_ERR_COLLECTIVE"


ERRORS = {cls.status: cls for cls in (
    NullArgument, InvalidArgument, OutOfHostMemory, NoDevice, BadSelector, DeviceNotFound,
    OpenCLError, BuildFailed, Fp64Unsupported, CacheIOError, BufferTooSmall, PositionRange,
    TemperatureRange, TokenRange, NotSupported, FilterRange, StructSize, ForeignBuffer,
    BufferOverlap, OutOfDeviceMemory, ShardMismatch, CollectiveError)}


def error_for(status, detail):
    """The exception for a psr_status (Error itself for a number psr.h does not name)."""
    cls = ERRORS.get(status)
    if cls is None:
        return Error(detail, status=status, name=f"PSR_ERR_UNKNOWN({status})")
    return cls(detail)
