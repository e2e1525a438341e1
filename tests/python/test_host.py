"""numpy in, numpy out: tokens against the known answers of tests/data, the
CLI, and the oracle; filters, logprobs and verification against the oracle."""
import json
import os
import subprocess
from collections import defaultdict

import numpy as np
import pytest

import psr
from conftest import load_tsv, logits, same, vector_logits


def _vector_groups(max_vocab):
    groups = defaultdict(list)
    for r in load_tsv("gumbel_tokens.tsv"):
        if int(r["vocab"]) <= max_vocab:
            groups[(int(r["vocab"]), r["drafting"] == "1", r["fp64"] == "1")].append(r)
    return groups


def _batch(rows):
    x = np.stack([vector_logits(int(r["case"]), int(r["row"]), int(r["vocab"])) for r in rows])
    return (x, np.array([float(r["temp"]) for r in rows], np.float32),
            np.array([int(r["seed"]) for r in rows]), np.array([int(r["pos"]) for r in rows]),
            np.array([int(r["token"]) for r in rows]))


def test_known_answers_oracle():
    n = 0
    for (vocab, drafting, fp64), rows in _vector_groups(1 << 20).items():
        x, t, s, p, want = _batch(rows)
        got = psr.oracle.sample(x, t, s, p, drafting=drafting, noise="fp64" if fp64 else "fp32")
        assert (got == want).all(), (vocab, drafting, fp64)
        n += len(rows)
    assert n > 250


def test_known_answers_device(ctx):
    fp64_ok = ctx.device.fp64
    n = 0
    for (vocab, drafting, fp64), rows in _vector_groups(4097).items():
        if fp64 and (drafting or not fp64_ok):  # one more build each; the C suites cover them
            continue
        x, t, s, p, want = _batch(rows)
        got = ctx.sample(x, t, s, p, drafting=drafting, noise="fp64" if fp64 else "fp32")
        assert (got == want).all(), (vocab, drafting, fp64)
        n += len(rows)
    assert n > 100


@pytest.mark.skipif(not os.environ.get("PSR_CLI"), reason="PSR_CLI (the psr tool) not set")
def test_tokens_equal_the_cli(ctx, tmp_path):
    x = logits(5, 2000, seed=7)
    seeds = np.array([3, 1 << 40, -5, 0, 77], np.int64)
    pos = np.array([0, 9, 1 << 29, 4, 100], np.int64)
    for name, a in (("x", x), ("s", seeds), ("p", pos)):
        np.save(tmp_path / f"{name}.npy", a)
    cmd = [os.environ["PSR_CLI"], "sample", "--logits", str(tmp_path / "x.npy"), "--seeds",
           str(tmp_path / "s.npy"), "--positions", str(tmp_path / "p.npy"), "--temperature",
           "0.7", "--top-k", "40", "--logprobs", "3", "--json"]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    r = ctx.sample(x, 0.7, seeds, pos, top_k=40, logprobs=3)
    assert r.tokens.tolist() == out["tokens"]
    assert r.ranks.tolist() == out["ranks"]
    assert (r.logprobs == np.array(out["logprobs"], np.float32)).all()
    assert r.top_ids.tolist() == [[e[0] for e in row] for row in out["top"]]
    plain = json.loads(subprocess.run(cmd[:10] + ["--json"], capture_output=True, text=True,
                                      check=True).stdout)
    assert ctx.sample(x, 0.7, seeds, pos).tolist() == plain["tokens"]


@pytest.mark.parametrize("kw", [
    dict(),
    dict(drafting=True),
    dict(noise="wide"),
    dict(temperature=0.0),
    dict(temperature=np.array([0.0, 0.5, 1.0, 2.0, 0.9, 1e-3], np.float32)),
    dict(tokens_dtype=np.int64),
])
def test_sample_equals_oracle(ctx, kw):
    kw = dict(kw)
    t = kw.pop("temperature", 0.8)
    x = logits(6, 1500, seed=1)
    seeds = np.arange(6) * 1000003
    pos = np.arange(6) * 17
    got = ctx.sample(x, t, seeds, pos, **kw)
    want = psr.oracle.sample(x, t, seeds, pos, **kw)
    assert got.dtype == want.dtype == np.dtype(kw.get("tokens_dtype", np.int32))
    assert (got == want).all()


def test_fp64_noise(ctx):
    x = logits(3, 1200, seed=2)
    if not ctx.device.fp64:
        with pytest.raises(psr.Fp64Unsupported):
            ctx.sample(x, 1.0, 1, 2, noise="fp64")
        return
    assert (ctx.sample(x, 1.0, [1, 2, 3], 2, noise="fp64") ==
            psr.oracle.sample(x, 1.0, [1, 2, 3], 2, noise="fp64")).all()


def test_half_and_bfloat16(ctx):
    x = logits(4, 1000, seed=3)
    h = x.astype(np.float16)
    assert (ctx.sample(h, 0.9, 5, [1, 2, 3, 4]) == psr.oracle.sample(h, 0.9, 5, [1, 2, 3, 4])).all()
    b = (x.view(np.uint32) >> 16).astype(np.uint16)
    got = ctx.sample(b, 0.9, 5, [1, 2, 3, 4], dtype="bf16")
    assert (got == psr.oracle.sample(b, 0.9, 5, [1, 2, 3, 4], dtype="bf16")).all()
    with pytest.raises(TypeError, match="bf16"):
        ctx.sample(b, 0.9, 5, 0)


