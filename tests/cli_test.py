#!/usr/bin/env python3
"""End-to-end checks of the psr command-line tool: exit codes, --help on
every command, JSON that parses, and the cache commands on a scratch dir."""
import json
import os
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi"))
from retry_lsan import run as run_mpirun  # noqa: E402  mpirun, once more if LeakSanitizer itself failed

PSR = sys.argv[1]
failures = []


def run(*args, env=None):
    return subprocess.run([PSR, *args], capture_output=True, text=True, env=env, timeout=1500)


def check(cond, what, detail=None):
    """detail: a function giving what to print under a failure (a run's exit
    status and stderr), so that a failure in CI says why."""
    if not cond:
        failures.append(what)
        print("FAIL:", what)
        if detail:
            print("   ", detail().replace("\n", "\n    "))
    else:
        print("ok:", what)


def runs_detail(**runs):
    """Each run's exit status, the size of its stdout and the end of its stderr."""
    lines = []
    for name, r in runs.items():
        lines.append(f"{name}: exit {r.returncode}, {len(r.stdout)} bytes of stdout, stderr ends:")
        lines.append(r.stderr[-1200:])
    return "\n".join(lines)


for cmd in ([], ["info"], ["cache"]):
    r = run(*cmd, "--help")
    check(r.returncode == 0 and "usage: psr" in r.stdout, f"psr {' '.join(cmd)} --help")
check(run().returncode == 2, "no command is a usage error")
check(run("frobnicate").returncode == 2, "unknown command is a usage error")
check(run("info", "--bogus").returncode == 2, "unknown info flag is a usage error")
check(run("cache", "warm", "--device").returncode == 2, "--device without a value")
check(run("--version").stdout.startswith("psr "), "--version")

r = run("info", "--json")
check(r.returncode == 0, "info --json succeeds")
info = json.loads(r.stdout)
check(isinstance(info["devices"], list) and "cache" in info, "info --json has devices and cache")
have_device = len(info["devices"]) > 0



def info_tuning_checks():
    """psr info shows each device's tuning as psr's table picks it (a rule
    and named values per kernel family), the same in text and JSON, and
    psr info --help lists the PSR_TUNE_* variables that change it."""
    families = ("sample", "verify", "logprobs", "filter")
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PSR_TUNE_")}
    out = json.loads(run("info", "--json", env=clean).stdout)
    check(out.get("tune_env") == {}, "info --json: tune_env empty without PSR_TUNE_*")
    for dev in out["devices"]:
        t = dev.get("tuning", {})
        check(all(isinstance(t.get(f, {}).get("rule"), str) and t[f]["rule"] for f in families)
              and isinstance(t.get("driver_caches"), bool), f"info --json: device {dev['index']} has a tuning rule per family")
        wg = t.get("sample", {}).get("work_group_size", 0)
        check(isinstance(wg, int) and 0 < wg <= dev["max_work_group_size"] and wg & (wg - 1) == 0,
              f"info --json: device {dev['index']}'s work-group size is a power of two it allows")
    text = run("info", env=clean).stdout
    lines = [l.split() for l in text.splitlines() if l.strip().startswith("tuning ") and "(rule" in l]
    check(len(lines) == len(families) * len(out["devices"]) and "no PSR_TUNE_* variable is set" in text,
          "info: a tuning line per family and device")
    if out["devices"]:
        # "tuning sample (rule cpu): work_group_size 64, resident_per_unit 1, ...": as in the JSON.
        t = out["devices"][0]["tuning"]
        for words in lines[:len(families)]:
            values = dict(zip(words[4::2], (int(v.rstrip(",")) for v in words[5::2])))
            fam = t.get(words[1], {})
            check(words[3].rstrip("):") == fam.get("rule") and values == {k: v for k, v in fam.items() if k != "rule"},
                  f"info: the {words[1]} tuning line equals the JSON")
    r = run("info", "--help")
    variables = [l.split(None, 1) for l in r.stdout.splitlines() if l.strip().startswith("PSR_TUNE_")]
    check(len(variables) >= 10 and any(v[0] == "PSR_TUNE_WG" and v[1].startswith("sample.work_group_size: ")
                                       for v in variables), "info --help lists the PSR_TUNE_* variables")

    def shown(field, tuning):
        family, _, name = field.rpartition(".")
        return name in (tuning.get(family, {}) if family else tuning)

    if out["devices"]:
        fields = [f for _, rest in variables for f in rest.split(":")[0].split(" and ")]
        check(all(shown(f, out["devices"][0]["tuning"]) for f in fields),
              "info --json shows every field a PSR_TUNE_* variable sets")
    tuned = dict(clean, PSR_TUNE_WG="32", PSR_TUNE_VECTOR="0")
    out = json.loads(run("info", "--json", env=tuned).stdout)
    check(out.get("tune_env") == {"PSR_TUNE_WG": "32", "PSR_TUNE_VECTOR": "0"}, "info --json: tune_env lists what is set")
    check("PSR_TUNE_WG=32, PSR_TUNE_VECTOR=0" in run("info", env=tuned).stdout, "info: names the PSR_TUNE_* set")


info_tuning_checks()

r = run("cache", "warm", "--device", "1:2:3")
check(r.returncode == 1 and "PSR_ERR_BAD_SELECTOR" in r.stderr, "bad selector reports its status")


def npy_bytes(descr, shape, payload, fortran=False, magic=b"\x93NUMPY"):
    header = "{'descr': '%s', 'fortran_order': %s, 'shape': (%s), }" % (
        descr, "True" if fortran else "False", "".join(f"{d}, " for d in shape))
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
    return magic + bytes([1, 0]) + struct.pack("<H", len(header)) + header.encode() + payload


def write(d, name, data):
    path = os.path.join(d, name)
    with open(path, "wb") as f:
        f.write(data)
    return path


with tempfile.TemporaryDirectory() as d:
    env = dict(os.environ, PSR_CACHE_DIR=d)
    env.pop("PSR_CACHE", None)
    if have_device:
        r = run("cache", "warm", env=env)
        check(r.returncode == 0 and "kernel variants ready" in r.stdout, "cache warm")
        if "disk tier off" in r.stdout:
            # A driver that caches its own builds (PoCL): warm writes nothing
            # unless PSR_CACHE=1, which two samples of different noise use
            # here (warming every variant through it takes minutes on PoCL).
            check("PSR_CACHE=1" in r.stdout and "0 entries" in run("cache", "list", env=env).stdout,
                  "cache warm without psr's disk tier on a driver that caches its builds")
            logits = write(d, "warm.npy", npy_bytes("<f4", (1, 4), struct.pack("<4f", 1, 2, 3, 4)))
            on = dict(env, PSR_CACHE="1")
            for noise in ("fp32", "wide"):
                r = run("sample", "--logits", logits, "--noise", noise, env=on)
                check(r.returncode == 0, f"sample --noise {noise} with PSR_CACHE=1")
        r = run("cache", "list", "--json", env=env)
        entries = json.loads(r.stdout)
        check(len(entries) >= 2 and all(e["valid"] for e in entries), "cache list --json")
        r = run("info", "--json", env=env)
        check(json.loads(r.stdout)["cache"]["files"] == len(entries), "info counts cache files")
        r = run("cache", "clear", env=env)
        check(r.returncode == 0 and f"removed {len(entries)} files" in r.stdout, "cache clear")
    r = run("cache", "list", env=env)
    check(r.returncode == 0 and "0 entries" in r.stdout, "empty cache lists")

