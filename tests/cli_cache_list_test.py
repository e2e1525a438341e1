#!/usr/bin/env python3
"""`psr cache list` flags every entry a lookup would not load, and says
why, in its text and in --json: damaged, another user's or writable by
others, on trial after a process died loading it, or in a directory that
is not the user's alone. The entries are written here (docs/cache.md,
"File format"), so no device is needed."""
import hashlib
import json
import os
import struct
import subprocess
import sys
import tempfile

PSR = sys.argv[1]
OTHER_UID = 65534  # nobody
failures = []


def check(cond, what):
    print("ok:" if cond else "FAIL:", what)
    if not cond:
        failures.append(what)


def write_entry(directory, n, mode=0o600):
    key = hashlib.sha256(b"key %d" % n).digest()
    payload = b"binary %d " % n * 50
    meta = b"kernels=stream\nplatform=Test\ndevice=Test Device\ndriver=1.0\noptions=\nlibrary=0\n"
    header = b"PSRCACHE" + struct.pack("<IIQ", 1, len(meta), len(payload)) + key
    path = os.path.join(directory, key.hex() + ".psrbin")
    with open(path, "wb") as f:
        f.write(header + hashlib.sha256(payload).digest() + meta + payload)
    os.chmod(path, mode)
    return key.hex() + ".psrbin", path


def mark_died(path):
    """The mark a process leaves when it dies with the entry on trial."""
    st = os.stat(path)
    with open(path[: -len(".psrbin")] + ".trial", "w") as f:
        f.write(f"pid 4242\ndev {st.st_dev}\nino {st.st_ino}\nsize {st.st_size}\n"
                f"mtime {st.st_mtime_ns // 10**9}.{st.st_mtime_ns % 10**9:09d}\n")


def listing(directory):
    env = dict(os.environ, PSR_CACHE_DIR=directory)
    text = subprocess.run([PSR, "cache", "list"], capture_output=True, text=True, env=env)
    js = subprocess.run([PSR, "cache", "list", "--json"], capture_output=True, text=True, env=env)
    check(text.returncode == 0 and js.returncode == 0, "cache list exits 0")
    return text.stdout, {e["file"]: e for e in json.loads(js.stdout)}


with tempfile.TemporaryDirectory() as d:
    os.chmod(d, 0o700)
    ok, _ = write_entry(d, 0)
    cut, cut_path = write_entry(d, 1)
    os.truncate(cut_path, 100)
    shared, _ = write_entry(d, 2, 0o664)
    died, died_path = write_entry(d, 3)
    mark_died(died_path)
    expect = {ok: "ok", cut: "invalid", shared: "ignored", died: "on-trial"}
    if os.geteuid() == 0:
        other, other_path = write_entry(d, 4)
        os.chown(other_path, OTHER_UID, OTHER_UID)
        expect[other] = "ignored"
    text, entries = listing(d)
    for name, status in expect.items():
        e = entries.get(name, {})
        check(e.get("status") == status, f"--json: {status} entry is {e.get('status')}")
        check((e.get("reason") == "") == (status == "ok"), f"--json: {status} entry has a reason iff not ok")
    check(entries[died]["valid"] and "died while the driver loaded it" in entries[died]["reason"],
          "--json: an entry on trial is intact, and says a process died loading it")
    check("writable by group or others" in entries[shared]["reason"], "--json: the mode is the reason")
    if os.geteuid() == 0:
        check("owned by uid 65534" in entries[other]["reason"], "--json: the owner is the reason")
    lines = {line[:16]: line for line in text.splitlines()}
    flags = {"ok": None, "invalid": "[invalid:", "ignored": "[ignored:", "on-trial": "[on trial:"}
    for name, status in expect.items():
        line = lines.get(name[:16], "")
        want = flags[status]
        check((want in line) if want else "[" not in line, f"text: {status} entry flagged as such")

    os.chmod(d, 0o770)
    text, entries = listing(d)
    check(all(e["status"] == "directory" and "writable by group or others" in e["reason"]
              for e in entries.values()), "--json: a shared directory's entries are not used")
    check(text.count("[not used:") == len(expect), "text: a shared directory's entries are not used")
    os.chmod(d, 0o700)

sys.exit(1 if failures else 0)
