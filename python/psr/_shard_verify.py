"""Verification of speculative drafts across vocabulary shards on host
arrays: psr.VerifyShard, one shard's inputs on the device and the four
rounds of psr_verify_shard_round, the application moving the bytes
between shards (docs/python.md, "Verification across shards"). The device
buffers and the rounds' mechanics are _shard.DeviceShard's."""
import numpy as np

from . import _api
from . import _convert as cv
from ._context import SHARD_RECORD, _host_cache, _max_drafts
from ._errors import (InvalidArgument, PositionRange, ShardMismatch, TemperatureRange,
                      TokenRange)
from ._shard import (DeviceShard, check_positions, check_temperatures, gathered, shard_place,
                     size_arg)

# PSR_VERIFY_* bits of the status round 3 reads from the reduced keys: the
# class raised for each and what it means.
_FLAGGED = ((_api.PSR_VERIFY_BAD_TOKEN, TokenRange, "a draft token is outside [-1, vocab_total)"),
            (_api.PSR_VERIFY_BAD_POSITION, PositionRange, "a position is outside [0, 2^30)"),
            (_api.PSR_VERIFY_BAD_TEMPERATURE, TemperatureRange,
             "a temperature is not 0 or a positive normal number"))


def verify_shard_slot_bytes(rows):
    """The bytes of one slot of verification's partials for rows target
    rows (psr_verify_shard_slot_bytes): rows x 24, rounded up to 16. A
    shard fills psr.logprobs_shard_slots(its tokens) slots, as for logprobs."""
    rows = size_arg(rows, "rows")
    n = _api.lib().psr_verify_shard_slot_bytes(rows)
    if n == 0 and rows:
        raise cv.bad("rows", f"{rows} rows are too many for a slot")
    return n


