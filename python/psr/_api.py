"""libpsr through ctypes: the loader, hand-written mirrors of psr.h's
structs, and the prototypes of the calls the package makes.

The mirrors follow include/psr/psr.h field for field (enums are C ints,
cl_mem / cl_event / function pointers are void pointers); the test suite
compiles a C program that prints every field's offset and every struct's
size and compares them with these (tests/python/test_abi.py). Every
argument struct is still set up by its init call with ctypes.sizeof, which
fails with PSR_ERR_STRUCT_SIZE if the two ever disagree in size.
"""
import ctypes
import functools
import os
import pathlib
from ctypes import (POINTER, c_char, c_char_p, c_float, c_int, c_size_t, c_uint, c_uint32,
                    c_uint64, c_void_p)

_HERE = pathlib.Path(__file__).resolve().parent

# psr.h's constants the package uses.
PSR_FEATURE_CLBLAST = 1 << 0
PSR_CAP_FP64, PSR_CAP_FP16, PSR_CAP_SUBGROUPS, PSR_CAP_INT64_ATOMICS = 1, 2, 4, 8
PSR_DTYPE_F32, PSR_DTYPE_F16, PSR_DTYPE_BF16 = 0, 1, 2
PSR_TOKENS_I32, PSR_TOKENS_I64 = 0, 1
PSR_NOISE = {"fp32": 0, "fp64": 1, "wide": 2}
PSR_SAMPLE_DRAFTING, PSR_SAMPLE_FAST_MATH, PSR_SAMPLE_RACE, PSR_SAMPLE_PROBS = 1, 4, 16, 32
PSR_ROW_NO_FINITE, PSR_ROW_BAD_POSITION, PSR_ROW_BAD_TEMPERATURE = 1, 2, 4
PSR_ROW_BAD_INDEX, PSR_ROW_BAD_FILTER, PSR_ROW_BAD_SHARD = 8, 16, 32
PSR_MAX_SHARDS = 255
PSR_VERIFY = {"probabilistic": 0, "greedy": 1}
PSR_VERIFY_BAD_TOKEN, PSR_VERIFY_BAD_POSITION, PSR_VERIFY_BAD_TEMPERATURE = 1, 2, 4
PSR_VERIFY_SHARD_ROUNDS = 4
PSR_LOGPROBS_MAX_TOP_N = 20
PSR_LOGPROBS_RAW = 1
PSR_LOGPROBS_SHARD_ROUNDS, PSR_LOGPROBS_SHARD_BLOCK, PSR_LOGPROBS_MAX_SLOTS = 3, 16384, 64
PSR_SHARD_FILTER_WORDS, PSR_SHARD_FILTER_STATE_BYTES = 256, 40
PSR_MAX_POSITION = 1 << 30
PSR_LOG_LEVELS = {"debug": 0, "info": 1, "warning": 2, "error": 3}
PSR_FP64_POLICY = {"error": 0, "wide": 1}
PSR_DISK_CACHE = {"auto": 0, "on": 1, "off": 2}
DEVICE_TYPES = {0: "other", 1: "cpu", 2: "gpu", 3: "accelerator"}

_enum = c_int
_mem = c_void_p  # cl_mem, cl_event, cl_* handles, data pointers

LOG_FN = ctypes.CFUNCTYPE(None, c_int, c_char_p, c_void_p)


class DeviceInfoStruct(ctypes.Structure):
    _fields_ = [
        ("platform_index", c_uint), ("device_index", c_uint), ("type", _enum),
        ("platform_name", c_char * 128), ("platform_vendor", c_char * 128),
        ("platform_version", c_char * 128), ("name", c_char * 128), ("vendor", c_char * 128),
        ("version", c_char * 128), ("driver_version", c_char * 128),
        ("opencl_c_version", c_char * 64), ("vendor_id", c_uint32), ("compute_units", c_uint32),
        ("max_clock_mhz", c_uint32), ("preferred_work_group_multiple", c_uint32),
        ("max_work_group_size", c_size_t), ("local_mem_bytes", c_uint64),
        ("global_mem_bytes", c_uint64), ("max_alloc_bytes", c_uint64), ("capabilities", c_uint32),
        ("platform", c_void_p), ("device", c_void_p),
    ]


class ContextOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("device", c_char_p), ("log", c_void_p),
        ("log_user_data", c_void_p), ("log_level", _enum), ("cache_dir", c_char_p),
        ("disk_cache", _enum), ("profiling", c_int), ("hide_capabilities", c_uint32),
        ("fp64_policy", _enum),
    ]


class SampleArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("rows", c_size_t), ("vocab", c_size_t), ("logits", _mem),
        ("logits_dtype", _enum), ("logits_offset", c_size_t), ("row_stride", c_size_t),
        ("row_request", _mem), ("requests", c_size_t), ("seeds", _mem), ("temperatures", _mem),
        ("positions", _mem), ("tokens", _mem), ("row_flags", _mem), ("draft_cache", _mem),
        ("draft_cache_rows", _mem), ("draft_cache_rows_total", c_size_t),
        ("draft_cache_k", c_size_t), ("draft_step", c_size_t), ("top_k", _mem), ("top_p", _mem),
        ("min_p", _mem), ("flags", c_uint), ("effective_noise", c_void_p),
        ("num_events_in_wait_list", c_uint32), ("event_wait_list", c_void_p), ("noise", _enum),
        ("tokens_dtype", _enum), ("all_top_k", c_int), ("all_top_p", c_float),
        ("all_min_p", c_float), ("shard_count", c_size_t), ("shard_index", c_size_t),
        ("vocab_offset", c_size_t), ("vocab_total", c_size_t), ("shard_records", _mem),
        ("shard_records_offset", c_size_t), ("shard_filter_state", _mem),
    ]


class SampleHostArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("rows", c_size_t), ("vocab", c_size_t),
        ("row_stride", c_size_t), ("logits", c_void_p), ("logits_dtype", _enum),
        ("seeds", c_void_p), ("positions", c_void_p), ("temperatures", c_void_p),
        ("top_k", c_void_p), ("top_p", c_void_p), ("min_p", c_void_p), ("all_top_k", c_int),
        ("all_top_p", c_float), ("all_min_p", c_float), ("flags", c_uint), ("noise", _enum),
        ("tokens", c_void_p), ("tokens_dtype", _enum), ("row_flags", c_void_p),
        ("no_finite_rows", c_void_p), ("effective_noise", c_void_p), ("shard_count", c_size_t),
        ("shard_index", c_size_t), ("vocab_offset", c_size_t), ("vocab_total", c_size_t),
        ("shard_records", c_void_p),
    ]


class ShardRecord(ctypes.Structure):
    _fields_ = [("value", c_uint64), ("token", ctypes.c_int32), ("flags", c_uint32)]


class CombineArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("rows", c_size_t), ("shards", c_size_t), ("records", _mem),
        ("tokens", _mem), ("tokens_dtype", _enum), ("row_flags", _mem),
        ("num_events_in_wait_list", c_uint32), ("event_wait_list", c_void_p),
    ]


class CombineHostArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("rows", c_size_t), ("shards", c_size_t),
        ("records", c_void_p), ("tokens", c_void_p), ("tokens_dtype", _enum),
        ("row_flags", c_void_p),
    ]


class VerifyArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("requests", c_size_t), ("cu", c_void_p), ("rows", c_size_t),
        ("max_drafts", c_size_t), ("vocab", c_size_t), ("target_logits", _mem),
        ("target_dtype", _enum), ("target_offset", c_size_t), ("target_row_stride", c_size_t),
        ("draft_cache", _mem), ("draft_cache_k", c_size_t), ("draft_tokens", _mem),
        ("seeds", _mem), ("temperatures", _mem), ("positions", _mem), ("method", _enum),
        ("flags", c_uint), ("tokens", _mem), ("tokens_dtype", _enum), ("num_sampled", _mem),
        ("status", _mem), ("effective_noise", c_void_p), ("num_events_in_wait_list", c_uint32),
        ("event_wait_list", c_void_p), ("noise", _enum),
        # 0.3: one shard of a vocabulary (psr_verify_shard_round)
        ("shard_count", c_size_t), ("shard_index", c_size_t), ("vocab_offset", c_size_t),
        ("vocab_total", c_size_t), ("shard_slot", c_size_t), ("shard_slots", c_size_t),
        ("shard_keys", _mem), ("shard_partials", _mem), ("shard_records", _mem),
    ]


class VerifyHostArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("requests", c_size_t), ("cu", c_void_p), ("rows", c_size_t),
        ("max_drafts", c_size_t), ("vocab", c_size_t), ("target_logits", c_void_p),
        ("target_dtype", _enum), ("target_row_stride", c_size_t), ("draft_cache", c_void_p),
        ("draft_cache_k", c_size_t), ("draft_tokens", c_void_p), ("seeds", c_void_p),
        ("temperatures", c_void_p), ("positions", c_void_p), ("method", _enum), ("noise", _enum),
        ("tokens", c_void_p), ("tokens_dtype", _enum), ("num_sampled", c_void_p),
        ("effective_noise", c_void_p),
    ]


class LogprobsArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("rows", c_size_t), ("vocab", c_size_t), ("logits", _mem),
        ("logits_dtype", _enum), ("logits_offset", c_size_t), ("row_stride", c_size_t),
        ("row_request", _mem), ("requests", c_size_t), ("temperatures", _mem), ("tokens", _mem),
        ("top_k", _mem), ("top_p", _mem), ("min_p", _mem), ("top_n", c_int), ("flags", c_uint),
        ("token_logprobs", _mem), ("token_ranks", _mem), ("top_ids", _mem),
        ("top_logprobs", _mem), ("num_events_in_wait_list", c_uint32),
        ("event_wait_list", c_void_p), ("tokens_dtype", _enum), ("all_top_k", c_int),
        ("all_top_p", c_float), ("all_min_p", c_float), ("shard_count", c_size_t),
        ("shard_index", c_size_t), ("vocab_offset", c_size_t), ("vocab_total", c_size_t),
        ("shard_slot", c_size_t), ("shard_slots", c_size_t), ("shard_token_keys", _mem),
        ("shard_partials", _mem), ("shard_filter_state", _mem),
    ]


class LogprobsHostArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("rows", c_size_t), ("vocab", c_size_t),
        ("row_stride", c_size_t), ("logits", c_void_p), ("logits_dtype", _enum),
        ("temperatures", c_void_p), ("tokens", c_void_p), ("tokens_dtype", _enum),
        ("top_k", c_void_p), ("top_p", c_void_p), ("min_p", c_void_p), ("all_top_k", c_int),
        ("all_top_p", c_float), ("all_min_p", c_float), ("top_n", c_int), ("flags", c_uint),
        ("token_logprobs", c_void_p), ("token_ranks", c_void_p), ("top_ids", c_void_p),
        ("top_logprobs", c_void_p),
    ]


class ShardFilterArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("sample", c_void_p), ("round", c_size_t), ("reduced", _mem),
        ("partial", _mem), ("num_events_in_wait_list", c_uint32), ("event_wait_list", c_void_p),
    ]


class LmHeadArgs(ctypes.Structure):
    _fields_ = [
        ("struct_size", c_size_t), ("batch", c_size_t), ("hidden_size", c_size_t),
        ("vocab", c_size_t), ("dtype", _enum), ("hidden", _mem), ("weights", _mem),
        ("logits", _mem), ("num_events_in_wait_list", c_uint32), ("event_wait_list", c_void_p),
    ]


# C name of each mirrored struct, for the layout test.
MIRRORS = {
    "psr_device_info": DeviceInfoStruct,
    "psr_context_options": ContextOptions,
    "psr_sample_args": SampleArgs,
    "psr_sample_host_args": SampleHostArgs,
    "psr_verify_args": VerifyArgs,
    "psr_verify_host_args": VerifyHostArgs,
    "psr_logprobs_args": LogprobsArgs,
    "psr_logprobs_host_args": LogprobsHostArgs,
    "psr_lm_head_args": LmHeadArgs,
    "psr_shard_record": ShardRecord,
    "psr_combine_args": CombineArgs,
    "psr_combine_host_args": CombineHostArgs,
    "psr_shard_filter_args": ShardFilterArgs,
}

# Each argument struct's init call.
INITS = {
    ContextOptions: "psr_context_options_init",
    SampleArgs: "psr_sample_args_init",
    SampleHostArgs: "psr_sample_host_args_init",
    VerifyArgs: "psr_verify_args_init",
    VerifyHostArgs: "psr_verify_host_args_init",
    LogprobsArgs: "psr_logprobs_args_init",
    LogprobsHostArgs: "psr_logprobs_host_args_init",
    LmHeadArgs: "psr_lm_head_args_init",
    CombineArgs: "psr_combine_args_init",
    CombineHostArgs: "psr_combine_host_args_init",
    ShardFilterArgs: "psr_shard_filter_args_init",
}

