"""Vocabulary shards from Python: Context.sample_shard per shard and
psr.combine give ctx.sample's tokens; records that do not fit raise
ShardMismatch. Context.logprobs_shard's three rounds give ctx.logprobs'
results: the same bits on 16,384-token bounds, the same ranks and ids on
others; keys left unreduced change them; bad arguments raise, named. With
top-k, top-p and min-p (per row or one value), the filters' rounds first
give ctx.logprobs' filtered bits on 16,384-token bounds; reductions that
miss a shard change them; rounds run out of order or with bad reductions
raise, named.
Context.verify_shard's four rounds give ctx.verify's tokens on 16,384-token
bounds, probabilistic and greedy, with and without draft logits, over
either transport (gathers, or reductions of full buffers); unreduced keys
change them; bad arguments and records out of place raise, named."""
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


def _filter_rounds(shards, leave_out=None, int64=False):
    """The filters' rounds for every shard, the app's reductions done here
    (round 0 by maximum, later rounds by sum). leave_out: a shard whose
    partials the reductions miss; int64: the reductions handed back flat
    and as int64, as a transport without uint64 would."""
    n, rows = shards[0].filter_rounds, shards[0].rows
    assert all(s.filter_rounds == n for s in shards)
    reduced = None
    for r in range(n):
        parts = [s.filter_partial(r, reduced) for s in shards]
        assert all(p.dtype == np.uint64 and p.shape == (rows, 256) for p in parts)
        kept = [p for i, p in enumerate(parts) if i != leave_out]
        reduced = np.maximum.reduce(kept) if r == 0 else np.sum(kept, axis=0, dtype=np.uint64)
        if int64:
            reduced = reduced.astype(np.int64).reshape(-1)
    for s in shards:
        s.filter_apply(reduced)


def _sharded_logprobs(ctx, x, tokens, temps, bounds, reduce_keys=True, full=False,
                      leave_out=None, int64=False, **kw):
    """The filters' rounds (with filters) and the three rounds for every
    shard, the app's reductions and gather done here; every shard's result."""
    shards = _open_shards(ctx, x, tokens, temps, bounds, **kw)
    try:
        if shards[0].filter_rounds:
            _filter_rounds(shards, leave_out, int64)
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


# ---- logprobs across shards with filters: the filters' rounds first ----

def _filtered_batch(rows, vocab, seed):
    """_lp_batch's rows, most tokens among their row's 60 largest logits (so
    that filters keep some and cut others), and per-row filters with some
    rows off."""
    rng = np.random.default_rng(seed)
    x, tokens, temps = _lp_batch(rows, vocab, seed)
    near = np.argsort(-x, axis=1)[np.arange(rows), rng.integers(0, 60, rows)]
    tokens[4:] = near[4:]
    filters = dict(top_k=rng.choice(np.array([0, 1, 5, 20, 50, vocab], np.int32), rows),
                   top_p=rng.choice(np.array([1.0, 0.3, 0.8, 0.95], np.float32), rows),
                   min_p=rng.choice(np.array([0.0, 0.0, 0.01, 0.1], np.float32), rows))
    return x, tokens, temps, filters


def test_sharded_filtered_logprobs_equal_unsharded(ctx):
    x, tokens, temps, filters = _filtered_batch(16, 40000, seed=11)
    bounds = [0, 16384, 32768, 40000]
    want = ctx.logprobs(x, tokens, temps, top_n=5, **filters)
    results = _sharded_logprobs(ctx, x, tokens, temps, bounds, top_n=5, **filters)
    for got in results:  # the same bits on every shard
        assert _same_result(got, want)
    plain = ctx.logprobs(x, tokens, temps, top_n=5)
    cut = np.isneginf(want.logprobs) & np.isfinite(plain.logprobs)
    assert 3 <= cut.sum() and np.isfinite(want.logprobs).sum() >= 3  # kept and cut tokens
    assert (want.top_ids != plain.top_ids).any()  # lists cut short


@pytest.mark.parametrize("filters, rounds", [
    (dict(top_k=20), 5), (dict(top_p=0.9), 5), (dict(min_p=0.05), 1),
    (dict(top_k=40000, min_p=0.05), 1), (dict(top_k=0, top_p=1.0, min_p=0.0), 0),
    (dict(top_k=20, top_p=0.9, min_p=0.05), 9)])
