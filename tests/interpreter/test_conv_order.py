"""XLA CPU's summation order for 2-D f32 convolutions that it hands to YNNPACK (ops/convolution.py,
_window_chain / _fma_chain_window): each output is one FMA chain over the window's taps in
row-major order, then the input features, padding multiplied as zeros.

- goldens made with XLA (tests/data/conv_order/NAME.hlo, NAME.npz: arg0, arg1, out0), compared bit
  for bit (NaN positions where the inputs hold NaN or inf), so the order is checked without JAX;
- the threaded, blocked chain equals a plain step-by-step chain of elementwise.fma over the
  patches (hypothesis, finite and NaN/Inf-filled, every stride and padding);
- the class gate (what was measured, nothing wider);
- live (slow): the goldens are what XLA gives today, and more shapes of the class against XLA.

Regenerate the goldens with `python tests/interpreter/test_conv_order.py` (needs jax).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hlo_cli.interpreter import run
from hlo_cli.interpreter.ops import convolution as CV
from hlo_cli.interpreter.ops.elementwise import fma
from hlo_cli.ir.attributes import WindowDim
from hlo_cli.parser import parse

F32 = np.float32
DATA = Path(__file__).resolve().parent.parent / "data" / "conv_order"

# name: (N, C, H, W, O, KH, KW, strides, pad (lo, hi) per dim, NaN/inf share, dim_labels)
CASES = {
    "stem_s2": (2, 3, 17, 17, 32, 3, 3, (2, 2), ((1, 1), (1, 1)), 0.0, "bf01_oi01->bf01"),
    "stem_s2_nonfinite": (2, 3, 17, 17, 32, 3, 3, (2, 2), ((1, 1), (1, 1)), 0.01, "bf01_oi01->bf01"),
    "stem_nhwc": (2, 17, 17, 3, 48, 3, 3, (2, 2), ((1, 1), (1, 1)), 0.0, "b01f_01io->b01f"),
    "pointwise_32_to_16": (1, 32, 5, 7, 16, 1, 1, (1, 1), ((0, 0), (0, 0)), 0.0, "bf01_oi01->bf01"),
    "pointwise_24_to_12": (1, 24, 1, 14, 12, 1, 1, (1, 1), ((0, 0), (0, 0)), 0.0, "bf01_oi01->bf01"),
    "pointwise_20_to_96_s2": (2, 20, 9, 9, 96, 1, 1, (2, 2), ((0, 0), (0, 0)), 0.0, "bf01_oi01->bf01"),
    "k5_pad2": (2, 1, 12, 12, 32, 5, 5, (1, 1), ((2, 2), (2, 2)), 0.0, "bf01_oi01->bf01"),
    "k2_s2": (2, 8, 12, 12, 32, 2, 2, (2, 2), ((0, 0), (0, 0)), 0.0, "bf01_oi01->bf01"),
    "k3_asymmetric": (2, 3, 11, 11, 25, 3, 3, (1, 1), ((0, 1), (1, 0)), 0.0, "bf01_oi01->bf01"),
}


def _values(seed, shape, hostile):
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(shape).astype(F32)
    if hostile:
        flat = v.reshape(-1)
        for bad in (np.nan, np.inf, -np.inf):
            flat[rng.random(flat.size) < hostile] = bad
    return v


def _out_len(size, k, s, pad):
    return (size + pad[0] + pad[1] - k) // s + 1


def case_text(name):
    n, c, h, w, o, kh, kw, s, pads, _, labels = CASES[name]
    nhwc = labels.startswith("b01f")
    if nhwc:
        h, w, c = c, h, w                      # the tuple lists the NHWC shape in order
    oh, ow = _out_len(h, kh, s[0], pads[0]), _out_len(w, kw, s[1], pads[1])
    xs = f"f32[{n},{h},{w},{c}]" if nhwc else f"f32[{n},{c},{h},{w}]"
    ws = f"f32[{kh},{kw},{c},{o}]" if nhwc else f"f32[{o},{c},{kh},{kw}]"
    ys = f"f32[{n},{oh},{ow},{o}]" if nhwc else f"f32[{n},{o},{oh},{ow}]"
    pad = "x".join(f"{lo}_{hi}" for lo, hi in pads)
    return f"""HloModule {name}
