"""Logprobs across vocabulary shards on host arrays: psr.LogprobsShard,
one shard's inputs on the device, the filters' rounds of
psr_shard_filter_round (with top_k, top_p or min_p) and the three rounds
of psr_logprobs_shard_round, the application moving the bytes between
shards (docs/python.md, "Logprobs across shards"). The device buffers,
the rounds' mechanics and the filters' rounds are _shard.FilteredShard's."""
import numpy as np

from . import _api
from . import _convert as cv
from ._context import LogprobsResult, _host_tokens
from ._errors import InvalidArgument
from ._shard import (FilteredShard, check_temperatures, filter_specs, filter_values, shard_place,
                     size_arg)


def logprobs_shard_slots(shard_vocab):
    """The slots of the partials a shard of shard_vocab tokens fills
    (psr_logprobs_shard_slots): one per 16,384 tokens, rounded up."""
    return _api.lib().psr_logprobs_shard_slots(size_arg(shard_vocab, "shard_vocab"))


def logprobs_shard_slot_bytes(rows, top_n):
    """The bytes of one slot for rows rows and top_n top logprobs
    (psr_logprobs_shard_slot_bytes): rows x (12 + 8 top_n), rounded up to 16."""
    rows = size_arg(rows, "rows")
    top_n = cv.top_n_of(top_n, "top_n")
    n = _api.lib().psr_logprobs_shard_slot_bytes(rows, top_n)
    if n == 0 and rows:
        raise cv.bad("rows", f"{rows} rows are too many for a slot")
    return n


class LogprobsShard(FilteredShard):
    """One shard of a vocabulary split over devices or processes, for
    logprobs (made by Context.logprobs_shard). With filters (top_k, top_p,
    min_p), every shard first runs the filters' rounds, reducing every
    shard's partials between them:

        reduced = None
        for r in range(shard.filter_rounds):   # 0 without filters
            part = shard.filter_partial(r, reduced)  # uint64 [rows, 256]
            reduced = ...  # every shard's part, element-wise: round 0 maximum, then sum
        if shard.filter_rounds:
            shard.filter_apply(reduced)        # the thresholds, on this shard

    Then every shard runs the three rounds of the logprobs, the
    application moving the bytes between them:

        keys = shard.keys()            # round 0: uint32 [rows]
        # reduce: every shard's keys, element-wise maximum
        mine = shard.partials(keys)    # round 1: this shard's slots, uint8
        # gather: every shard's slots, in slot order
        result = shard.finish(gathered)  # round 2: a LogprobsResult

    The result is the same on every shard; shards whose first tokens are
    multiples of 16,384 give Context.logprobs' bits on the whole
    vocabulary. Holds device buffers until close() (or the end of a with
    block, or garbage collection)."""

    _ROUND = "psr_logprobs_shard_round"

    def __init__(self, ctx, args, inputs, top_n, filt):
        super().__init__(ctx, args)
        self._top_n = top_n
        self.rows, self.vocab = args.rows, args.vocab
        self.shard_slot, self.shard_slots = args.shard_slot, args.shard_slots
        self.slots = _api.lib().psr_logprobs_shard_slots(args.vocab)
        self.slot_bytes = _api.lib().psr_logprobs_shard_slot_bytes(args.rows, top_n)
        logits, temps, tokens = inputs
        rows = args.rows
        specs = [("logits", logits, "logits"), ("tokens", tokens, "tokens"),
                 ("shard_token_keys", rows * 4, "keys"),
                 ("shard_partials", self.partials_bytes, "partials"),
                 ("token_logprobs", rows * 4, "logprobs"), ("token_ranks", rows * 4, "ranks")]
        if temps is not None:
            specs.append(("temperatures", temps, "temperature"))
        if top_n:
            specs += [("top_ids", rows * top_n * 4, "top_ids"),
                      ("top_logprobs", rows * top_n * 4, "top_logprobs")]
        specs += filter_specs(args, filt)
        self._make_buffers(specs)
        if any(v is not None or arr is not None for v, arr in filt):
            self._open_filters()

    def keys(self):
        """Round 0: this shard's keys of the sampled tokens, uint32 [rows].
        Reduce every shard's keys by element-wise maximum (np.maximum,
        MPI.MAX, ReduceOp.MAX) and pass the result to partials(). With
        filters, after their rounds (filter_apply)."""
        self._need_filters("keys")
        out = np.empty(self.rows, np.uint32)
        self._round(0, [], [(self._a.shard_token_keys, out, 0)])
        return out

    def partials(self, keys, *, full=False):
        """Round 1 with keys, every shard's keys reduced: this shard's slots
        of the partials, uint8 [slots x slot_bytes], which belong at byte
        shard_slot x slot_bytes of the gathered partials. full=True returns
        the whole partials instead, [shard_slots x slot_bytes] with zeros in
        the other shards' slots: then an element-wise maximum (or sum) of
        every shard's gives the gathered partials, as the keys' reduction."""
        self._need_filters("partials")
        return self._partials_round(self._a.shard_token_keys, keys, self.rows, full)

    def finish(self, partials):
        """Round 2: the logprobs from every shard's slots gathered, as uint8
        [shard_slots x slot_bytes] bytes (or a list of the shards' pieces in
        slot order, concatenated here), with the reduced keys the last
        partials() took. Returns a LogprobsResult like Context.logprobs',
        the same on every shard."""
        self._need_filters("finish")
        if self._keys is None:
            raise InvalidArgument("finish: round 2 needs this shard's round 1 first: call "
                                  "partials(keys) with the reduced keys")
        p = self._gathered_partials(partials)
        rows, n = self.rows, self._top_n
        lp, rk = np.empty(rows, np.float32), np.empty(rows, np.int32)
        ids, tlp = np.empty((rows, n), np.int32), np.empty((rows, n), np.float32)
        a = self._a
        reads = [(a.token_logprobs, lp, 0), (a.token_ranks, rk, 0)]
        if n:
            reads += [(a.top_ids, ids, 0), (a.top_logprobs, tlp, 0)]
        self._round(2, [(a.shard_token_keys, self._keys, 0), (a.shard_partials, p, 0)], reads)
        return LogprobsResult(lp, rk, ids, tlp)