def test_sharded_filtered_logprobs_one_value(ctx, filters, rounds):
    """One value for every row (the all_* fields): the rounds each filter
    takes (top-k off at vocab_total or 0, top-p at 1, min-p at 0), and
    reductions handed back as flat int64 arrays."""
    x, tokens, temps, _ = _filtered_batch(8, 40000, seed=12)
    bounds = [0, 16384, 32768, 40000]
    with ctx.logprobs_shard(x[:, :16384], tokens, temps, vocab_offset=0, vocab_total=40000,
                            shard_index=0, shard_count=3, shard_slot=0, shard_slots=3,
                            **filters) as s:
        assert s.filter_rounds == rounds
    want = ctx.logprobs(x, tokens, temps, top_n=3, **filters)
    got = _sharded_logprobs(ctx, x, tokens, temps, bounds, top_n=3, int64=True, **filters)
    assert _same_result(got[2], want)


def test_sharded_filtered_logprobs_control_missing_shard(ctx):
    """Reductions that leave out the last shard's partials (the thresholds
    of 32,768 .. 40,000 unseen) change some rows: the comparisons above
    can fail."""
    x, tokens, temps, filters = _filtered_batch(16, 40000, seed=11)
    bounds = [0, 16384, 32768, 40000]
    want = ctx.logprobs(x, tokens, temps, top_n=5, **filters)
    got = _sharded_logprobs(ctx, x, tokens, temps, bounds, leave_out=2, top_n=5, **filters)
    fields = ("logprobs", "ranks", "top_ids", "top_logprobs")
    differ = [r for r in range(16)
              if not all(same(getattr(got[0], f)[r], getattr(want, f)[r]) for f in fields)]
    assert len(differ) >= 3  # of 16 rows


def test_logprobs_shard_filter_misuse(ctx):
    x, tokens, temps = _lp_batch(4, 100, seed=13)
    kw = dict(vocab_offset=50, vocab_total=100, shard_index=1, shard_count=2, shard_slot=1,
              shard_slots=2, top_n=2)
    filters = dict(top_k=[5, 0, 20, 3], top_p=0.9, min_p=[0.0, 0.1, 0.0, 0.05])
    with pytest.raises(psr.InvalidArgument, match="raw: filters shape processed logprobs"):
        ctx.logprobs_shard(x[:, 50:], tokens, None, raw=True, top_k=5, **kw)
    with pytest.raises(psr.FilterRange, match=r"top_p\[1\] = 1.5 is outside \(0, 1\]"):
        ctx.logprobs_shard(x[:, 50:], tokens, temps, top_p=[0.9, 1.5, 1.0, 1.0], **kw)
    with pytest.raises(psr.FilterRange, match=r"min_p = -0.1 is outside \[0, 1\]"):
        ctx.logprobs_shard(x[:, 50:], tokens, temps, min_p=-0.1, **kw)
    with pytest.raises(TypeError, match="top_k"):
        ctx.logprobs_shard(x[:, 50:], tokens, temps, top_k=2.5, **kw)
    with pytest.raises(psr.ShardMismatch, match="vocab_offset 60"):
        ctx.logprobs_shard(x[:, 50:], tokens, temps, **{**kw, "vocab_offset": 60}, **filters)

    with ctx.logprobs_shard(x[:, 50:], tokens, temps, **kw) as plain:
        assert plain.filter_rounds == 0
        with pytest.raises(psr.InvalidArgument, match="filter_partial: this LogprobsShard has no"):
            plain.filter_partial(0)
        with pytest.raises(psr.InvalidArgument, match="filter_apply: .* no filters"):
            plain.filter_apply(np.zeros((4, 256), np.uint64))

    shards = _open_shards(ctx, x, tokens, temps, [0, 50, 100], top_n=2, **filters)
    s = shards[1]
    assert s.filter_rounds == 9
    with pytest.raises(psr.InvalidArgument, match="keys: the filters' rounds are not complete"
                                                 r" \(none ran\)"):
        s.keys()
    with pytest.raises(psr.InvalidArgument, match="partials: the filters' rounds"):
        s.partials(np.zeros(4, np.uint32))
    with pytest.raises(psr.InvalidArgument, match="finish: the filters' rounds"):
        s.finish(np.zeros(s.partials_bytes, np.uint8))
    with pytest.raises(psr.InvalidArgument, match=r"start with filter_partial\(0\)"):
        s.filter_partial(1, np.zeros((4, 256), np.uint64))
    with pytest.raises(psr.InvalidArgument, match="reduced: round 0 takes none"):
        s.filter_partial(0, np.zeros((4, 256), np.uint64))
    with pytest.raises(psr.InvalidArgument, match="r: 9 is not a round with a partial: those "
                                                 "are 0 .. 8"):
        s.filter_partial(9)
    with pytest.raises(psr.InvalidArgument, match="r: -1 is negative"):
        s.filter_partial(-1)
    with pytest.raises(TypeError, match="r: expected an integer"):
        s.filter_partial(1.0)
    with pytest.raises(psr.InvalidArgument, match="filter_apply: .*round 8 .* start with"):
        s.filter_apply(np.zeros((4, 256), np.uint64))
    parts = [t.filter_partial(0) for t in shards]
    with pytest.raises(psr.InvalidArgument, match="reduced: None: round 1 takes the "
                                                 "element-wise maximum"):
        s.filter_partial(1)
    with pytest.raises(psr.InvalidArgument, match=r"reduced: shape \(2, 4, 256\)"):
        s.filter_partial(1, parts)  # the partials, not their reduction
    with pytest.raises(psr.InvalidArgument, match=r"reduced: shape \(4, 128\)"):
        s.filter_partial(1, parts[0][:, :128])
    with pytest.raises(TypeError, match="reduced: expected integers"):
        s.filter_partial(1, parts[0].astype(np.float64))
    with pytest.raises(psr.InvalidArgument, match="reduced: values outside uint64"):
        s.filter_partial(1, np.full((4, 256), -1, np.int64))
    with pytest.raises(psr.InvalidArgument, match="round 1 is next"):
        s.filter_partial(2, parts[0])
    reduced = np.maximum.reduce(parts)
    for r in range(1, 9):
        parts = [t.filter_partial(r, reduced) for t in shards]
        reduced = np.sum(parts, axis=0, dtype=np.uint64)
        if r == 1:
            with pytest.raises(psr.InvalidArgument, match="round 1 already ran"):
                s.filter_partial(1, reduced)
    with pytest.raises(psr.InvalidArgument, match="keys: .*round 9 of 0 .. 9 is next"):
        s.keys()
    for t in shards:
        t.filter_apply(reduced)
    with pytest.raises(psr.InvalidArgument, match="rounds are complete"):
        s.filter_apply(reduced)
    keys = np.maximum.reduce([t.keys() for t in shards])
    assert s.finish([t.partials(keys) for t in shards]).top_ids.shape == (4, 2)
    s.filter_partial(0)  # the rounds again: the logprobs' rounds wait for them
    with pytest.raises(psr.InvalidArgument, match="finish: the filters' rounds are not "
                                                 "complete"):
        s.finish(np.zeros(s.partials_bytes, np.uint8))
    for t in shards:
        t.close()
    with pytest.raises(psr.InvalidArgument, match="LogprobsShard is closed"):
        s.filter_partial(0)


