#!/usr/bin/env python3
"""The host time a Python call of psr adds over the same call from C.

Times psr_sample on PyOpenCL buffers (the device path, nothing copied) at
1 x 128,256 fp32 logits: the host time of each call alone (median of N
calls, the queue drained between calls, as the C figure of
docs/benchmarks.md is taken), from Python (ctx.sample) and from C, and
prints one line per call: the Python us, the C us and the difference.

The C figure comes from a small C program compiled here against psr.h and
the same libpsr the package loads (needs a C compiler, the OpenCL loader
and psr's headers: --include, or $PSR_INCLUDE, or the repository's include/
and build/include/). Without those it falls back to the same psr_sample
call made through ctypes with its argument struct filled once (the
C figure then includes ctypes' own call cost, well under a microsecond),
and says so.

    python3 python/bench_overhead.py [--iters 2000] [--device SEL] [--include DIR:DIR]

Run it with the installed package, or from the repository with
PYTHONPATH=python PSR_LIBRARY=build/lib/libpsr.so.
"""
import argparse
import ctypes
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

import psr
from psr import _api

ROWS, VOCAB = 1, 128256

C_PROGRAM = r"""
#include <psr/psr.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

int main(int argc, char **argv)
{
    int iters = atoi(argv[1]);
    const char *device = argc > 2 ? argv[2] : NULL;
    enum { ROWS = 1, VOCAB = 128256 };
    psr_context_options o;
    psr_context_options_init(&o, sizeof o);
    o.device = device;
    psr_context *ctx = NULL;
    if (psr_context_create(&o, &ctx) != PSR_OK) {
        fprintf(stderr, "%s\n", psr_last_error(NULL));
        return 1;
    }
    cl_context cl;
    cl_command_queue q;
    psr_context_cl(ctx, &cl, NULL, &q);
    float *x = malloc(sizeof(float) * ROWS * VOCAB);
    for (int i = 0; i < ROWS * VOCAB; i++)
        x[i] = (float)((i * 2654435761u) % 1000) / 100.0f;
    long long seeds[ROWS] = {1}, pos[ROWS] = {7};
    float temps[ROWS] = {0.8f};
    cl_int err;
    cl_mem m[5];
    m[0] = clCreateBuffer(cl, CL_MEM_COPY_HOST_PTR, sizeof(float) * ROWS * VOCAB, x, &err);
    m[1] = clCreateBuffer(cl, CL_MEM_COPY_HOST_PTR, sizeof seeds, seeds, &err);
    m[2] = clCreateBuffer(cl, CL_MEM_COPY_HOST_PTR, sizeof pos, pos, &err);
    m[3] = clCreateBuffer(cl, CL_MEM_COPY_HOST_PTR, sizeof temps, temps, &err);
    m[4] = clCreateBuffer(cl, CL_MEM_READ_WRITE, 4 * ROWS, NULL, &err);
    psr_sample_args a;
    psr_sample_args_init(&a, sizeof a);
    a.rows = a.requests = ROWS, a.vocab = VOCAB, a.logits = m[0];
    a.seeds = m[1], a.positions = m[2], a.temperatures = m[3], a.tokens = m[4];
    double *t = calloc((size_t)iters, sizeof *t);
    for (int i = -50; i < iters; i++) {
        cl_event ev = NULL;
        double t0 = now_us();
        psr_status st = psr_sample(ctx, &a, &ev);
        double t1 = now_us();
        if (st != PSR_OK) {
            fprintf(stderr, "%s\n", psr_last_error(ctx));
            return 1;
        }
        clWaitForEvents(1, &ev);
        clReleaseEvent(ev);
        if (i >= 0)
            t[i] = t1 - t0;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp);
    printf("%.3f\n", t[iters / 2]);
    for (int i = 0; i < 5; i++)
        clReleaseMemObject(m[i]);
    psr_context_free(ctx);
    return 0;
}
"""


def include_dirs(given):
    dirs = [d for d in (given or os.environ.get("PSR_INCLUDE", "")).split(":") if d]
    if not dirs:
        root = pathlib.Path(__file__).resolve().parent.parent
        dirs = [str(root / "include"), str(root / "build" / "include")]
    ok = any((pathlib.Path(d) / "psr" / "psr.h").exists() for d in dirs) and \
        any((pathlib.Path(d) / "psr" / "psr_version.h").exists() for d in dirs)
    return dirs if ok else None