_P = c_void_p
_PROTOTYPES = {
    # name: (restype, argtypes)
    "psr_status_string": (c_char_p, [c_int]),
    "psr_last_error": (c_char_p, [_P]),
    "psr_last_cl_error": (c_int, [_P]),
    "psr_version": (c_char_p, []),
    "psr_version_number": (c_uint, []),
    "psr_features": (c_uint, []),
    "psr_device_list": (c_int, [_P, c_size_t, POINTER(c_size_t)]),
    "psr_device_select": (c_int, [c_char_p, POINTER(DeviceInfoStruct)]),
    "psr_context_create": (c_int, [_P, POINTER(c_void_p)]),
    "psr_context_create_from_cl": (c_int, [_P, _P, _P, _P, POINTER(c_void_p)]),
    "psr_context_free": (None, [_P]),
    "psr_context_device_info": (c_int, [_P, POINTER(DeviceInfoStruct)]),
    "psr_context_cl": (c_int, [_P, POINTER(c_void_p), POINTER(c_void_p), POINTER(c_void_p)]),
    "psr_context_build_log": (c_char_p, [_P]),
    "psr_context_last_noise": (c_int, [_P, POINTER(c_int)]),
    "psr_context_scratch_bytes": (c_int, [_P, POINTER(c_size_t)]),
    "psr_context_recover": (c_int, [_P]),
    "psr_sample": (c_int, [_P, _P, _P]),
    "psr_sample_host": (c_int, [_P, _P]),
    "psr_verify": (c_int, [_P, _P, _P]),
    "psr_verify_host": (c_int, [_P, _P]),
    "psr_logprobs": (c_int, [_P, _P, _P]),
    "psr_logprobs_host": (c_int, [_P, _P]),
    "psr_logprobs_shard_round": (c_int, [_P, _P, c_uint, _P]),
    "psr_logprobs_shard_slots": (c_size_t, [c_size_t]),
    "psr_logprobs_shard_slot_bytes": (c_size_t, [c_size_t, c_int]),
    "psr_verify_shard_round": (c_int, [_P, _P, c_uint, _P]),
    "psr_verify_shard_slot_bytes": (c_size_t, [c_size_t]),
    "psr_shard_filter_rounds": (c_int, [_P, _P, POINTER(c_size_t)]),
    "psr_shard_filter_round": (c_int, [_P, _P, _P]),
    "psr_lm_head": (c_int, [_P, _P, _P]),
    "psr_combine": (c_int, [_P, _P, _P]),
    "psr_combine_host": (c_int, [_P, _P]),
}
for _cls, _init in INITS.items():
    _PROTOTYPES[_init] = (c_int, [_P, c_size_t])


def _library_path(stem, env):
    """The bundled library next to this module, else the file (or the
    directory holding it) that the environment variable names."""
    bundled = sorted(_HERE.glob(stem + ".so*"))
    if bundled:
        return bundled[0]
    given = os.environ.get(env, "")
    if given:
        p = pathlib.Path(given)
        if p.is_dir():
            found = sorted(p.glob(stem + ".so*"))
            if found:
                return found[0]
        elif p.exists():
            return p
        raise ImportError(f"psr: ${env} = {given!r} names no {stem}.so")
    raise ImportError(f"psr: no {stem}.so next to {_HERE} (an installed package has it) and "
                      f"${env} is not set (give the path of a build's {stem}.so)")


def load_library(path, prototypes):
    """A ctypes.CDLL of path with each function's (restype, argtypes) set."""
    handle = ctypes.CDLL(str(path))
    for name, (restype, argtypes) in prototypes.items():
        fn = getattr(handle, name)
        fn.restype, fn.argtypes = restype, argtypes
    return handle


@functools.lru_cache(maxsize=None)
def lib():
    """libpsr, loaded once with its prototypes set (a race loads it twice:
    the same handle)."""
    return load_library(_library_path("libpsr", "PSR_LIBRARY"), _PROTOTYPES)


# The few OpenCL calls the package makes itself (host arrays to device
# buffers for calls that only take cl_mem: psr_logprobs_shard_round,
# psr_verify_shard_round and psr_shard_filter_round),
# found through libpsr: the OpenCL library libpsr itself links.
CL_MEM_READ_WRITE, CL_MEM_COPY_HOST_PTR = 1 << 0, 1 << 5
_CL_PROTOTYPES = {
    "clCreateBuffer": (c_void_p, [_P, c_uint64, c_size_t, _P, POINTER(ctypes.c_int32)]),
    "clReleaseMemObject": (ctypes.c_int32, [_P]),
    "clEnqueueReadBuffer": (ctypes.c_int32, [_P, _P, c_uint32, c_size_t, c_size_t, _P, c_uint32,
                                              _P, _P]),
    "clEnqueueWriteBuffer": (ctypes.c_int32, [_P, _P, c_uint32, c_size_t, c_size_t, _P, c_uint32,
                                               _P, _P]),
}


@functools.lru_cache(maxsize=None)
def opencl():
    """The OpenCL entry points above, looked up in libpsr's handle (its
    dependencies included), with their prototypes set."""
    lib()
    return load_library(_library_path("libpsr", "PSR_LIBRARY"), _CL_PROTOTYPES)


def oracle_library_path():
    return _library_path("libpsr_oracle", "PSR_ORACLE_LIBRARY")


def decode(b):
    return b.decode("utf-8", "replace") if b else ""


def init_struct(cls):
    """A new argument struct filled with the library's defaults."""
    from ._errors import error_for
    s = cls()
    st = getattr(lib(), INITS[cls])(ctypes.byref(s), ctypes.sizeof(s))
    if st:
        raise error_for(st, decode(lib().psr_last_error(None)) +
                        f" (this package's {cls.__name__} is {ctypes.sizeof(s)} bytes: "
                        f"a libpsr of another version?)")
    return s