def test_race_over_probabilities(ctx):
    p = np.exp(logits(4, 1000, seed=4) / 2)
    p[:, ::7] = 0
    got = ctx.sample(p, 1.0, [9, 8, 7, 6], 3, method="race", probs=True)
    assert (got == psr.oracle.sample(p, 1.0, [9, 8, 7, 6], 3, method="race", probs=True)).all()
    with pytest.raises(NotImplementedError):
        psr.oracle.sample(p, 1.0, 1, 1, method="race")


def test_strided_and_non_contiguous_logits(ctx):
    wide = logits(8, 1300, seed=5)
    view = wide[::2, 100:1100]  # rows apart, each contiguous: no copy (row_stride)
    col = np.asfortranarray(view)  # columns adjacent: copied
    want = psr.oracle.sample(np.ascontiguousarray(view), 0.7, 11, [1, 2, 3, 4])
    assert (ctx.sample(view, 0.7, 11, [1, 2, 3, 4]) == want).all()
    assert (ctx.sample(col, 0.7, 11, [1, 2, 3, 4]) == want).all()
    assert (ctx.sample(view[1], 0.7, 11, 2) == want[1:2]).all()  # 1-D: one row


@pytest.mark.parametrize("filters", [
    dict(top_k=20),
    dict(top_p=0.8),
    dict(min_p=0.05),
    dict(top_k=np.array([5, 0, 50, 2000]), top_p=np.array([0.9, 0.5, 1.0, 0.7]),
         min_p=np.array([0.0, 0.01, 0.1, 0.0])),
])
def test_filters_equal_oracle(ctx, filters):
    x = logits(4, 2000, seed=6)
    t = np.array([0.8, 1.0, 1.3, 0.0], np.float32)
    got = ctx.sample(x, t, [1, 2, 3, 4], 10, **filters)
    assert (got == psr.oracle.sample(x, t, [1, 2, 3, 4], 10, **filters)).all()


@pytest.mark.parametrize("kw", [dict(), dict(raw=True), dict(top_p=0.9, top_k=30)])
def test_logprobs_equal_oracle(ctx, kw):
    x = logits(4, 3000, seed=8)
    x[1, 5] = np.nan
    tokens = np.array([0, 5, 2999, -1])
    t = None if kw.get("raw") else np.array([1.0, 0.5, 0.0, 2.0], np.float32)
    got = ctx.logprobs(x, tokens, t, top_n=5, **kw)
    want = psr.oracle.logprobs(x, tokens, t, top_n=5, **kw)
    for name in ("logprobs", "ranks", "top_ids", "top_logprobs"):
        g, w = getattr(got, name), getattr(want, name)
        assert same(g, w), name
    assert np.isnan(got.logprobs[3]) and got.ranks[3] == 0


def test_sample_with_logprobs(ctx):
    x = logits(3, 1000, seed=9)
    r = ctx.sample(x, 0.7, [4, 5, 6], 1, top_p=0.9, logprobs=4)
    w = psr.oracle.sample(x, 0.7, [4, 5, 6], 1, top_p=0.9, logprobs=4)
    assert isinstance(r, psr.SampleResult)
    assert (r.tokens == w.tokens).all() and r.top_ids.shape == (3, 4)
    assert same(r.logprobs, w.logprobs) and (r.ranks == w.ranks).all()
    raw = ctx.sample(x, 0.7, [4, 5, 6], 1, logprobs=0, raw_logprobs=True)
    assert raw.top_ids.shape == (3, 0)
    assert same(raw.logprobs, psr.oracle.logprobs(x, raw.tokens, raw=True).logprobs)


def _verify_case(seed=10, vocab=1500):
    rng = np.random.default_rng(seed)
    cu = np.array([0, 3, 4, 8])  # drafts per request: 2, 0, 3
    rows = int(cu[-1])
    target = logits(rows, vocab, seed=seed, sigma=2.0)
    drafts = rng.integers(0, vocab, rows).astype(np.int32)
    drafts[0] = int(np.argmax(target[0]))  # likely accepted
    drafts[5] = -1
    return dict(target_logits=target, draft_tokens=drafts, cu=cu, seeds=[5, 6, 7],
                temperatures=np.array([0.9, 0.0, 1.1], np.float32),
                positions=np.arange(rows) + 40)


@pytest.mark.parametrize("kw", [dict(), dict(method="greedy"), dict(cache=True),
                                dict(tokens_dtype=np.int64, max_drafts=4)])
def test_verify_equals_oracle(ctx, kw):
    kw = dict(kw)
    case = _verify_case()
    if kw.pop("cache", False):
        kw["draft_cache"] = logits(3, 1500 * 3, seed=12, sigma=2.0).reshape(3, 3, 1500)
    tokens, num = ctx.verify(**case, **kw)
    wt, wn = psr.oracle.verify(**case, **kw)
    assert tokens.shape == (3, kw.get("max_drafts", 3) + 1) and tokens.dtype == wt.dtype
    assert (tokens == wt).all() and (num == wn).all()
    assert ((num >= 1) & (num <= np.diff(case["cu"]))).all()


def test_recover_keeps_results(ctx):
    """Context.recover (psr_context_recover): the next calls clear the
    kernels' counters first and give the same tokens; the context's
    properties read back."""
    x = logits(4, 3001, seed=31)
    before = ctx.sample(x, 0.8, [1, 2, 3, 4], 5)
    ctx.recover()
    assert (ctx.sample(x, 0.8, [1, 2, 3, 4], 5) == before).all()
    assert ctx.scratch_bytes > 0 and ctx.last_noise == "fp32" and isinstance(ctx.build_log, str)