# ---- verification across shards: Context.verify_shard and its four rounds ----

def _verify_batch(requests, vocab, seed, max_drafts=3):
    """Requests of 0 .. max_drafts drafts: drafts often a token the target
    makes likely (so some are accepted), else random or -1; a row of NaN;
    temperatures 0 (greedy), 0.7 and 1; the draft logits near the target's."""
    rng = np.random.default_rng(seed)
    cu = np.concatenate([[0], np.cumsum(1 + rng.integers(0, max_drafts + 1, requests))])
    rows = int(cu[-1])
    x = logits(rows, vocab, seed=seed)
    drafts = rng.integers(0, vocab, rows).astype(np.int32)
    pick = rng.integers(0, 10, rows)
    x[np.arange(rows), drafts] += np.where(pick < 6, 15.0, 0.0).astype(np.float32)
    drafts[pick == 9] = -1
    x[rows // 2, :] = np.nan
    cache = np.zeros((requests, max_drafts, vocab), np.float32)
    for r in range(requests):
        n = cu[r + 1] - cu[r] - 1
        cache[r, :n] = 0.8 * np.nan_to_num(x[cu[r]:cu[r] + n], nan=0.0) + \
            rng.normal(size=(n, vocab)).astype(np.float32)
    return dict(target_logits=x, draft_tokens=drafts, cu=cu,
                seeds=rng.integers(-2**40, 2**40, requests),
                temperatures=rng.choice(np.array([0.0, 0.7, 1.0], np.float32), requests),
                positions=rng.integers(0, 1 << 29, rows)), cache


def _open_verify(ctx, case, cache, bounds, **kw):
    """One VerifyShard per shard of bounds, their slots laid out in order."""
    slots = [psr.logprobs_shard_slots(b - a) for a, b in zip(bounds[:-1], bounds[1:])]
    return [ctx.verify_shard(**dict(case, target_logits=case["target_logits"][:, a:b]),
                             draft_cache=None if cache is None else cache[:, :, a:b],
                             vocab_offset=a, vocab_total=bounds[-1], shard_index=s,
                             shard_count=len(bounds) - 1, shard_slot=sum(slots[:s]),
                             shard_slots=sum(slots), **kw)
            for s, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]


def _sharded_verify(ctx, case, cache, bounds, reduce_keys=True, full=False, **kw):
    """The four rounds for every shard, the app's reduction and gathers done
    here; every shard's (tokens, num_sampled)."""
    shards = _open_verify(ctx, case, cache, bounds, **kw)
    try:
        keys = [s.keys() for s in shards]
        rows = case["target_logits"].shape[0]
        assert all(k.dtype == np.uint32 and k.shape == (2 * rows + 1,) for k in keys)
        reduced = np.maximum.reduce(keys)
        if full:  # as a transport of int64 tensors would hand them back
            reduced = reduced.astype(np.int64)
        parts = [s.partials(reduced if reduce_keys else k, full=full)
                 for s, k in zip(shards, keys)]
        # full=True: each shard's whole buffer, reduced like the keys; else
        # the pieces as a list (records() concatenates them)
        recs = [s.records(np.maximum.reduce(parts) if full else parts, full=full)
                for s in shards]
        assert all(r.dtype == psr.SHARD_RECORD for r in recs)
        if full:  # [shards, requests] each, zeros but in its own row
            gathered = np.maximum.reduce([r.view(np.uint8) for r in recs])
        else:
            gathered = np.stack(recs)
        return [s.finish(gathered) for s in shards]
    finally:
        for s in shards:
            s.close()


def _differing(got, want):
    """The requests whose tokens or num_sampled differ."""
    return int(((got[0] != want[0]).any(axis=1) | (got[1] != want[1])).sum())


@pytest.mark.parametrize("method", ["probabilistic", "greedy"])
@pytest.mark.parametrize("draft_logits", [False, True])
def test_sharded_verify_equals_unsharded_on_block_bounds(ctx, method, draft_logits):
    case, cache = _verify_batch(16, 40000, seed=8)
    cache = cache if draft_logits else None
    want = ctx.verify(**case, draft_cache=cache, method=method)
    results = _sharded_verify(ctx, case, cache, [0, 16384, 32768, 40000], method=method)
    for tokens, num in results:  # the same on every shard
        assert tokens.dtype == want[0].dtype and tokens.shape == want[0].shape
        assert (tokens == want[0]).all() and (num == want[1]).all()
    n = np.diff(case["cu"])
    assert (want[1] > 1).any() and (want[1] < n).any()  # drafts accepted, drafts rejected


def test_sharded_verify_full_exchanges_and_one_shard(ctx):
    case, cache = _verify_batch(8, 20000, seed=9)
    kw = dict(tokens_dtype=np.int64, max_drafts=5)
    want = ctx.verify(**case, draft_cache=cache, **kw)
    got = _sharded_verify(ctx, case, cache, [0, 16384, 20000], full=True, **kw)
    assert got[1][0].dtype == np.int64 and got[1][0].shape == (8, 6)
    assert (got[1][0] == want[0]).all() and (got[1][1] == want[1]).all()
    got = _sharded_verify(ctx, case, None, [0, 20000], method="greedy")
    want = ctx.verify(**case, method="greedy")
    assert (got[0][0] == want[0]).all() and (got[0][1] == want[1]).all()


def test_sharded_verify_control_unreduced_keys(ctx):
    """Keys left unreduced (each shard sees only the draft logits it holds)
    change the verdicts of some requests: the comparisons above can fail."""
    case, cache = _verify_batch(16, 40000, seed=8)
    want = ctx.verify(**case, draft_cache=cache)
    got = _sharded_verify(ctx, case, cache, [0, 16384, 32768, 40000], reduce_keys=False)
    assert _differing(got[0], want) >= 3  # of 16 requests


def test_verify_shard_slot_bytes():
    assert psr.verify_shard_slot_bytes(3) == 80  # 3 x 24 = 72, rounded up to 16
    assert psr.verify_shard_slot_bytes(2) == 48 and psr.verify_shard_slot_bytes(0) == 0
    with pytest.raises(psr.InvalidArgument, match="rows: -1 is negative"):
        psr.verify_shard_slot_bytes(-1)
    with pytest.raises(TypeError, match="rows"):
        psr.verify_shard_slot_bytes(3.0)


def test_verify_shard_bad_arguments(ctx):
    case, cache = _verify_batch(4, 100, seed=10, max_drafts=2)
    tail = dict(case, target_logits=case["target_logits"][:, 50:])
    kw = dict(vocab_offset=50, vocab_total=100, shard_index=1, shard_count=2, shard_slot=1,
              shard_slots=2)

    def keys(**changes):
        with ctx.verify_shard(**{**tail, **kw, **changes}) as s:
            return s.keys()

    assert keys().shape == (2 * case["cu"][-1] + 1,)
    with pytest.raises(psr.ShardMismatch, match="shard_slot 2"):
        keys(shard_slot=2)
    with pytest.raises(psr.ShardMismatch, match="vocab_offset 60"):
        keys(vocab_offset=60)
    with pytest.raises(psr.InvalidArgument, match="shard_index 2"):
        keys(shard_index=2)
    for n in (0, psr._api.PSR_MAX_SHARDS + 1):
        with pytest.raises(psr.InvalidArgument, match=f"shard_count: {n} is outside"):
            keys(shard_count=n)
    with pytest.raises(psr.InvalidArgument, match="shard_slots: 4 is outside 1 .. 2"):
        keys(shard_slots=4)
    with pytest.raises(psr.InvalidArgument, match="vocab_offset: -1 is negative"):
        keys(vocab_offset=-1)
    with pytest.raises(TypeError, match="shard_index"):
        keys(shard_index=1.0)
    with pytest.raises(psr.InvalidArgument, match="method"):
        keys(method="sure")
    with pytest.raises(psr.InvalidArgument, match="draft_cache"):
        keys(draft_cache=cache)  # the whole vocabulary's, not the shard's columns
    with pytest.raises(psr.InvalidArgument, match=r"cu\[0\]"):
        keys(cu=case["cu"] + 1)
    bad = case["draft_tokens"].copy()
    bad[0] = 100  # in no shard of the vocabulary
    with pytest.raises(psr.TokenRange, match=r"draft_tokens\[0\] = 100"):
        keys(draft_tokens=bad)
    with pytest.raises(psr.TokenRange, match="draft_tokens"):
        ctx.verify(**dict(case, draft_tokens=bad))
    with pytest.raises(psr.TemperatureRange, match=r"temperatures\[1\]"):
        keys(temperatures=[1.0, -1.0, 1.0, 1.0])
    with pytest.raises(psr.PositionRange, match=r"positions\[0\]"):
        keys(positions=np.full(case["cu"][-1], -1))

    shards = _open_verify(ctx, case, None, [0, 50, 100])
    s = shards[1]
    with pytest.raises(psr.InvalidArgument, match="records: round 2 needs"):
        s.records(np.zeros(s.partials_bytes, np.uint8))
    with pytest.raises(psr.InvalidArgument, match="keys"):
        s.partials(s.keys()[:3])
    k = np.maximum.reduce([t.keys() for t in shards])
    parts = [t.partials(k) for t in shards]
    assert parts[1].shape == (s.slots * s.slot_bytes,) and s.partials_bytes == 2 * s.slot_bytes
    with pytest.raises(psr.InvalidArgument, match="finish: round 3 needs"):
        s.finish(np.zeros(s.records_bytes, np.uint8))
    with pytest.raises(psr.InvalidArgument, match="partials"):
        s.records(parts[1])  # shard 0's slot is missing
    recs = np.stack([t.records(parts) for t in shards])
    with pytest.raises(psr.ShardMismatch, match=r"records\[0, 0\] is from shard 1 of 2"):
        s.finish(recs[::-1])
    with pytest.raises(psr.InvalidArgument, match="records"):
        s.finish(recs[0])
    with pytest.raises(TypeError, match="records"):
        s.finish(recs.view(np.int64))
    assert s.finish(list(recs))[1].shape == (4,)
    k[-1] = 1  # another shard's device saw a bad draft token
    s.partials(k)
    s.records(parts)
    with pytest.raises(psr.TokenRange, match="flagged"):
        s.finish(recs)
    for t in shards:
        t.close()
    with pytest.raises(psr.InvalidArgument, match="VerifyShard is closed"):
        s.keys()
