"""PyOpenCL arrays in, PyOpenCL arrays and an event out, without copies: the
same tokens, logprobs and verification as the host path."""
import numpy as np
import pytest

import psr
from conftest import logits, same


@pytest.fixture(scope="module")
def q(ctx, cl):
    return ctx.cl_queue


def test_sample_device_equals_host(ctx, cl, cla, q):
    x = logits(5, 2000, seed=20)
    seeds = np.array([1, 2, 3, 4, 5], np.int64)
    pos = np.array([10, 0, 7, 9, 1], np.int64)
    t = np.array([0.8, 1.0, 0.0, 1.5, 0.6], np.float32)
    dx, ds, dp, dt = (cla.to_device(q, a) for a in (x, seeds, pos, t))
    tokens, ev = ctx.sample(dx, dt, ds, dp)
    assert isinstance(tokens, cla.Array) and isinstance(ev, cl.Event)
    ev.wait()
    assert (tokens.get() == ctx.sample(x, t, seeds, pos)).all()
    # host values for the per-row arguments are uploaded; out= is written in place
    out = cla.empty(q, 5, np.int64)
    tokens2, ev2 = ctx.sample(dx, 0.8, 1, 10, tokens_dtype=np.int64, out=out, top_k=30)
    assert tokens2 is out
    ev2.wait()
    assert (out.get() == ctx.sample(x, 0.8, 1, 10, top_k=30)).all()


def test_event_is_not_retained_twice(ctx, cl, cla, q, monkeypatch):
    """psr hands its event's reference over: the wrapper takes it without a
    retain, and releases it when dropped. (Reference counts themselves move
    with the driver's own bookkeeping on PoCL, so the call is checked.)"""
    calls = []
    real = cl.Event.from_int_ptr

    def spy(ptr, retain=True):
        calls.append(retain)
        return real(ptr, retain=retain)

    monkeypatch.setattr(cl.Event, "from_int_ptr", spy)
    dx = cla.to_device(q, logits(2, 1000, seed=21))
    _, ev = ctx.sample(dx, 1.0, 1, 1)
    ev.wait()
    assert calls == [False]
    witness = real(ev.int_ptr, retain=True)
    before = witness.get_info(cl.event_info.REFERENCE_COUNT)
    del ev
    assert witness.get_info(cl.event_info.REFERENCE_COUNT) == before - 1


def test_logits_views_and_row_flags(ctx, cl, cla, q):
    x = logits(6, 1000, seed=22)
    dx = cla.to_device(q, x)
    flags = cla.zeros(q, 3, np.uint32)
    t = cla.to_device(q, np.array([0.7, -1.0, 0.7], np.float32))  # a bad value on the device
    tokens, ev = ctx.sample(dx[2:5], t, 9, 3, row_flags=flags)  # offset: logits_offset
    ev.wait()
    want = ctx.sample(x[2:5], 0.7, 9, 3)
    got = tokens.get()
    assert got[0] == want[0] and got[2] == want[2] and got[1] == -1
    assert flags.get()[1] & 4  # PSR_ROW_BAD_TEMPERATURE


def test_logprobs_device(ctx, cl, cla, q):
    x = logits(4, 2500, seed=23)
    dx = cla.to_device(q, x)
    r, ev = ctx.sample(dx, 0.9, [1, 2, 3, 4], 5, top_p=0.85, logprobs=3)
    ev.wait()
    h = ctx.sample(x, 0.9, [1, 2, 3, 4], 5, top_p=0.85, logprobs=3)
    for name in ("tokens", "logprobs", "ranks", "top_ids", "top_logprobs"):
        assert same(getattr(r, name).get(), getattr(h, name)), name
    lp, ev = ctx.logprobs(dx, r.tokens, raw=True, top_n=2)
    ev.wait()
    assert same(lp.logprobs.get(), ctx.logprobs(x, h.tokens, raw=True).logprobs)


def test_verify_device(ctx, cl, cla, q):
    from test_host import _verify_case
    case = _verify_case(seed=24)
    cache = logits(3, 1500 * 3, seed=25, sigma=2.0).reshape(3, 3, 1500)
    dev = dict(case, target_logits=cla.to_device(q, case["target_logits"]),
               draft_tokens=cla.to_device(q, case["draft_tokens"]))
    status = cla.zeros(q, 1, np.uint32)
    tokens, num, ev = ctx.verify(**dev, draft_cache=cla.to_device(q, cache), status_out=status)
    ev.wait()
    wt, wn = ctx.verify(**case, draft_cache=cache)
    assert (tokens.get() == wt).all() and (num.get() == wn).all() and status.get()[0] == 0


def test_app_context(ctx, cl, cla, q):
    dev = q.device
    app = cl.Context(devices=[dev])
    app_q = cl.CommandQueue(app)
    x = logits(3, 1000, seed=26)
    with psr.Context(cl_context=app, cl_queue=app_q) as mine:
        assert mine.cl_queue is app_q and mine.device.name == ctx.device.name
        tokens, ev = mine.sample(cla.to_device(app_q, x), 0.5, 3, [1, 2, 3])
        ev.wait()
        assert (tokens.get() == ctx.sample(x, 0.5, 3, [1, 2, 3])).all()
        with pytest.raises(psr.ForeignBuffer, match="logits"):  # psr's own context's buffer
            mine.sample(cla.to_device(q, x), 0.5, 3, 1)
    cla.to_device(app_q, x).get()  # the app's context and queue still work
    with pytest.raises(psr.InvalidArgument, match="out-of-order|order"):
        psr.Context(cl_context=app, cl_queue=cl.CommandQueue(
            app, properties=cl.command_queue_properties.OUT_OF_ORDER_EXEC_MODE_ENABLE))


def test_lm_head(ctx, cl, cla, q):
    rng = np.random.default_rng(27)
    h = rng.normal(size=(2, 32)).astype(np.float32)
    w = rng.normal(size=(300, 32)).astype(np.float32)
    if not psr.has_clblast():
        with pytest.raises(psr.NotSupported):
            ctx.lm_head(h, w)
        return
    out, ev = ctx.lm_head(cla.to_device(q, h), cla.to_device(q, w))
    ev.wait()
    assert np.allclose(out.get(), h @ w.T, rtol=1e-4, atol=1e-4)
    tokens, ev = ctx.sample(out, 0.0, 0, 0, wait_for=[ev])
    ev.wait()
    assert (tokens.get() == np.argmax(out.get(), axis=1)).all()
