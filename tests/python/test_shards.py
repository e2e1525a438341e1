"""Vocabulary shards from Python: Context.sample_shard per shard and
psr.combine give ctx.sample's tokens; records that do not fit raise
ShardMismatch. Context.logprobs_shard's three rounds give ctx.logprobs'
results: the same bits on 16,384-token bounds, the same ranks and ids on
others; keys left unreduced change them; bad arguments raise, named."""
import numpy as np
import pytest

import psr

from conftest import logits, same


def _bounds(vocab, shards):
    edges = np.linspace(0, vocab, shards + 1).astype(int)
    edges[1] = 1  # a shard of one token
    return edges


@pytest.mark.parametrize("shards", [1, 2, 5])
def test_sharded_tokens_equal_unsharded(ctx, shards):
    x = logits(6, 3000, seed=shards)
    x[1, :] = -np.inf
    seeds, pos = np.arange(6) + 11, np.arange(6) * 5
    temps = np.array([0.0, 0.8, 1.0, 1.3, 0.7, 2.0], dtype=np.float32)
    edges = _bounds(3000, shards) if shards > 1 else np.array([0, 3000])
    records = np.stack([
        ctx.sample_shard(x[:, edges[s]:edges[s + 1]], temps, seeds, pos,
                         vocab_offset=edges[s], vocab_total=3000, shard_index=s,
                         shard_count=shards, noise="wide")
        for s in range(shards)])
    want = ctx.sample(x, temps, seeds, pos, noise="wide")
    tokens, flags = psr.combine(records, row_flags=True)
    assert records.dtype == psr.SHARD_RECORD and records.shape == (shards, 6)
    assert (tokens == want).all()
    assert flags[1] == 1 and (np.delete(flags, 1) == 0).all()  # PSR_ROW_NO_FINITE


