"""Bad input for every argument: refused before any C call with a Python
exception naming the argument, or by psr with its psr.Error subclass
(carrying .status and psr's message); never a crash."""
import numpy as np
import pytest

import psr
from conftest import logits

X = logits(3, 1000, seed=30)
GOOD = dict(temperature=0.8, seeds=[1, 2, 3], positions=[0, 1, 2])


def call(ctx, **kw):
    args = dict(GOOD, **kw)
    x = args.pop("logits", X)
    return ctx.sample(x, args.pop("temperature"), args.pop("seeds"), args.pop("positions"), **args)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(logits=X.astype(np.float64)), TypeError, "logits: dtype float64"),
    (dict(logits=X.astype(np.int32)), TypeError, "logits"),
    (dict(logits=X.view(np.uint16)), TypeError, "bf16"),
    (dict(logits="abc"), TypeError, "logits"),
    (dict(logits=None), TypeError, "logits"),
    (dict(logits=X.reshape(3, 10, 100)), psr.InvalidArgument, "logits: expected"),
    (dict(logits=X[:, :0]), psr.InvalidArgument, "logits: shape"),
    (dict(seeds=[1.5, 2, 3]), TypeError, "seeds"),
    (dict(seeds=None), TypeError, "seeds"),
    (dict(seeds=[1, 2]), psr.InvalidArgument, r"seeds: expected shape \(3,\)"),
    (dict(seeds=np.ones((3, 1), np.int64)), psr.InvalidArgument, "seeds"),
    (dict(seeds=2**64), psr.InvalidArgument, "seeds"),
    (dict(seeds=np.array([2**63, 0, 0], np.uint64)), psr.InvalidArgument, "seeds"),
    (dict(positions=[0, -3, 1]), psr.PositionRange, r"positions\[1\] = -3"),
    (dict(positions=2**30), psr.PositionRange, "positions"),
    (dict(positions=["a", "b", "c"]), TypeError, "positions"),
    (dict(temperature=-1.0), psr.TemperatureRange, "temperatures"),
    (dict(temperature=[0.5, np.nan, 1.0]), psr.TemperatureRange, r"temperatures\[1\]"),
    (dict(temperature=[0.5, 1.0]), psr.InvalidArgument, "temperature"),
    (dict(temperature="hot"), TypeError, "temperature"),
    (dict(top_p=0.0), psr.FilterRange, "top_p"),
    (dict(top_p=[0.5, 1.5, 1.0]), psr.FilterRange, r"top_p\[1\]"),
    (dict(min_p=-0.1), psr.FilterRange, "min_p"),
    (dict(top_k=2**40), psr.InvalidArgument, "top_k"),
    (dict(top_k=0.5), TypeError, "top_k"),
    (dict(top_k=[1, 2]), psr.InvalidArgument, "top_k"),
    (dict(noise="fp16"), psr.InvalidArgument, "noise"),
    (dict(method="argmax"), psr.InvalidArgument, "method"),
    (dict(probs=True), psr.InvalidArgument, "probs"),
    (dict(method="race", probs=True, top_k=5), psr.InvalidArgument, None),
    (dict(tokens_dtype=np.float32), TypeError, "tokens_dtype"),
    (dict(logprobs=21), psr.InvalidArgument, "logprobs"),
    (dict(logprobs=-1), psr.InvalidArgument, "logprobs"),
    (dict(out=np.empty(3, np.int32)), TypeError, "PyOpenCL"),
    (dict(dtype="f64"), TypeError, "dtype"),
])
def test_sample_bad_input(ctx, kw, exc, match):
    with pytest.raises(exc, match=match) as e:
        call(ctx, **kw)
    if isinstance(e.value, psr.Error):
        assert e.value.status == type(e.value).status > 0
        assert e.value.name.startswith("PSR_ERR_")
    call(ctx)  # the context is still usable


def test_psr_messages_name_the_argument(ctx):
    with pytest.raises(psr.PositionRange) as e:
        call(ctx, positions=[0, 1, 1 << 30])
    assert e.value.status == 12 and "positions[2]" in e.value.detail
    assert isinstance(e.value, ValueError)


def test_non_contiguous_inputs_are_converted(ctx):
    seeds = np.arange(6, dtype=np.int64)[::2]
    temps = np.array([[0.8, 9.0]] * 3, np.float32)[:, 0]
    x = np.asfortranarray(X)
    assert (ctx.sample(x, temps, seeds, [0, 1, 2]) ==
            ctx.sample(np.ascontiguousarray(X), 0.8, [0, 2, 4], [0, 1, 2])).all()
    # integer temperatures and int32 seeds convert by the documented rule
    assert (ctx.sample(X, 1, np.array([0, 2, 4], np.int32), [0, 1, 2]) ==
            ctx.sample(X, 1.0, [0, 2, 4], [0, 1, 2])).all()


def test_logprobs_bad_input(ctx):
    with pytest.raises(psr.InvalidArgument, match="temperature"):
        ctx.logprobs(X, [1, 2, 3])
    with pytest.raises(psr.InvalidArgument, match="raw"):
        ctx.logprobs(X, [1, 2, 3], raw=True, top_k=3)
    with pytest.raises(psr.InvalidArgument, match="top_n"):
        ctx.logprobs(X, [1, 2, 3], 1.0, top_n=99)
    with pytest.raises(psr.InvalidArgument, match="tokens"):
        ctx.logprobs(X, [1, 2], 1.0)
    with pytest.raises(TypeError, match="tokens"):
        ctx.logprobs(X, [0.5, 1, 2], 1.0)


