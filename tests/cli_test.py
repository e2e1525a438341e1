#!/usr/bin/env python3
"""End-to-end checks of the psr command-line tool: exit codes, --help on
every command, JSON that parses, and the cache commands on a scratch dir."""
import json
import os
import subprocess
import sys
import tempfile

PSR = sys.argv[1]
failures = []


def run(*args, env=None):
    return subprocess.run([PSR, *args], capture_output=True, text=True, env=env, timeout=300)


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)
    else:
        print("ok:", what)


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

r = run("cache", "warm", "--device", "1:2:3")
check(r.returncode == 1 and "PSR_ERR_BAD_SELECTOR" in r.stderr, "bad selector reports its status")

with tempfile.TemporaryDirectory() as d:
    env = dict(os.environ, PSR_CACHE_DIR=d)
    if have_device:
        r = run("cache", "warm", env=env)
        check(r.returncode == 0 and "kernel variants ready" in r.stdout, "cache warm")
        r = run("cache", "list", "--json", env=env)
        entries = json.loads(r.stdout)
        check(len(entries) >= 2 and all(e["valid"] for e in entries), "cache list --json")
        r = run("info", "--json", env=env)
        check(json.loads(r.stdout)["cache"]["files"] == len(entries), "info counts cache files")
        r = run("cache", "clear", env=env)
        check(r.returncode == 0 and f"removed {len(entries)} files" in r.stdout, "cache clear")
    r = run("cache", "list", env=env)
    check(r.returncode == 0 and "0 entries" in r.stdout, "empty cache lists")

sys.exit(1 if failures else 0)