def open_shard(ctx, logits, tokens, temperature, *, vocab_offset, vocab_total, shard_index,
               shard_count, shard_slot, shard_slots, top_n, raw, top_k, top_p, min_p, dtype):
    """Context.logprobs_shard's work: the host arguments checked and
    converted, then a LogprobsShard."""
    top_n = cv.top_n_of(top_n, "top_n")
    if raw and (top_k is not None or top_p is not None or min_p is not None):
        raise cv.bad("raw", "filters shape processed logprobs only (raw=False)")
    if not raw and temperature is None:
        raise cv.bad("temperature", "required for processed logprobs (raw=False)")
    sizes = shard_place(vocab_offset=vocab_offset, vocab_total=vocab_total,
                        shard_index=shard_index, shard_count=shard_count, shard_slot=shard_slot,
                        shard_slots=shard_slots)
    if not 1 <= sizes["shard_slots"] <= _api.PSR_LOGPROBS_MAX_SLOTS:
        raise cv.bad("shard_slots", f"{sizes['shard_slots']} is outside 1 .. "
                                    f"{_api.PSR_LOGPROBS_MAX_SLOTS} (PSR_LOGPROBS_MAX_SLOTS)")
    x, rows, vocab, _, pdtype = cv.host_logits(logits, "logits", dtype)
    x = np.ascontiguousarray(x)  # the shard's columns alone go to the device
    tok = _host_tokens(tokens, rows)
    temps = None
    if not raw:
        temps = cv.per_row_float(temperature, "temperature", rows)
        check_temperatures(temps, "temperature")
    filt = filter_values(top_k, top_p, min_p, rows)
    a = ctx._args(_api.LogprobsArgs)
    a.rows, a.vocab, a.row_stride, a.requests = rows, vocab, vocab, rows
    a.logits_dtype, a.top_n = pdtype, top_n
    a.tokens_dtype = _api.PSR_TOKENS_I64 if tok.dtype == np.int64 else _api.PSR_TOKENS_I32
    a.flags = _api.PSR_LOGPROBS_RAW if raw else 0
    for n, v in sizes.items():
        setattr(a, n, v)
    return LogprobsShard(ctx, a, (x, temps, tok), top_n, filt)