def test_verify_bad_input(ctx):
    from test_host import _verify_case
    case = _verify_case()
    bad = [
        (dict(cu=[1, 3, 4, 8]), psr.InvalidArgument, r"cu\[0\]"),
        (dict(cu=[0, 3, 3, 8]), psr.InvalidArgument, "cu"),
        (dict(cu=[0, 3, 4, 7]), psr.InvalidArgument, "cu"),
        (dict(cu=5), psr.InvalidArgument, "cu"),
        (dict(draft_tokens=np.full(8, 1500)), psr.TokenRange, "draft_tokens"),
        (dict(draft_tokens=np.zeros(7, np.int32)), psr.InvalidArgument, "draft_tokens"),
        (dict(seeds=[1, 2]), psr.InvalidArgument, "seeds"),
        (dict(temperatures=[1.0, -1.0, 1.0]), psr.TemperatureRange, "temperatures"),
        (dict(positions=np.full(8, -1)), psr.PositionRange, "positions"),
        (dict(method="sure"), psr.InvalidArgument, "method"),
        (dict(max_drafts=1), psr.InvalidArgument, "max_drafts"),
        (dict(draft_cache=np.zeros((3, 3, 10), np.float32)), psr.InvalidArgument, "draft_cache"),
        (dict(draft_cache=np.zeros((3, 3, 1500), np.float64)), TypeError, "draft_cache"),
        (dict(target_logits=case["target_logits"].astype(np.float64)), TypeError, "target"),
    ]
    for kw, exc, match in bad:
        with pytest.raises(exc, match=match):
            ctx.verify(**dict(case, **kw))
        with pytest.raises(exc, match=match):
            psr.oracle.verify(**dict(case, **kw))


def test_oracle_bad_input():
    with pytest.raises(psr.PositionRange):
        psr.oracle.sample(X, 1.0, 1, -1)
    with pytest.raises(psr.TemperatureRange):
        psr.oracle.sample(X, np.inf, 1, 1)
    with pytest.raises(psr.FilterRange):
        psr.oracle.sample(X, 1.0, 1, 1, top_p=2.0)
    with pytest.raises(TypeError):
        psr.oracle.sample(X.astype(np.float64), 1.0, 1, 1)
    with pytest.raises(psr.InvalidArgument):
        psr.oracle.logprobs(X, [1, 2, 3], 1.0, top_n=21)


def test_device_and_context_errors():
    with pytest.raises(psr.BadSelector):
        psr.Context("")
    with pytest.raises(psr.BadSelector):
        psr.select_device("1:x")
    with pytest.raises(psr.DeviceNotFound):
        psr.Context("no-such-device-anywhere")
    with pytest.raises(TypeError, match="device"):
        psr.Context(3)
    with pytest.raises(psr.InvalidArgument, match="fp64_policy"):
        psr.Context(fp64_policy="maybe")


def test_closed_context(ctx):
    c = psr.Context()
    c.close()
    c.close()  # twice is fine
    with pytest.raises(psr.InvalidArgument, match="closed"):
        call(c)


def test_device_bad_input(ctx, cl, cla):
    q = ctx.cl_queue
    dx = cla.to_device(q, X)
    with pytest.raises(TypeError, match="seeds"):  # a device array of the wrong dtype
        ctx.sample(dx, 0.8, cla.to_device(q, np.array([1, 2, 3], np.int32)), 0)
    with pytest.raises(psr.InvalidArgument, match="seeds"):  # wrong shape
        ctx.sample(dx, 0.8, cla.to_device(q, np.arange(4)), 0)
    with pytest.raises(psr.BufferTooSmall, match="seeds"):  # a raw buffer psr measures
        ctx.sample(dx, 0.8, cl.Buffer(ctx.cl_context, cl.mem_flags.READ_WRITE, 8), 0)
    with pytest.raises(psr.InvalidArgument, match="logits"):  # columns apart
        ctx.sample(cla.to_device(q, np.zeros((3, 8), np.float32))[:, ::2], 1.0, 0, 0)
    with pytest.raises(TypeError, match="shape"):
        ctx.sample(dx.base_data, 0.8, 0, 0)
    with pytest.raises(psr.BufferTooSmall, match="logits"):
        ctx.sample(dx.base_data, 0.8, 0, 0, shape=(3, 2000), dtype="f32")
    with pytest.raises(psr.InvalidArgument, match="out"):
        ctx.sample(dx, 0.8, 0, 0, out=cla.empty(q, 4, np.int32))
    with pytest.raises(TypeError, match="out"):
        ctx.sample(dx, 0.8, 0, 0, out=cla.empty(q, 3, np.int64))
    with pytest.raises(psr.BufferOverlap):
        tok = cla.empty(q, 3, np.int32)
        ctx.sample(dx, 0.8, 0, 0, out=tok, row_flags=tok.view(np.uint32))
    other = cl.Context(devices=[q.device])
    with pytest.raises(psr.ForeignBuffer, match="seeds"):
        ctx.sample(dx, 0.8, cla.to_device(cl.CommandQueue(other), np.arange(3)), 0)
    tokens, ev = ctx.sample(dx, 0.8, [1, 2, 3], [0, 1, 2])  # still usable
    ev.wait()
    assert (tokens.get() == call(ctx)).all()