class VerifyShard(DeviceShard):
    """One shard of a vocabulary split over devices or processes, for the
    verification of speculative drafts (made by Context.verify_shard).
    Every shard runs the four rounds, the application moving the bytes
    between them:

        keys = shard.keys()               # round 0: uint32 [2 rows + 1]
        # reduce: every shard's keys, element-wise maximum
        mine = shard.partials(keys)       # round 1: this shard's slots, uint8
        # gather: every shard's slots, in slot order
        rec = shard.records(gathered)     # round 2: this shard's records [requests]
        # gather: every shard's records, in shard order
        tokens, num = shard.finish(recs)  # round 3: as Context.verify returns

    The result is the same on every shard; shards whose first tokens are
    multiples of 16,384 give Context.verify's tokens on the whole
    vocabulary. Holds device buffers until close() (or the end of a with
    block, or garbage collection)."""

    _ROUND = "psr_verify_shard_round"

    def __init__(self, ctx, args, inputs, cu, tokens_dtype):
        super().__init__(ctx, args)
        self._cu = cu  # args.cu points into it; psr copies it at each round
        self._tokens_dtype = tokens_dtype
        self._partials = None  # the gathered partials of the last records()
        self.requests, self.rows, self.vocab = args.requests, args.rows, args.vocab
        self.max_drafts = args.max_drafts
        self.shard_index, self.shard_count = args.shard_index, args.shard_count
        self.shard_slot, self.shard_slots = args.shard_slot, args.shard_slots
        self.slots = _api.lib().psr_logprobs_shard_slots(args.vocab)
        self.slot_bytes = _api.lib().psr_verify_shard_slot_bytes(args.rows)
        target, cache, drafts, seeds, temps, positions = inputs
        R, rows = args.requests, args.rows
        specs = [("target_logits", target, "target_logits"),
                 ("draft_tokens", drafts, "draft_tokens"), ("seeds", seeds, "seeds"),
                 ("temperatures", temps, "temperatures"), ("positions", positions, "positions"),
                 ("shard_keys", (2 * rows + 1) * 4, "keys"),
                 ("shard_partials", self.partials_bytes, "partials"),
                 ("shard_records", self.records_bytes, "records"),
                 ("tokens", R * (args.max_drafts + 1) * tokens_dtype.itemsize, "tokens"),
                 ("num_sampled", R * 4, "num_sampled"), ("status", 4, "status")]
        if cache is not None:
            specs.append(("draft_cache", cache, "draft_cache"))
        self._make_buffers(specs)

    @property
    def records_bytes(self):
        """The bytes of every shard's records together: shard_count x requests x 16."""
        return self.shard_count * self.requests * SHARD_RECORD.itemsize

    def keys(self):
        """Round 0: this shard's keys, uint32 [2 rows + 1] (the target and
        draft logits of each row's draft token where this shard holds it,
        and the inputs' check). Reduce every shard's keys by element-wise
        maximum (np.maximum, MPI.MAX, ReduceOp.MAX) and pass the result to
        partials()."""
        out = np.empty(2 * self.rows + 1, np.uint32)
        self._round(0, [], [(self._a.shard_keys, out, 0)])
        return out

    def partials(self, keys, *, full=False):
        """Round 1 with keys, every shard's keys reduced: this shard's slots
        of the partials, uint8 [slots x slot_bytes], which belong at byte
        shard_slot x slot_bytes of the gathered partials. full=True returns
        the whole partials instead, [shard_slots x slot_bytes] with zeros in
        the other shards' slots: then an element-wise maximum (or sum) of
        every shard's gives the gathered partials, as the keys' reduction."""
        self._partials = None  # records() again before finish()
        return self._partials_round(self._a.shard_keys, keys, 2 * self.rows + 1, full)

    def records(self, partials, *, full=False):
        """Round 2 with every shard's slots gathered, as uint8 [shard_slots x
        slot_bytes] bytes (or a list of the shards' pieces in slot order,
        concatenated here): this shard's records, [requests] of
        psr.SHARD_RECORD (the residual or bonus token of each request over
        its columns), which belong in row shard_index of the gathered
        records. full=True returns the whole records instead,
        [shard_count, requests] with zeros in the other shards' rows: an
        element-wise maximum (or sum) of every shard's, as bytes
        (.view(np.uint8)), is then the gathered records."""
        if self._keys is None:
            raise InvalidArgument("records: round 2 needs this shard's round 1 first: call "
                                  "partials(keys) with the reduced keys")
        p = self._gathered_partials(partials).copy()  # kept for finish()
        a, mine = self._a, self.requests * SHARD_RECORD.itemsize
        out = self._share(2, [(a.shard_keys, self._keys, 0), (a.shard_partials, p, 0)],
                          a.shard_records, self.records_bytes, self.shard_index * mine, mine, full)
        self._partials = p
        rec = out.view(SHARD_RECORD)
        return rec.reshape(self.shard_count, self.requests) if full else rec

    def finish(self, records):
        """Round 3 with every shard's records gathered: [shard_count,
        requests] of psr.SHARD_RECORD (shard s's in row s), their bytes, or
        a list of the shards' records in shard order. Returns (tokens
        [requests, max_drafts + 1], num_sampled [requests]) as
        Context.verify does, the same on every shard."""
        if self._partials is None:
            raise InvalidArgument("finish: round 3 needs this shard's round 2 first: call "
                                  "records(partials) with the gathered partials")
        b = gathered(records, self.records_bytes, "records",
                     f"shard_count x requests x 16 = {self.shard_count} x {self.requests} x 16",
                     record=SHARD_RECORD)
        self._check_records(b.view(SHARD_RECORD).reshape(self.shard_count, self.requests))
        R, a = self.requests, self._a
        tokens = np.empty((R, self.max_drafts + 1), self._tokens_dtype)
        num, status = np.empty(R, np.int32), np.zeros(1, np.uint32)
        self._round(3, [(a.shard_keys, self._keys, 0), (a.shard_partials, self._partials, 0),
                        (a.shard_records, b, 0)],
                    [(a.tokens, tokens, 0), (a.num_sampled, num, 0), (a.status, status, 0)])
        if status[0]:
            raise _flagged(int(status[0]))
        return tokens, num

    def _check_records(self, rec):
        """Each record in its place: shard s's in row s, of shard_count shards."""
        S = self.shard_count
        tags = rec["flags"] >> np.uint32(16)
        bad = tags != (np.arange(S, dtype=np.uint32) | np.uint32(S << 8))[:, None]
        if bad.any():
            s, r = (int(i) for i in np.argwhere(bad)[0])
            t = int(tags[s, r])
            raise ShardMismatch(f"records[{s}, {r}] is from shard {t & 255} of {t >> 8}, not "
                                f"shard {s} of {S} (every shard's records(), in shard order)")