def test_records_out_of_place(ctx):
    x = logits(3, 100)
    recs = np.stack([ctx.sample_shard(x[:, a:b], 1.0, 1, 0, vocab_offset=a, vocab_total=100,
                                      shard_index=s, shard_count=2)
                     for s, (a, b) in enumerate([(0, 40), (40, 100)])])
    with pytest.raises(psr.ShardMismatch, match="shard 1 of 2, not shard 0 of 2"):
        psr.combine(recs[::-1])
    with pytest.raises(TypeError, match="SHARD_RECORD"):
        psr.combine(np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(psr.ShardMismatch, match="vocab_total 100"):
        ctx.sample_shard(x, 1.0, 1, 0, vocab_offset=1, vocab_total=100, shard_index=0,
                         shard_count=2)


# ---- logprobs across shards: Context.logprobs_shard and its three rounds ----

def _lp_batch(rows, vocab, seed):
    """Logits with a row of -inf and a row of NaN, tokens with -1 and one
    past the vocabulary, temperatures with greedy rows."""
    rng = np.random.default_rng(seed)
    x = logits(rows, vocab, seed=seed)
    x[1, :] = -np.inf
    x[2, :] = np.nan
    tokens = rng.integers(0, vocab, rows)
    tokens[0], tokens[3] = -1, vocab
    temps = np.where(np.arange(rows) % 4 == 0, 0.0, rng.uniform(0.5, 2.0, rows))
    return x, tokens, temps.astype(np.float32)


def _open_shards(ctx, x, tokens, temps, bounds, **kw):
    """One LogprobsShard per shard of bounds, their slots laid out in order."""
    slots = [psr.logprobs_shard_slots(b - a) for a, b in zip(bounds[:-1], bounds[1:])]
    first = np.concatenate([[0], np.cumsum(slots)[:-1]])
    return [ctx.logprobs_shard(x[:, a:b], tokens, temps, vocab_offset=a,
                               vocab_total=bounds[-1], shard_index=s,
                               shard_count=len(bounds) - 1, shard_slot=int(first[s]),
                               shard_slots=sum(slots), **kw)
            for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]


def _sharded_logprobs(ctx, x, tokens, temps, bounds, reduce_keys=True, full=False, **kw):
    """The three rounds for every shard, the app's reduction and gather done
    here; every shard's result."""
    shards = _open_shards(ctx, x, tokens, temps, bounds, **kw)
    try:
        keys = [s.keys() for s in shards]
        assert all(k.dtype == np.uint32 and k.shape == (x.shape[0],) for k in keys)
        reduced = np.maximum.reduce(keys)
        if full:  # as a transport of int64 tensors would hand them back
            reduced = reduced.astype(np.int64)
        parts = [s.partials(reduced if reduce_keys else k, full=full)
                 for s, k in zip(shards, keys)]
        assert all(p.dtype == np.uint8 for p in parts)
        # full=True: each shard's whole buffer, reduced like the keys; else
        # the pieces as a list (finish concatenates them)
        gathered = np.maximum.reduce(parts) if full else parts
        return [s.finish(gathered) for s in shards]
    finally:
        for s in shards:
            s.close()


def _same_result(got, want, exact=True):
    fields = ("logprobs", "ranks", "top_ids", "top_logprobs")
    if exact:
        return all(same(getattr(got, f), getattr(want, f)) for f in fields)
    return same(got.ranks, want.ranks) and same(got.top_ids, want.top_ids) and \
        np.allclose(got.logprobs, want.logprobs, rtol=1e-5, atol=1e-5, equal_nan=True) and \
        np.allclose(got.top_logprobs, want.top_logprobs, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("raw", [False, True])
def test_sharded_logprobs_equal_unsharded_on_block_bounds(ctx, raw):
    x, tokens, temps = _lp_batch(8, 40000, seed=3)
    bounds = [0, 16384, 32768, 40000]
    want = ctx.logprobs(x, tokens, None if raw else temps, top_n=5, raw=raw)
    results = _sharded_logprobs(ctx, x, tokens, None if raw else temps, bounds, top_n=5, raw=raw)
    for got in results:  # the same bits on every shard
        assert _same_result(got, want)
    assert want.ranks[0] == 0 and want.ranks[3] == 0 and np.isnan(want.logprobs[0])


def test_sharded_logprobs_full_partials_and_one_shard(ctx):
    x, tokens, temps = _lp_batch(6, 20000, seed=4)
    want = ctx.logprobs(x, tokens, temps, top_n=3)
    got = _sharded_logprobs(ctx, x, tokens, temps, [0, 16384, 20000], full=True, top_n=3)
    assert _same_result(got[1], want)
    got = _sharded_logprobs(ctx, x, tokens, temps, [0, 20000], top_n=0)
    assert _same_result(got[0], ctx.logprobs(x, tokens, temps))


def test_sharded_logprobs_uneven_split(ctx):
    x, tokens, temps = _lp_batch(8, 40000, seed=5)
    bounds = [0, 1, 9000, 25001, 40000]  # a shard of one token
    want = ctx.logprobs(x, tokens, temps, top_n=5)
    for got in _sharded_logprobs(ctx, x, tokens, temps, bounds, top_n=5):
        assert _same_result(got, want, exact=False)


def test_sharded_logprobs_control_unreduced_keys(ctx):
    """Keys left unreduced change the ranks of most rows: the comparisons
    above can fail."""
    x, tokens, temps = _lp_batch(16, 40000, seed=6)
    bounds = [0, 16384, 32768, 40000]
    want = ctx.logprobs(x, tokens, temps, top_n=5)
    got = _sharded_logprobs(ctx, x, tokens, temps, bounds, reduce_keys=False, top_n=5)
    assert (got[0].ranks != want.ranks).sum() >= 10  # of 16 rows


def test_logprobs_shard_slot_helpers():
    assert psr.logprobs_shard_slots(0) == 0
    assert psr.logprobs_shard_slots(psr.LOGPROBS_SHARD_BLOCK) == 1
    assert psr.logprobs_shard_slots(psr.LOGPROBS_SHARD_BLOCK + 1) == 2
    assert psr.logprobs_shard_slot_bytes(3, 1) == 64  # 3 x 20 = 60, rounded up to 16
    assert psr.logprobs_shard_slot_bytes(4, 0) == 48
    with pytest.raises(psr.InvalidArgument, match="top_n"):
        psr.logprobs_shard_slot_bytes(3, psr.MAX_TOP_N + 1)
    with pytest.raises(psr.InvalidArgument, match="shard_vocab"):
        psr.logprobs_shard_slots(-1)


def test_logprobs_shard_bad_arguments(ctx):
    x, tokens, temps = _lp_batch(4, 100, seed=7)
    kw = dict(vocab_offset=50, vocab_total=100, shard_index=1, shard_count=2, shard_slot=1,
              shard_slots=2, top_n=2)

    def keys(**changes):
        with ctx.logprobs_shard(x[:, 50:], tokens, temps, **{**kw, **changes}) as s:
            return s.keys()

    assert keys().shape == (4,)
    with pytest.raises(psr.ShardMismatch, match="shard_slot 2"):
        keys(shard_slot=2)
    with pytest.raises(psr.ShardMismatch, match="vocab_offset 60"):
        keys(vocab_offset=60)
    with pytest.raises(psr.InvalidArgument, match="shard_index 2"):
        keys(shard_index=2)
    with pytest.raises(psr.InvalidArgument, match="vocab_total"):
        keys(vocab_total=(1 << 20) + 1)
    with pytest.raises(psr.InvalidArgument, match="shard_slots"):
        keys(shard_slots=psr.LOGPROBS_MAX_SLOTS + 1)
    with pytest.raises(psr.InvalidArgument, match="vocab_offset: -1 is negative"):
        keys(vocab_offset=-1)
    with pytest.raises(TypeError, match="shard_index"):
        keys(shard_index=1.0)
    with pytest.raises(psr.InvalidArgument, match="top_n"):
        keys(top_n=psr.MAX_TOP_N + 1)
    for name, value in (("top_k", 5), ("top_p", 0.9), ("min_p", 0.1)):
        with pytest.raises(ValueError, match=f"{name}: filters across shards"):
            keys(**{name: value})
    with pytest.raises(psr.InvalidArgument, match="temperature"):
        ctx.logprobs_shard(x[:, 50:], tokens, None, **kw)
    with pytest.raises(psr.TemperatureRange, match=r"temperature\[1\]"):
        ctx.logprobs_shard(x[:, 50:], tokens, [1.0, -1.0, 1.0, 1.0], **kw)

    s = ctx.logprobs_shard(x[:, 50:], tokens, temps, **kw)
    k = s.keys()
    with pytest.raises(psr.InvalidArgument, match="finish"):
        s.finish(np.zeros(s.partials_bytes, np.uint8))
    with pytest.raises(psr.InvalidArgument, match="keys"):
        s.partials(k[:3])
    with pytest.raises(TypeError, match="keys"):
        s.partials(k.astype(np.float32))
    mine = s.partials(k)
    assert mine.shape == (s.slots * s.slot_bytes,) and s.partials_bytes == 2 * s.slot_bytes
    with pytest.raises(psr.InvalidArgument, match="partials"):
        s.finish(mine)  # shard 0's slot is missing
    with pytest.raises(TypeError, match="partials"):
        s.finish(np.zeros(s.partials_bytes // 4, np.float32))
    s.close()
    with pytest.raises(psr.InvalidArgument, match="closed"):
        s.keys()