def c_figure(iters, device, includes):
    """The C program's median host time of psr_sample, or None."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    dirs = include_dirs(includes)
    if not cc or not dirs:
        return None, "no C compiler or psr headers"
    libpsr = pathlib.Path(_api._library_path("libpsr", "PSR_LIBRARY")).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = pathlib.Path(tmp) / "hostcost.c", pathlib.Path(tmp) / "hostcost"
        src.write_text(C_PROGRAM)
        cmd = [cc, "-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L",
               "-DCL_TARGET_OPENCL_VERSION=120", str(src), "-o", str(exe)] + \
            [f"-I{d}" for d in dirs] + [str(libpsr), f"-Wl,-rpath,{libpsr.parent}", "-lOpenCL"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode:
            return None, "the C program did not build: " + r.stderr.strip().splitlines()[-1]
        args = [str(exe), str(iters)] + ([device] if device else [])
        r = subprocess.run(args, capture_output=True, text=True)
        if r.returncode:
            return None, "the C program failed: " + r.stderr.strip()
        return float(r.stdout.strip()), f"C program ({cc})"


def ctypes_figure(ctx, dev, iters):
    """psr_sample through ctypes with its struct filled once."""
    a = ctx._args(_api.SampleArgs)
    a.rows, a.requests, a.vocab = ROWS, ROWS, VOCAB
    a.logits, a.seeds = dev["x"].base_data.int_ptr, dev["s"].base_data.int_ptr
    a.positions, a.temperatures = dev["p"].base_data.int_ptr, dev["t"].base_data.int_ptr
    a.tokens = dev["out"].base_data.int_ptr
    fn, ptr, ref = ctx._lib.psr_sample, ctx._ptr, ctypes.byref(a)
    ev = ctypes.c_void_p()
    evref = ctypes.byref(ev)
    import pyopencl as cl
    times = []
    for i in range(-50, iters):
        t0 = time.perf_counter()
        fn(ptr, ref, evref)
        t1 = time.perf_counter()
        cl.Event.from_int_ptr(ev.value, retain=False).wait()
        if i >= 0:
            times.append(t1 - t0)
    return float(np.median(times)) * 1e6


def python_figure(ctx, dev, iters, use_out):
    times = []
    for i in range(-50, iters):
        t0 = time.perf_counter()
        if use_out:
            _, ev = ctx.sample(dev["x"], dev["t"], dev["s"], dev["p"], out=dev["out"])
        else:
            _, ev = ctx.sample(dev["x"], dev["t"], dev["s"], dev["p"])
        t1 = time.perf_counter()
        ev.wait()
        if i >= 0:
            times.append(t1 - t0)
    return float(np.median(times)) * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=2000)
    ap.add_argument("--device", default=None)
    ap.add_argument("--include", default=None, help="psr's include dirs, ':'-separated")
    ap.add_argument("--rounds", type=int, default=3,
                    help="each figure is the lowest of this many medians (a shared machine)")
    o = ap.parse_args()
    import pyopencl.array as cla
    ctx = psr.Context(o.device)
    q = ctx.cl_queue
    x = np.random.default_rng(0).normal(size=(ROWS, VOCAB)).astype(np.float32) * 3
    dev = dict(x=cla.to_device(q, x), s=cla.to_device(q, np.array([1] * ROWS, np.int64)),
               p=cla.to_device(q, np.array([7] * ROWS, np.int64)),
               t=cla.to_device(q, np.array([0.8] * ROWS, np.float32)),
               out=cla.empty(q, ROWS, np.int32))
    print(f"psr {psr.version()} on {ctx.device.name} ({ctx.device.platform_name}); "
          f"psr_sample at {ROWS} x {VOCAB:,} fp32, PyOpenCL buffers, median of {o.iters} calls, "
          f"host time of the call alone")
    c_runs = [c_figure(o.iters, o.device, o.include) for _ in range(o.rounds)]
    c_us, how = min(c_runs, key=lambda r: (r[0] is None, r[0] or 0))
    if c_us is None:
        print(f"(C figure: {how}; using psr_sample through ctypes instead)")
        c_us = min(ctypes_figure(ctx, dev, o.iters) for _ in range(o.rounds))
        how = "ctypes, struct filled once"
    for label, use_out in (("ctx.sample(..., out=tokens)", True),
                           ("ctx.sample(...) (new tokens array)", False)):
        py_us = min(python_figure(ctx, dev, o.iters, use_out) for _ in range(o.rounds))
        print(f"{label}: python {py_us:.1f} us, C {c_us:.1f} us [{how}], "
              f"difference {py_us - c_us:.1f} us")
    ctx.close()


if __name__ == "__main__":
    sys.exit(main())