if have_device:
    with tempfile.TemporaryDirectory() as d:
        rows = [[0.5, 3.0, -1.0, 2.0, 1.0], [7.0, 1.0, 7.0, float("nan"), 0.0], [-2.0, -1.0, -3.0, -1.5, -9.0]]
        flat = [v for r in rows for v in r]
        f32 = write(d, "l32.npy", npy_bytes("<f4", (3, 5), struct.pack("<15f", *flat)))
        f16 = write(d, "l16.npy", npy_bytes("<f2", (3, 5), struct.pack("<15e", *flat)))
        r = run("sample", "--logits", f32, "--temperature", "0")
        check(r.returncode == 0 and r.stdout.split() == ["1", "0", "1"], "greedy sample of a .npy")
        r = run("sample", "--logits", f16, "--temperature", "0", "--json")
        out = json.loads(r.stdout) if r.returncode == 0 else {}
        check(out.get("tokens") == [1, 0, 1] and out.get("vocab") == 5, "float16 .npy, JSON output")
        seeds = write(d, "seeds.npy", npy_bytes("<i8", (3,), struct.pack("<3q", 1, -2, 3)))
        pos1 = write(d, "pos.npy", npy_bytes("<i8", (1,), struct.pack("<q", 42)))
        a = run("sample", "--logits", f32, "--seeds", seeds, "--positions", pos1, "--json")
        b = run("sample", "--logits", f32, "--seeds", seeds, "--pos", "42", "--json")
        ta = json.loads(a.stdout)["tokens"] if a.returncode == 0 else None
        check(ta is not None and ta == json.loads(b.stdout)["tokens"], "seeds/positions files equal flags")
        check(all(0 <= t < 5 for t in ta or [-1]), "sampled tokens in range")
        a = run("sample", "--logits", f32, "--noise", "wide", "--json")
        check(a.returncode == 0 and json.loads(a.stdout)["noise"] == "wide", "--noise wide")
        check(run("sample", "--logits", f32, "--noise", "fp16").returncode == 2, "bad --noise is a usage error")
        a = run("sample", "--logits", f32, "--method", "race", "--json")
        b = run("sample", "--logits", f32, "--json")
        check(a.returncode == 0 and json.loads(a.stdout)["method"] == "race"
              and json.loads(a.stdout)["tokens"] == json.loads(b.stdout)["tokens"], "--method race picks the Gumbel tokens")
        check(run("sample", "--logits", f32, "--method", "coin").returncode == 2, "bad --method is a usage error")
        r = run("sample", "--logits", f32, "--top-k", "1", "--seed", "5", "--json")
        t = json.loads(r.stdout)["tokens"] if r.returncode == 0 else []
        check(len(t) == 3 and t[0] == 1 and t[1] in (0, 2) and t[2] == 1, "--top-k 1 keeps the top token and its ties")
        r = run("sample", "--logits", f32, "--top-p", "0.5", "--min-p", "0.1", "--json")
        check(r.returncode == 0 and json.loads(r.stdout)["tokens"][0] == 1, "--top-p with --min-p")
        r = run("sample", "--logits", f32, "--top-p", "1.5")
        check(r.returncode == 1 and "PSR_ERR_FILTER_RANGE" in r.stderr, "--top-p 1.5 rejected")
        r = run("sample", "--logits", f32, "--min-p", "nan")
        check(r.returncode == 1 and "PSR_ERR_FILTER_RANGE" in r.stderr, "--min-p nan rejected")
        check(run("sample", "--logits", f32, "--top-k", "x").returncode == 2, "bad --top-k is a usage error")
        r = run("verify", "lower-tail", "--draws", "1e6", "--json")
        out = json.loads(r.stdout) if r.returncode == 0 else []
        check(len(out) >= 2 and all(o["top_slice_below_2^-32"] == (0 if o["noise"] == "fp32" else o["top_slice_draws"]) for o in out),
              "verify lower-tail --json")
        r = run("verify", "tail", "--noise", "wide", "--trials", "200", "--tail-tokens", "1000", "--gap", "3", "--json")
        out = json.loads(r.stdout) if r.returncode == 0 else {}
        check({"noise", "trials", "tail_tokens", "gap", "expected", "observed", "p_value"} <= set(out),
              "verify tail --json fields")
        r = run("sample", "--logits", f32, "--pos", str(2**30))
        check(r.returncode == 1 and "PSR_ERR_POSITION_RANGE" in r.stderr, "position 2^30 rejected")
        r = run("sample", "--logits", f32, "--temperature", "-1")
        check(r.returncode == 1 and "PSR_ERR_TEMPERATURE" in r.stderr, "negative temperature rejected")
        bad = {
            "magic": npy_bytes("<f4", (3, 5), struct.pack("<15f", *flat), magic=b"\x93NUMPX"),
            "dtype": npy_bytes("<f8", (3, 5), struct.pack("<15d", *flat)),
            "Fortran order": npy_bytes("<f4", (3, 5), struct.pack("<15f", *flat), fortran=True),
            "truncated": npy_bytes("<f4", (3, 5), struct.pack("<14f", *flat[:14])),
            "3-D": npy_bytes("<f4", (1, 3, 5), struct.pack("<15f", *flat)),
        }
        for what, data in bad.items():
            path = write(d, "bad.npy", data)
            r = run("sample", "--logits", path)
            check(r.returncode == 1 and "bad.npy" in r.stderr, f"malformed .npy ({what}) is a clear error")
        r = run("sample", "--logits", f32, "--seeds", f32)
        check(r.returncode == 1 and "int64" in r.stderr, "seeds of the wrong dtype")
        r = run("sample", "--logits", os.path.join(d, "missing.npy"))
        check(r.returncode == 1 and "missing.npy" in r.stderr, "missing file")
    r = run("demo")
    check(r.returncode == 0 and "every token matches" in r.stdout, "psr demo")
    r = run("bench", "sample", "--shapes", "2x3000", "--iters", "3", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    check(len(out.get("results", [])) >= 6, "bench sample --json")
    r = run("bench", "sample", "--shapes", "2x3000", "--iters", "3", "--variants", "race,fp32", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    check(sorted(x["variant"] for x in out.get("results", [])) == ["fp32", "race"], "bench --variants picks exact names")
    # On a CPU the bench also times the host oracle's plain C loop, for fp32 only.
    default_type = info["devices"][0]["type"] if info["devices"] else None
    loops = {x["variant"]: x.get("c_loop_us", "absent") for x in out.get("results", [])}
    check(loops.get("race") is None, "bench sample: no C loop for the race")
    if default_type == "cpu":
        check(isinstance(loops.get("fp32"), (int, float)) and loops["fp32"] > 0, "bench sample: C loop time on a CPU")
    check(run("bench", "sample", "--shapes", "2by3").returncode == 2, "bad --shapes is a usage error")
    for args in (["filters", "--iters", "0"], ["logprobs", "--top-n", "21"], ["logprobs", "--top-n"],
                 ["verify", "--bogus"], ["sample", "--logits", "flat"], ["sample", "--device"],
                 ["filters", "--logits", "flat"], ["logprobs", "--logits", "flat"], ["verify", "--logits", "flat"],
                 ["filters", "--top-k", "0"],
                 ["filters", "--top-p", "1"], ["filters", "--top-p", "1.5"], ["filters", "--min-p", "0"],
                 ["filters", "--min-p", "2"]):
        r = run("bench", *args)
        check(r.returncode == 2 and f"bench {args[0]}" in r.stderr, f"bench {' '.join(args)} is a usage error")


# The LM head: `psr sample --hidden --weights` samples the tokens that
# `psr sample --logits` does on the product computed here. Halves and
# eighths keep every product and partial sum exact in fp32 and fp16, so
# the device's logits equal these bit for bit, whatever the GEMM's order.
def lm_head_checks(d):
    chosen = (info.get("psr_device") or {}).get("device") or info["auto"]
    dev = [x for x in info["devices"] if x["index"] == chosen.split(" ")[0]]
    fp16 = bool(dev) and dev[0]["fp16"]
    B, H, V = 6, 9, 40
    hid = [[((r * 7 + k * 3) % 9 - 4) / 2 for k in range(H)] for r in range(B)]
    wts = [[((v * k * 3 + v + 2 * k) % 13 - 6) / 8 for k in range(H)] for v in range(V)]
    lg = [[sum(a * b for a, b in zip(hr, wr)) for wr in wts] for hr in hid]

    def mat(name, rows, code, descr):
        flat = [x for r in rows for x in r]
        return write(d, name, npy_bytes(descr, (len(rows), len(rows[0])), struct.pack(f"<{len(flat)}{code}", *flat)))

    h32, w32, l32 = mat("h32.npy", hid, "f", "<f4"), mat("w32.npy", wts, "f", "<f4"), mat("lg.npy", lg, "f", "<f4")
    h16, w16 = mat("h16.npy", hid, "e", "<f2"), mat("w16.npy", wts, "e", "<f2")
    seeds = write(d, "lm_seeds.npy", npy_bytes("<i8", (B,), struct.pack(f"<{B}q", *range(100, 100 + B))))
    if not info["clblast"]:
        r = run("sample", "--hidden", h32, "--weights", w32)
        check(r.returncode == 1 and "PSR_ERR_NOT_SUPPORTED" in r.stderr, "sample --hidden without CLBlast")
        r = run("bench", "gemm", "--batch", "2", "--hidden", "8", "--vocab", "16", "--iters", "1")
        check(r.returncode == 1 and "PSR_ERR_NOT_SUPPORTED" in r.stderr, "bench gemm without CLBlast")
        return
    for opts in ([], ["--temperature", "0"], ["--temperature", "2", "--method", "race"],
                 ["--drafting", "--noise", "wide", "--pos", "77"]):
        a = run("sample", "--hidden", h32, "--weights", w32, "--seeds", seeds, "--json", *opts)
        b = run("sample", "--logits", l32, "--seeds", seeds, "--json", *opts)
        ta = json.loads(a.stdout) if a.returncode == 0 else {}
        tb = json.loads(b.stdout)["tokens"] if b.returncode == 0 else None
        check(ta.get("tokens") == tb and tb is not None and ta.get("hidden_size") == H and ta.get("vocab") == V,
              f"sample --hidden --weights {' '.join(opts)} equals sampling the host product")
    r = run("sample", "--hidden", h16, "--weights", w16, "--seeds", seeds, "--json")
    if fp16:
        b = run("sample", "--logits", l32, "--seeds", seeds, "--json")
        check(r.returncode == 0 and json.loads(r.stdout)["tokens"] == json.loads(b.stdout)["tokens"],
              "sample --hidden float16 equals sampling the host product")
    else:
        check(r.returncode == 1 and "cl_khr_fp16" in r.stderr, "float16 --hidden without cl_khr_fp16 is refused")
    check(run("sample", "--hidden", h32).returncode == 2, "--hidden without --weights is a usage error")
    check(run("sample", "--logits", l32, "--hidden", h32, "--weights", w32).returncode == 2,
          "--logits with --hidden is a usage error")
    wide = mat("w_wide.npy", [r + [0.0] for r in wts], "f", "<f4")
    r = run("sample", "--hidden", h32, "--weights", wide)
    check(r.returncode == 1 and "hidden size" in r.stderr, "mismatched hidden sizes are a clear error")
    r = run("sample", "--hidden", h32, "--weights", w16)
    check(r.returncode == 1 and "dtype" in r.stderr, "mismatched dtypes are a clear error")
    r = run("sample", "--hidden", h32, "--weights", w32, "--pos", str(2**30))
    check(r.returncode == 1 and "PSR_ERR_POSITION_RANGE" in r.stderr, "--hidden: position 2^30 rejected")
    r = run("bench", "gemm", "--batch", "3", "--hidden", "17", "--vocab", "1000", "--iters", "2", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    check(out.get("batch") == 3 and out.get("us", 0) > 0 and out.get("tflops", 0) > 0, "bench gemm --json")
    check(run("bench", "gemm", "--dtype", "f8").returncode == 2, "bad bench gemm --dtype is a usage error")


if have_device:
    with tempfile.TemporaryDirectory() as d:
        lm_head_checks(d)
r = run("bench", "gemm", "--help")
check(r.returncode == 0 and "usage: psr bench gemm" in r.stdout, "psr bench gemm --help")


def verify_checks():
    """psr verify (the umbrella), psr verify unbiased and psr bench verify."""
    r = run("verify", "--json")
    out = json.loads(r.stdout) if r.stdout.strip() else {}
    names = [c.get("name") for c in out.get("checks", [])]
    check(r.returncode == 0 and out.get("pass") is True and names == ["stream", "oracle", "fit", "unbiased"],
          "psr verify runs every quick check and passes")
    r = run("verify", "unbiased", "--k", "1", "--trials", "20000", "--control", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    pos = out.get("positions", [])
    ctl = out.get("control", {}).get("positions", [])
    check(out.get("k") == 1 and out.get("trials") == 20000 and out.get("vocab") == 16 and len(pos) == 2
          and all(p["pass"] for p in pos) and all(k in pos[0] for k in ("chi2", "df", "threshold")),
          "verify unbiased --json: every salted position passes")
    check(len(ctl) == 2 and ctl[0]["pass"] is False, "verify unbiased --control: the unsalted control fails at 0")
    # Sharded, the drafts are the unsharded ones, verified in the same shards: the unsharded
    # verdicts (the control still failing) and counts, up to near-ties of the acceptance test.
    r = run("verify", "unbiased", "--k", "1", "--trials", "20000", "--control", "--json", "--shards", "3")
    sh = json.loads(r.stdout) if r.returncode == 0 else {}
    check(sh.get("shards") == 3 and like_unsharded(sh, out) and sh["control"]["positions"][0]["pass"] is False,
          "verify unbiased --shards 3: the unsharded verdicts and counts, the control fails")
    # One-token shards: every shard's rounds with a single column.
    r = run("verify", "unbiased", "--k", "1", "--trials", "20000", "--json", "--shards", "4:1,2,15")
    sh = json.loads(r.stdout) if r.returncode == 0 else {}
    check(sh.get("shards") == 4 and like_unsharded(sh, {k: v for k, v in out.items() if k != "control"}),
          "verify unbiased --shards 4:1,2,15: the unsharded verdicts and counts")
    r = run("verify", "unbiased", "--k", "0", "--trials", "2000", "--shards", "2")
    check(r.returncode == 0 and "sampled and verified in 2 vocabulary shards" in r.stdout,
          "verify unbiased --shards 2 says the drafts are verified in shards")
    r = run("verify", "unbiased", "--shards", "17")
    check(r.returncode == 2 and "--shards" in r.stderr, "verify unbiased --shards 17 (> vocabulary 16) is a usage error")
    verify_mpi_checks(out)
    r = run("verify", "unbiased", "--k", "1", "--trials", "2000")
    check(r.returncode == 0 and "position 1" in r.stdout and "control" not in r.stdout,
          "verify unbiased without --control prints no control")
    check(run("verify", "unbiased", "--k", "99").returncode == 2, "verify unbiased --k 99 is a usage error")
    check(run("verify", "unbiased", "--trials", "0").returncode == 2, "verify unbiased --trials 0 is a usage error")
    r = run("bench", "verify", "--shapes", "2x3x5000", "--iters", "2", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    modes = sorted(x.get("mode") for x in out.get("results", []))
    check(modes == ["greedy", "onehot", "prob"]
          and all(x["us"] > 0 and x["piped_us"] > 0 and x["device_us"] > 0
                  and isinstance(x.get("one_launch"), bool) for x in out["results"]),
          "bench verify --json")
    check(run("bench", "verify", "--shapes", "2x3").returncode == 2, "bad bench verify --shapes is a usage error")
    check(out.get("logits") == "default", "bench verify: default target rows")
    r = run("bench", "verify", "--shapes", "2x3x5000", "--iters", "2", "--logits", "peaked", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    # peaked targets: the drafts (the target's logits plus N(0, 1)) are all accepted
    check(out.get("logits") == "peaked" and [x.get("mean_accepted") for x in out.get("results", [])] == [3, 3, 3],
          "bench verify --logits peaked")


def like_unsharded(got, want):
    """A sharded verify unbiased report against the unsharded one: the same verdicts, and
    counts that differ by at most a few tokens (a near-tie of the acceptance test may fall
    the other way where shards do not start on multiples of 16,384 tokens)."""
    def runs(o):
        return [o] + ([o["control"]] if "control" in o else [])
    if got.get("passed") != want.get("passed") or len(runs(got)) != len(runs(want)):
        return False
    moved = 0
    for g, w in zip(runs(got), runs(want)):
        gp, wp = g.get("positions", []), w.get("positions", [])
        if len(gp) != len(wp) or [p["pass"] for p in gp] != [p["pass"] for p in wp]:
            return False
        moved += sum(abs(a - b) for p, q in zip(gp, wp) for a, b in zip(p["observed"], q["observed"]))
    if moved:
        print(f"note: the sharded counts differ from the unsharded ones by {moved} tokens")
    return moved <= 8


def mpirun_env():
    """psr under mpirun: root allowed, and in a sanitizer build Open MPI's own
    leaks suppressed as the mpi suite does (tests/mpi/meson.build)."""
    supp = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi", "lsan.supp")
    return dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                OMPI_MCA_mca_base_component_disable_dlclose="1",
                ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:fast_unwind_on_malloc=0",
                LSAN_OPTIONS="print_suppressions=0:suppressions=" + supp)


def verify_mpi_checks(unsharded):
    """verify unbiased --mpi: under mpirun the unsharded verdicts (the control still failing); else usage errors."""
    import shutil
    for cmd in (["verify"], ["verify", "unbiased"]):
        r = run(*cmd, "--help")
        check(r.returncode == 0 and "--mpi" in r.stdout, f"psr {' '.join(cmd)} --help documents --mpi")
    env = mpirun_env()
    r = run("verify", "unbiased", "--mpi", "--shards", "2")
    check(r.returncode == 2 and "--shards and --mpi" in r.stderr, "verify unbiased --mpi with --shards is a usage error")
    r = run("verify", "unbiased", "--mpi", "--k", "0", "--trials", "1", "--json", env=env)
    if "built without MPI" in r.stderr:
        check(r.returncode == 2 and "--mpi" in r.stderr, "verify unbiased --mpi without MPI in the build is a usage error")
        return
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("skip: verify unbiased --mpi (no mpirun)")
        return
    mpi = lambda np, *extra: run_mpirun(
        [mpirun, "--oversubscribe", "-np", np, PSR, "verify", "unbiased", "--mpi", "--k", "1", "--trials", "20000",
         "--json", *extra], env=env, timeout=300)
    # The drafts sampled and verified across the ranks: the unsharded verdicts and exit status,
    # the counts up to near-ties of the acceptance test, the control still failing.
    salted = {k: v for k, v in unsharded.items() if k != "control"}
    for extra, want in (([], salted), (["--control"], unsharded)):
        got = mpi("2", *extra)
        out = json.loads(got.stdout) if got.returncode == 0 and got.stdout.strip() else {}
        how = (out.pop("shards", None), out.pop("mpi", None))
        control_fails = "control" not in want or out.get("control", {}).get("positions", [{}])[0].get("pass") is False
        check(how == (2, True) and like_unsharded(out, want) and control_fails,
              "mpirun -np 2 psr verify unbiased " + " ".join(["--mpi", *extra]) + ": the unsharded verdicts and counts")
    got = mpi("17")
    check(got.returncode != 0 and got.stderr.count("--mpi: 17 shards") == 1,
          "mpirun -np 17 psr verify unbiased --mpi (> vocabulary 16) is a usage error, said once")


def logprobs_checks(d):
    """psr sample --logprobs N [--raw-logprobs]: logprobs, ranks and the top N in the JSON."""
    import math
    f32 = write(d, "lp.npy", npy_bytes("<f4", (2, 5), struct.pack("<10f", 0, 1, 2, 3, 4, 4, 3, 2, 1, 0)))
    r = run("sample", "--logits", f32, "--temperature", "0", "--logprobs", "3", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    want = 4 - math.log(sum(math.exp(i) for i in range(5)))
    lps = out.get("logprobs", [])
    check(out.get("tokens") == [4, 0] and out.get("ranks") == [1, 1] and len(lps) == 2
          and all(abs(x - want) < 1e-5 for x in lps), "sample --logprobs: logprobs and ranks")
    top = out.get("top", [])
    check(len(top) == 2 and [t[0] for t in top[0]] == [4, 3, 2] and [t[0] for t in top[1]] == [0, 1, 2]
          and abs(top[0][1][1] - (want - 1)) < 1e-5, "sample --logprobs: the top 3 in order")
    r = run("sample", "--logits", f32, "--temperature", "2", "--logprobs", "0", "--raw-logprobs", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    t = out.get("tokens", [0, 0])
    check(out.get("logprobs_raw") is True and len(out.get("logprobs", [])) == 2
          and abs(out["logprobs"][0] - ([0, 1, 2, 3, 4][t[0]] - 4 + want)) < 1e-5,
          "sample --raw-logprobs: logprobs of the logits as given")
    r = run("sample", "--logits", f32, "--top-k", "2", "--logprobs", "2", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    kept = 4 - math.log(math.exp(4) + math.exp(3))
    check(len(out.get("logprobs", [])) == 2 and abs(out["logprobs"][0] - kept) < 1e-5,
          "sample --logprobs with --top-k: renormalised over the kept tokens")
    check(run("sample", "--logits", f32, "--logprobs", "21").returncode == 2, "--logprobs 21 is a usage error")
    check(run("sample", "--logits", f32, "--raw-logprobs").returncode == 2, "--raw-logprobs alone is a usage error")
    r = run("bench", "logprobs", "--shapes", "2x3000", "--iters", "2", "--top-n", "5", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    res = out.get("results", [])
    check(len(res) == 1 and res[0]["top_n"] == 5 and res[0]["logprobs_us"] > 0
          and res[0].get("device_sample_us", 0) > 0 and res[0].get("device_logprobs_us", 0) > 0,
          "bench logprobs --json")
    r = run("bench", "filters", "--shapes", "2x3000", "--iters", "2", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    names = [x.get("filters") for x in out.get("results", [])]
    check(len(names) == 5 and names[0] == "plain" and out["results"][0]["x_plain"] == 1
          and out["results"][0].get("device_x_plain") == 1
          and all(x.get("device_us", 0) > 0 for x in out["results"]), "bench filters --json")
    check(run("bench", "filters", "--shapes", "2y3").returncode == 2, "bad bench filters --shapes is a usage error")
    # the filters' values and the logit profile are the run's own
    r = run("bench", "filters", "--shapes", "2x3000", "--iters", "2", "--top-k", "40", "--top-p", "0.9",
            "--min-p", "0.1", "--logits", "zipf", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    names = [x.get("filters") for x in out.get("results", [])]
    check(out.get("logits") == "zipf" and names == ["plain", "min-p 0.1", "top-k 40", "top-p 0.9",
                                                    "top-k 40 + top-p 0.9"], "bench filters --top-k/--top-p/--min-p/--logits")
    r = run("bench", "sample", "--shapes", "2x3000", "--iters", "2", "--variants", "fp32", "--logits", "confident",
            "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    check(out.get("logits") == "confident" and len(out.get("results", [])) == 1, "bench sample --logits confident")


if have_device:
    with tempfile.TemporaryDirectory() as d:
        logprobs_checks(d)
if have_device:
    verify_checks()
check(run("verify", "bogus").returncode == 2, "psr verify bogus is a usage error")
for cmd in (["verify", "unbiased"], ["bench", "verify"], ["bench", "logprobs"], ["bench", "filters"]):
    r = run(*cmd, "--help")
    check(r.returncode == 0 and "usage: psr" in r.stdout, f"psr {' '.join(cmd)} --help")

for cmd in (["sample"], ["bench"], ["demo"], ["verify"]):
    r = run(*cmd, "--help")
    check(r.returncode == 0 and "usage: psr" in r.stdout, f"psr {' '.join(cmd)} --help")


def run_to(stdout, *args, env=None):
    """psr with stdout sent to an open file (such as /dev/full)."""
    return subprocess.run([PSR, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, timeout=1500)


def full_device_checks(d):
    """Every command fails, with a message, when its output cannot be written."""
    if not os.path.exists("/dev/full"):
        return
    f32 = write(d, "full.npy", npy_bytes("<f4", (2, 5), struct.pack("<10f", 0, 1, 2, 3, 4, 4, 3, 2, 1, 0)))
    cases = [["--help"], ["--version"], ["info"], ["info", "--json"], ["cache", "list"], ["sample", "--help"]]
    if have_device:
        cases += [["sample", "--logits", f32], ["sample", "--logits", f32, "--json"], ["demo"]]
    env = dict(os.environ, PSR_CACHE_DIR=d)
    for args in cases:
        with open("/dev/full", "w") as full:
            r = run_to(full, *args, env=env)
        check(r.returncode == 1 and "psr:" in r.stderr and "output" in r.stderr,
              f"psr {' '.join(args)} > /dev/full fails with a message")


def shortest_float(x):
    """The shortest %.Ng (6 to 9) that reads back as the float32 x."""
    for n in range(6, 10):
        t = "%.*g" % (n, x)
        if struct.pack("<f", float(t)) == struct.pack("<f", x):
            return t
    return t


def json_number_checks(d):
    """JSON numbers in the fewest digits that read back: floats as floats, doubles as doubles."""
    lp = write(d, "digits.npy", npy_bytes("<f4", (2, 5), struct.pack("<10f", 0, 1, 2, 3, 4, 4, 3, 2, 1, 0)))
    r = run("sample", "--logits", lp, "--temperature", "0", "--logprobs", "2", "--json")
    raw = r.stdout.split('"logprobs":[', 1)[-1].split("]", 1)[0].split(",")
    top = r.stdout.split('"top":', 1)[-1].replace("[", "").replace("]", "").replace("}", "").split(",")[1::2]
    check(r.returncode == 0 and len(raw) == 2 and len(top) == 4
          and all(t.strip() == shortest_float(float(t)) for t in raw + top),
          "sample --json: float logprobs in their shortest form")
    r = run("verify", "tail", "--noise", "wide", "--trials", "200", "--tail-tokens", "1000", "--gap", "3.3", "--json")
    check(r.returncode == 0 and '"gap":3.3,' in r.stdout, "JSON doubles in their shortest round-trip form")


def number_checks():
    """Numbers out of range or with trailing text, unknown bench variants and
    malformed shapes are usage errors that name the option and the text."""
    big = "99999999999999999999999"
    for args, opt, text in ((["sample", "--seed", big], "--seed", big), (["sample", "--pos", big], "--pos", big),
                            (["sample", "--pos", "-" + big], "--pos", "-" + big),
                            (["sample", "--seed", "12x"], "--seed", "12x"),
                            (["sample", "--top-k", "3 "], "--top-k", "3 "),
                            (["sample", "--temperature", "1e39"], "--temperature", "1e39"),
                            (["sample", "--top-p", "0.5.1"], "--top-p", "0.5.1"),
                            (["sample", "--logprobs", "2x"], "--logprobs", "2x"),
                            (["bench", "sample", "--iters", big], "--iters", big),
                            (["bench", "gemm", "--iters", "3x"], "--iters", "3x"),
                            (["bench", "gemm", "--batch", big], "--batch", big),
                            (["bench", "logprobs", "--top-n", "1e1"], "--top-n", "1e1")):
        r = run(*args, *(["--logits", "x.npy"] if args[0] == "sample" else []))
        check(r.returncode == 2 and opt in r.stderr and f'"{text}"' in r.stderr,
              f"psr {' '.join(args)}: a usage error naming the option and the text")
    r = run("bench", "sample", "--variants", "bogus")
    check(r.returncode == 2 and "bogus" in r.stderr, "bench sample --variants bogus is a usage error")
    r = run("bench", "sample", "--variants", "fp32,,race")
    check(r.returncode == 2, "bench sample --variants with an empty name is a usage error")
    for shapes in ("2x3000,", "+2x3000", "2x 3000", ",2x3000"):
        r = run("bench", "sample", "--shapes", shapes)
        check(r.returncode == 2 and "--shapes" in r.stderr, f"bench sample --shapes '{shapes}' is a usage error")


def npy_file_checks(d):
    """.npy files whose shape outgrows them, and paths that are no files, get their own message."""
    huge = write(d, "huge.npy", npy_bytes("<f4", (100000, 100000), b"\0" * 20))
    r = run("sample", "--logits", huge)
    check(r.returncode == 1 and "huge.npy" in r.stderr and "out of memory" not in r.stderr
          and "40000000000" in r.stderr, "a .npy shorter than its shape is refused before allocating")
    r = run("sample", "--logits", d)
    check(r.returncode == 1 and "directory" in r.stderr and "magic" not in r.stderr, "--logits DIR says it is a directory")
    r = run("sample", "--logits", "/dev/null")
    check(r.returncode == 1 and "not a regular file" in r.stderr, "--logits /dev/null says it is not a regular file")
    fifo = os.path.join(d, "fifo.npy")
    os.mkfifo(fifo)
    try:  # opening a FIFO must not wait for a writer
        r = subprocess.run([PSR, "sample", "--logits", fifo], capture_output=True, text=True, timeout=30)
        check(r.returncode == 1 and "not a regular file" in r.stderr, "--logits FIFO says it is not a regular file")
    except subprocess.TimeoutExpired:
        check(False, "--logits FIFO returns instead of waiting for a writer")


def option_syntax_checks():
    """--opt=value works like --opt value; a missing value names its option; flags take no value."""
    r = run("sample", "--seed=abc", "--logits=x.npy")
    check(r.returncode == 2 and '--seed "abc"' in r.stderr, "sample --seed=abc is parsed as --seed abc")
    r = run("sample", "--logits", "x.npy", "--seed")
    check(r.returncode == 2 and "--seed needs a value" in r.stderr, "sample --seed without a value names it")
    r = run("sample", "--logits", "x.npy", "--bogus")
    check(r.returncode == 2 and 'unknown argument "--bogus"' in r.stderr, "sample --bogus at the end is unknown")
    r = run("sample", "--logits", "x.npy", "--drafting=1")
    check(r.returncode == 2 and "--drafting takes no value" in r.stderr, "sample --drafting=1 is a usage error")
    r = run("demo", "--device")
    check(r.returncode == 2 and "--device needs a value" in r.stderr, "demo --device without a value names it")
    r = run("demo", "--device=1:2:3")
    check(r.returncode == 1 and "PSR_ERR_BAD_SELECTOR" in r.stderr, "demo --device=SEL")
    r = run("info", "--json=1")
    check(r.returncode == 2 and "--json takes no value" in r.stderr, "info --json=1 is a usage error")
    r = run("bench", "sample", "--iters")
    check(r.returncode == 2 and "--iters needs a value" in r.stderr, "bench sample --iters without a value names it")
    r = run("bench", "gemm", "--dtype=f8")
    check(r.returncode == 2 and '"f8"' in r.stderr, "bench gemm --dtype=f8 is parsed as --dtype f8")
    r = run("bench", "logprobs", "--top-n=21")
    check(r.returncode == 2 and '"21"' in r.stderr, "bench logprobs --top-n=21 is parsed as --top-n 21")
    r = run("verify", "unbiased", "--k=99")
    check(r.returncode == 2 and '"99"' in r.stderr, "verify unbiased --k=99 is parsed as --k 99")
    r = run("verify", "tail", "--noise=fp16")
    check(r.returncode == 2 and '"fp16"' in r.stderr, "verify tail --noise=fp16 is parsed as --noise fp16")


def shard_rows(seed, rows, vocab, second_inf):
    """N(0, 3) logits for the --shards checks: row 1 without a finite logit, row 2
    with +inf at tokens 17 and second_inf (a tie across shards)."""
    import math
    import random
    rnd = random.Random(seed)
    x = [rnd.gauss(0, 3) for _ in range(rows * vocab)]
    x[vocab:2 * vocab] = [-math.inf] * vocab
    x[2 * vocab + 17] = x[2 * vocab + second_inf] = math.inf
    return x


def shards_checks(d):
    """psr sample --shards N prints what psr sample prints; what it cannot do yet is a usage error."""
    rows, vocab = 5, 200
    x = shard_rows(7, rows, vocab, 190)
    f32 = write(d, "sh32.npy", npy_bytes("<f4", (rows, vocab), struct.pack(f"<{rows * vocab}f", *x)))
    f16 = write(d, "sh16.npy", npy_bytes("<f2", (rows, vocab), struct.pack(f"<{rows * vocab}e", *x)))
    seeds = write(d, "shs.npy", npy_bytes("<i8", (rows,), struct.pack(f"<{rows}q", *range(-2, rows - 2))))
    pos = write(d, "shp.npy", npy_bytes("<i8", (rows,), struct.pack(f"<{rows}q", *range(100, 100 + rows))))
    cases = [
        ([f32], ["3", "7"]),
        ([f32, "--json", "--noise", "wide", "--seed", "9"], ["2", "7"]),
        ([f32, "--drafting", "--temperature", "0.6", "--seeds", seeds, "--positions", pos], ["3", "4:1,2,199"]),
        ([f32, "--temperature", "0", "--json"], ["7", str(vocab)]),
        ([f32, "--method", "race", "--pos", "5"], ["2"]),
        ([f32, "--fast", "--json"], ["5"]),
        ([f16, "--json", "--seed", "3"], ["3", "7"]),
    ]
    for args, counts in cases:
        want = run("sample", "--logits", *args)
        for n in counts:
            got = run("sample", "--logits", *args, "--shards", n)
            check(want.returncode == 0 and got.returncode == 0 and got.stdout == want.stdout and got.stderr == want.stderr,
                  f"sample {' '.join(a for a in args if not a.startswith(d))} --shards {n} prints the unsharded output")
    bad = [(["0"], "not in [1, 255]"), (["256"], "not in [1, 255]"), ([str(vocab + 1)], "more than the vocabulary"),
           (["3:5"], "need 2 starts"), (["3:9,4"], "increasing"), (["2:200"], "past the vocabulary")]
    for extra, why in bad:
        r = run("sample", "--logits", f32, "--shards", *extra)
        check(r.returncode == 2 and "--shards" in r.stderr and why in r.stderr, f"sample --shards {' '.join(extra)} is a usage error")
    r = run("sample", "--hidden", f32, "--weights", f32, "--shards", "2")
    check(r.returncode == 2 and "--hidden with --weights is not available with --shards" in r.stderr, "--shards with --hidden")
    filtered = filtered_shards_checks(d)
    logprobs_shards_checks(d)
    mpi_checks(d, f32, filtered)
    r = run("bench", "sample", "--shards", "2", "--shapes", "2x1000", "--iters", "3", "--variants", "fp32,greedy")
    lines = [l.split() for l in r.stdout.splitlines()]
    check(r.returncode == 0
          and lines[2][-6:] == ["shard_us", "xshard", "queues_us", "xqueues", "rec_bytes", "gather_bytes"]
          and [l[-2:] for l in lines[3:]] == [["64", "8000"]] * 2
          and all(float(l[-3]) > 0 and float(l[-5]) > 0 for l in lines[3:]),
          "bench sample --shards 2 prints the sharded times (one queue, a queue each), their ratios and the bytes exchanged")
    r = run("bench", "sample", "--shards", "3", "--shapes", "2x1000", "--iters", "2", "--variants", "race", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    res = out.get("results", [{}])[0]
    check(out.get("shards") == 3 and res.get("shard_us", 0) > 0 and res.get("record_bytes") == 96
          and res.get("allgather_bytes") == 8000 and abs(res["x_shard"] - res["shard_us"] / res["us"]) < 1e-9,
          "bench sample --shards --json")
    r = run("bench", "sample", "--shards", "5", "--shapes", "2x4")
    check(r.returncode == 2 and "--shards" in r.stderr, "bench sample --shards above a shape's vocabulary is a usage error")
    # Logprobs and verification in rounds: keys + slots (+ records) against the all-gather.
    r = run("bench", "logprobs", "--shards", "2", "--shapes", "2x1000", "--iters", "3", "--top-n", "2")
    lines = [l.split() for l in r.stdout.splitlines()]
    v = run("bench", "verify", "--shards", "2", "--shapes", "2x1x1000", "--iters", "2", "--json")
    vout = json.loads(v.stdout) if v.returncode == 0 else {}
    check(r.returncode == 0 and lines[2][-4:] == ["shard_us", "xshard", "xch_bytes", "gather_bytes"]
          and lines[3][-2:] == ["136", "8000"] and float(lines[3][-4]) > 0 and float(lines[3][-3]) > 0
          and vout.get("shards") == 2 and len(vout.get("results", [])) == 3
          and all(x["shard_us"] > 0 and x["exchange_bytes"] == 292 and x["allgather_bytes"] == 16000
                  and abs(x["x_shard"] - x["shard_us"] / x["us"]) < 1e-9 for x in vout.get("results", [])),
          "bench logprobs and verify --shards 2 print the sharded rounds' time, its ratio and the bytes exchanged")


def filtered_shards_checks(d):
    """psr sample --shards N with the filters prints what psr sample prints;
    returns the first case's arguments after --logits, for --mpi."""
    rows, vocab = 16, 3000
    x = shard_rows(11, rows, vocab, 2900)
    f32 = write(d, "shf.npy", npy_bytes("<f4", (rows, vocab), struct.pack(f"<{rows * vocab}f", *x)))
    seeds = write(d, "shfs.npy", npy_bytes("<i8", (rows,), struct.pack(f"<{rows}q", *range(40, 40 + rows))))
    common = ["--logits", f32, "--temperature", "2", "--seeds", seeds]
    cases = [["--top-k", "20"], ["--top-p", "0.9"], ["--min-p", "0.05"],
             ["--top-k", "50", "--top-p", "0.95", "--min-p", "0.02", "--json"]]
    wants = []
    for args in cases:
        want = run("sample", *common, *args)
        wants.append(want.stdout)
        for n in ("3", "7"):
            got = run("sample", *common, *args, "--shards", n)
            check(want.returncode == 0 and got.returncode == 0 and got.stdout == want.stdout and got.stderr == want.stderr,
                  f"sample {' '.join(args)} --shards {n} prints the unsharded filtered output")
    check(len(set(wants[:3])) == 3, "the filtered cases' tokens differ from one another: the filters ran")
    return common[1:] + cases[0]


def close_logprobs(got, want):
    """Sharded --logprobs JSON against unsharded: the same tokens, ranks and
    top ids, logprobs equal up to rounding (null, a NaN, where unsharded)."""
    if got.keys() != want.keys() or any(got[k] != want[k] for k in got if k not in ("logprobs", "top")):
        return False
    near = lambda x, y: x == y or (x is not None and y is not None and abs(x - y) <= 1e-5 * (1 + abs(y)))
    pairs = list(zip(got["logprobs"], want["logprobs"]))
    for g, w in zip(got["top"], want["top"]):
        if [i for i, _ in g] != [i for i, _ in w]:
            return False
        pairs += [(a[1], b[1]) for a, b in zip(g, w)]
    return len(got["top"]) == len(want["top"]) and all(near(x, y) for x, y in pairs)


def logprobs_shards_checks(d):
    """psr sample --logprobs N --shards: the unsharded output, byte for byte, on
    shards starting at multiples of 16,384 tokens (a vocabulary of 3 blocks),
    filters and raw logprobs included; elsewhere the same tokens, ranks and top
    ids; too many blocks are a usage error."""
    rows, vocab = 4, 40000
    x = shard_rows(13, rows, vocab, 39000)
    f32 = write(d, "shl32.npy", npy_bytes("<f4", (rows, vocab), struct.pack(f"<{rows * vocab}f", *x)))
    f16 = write(d, "shl16.npy", npy_bytes("<f2", (rows, vocab), struct.pack(f"<{rows * vocab}e", *x)))
    seeds = write(d, "shls.npy", npy_bytes("<i8", (rows,), struct.pack(f"<{rows}q", *range(5, 5 + rows))))
    common = ["--seeds", seeds, "--temperature", "1.5", "--logprobs", "5"]
    filters = ["--top-k", "50", "--top-p", "0.9", "--min-p", "0.02"]
    cases = [([f32], ["2:16384", "3:16384,32768"]),
             ([f32, *filters, "--json"], ["3:16384,32768", "2:32768"]),
             ([f16, "--raw-logprobs", "--top-p", "0.8", "--json"], ["2:16384"])]
    wants = []
    for args, counts in cases:
        want = run("sample", "--logits", *args, *common)
        wants.append(want)
        what = " ".join(["--logprobs 5", *(a for a in args if not a.startswith(d))])
        for n in counts:
            got = run("sample", "--logits", *args, *common, "--shards", n)
            check(want.returncode == 0 and got.returncode == 0 and (got.stdout, got.stderr) == (want.stdout, want.stderr),
                  f"sample {what} --shards {n} prints the unsharded output")
    plain = run("sample", "--logits", f32, *common, "--json")
    check(plain.returncode == 0 and plain.stdout != wants[1].stdout, "the filters change the logprobs: they ran")
    for args, want in (([], plain), (filters, wants[1])):
        for n in ("3", "5:1,2,30000,39999"):
            got = run("sample", "--logits", f32, *args, *common, "--json", "--shards", n)
            check(got.returncode == 0 and want.returncode == 0
                  and close_logprobs(json.loads(got.stdout), json.loads(want.stdout)),
                  f"sample {' '.join(['--logprobs 5', *args, '--json'])} --shards {n}: the unsharded tokens, ranks, top ids")
    r = run("sample", "--logits", f32, "--logprobs", "1", "--shards", "70")
    check(r.returncode == 2 and "70 blocks" in r.stderr and "64" in r.stderr,
          "sample --logprobs --shards 70 (more than 64 blocks of 16,384 tokens) is a usage error")


def mpi_checks(d, f32, filtered):
    """--mpi: a usage error without MPI in the build; under mpirun (where it runs) the unsharded output."""
    import shutil
    r = run("sample", "--logits", f32, "--mpi")
    if "built without MPI" in r.stderr:
        check(r.returncode == 2, "sample --mpi without MPI in the build is a usage error")
        return
    mpirun = shutil.which("mpirun")
    if not mpirun:
        print("skip: sample --mpi (no mpirun)")
        return
    env = mpirun_env()
    for args in ([], ["--json", "--drafting", "--seed", "4"]):
        want = run("sample", "--logits", f32, *args)
        got = run_mpirun([mpirun, "--oversubscribe", "-np", "3", PSR, "sample", "--logits", f32, "--mpi", *args],
                         env=env, timeout=300)
        check(got.returncode == 0 and got.stdout == want.stdout, f"mpirun -np 3 psr sample --mpi {' '.join(args)}",
              lambda: runs_detail(unsharded=want, mpi=got))
    r = run("sample", "--logits", f32, "--mpi", "--shards", "2")
    check(r.returncode == 2 and "--shards and --mpi" in r.stderr, "--mpi with --shards is a usage error")
    # Filters across the ranks: the unsharded filtered output.
    want = run("sample", "--logits", *filtered)
    got = run_mpirun([mpirun, "--oversubscribe", "-np", "2", PSR, "sample", "--logits", *filtered, "--mpi"],
                     env=env, timeout=300)
    check(got.returncode == 0 and got.stdout == want.stdout, "mpirun -np 2 psr sample --mpi with filters",
          lambda: runs_detail(unsharded=want, mpi=got))

    def mpi(np, *args):
        return run_mpirun([mpirun, "--oversubscribe", "-np", np, PSR, "sample", *args, "--mpi"], env=env,
                          timeout=300)
    mpi_logprobs_checks(d, mpi)


def mpi_logprobs_checks(d, mpi):
    """--logprobs N --mpi: under mpirun -np 2 over 32,768 tokens (the even split
    lands on 16,384) the unsharded output byte for byte, filters, raw logprobs
    and float16 included; over 40,000 tokens the same tokens, ranks and top
    ids; more blocks than the exchange holds a usage error, said once."""
    rows, vocab = 3, 32768
    x = shard_rows(17, rows, vocab, 30000)
    f32 = write(d, "mpl32.npy", npy_bytes("<f4", (rows, vocab), struct.pack(f"<{rows * vocab}f", *x)))
    f16 = write(d, "mpl16.npy", npy_bytes("<f2", (rows, vocab), struct.pack(f"<{rows * vocab}e", *x)))
    common = ["--temperature", "1.5", "--seed", "8", "--logprobs", "5"]
    filters = ["--top-k", "50", "--top-p", "0.9", "--min-p", "0.02"]
    for args in ([f32], [f32, *filters, "--json"], [f16, "--raw-logprobs", "--top-p", "0.8", "--json"]):
        want = run("sample", "--logits", *args, *common)
        got = mpi("2", "--logits", *args, *common)
        what = " ".join(["--logprobs 5", *(a for a in args if not a.startswith(d))])
        check(want.returncode == 0 and got.returncode == 0 and got.stdout == want.stdout,
              f"mpirun -np 2 psr sample {what} --mpi prints the unsharded output",
              lambda: runs_detail(unsharded=want, mpi=got))
    # rank 1 starts at 20,000: no block bound
    y = shard_rows(19, rows, 40000, 39000)
    uneven = write(d, "mplu.npy", npy_bytes("<f4", (rows, 40000), struct.pack(f"<{rows * 40000}f", *y)))
    want = run("sample", "--logits", uneven, *filters, *common, "--json")
    got = mpi("2", "--logits", uneven, *filters, *common, "--json")
    check(want.returncode == 0 and got.returncode == 0
          and close_logprobs(json.loads(got.stdout), json.loads(want.stdout)),
          "mpirun -np 2 psr sample --logprobs 5 with filters --mpi over 40,000 tokens: the unsharded tokens, "
          "ranks, top ids")
    # 2^20 tokens over 3 ranks: 22 blocks each, above the 64 of the exchange
    big = write(d, "mplbig.npy", npy_bytes("<f4", (1, 1 << 20), bytes(4 << 20)))
    r = mpi("3", "--logits", big, "--logprobs", "1")
    check(r.returncode != 0 and r.stderr.count("--logprobs with --mpi: the shards span 66 blocks") == 1,
          "mpirun -np 3 psr sample --logprobs --mpi over 2^20 tokens (66 blocks) is a usage error, said once")


def one_row_checks(d):
    """A 1-D .npy of logits is one row."""
    one = write(d, "one.npy", npy_bytes("<f4", (5,), struct.pack("<5f", 0, 1, 2, 9, 4)))
    r = run("sample", "--logits", one, "--temperature", "0", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    check(out.get("tokens") == [3] and out.get("rows") == 1 and out.get("vocab") == 5, "1-D logits are one row")


def help_checks():
    """psr --help documents PSR_LOG_LEVEL; each bench has its own help."""
    r = run("--help")
    check("PSR_LOG_LEVEL" in r.stdout and all(v in r.stdout for v in ("debug", "info", "warning", "error")),
          "psr --help documents PSR_LOG_LEVEL and its values")
    r = run("bench", "--help")
    check(r.returncode == 0 and all(b in r.stdout for b in ("sample", "verify", "logprobs", "filters", "gemm"))
          and "usage: psr bench sample" not in r.stdout, "psr bench --help lists the benches")
    for b in ("sample", "verify", "logprobs", "filters", "gemm"):
        r = run("bench", b, "--help")
        check(r.returncode == 0 and f"usage: psr bench {b}" in r.stdout, f"psr bench {b} --help is its own")
    for cmd in ("demo", "sample", "info"):
        r = run(cmd, "--help")
        check(r.returncode == 0 and f"usage: psr {cmd}" in r.stdout, f"psr {cmd} --help is its own")


def convention_checks(d):
    """--opt=value on a device, PSR_LOG_LEVEL in any case, the top N of --logprobs in text."""
    lp = write(d, "conv.npy", npy_bytes("<f4", (2, 5), struct.pack("<10f", 0, 1, 2, 3, 4, 4, 3, 2, 1, 0)))
    a = run("sample", f"--logits={lp}", "--temperature=0.7", "--seed=3", "--json")
    b = run("sample", "--logits", lp, "--temperature", "0.7", "--seed", "3", "--json")
    check(a.returncode == 0 and a.stdout == b.stdout, "sample --opt=value equals --opt value")
    r = run("bench", "sample", "--shapes=2x3000", "--iters=3", "--variants=fp32", "--json")
    out = json.loads(r.stdout) if r.returncode == 0 else {}
    check([x["variant"] for x in out.get("results", [])] == ["fp32"], "bench sample --opt=value")
    quiet = {k: v for k, v in os.environ.items() if k != "PSR_LOG_LEVEL"}
    r = run("sample", "--logits", lp, env=quiet)
    check(r.returncode == 0 and "psr: info:" not in r.stderr, "no info messages by default")
    for level in ("info", "INFO", "Info"):
        r = run("sample", "--logits", lp, env=dict(quiet, PSR_LOG_LEVEL=level))
        check(r.returncode == 0 and "psr: info:" in r.stderr, f"PSR_LOG_LEVEL={level} prints info messages")
    r = run("sample", "--logits", lp, env=dict(quiet, PSR_LOG_LEVEL="loud"))
    check(r.returncode == 0 and 'PSR_LOG_LEVEL "loud"' in r.stderr and r.stderr.count("loud") == 1,
          "an unknown PSR_LOG_LEVEL is named once")
    r = run("sample", "--logits", lp, "--temperature", "0", "--logprobs", "2")
    lines = [l.split("\t") for l in r.stdout.splitlines()]
    check(r.returncode == 0 and [len(l) for l in lines] == [5, 5] and lines[0][0] == "4"
          and [t.split(":")[0] for t in lines[0][3:]] == ["4", "3"] and [t.split(":")[0] for t in lines[1][3:]] == ["0", "1"]
          and lines[0][3].split(":")[1] == lines[0][1], "sample --logprobs N prints the top N in text")


def pocl_affinity_checks():
    """The tool pins PoCL's threads (POCL_AFFINITY=1) only where that can neither
    fail (PoCL aborts on a thread past the last CPU) nor override the user."""
    base = {k: v for k, v in os.environ.items() if k not in ("POCL_AFFINITY", "POCL_MAX_PTHREAD_COUNT")}
    base["PSR_LOG_LEVEL"] = "info"
    line = "POCL_AFFINITY=1"
    cpus = os.cpu_count() or 1
    if hasattr(os, "sched_getaffinity") and os.sched_getaffinity(0) == set(range(cpus)):
        r = run("info", env=base)
        check(r.returncode == 0 and line in r.stderr, "POCL_AFFINITY=1 is set where every CPU is the process's",
              lambda: runs_detail(info=r))
    else:
        print("skipped: this process may not run on every CPU")
    r = run("info", env=dict(base, POCL_AFFINITY="0"))
    check(r.returncode == 0 and line not in r.stderr, "POCL_AFFINITY set by the user is left alone")
    r = run("info", env=dict(base, POCL_MAX_PTHREAD_COUNT=str(cpus + 2)))
    check(r.returncode == 0 and line not in r.stderr, "no pinning when PoCL starts more threads than CPUs",
          lambda: runs_detail(info=r))
    pocl_cpu = have_device and info["devices"][0]["type"] == "cpu" and \
        "portable computing language" in info["devices"][0]["platform"].lower()
    if pocl_cpu:  # the default device (PoCL alone): benches say how its threads ran
        for value, want in (("0", "unpinned"), ("1", "pinned")):
            r = run("bench", "filters", "--shapes", "1x4096", "--iters", "3", "--json",
                    env=dict(base, POCL_AFFINITY=value))
            out = json.loads(r.stdout) if r.returncode == 0 else {}
            check(out.get("pocl_threads") == want, f"bench --json: pocl_threads {want} under POCL_AFFINITY={value}",
                  lambda: runs_detail(bench=r))
        r = run("bench", "sample", "--shapes", "1x4096", "--variants", "greedy", "--iters", "3",
                env=dict(base, POCL_AFFINITY="0"))
        check(r.returncode == 0 and r.stdout.startswith("device: ") and "; PoCL's threads unpinned\n" in r.stdout,
              "bench's device line says how PoCL's threads ran")
    if cpus > 1 and hasattr(os, "sched_setaffinity"):
        r = subprocess.run([PSR, "info"], capture_output=True, text=True, env=base, timeout=300,
                           preexec_fn=lambda: os.sched_setaffinity(0, {cpus - 1}))
        check(r.returncode == 0 and line not in r.stderr, "no pinning for a process kept to some CPUs (taskset)",
              lambda: runs_detail(info=r))


number_checks()
option_syntax_checks()
pocl_affinity_checks()
help_checks()
with tempfile.TemporaryDirectory() as d:
    full_device_checks(d)
    npy_file_checks(d)
    if have_device:
        one_row_checks(d)
        shards_checks(d)
        convention_checks(d)
        json_number_checks(d)

sys.exit(1 if failures else 0)