ENTRY e {{
  x = {xs} parameter(0)
  w = {ws} parameter(1)
  ROOT c = {ys} convolution(x, w), window={{size={kh}x{kw} stride={s[0]}x{s[1]} pad={pad}}}, dim_labels={labels}
}}
"""


def case_args(name):
    text = case_text(name)
    module = parse(text, name)
    shapes = [tuple(p.shape.dims) for p in module.entry_computation.parameters]
    hostile = CASES[name][9]
    x = _values(1, shapes[0], hostile)
    w = _values(2, shapes[1], hostile / 4)
    return text, [x, w]


def _same(ours, want, what):
    assert ours.dtype == want.dtype and ours.shape == want.shape, what
    assert np.array_equal(np.isnan(ours), np.isnan(want)), f"{what}: NaN positions"
    ok = ~np.isnan(want)
    assert np.array_equal(ours[ok].view(np.uint32), want[ok].view(np.uint32)), f"{what}: bits"


def _ours(text, args):
    return np.asarray(run(parse(text, "c"), *args))


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden_bit_for_bit(name):
    text = (DATA / f"{name}.hlo").read_text()
    with np.load(DATA / f"{name}.npz") as z:
        args, want = [z["arg0"], z["arg1"]], z["out0"]
    _same(_ours(text, args), want, name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_goldens_take_the_chain(name):
    """Every golden runs through _fma_chain_window (so the goldens check this order)."""
    seen = []
    real = CV._fma_chain_window

    def spy(*a, **k):
        seen.append(True)
        return real(*a, **k)
    text = (DATA / f"{name}.hlo").read_text()
    with np.load(DATA / f"{name}.npz") as z:
        args = [z["arg0"], z["arg1"]]
    CV._fma_chain_window = spy
    try:
        _ours(text, args)
    finally:
        CV._fma_chain_window = real
    assert seen


def _plain_chain(x, w, strides, pads):
    """x (N, C, H, W), w (O, C, KH, KW) -> (N, OH, OW, O): acc = fma(x, w, acc) from +0 over the
    window's taps in row-major order, then the input features, padding read as zeros."""
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    oh, ow = _out_len(h, kh, strides[0], pads[0]), _out_len(wd, kw, strides[1], pads[1])
    shape = (n, oh, ow, o)
    acc = np.zeros(shape, F32)
    for i in range(kh):
        for j in range(kw):
            view = xp[:, :, i:i + strides[0] * oh:strides[0], j:j + strides[1] * ow:strides[1]]
            for k in range(c):
                a = np.broadcast_to(view[:, k, :, :, None], shape)
                b = np.broadcast_to(w[:, k, i, j], shape)
                acc = fma(np.ascontiguousarray(a), np.ascontiguousarray(b), acc)
    return acc


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 2), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3), st.integers(3, 9),
       st.sampled_from([(1, 1), (2, 2), (1, 2)]), st.integers(0, 2), st.integers(0, 2),
       st.integers(17, 40), st.sampled_from([0.0, 0.03]), st.booleans(), st.integers(0, 2**31 - 1))
def test_blocked_chain_equals_the_plain_chain(n, c, kh, kw, size, strides, lo, hi, o, hostile, hw, seed):
    x = _values(seed, (n, c, size, size + 1), hostile)
    w = _values(seed + 1, (o, c, kh, kw), hostile)
    pads = ((lo, hi), (hi, lo))
    dims = tuple(WindowDim(size=k, stride=s, padding_low=p[0], padding_high=p[1])
                 for k, s, p in zip((kh, kw), strides, pads))
    oh, ow = _out_len(size, kh, strides[0], pads[0]), _out_len(size + 1, kw, strides[1], pads[1])
    if min(oh, ow) < 1:
        return
    old = CV.FMA_CHAIN_BLOCK
    CV.FMA_CHAIN_BLOCK = 2 * ow * o              # several blocks even for small shapes
    try:
        got = CV._fma_chain_window(x[None], w[None], dims, (oh, ow), hw)
    finally:
        CV.FMA_CHAIN_BLOCK = old
    if not hw:
        return                                  # (flushing: subnormal-free values give the same bits)
    want = _plain_chain(x, w, strides, pads)
    got = got.reshape(want.shape)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))


def test_flushed_chain_equals_the_hardware_one_without_subnormals():
    x = _values(5, (2, 3, 9, 9), 0.02)
    w = _values(6, (32, 3, 3, 3), 0.0)
    dims = (WindowDim(size=3, stride=2, padding_low=1, padding_high=1),) * 2
    a = CV._fma_chain_window(x[None], w[None], dims, (5, 5), True)
    b = CV._fma_chain_window(x[None], w[None], dims, (5, 5), False)
    assert np.array_equal(np.isnan(a), np.isnan(b))
    assert np.array_equal(np.nan_to_num(a).view(np.uint32), np.nan_to_num(b).view(np.uint32))


def _gate(c, o, k=3, size=8, out=None, dt=F32, groups=1, spatial=2, **wd):
    x = np.zeros((groups, 2, c) + (size,) * spatial, dt)
    w = np.zeros((groups, o, c) + (k,) * spatial, dt)
    dims = tuple(WindowDim(size=k, **wd) for _ in range(spatial))
    out = out or tuple(size - k + 1 + wd.get("padding_low", 0) + wd.get("padding_high", 0)
                       for _ in range(spatial))
    return CV._window_chain(x, w, dims, out, np.dtype(dt))


