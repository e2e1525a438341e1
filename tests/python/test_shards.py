"""Vocabulary shards from Python: Context.sample_shard per shard and
psr.combine give ctx.sample's tokens; records that do not fit raise
ShardMismatch."""
import numpy as np
import pytest

import psr

from conftest import logits


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