def _flagged(status):
    """The error for the PSR_VERIFY_* bits a shard's device saw in the
    inputs (another process's, which this one did not check)."""
    found = [(cls, what) for bit, cls, what in _FLAGGED if status & bit]
    cls = found[0][0] if found else InvalidArgument
    reasons = "; ".join(what for _, what in found) or "unknown bits"
    return cls(f"finish: a shard's device flagged the inputs (status 0x{status:x}: {reasons}); "
               f"nothing was written")


def _check_draft_tokens(drafts, cu, vocab_total):
    """psr_verify_host's rule on the global vocabulary: every draft row's
    token (not the bonus rows') is in [-1, vocab_total)."""
    bonus = np.zeros(drafts.shape[0], bool)
    bonus[cu[1:] - 1] = True
    bad = ~bonus & ((drafts < -1) | (drafts >= vocab_total))
    if bad.any():
        row = int(np.argmax(bad))
        raise TokenRange(f"draft_tokens[{row}] = {int(drafts[row])} is outside [-1, vocab_total "
                         f"{vocab_total})")


def _check_place(place, vocab):
    """What the buffers' sizes depend on, before they are made: the shard
    count, and shard_slots against the slots shards of the vocabulary fill
    (psr checks the rest at the first round)."""
    S, slots = place["shard_count"], place["shard_slots"]
    if not 1 <= S <= _api.PSR_MAX_SHARDS:
        raise cv.bad("shard_count", f"{S} is outside 1 .. {_api.PSR_MAX_SHARDS} (PSR_MAX_SHARDS)")
    total = max(place["vocab_total"], place["vocab_offset"] + vocab)
    most = _api.lib().psr_logprobs_shard_slots(total) + S - 1
    if not 1 <= slots <= most:
        raise cv.bad("shard_slots", f"{slots} is outside 1 .. {most}, the slots {S} shards of a "
                                    f"{total}-token vocabulary fill at most (each "
                                    f"psr.logprobs_shard_slots of its tokens)")


def open_verify_shard(ctx, target_logits, draft_tokens, cu, seeds, temperatures, positions, *,
                      vocab_offset, vocab_total, shard_index, shard_count, shard_slot,
                      shard_slots, draft_cache, method, noise, max_drafts, tokens_dtype, dtype):
    """Context.verify_shard's work: the host arguments checked and
    converted as Context.verify checks them, then a VerifyShard."""
    if method not in _api.PSR_VERIFY:
        raise cv.bad("method", f"{method!r} is not 'probabilistic' or 'greedy'")
    noise_v = cv.noise_of(noise)
    tok_np, tok_psr = cv.tokens_dtype_of(tokens_dtype)
    place = shard_place(vocab_offset=vocab_offset, vocab_total=vocab_total,
                        shard_index=shard_index, shard_count=shard_count, shard_slot=shard_slot,
                        shard_slots=shard_slots)
    x, rows, vocab, _, pdtype = cv.host_logits(target_logits, "target_logits", dtype)
    x = np.ascontiguousarray(x)  # the shard's columns alone go to the device
    _check_place(place, vocab)
    cu_a, R, most = cv.check_cu(cu, rows)
    K = _max_drafts(max_drafts, most)
    drafts = cv.per_row_int(draft_tokens, "draft_tokens", rows, np.int32)
    seeds_a = cv.per_row_int(seeds, "seeds", R)
    temps = cv.per_row_float(temperatures, "temperatures", R)
    pos_a = cv.per_row_int(positions, "positions", rows)
    cache, cache_k = _host_cache(draft_cache, R, vocab)
    check_positions(pos_a, "positions")
    check_temperatures(temps, "temperatures")
    _check_draft_tokens(drafts, cu_a, place["vocab_total"])
    a = ctx._args(_api.VerifyArgs)
    a.requests, a.cu, a.rows, a.max_drafts, a.vocab = R, cu_a.ctypes.data, rows, K, vocab
    a.target_dtype, a.target_row_stride, a.draft_cache_k = pdtype, vocab, cache_k
    a.method, a.noise, a.tokens_dtype = _api.PSR_VERIFY[method], noise_v, tok_psr
    for n, v in place.items():
        setattr(a, n, v)
    return VerifyShard(ctx, a, (x, cache, drafts, seeds_a, temps, pos_a), cu_a, tok_np)