def test_the_window_chain_class():
    assert _gate(3, 32) and _gate(3, 25) and _gate(3, 48) and _gate(3, 32, stride=2, padding_low=1)
    assert _gate(32, 16, k=1) and _gate(24, 12, k=1) and _gate(17, 9, k=1) and _gate(32, 64, k=1)
    assert not _gate(3, 16) and not _gate(16, 12, k=1)       # <= 16 features: Eigen, not YNNPACK
    assert not any(_gate(32, o, k=1) for o in (8, 24, 40, 17))   # 1..8 modulo 16: other kernels
    assert not _gate(4, 32) and not _gate(33, 32, k=1)       # more than WINDOW_CHAIN_MAX_TERMS
    assert not _gate(1, 32, k=1)                             # one term
    assert not _gate(3, 32, window_dilation=2, out=(4, 4)) and not _gate(3, 32, base_dilation=2, out=(13, 13))
    assert not _gate(3, 32, window_reversal=True) and not _gate(3, 32, padding_low=-1)
    assert not _gate(3, 32, dt=np.float64) and not _gate(3, 32, groups=2)
    assert not _gate(3, 32, spatial=1) and not _gate(3, 32, spatial=3)   # YNNPACK takes 2-D only
    assert not _gate(3, 32, size=2, k=3, padding_low=2, padding_high=2)  # kernel larger than input


def regenerate():
    from hlo_cli.tools.xla_reference import run_with_xla
    DATA.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        text, args = case_args(name)
        out = np.asarray(run_with_xla(text, args)[0])
        (DATA / f"{name}.hlo").write_text(text)
        np.savez_compressed(DATA / f"{name}.npz", arg0=args[0], arg1=args[1], out0=out)
        print(name, [a.shape for a in args], out.shape)


@pytest.mark.slow
def test_goldens_are_xla_today():
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    for name in CASES:
        text, args = case_args(name)
        assert text == (DATA / f"{name}.hlo").read_text(), name
        with np.load(DATA / f"{name}.npz") as z:
            assert all(np.array_equal(a.view(np.uint32), z[f"arg{k}"].view(np.uint32)) for k, a in enumerate(args))
            _same(np.asarray(run_with_xla(text, args)[0]), z["out0"], name)


@pytest.mark.slow
@pytest.mark.parametrize("shape", [(4, 3, 56, 56, 32, 3, 3, (2, 2), ((1, 1), (1, 1)), 0.0, "bf01_oi01->bf01"),
                                   (2, 3, 56, 56, 32, 3, 3, (2, 2), ((1, 1), (1, 1)), 0.003, "bf01_oi01->bf01"),
                                   (2, 32, 28, 28, 16, 1, 1, (1, 1), ((0, 0), (0, 0)), 0.0, "bf01_oi01->bf01"),
                                   (2, 32, 28, 28, 16, 1, 1, (1, 1), ((0, 0), (0, 0)), 0.003, "bf01_oi01->bf01"),
                                   (3, 16, 15, 15, 64, 1, 2, (1, 1), ((0, 0), (0, 1)), 0.0, "bf01_oi01->bf01"),
                                   (2, 2, 20, 20, 57, 4, 4, (3, 3), ((1, 2), (2, 1)), 0.0, "bf01_oi01->bf01")])
def test_chain_is_xla_bit_for_bit(shape):
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    CASES["live"] = shape
    try:
        text, args = case_args("live")
    finally:
        del CASES["live"]
    _same(_ours(text, args), np.asarray(run_with_xla(text, args)[0]), str(shape))



@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_narrow_operands_into_f32_take_the_chain(dtype):
    """bf16 / f16 operands with an f32 result: XLA converts them and runs the f32 chain."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    npt = ml_dtypes.bfloat16 if dtype == "bf16" else np.float16
    text = case_text("stem_s2").replace("x = f32", f"x = {dtype}").replace("w = f32", f"w = {dtype}")
    _, (x, w) = case_args("stem_s2")
    args = [x.astype(npt), w.astype(npt)]
    _same(_ours(text, args), np.asarray(run_with_xla(text, args)[0]), dtype)


@pytest.mark.slow
def test_chain_inside_a_while_body():
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    state = "(s32[], f32[2,3,17,17], f32[32,3,3,3], f32[2,32,9,9])"
    text = f"""HloModule w
body {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = f32[2,3,17,17] get-tuple-element(p), index=1
  k = f32[32,3,3,3] get-tuple-element(p), index=2
  c = f32[2,32,9,9] convolution(x, k), window={{size=3x3 stride=2x2 pad=1_1x1_1}}, dim_labels=bf01_oi01->bf01
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = {state} tuple(j, x, k, c)
}}
cond {{
  p = {state} parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(1)
  ROOT l = pred[] compare(i, n), direction=LT
}}
ENTRY e {{
  x = f32[2,3,17,17] parameter(0)
  k = f32[32,3,3,3] parameter(1)
  z = s32[] constant(0)
  zc = f32[] constant(0)
  c0 = f32[2,32,9,9] broadcast(zc), dimensions={{}}
  t = {state} tuple(z, x, k, c0)
  r = {state} while(t), condition=cond, body=body
  ROOT o = f32[2,32,9,9] get-tuple-element(r), index=3
}}"""
    _, args = case_args("stem_s2")
    _same(_ours(text, args), np.asarray(run_with_xla(text, args)[0]), "while body")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    regenerate()
