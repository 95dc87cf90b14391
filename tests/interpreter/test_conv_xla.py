"""Convolutions against XLA CPU over a table covering every strategy of ops/convolution.py:
1x1 (plain and strided), padded, strided, rhs-dilated, depthwise (with a channel multiplier),
grouped, batch_group_count (JAX's depthwise weight gradient), lhs-dilated (transposed: JAX's input
gradient of a strided convolution), weight gradients (a convolution whose kernel is the output
gradient), 1-D / 2-D / 3-D, NHWC and NCHW dim_labels, f32 / bf16 / f16 / s8 / f64.

Each case is JAX's HLO text of one lax.conv_general_dilated (or its transpose, through
jax.linear_transpose) with XLA's results, committed under tests/data/conv/ (NAME.hlo, NAME.npz:
arg0.., out0), so the suite checks numbers without JAX; the live test compares with XLA itself.

How results are compared:
- "exact" cases hold small integers (or, for s8, wrap-around sums): every partial sum is exact, so
  XLA's bits are ours whatever the summation order: compared bit for bit.
- "ulps" cases hold random values: XLA sums f32 in its own blocked order (Eigen / YNNPACK), we sum
  in f64 (small convolutions) or f32 BLAS (more than F32_BLAS_MIN_MACS multiply-adds).  The error
  allowed is ULPS * eps(f32) * sum |products| (sum |x| * |w| over the window, computed by running
  the same module on |x|, |w|): the bound of a float sum's rounding error, in units of its scale.

Regenerate the goldens with `python tests/interpreter/test_conv_xla.py` (needs jax).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.interpreter import run
from hlo_cli.parser import parse

DATA = Path(__file__).resolve().parent.parent / "data" / "conv"
# Measured over the table (jaxlib 0.10.2): at most 2.6 ulps of sum |products| from XLA, alike for
# the f64 sums (1.4-2.6) and the f32 BLAS ones (1.9-2.5); the old tap loop was 1.5-2.6; on
# convnet shapes (batch 2) up to 3.0 (see ops/convolution.py's docstring)
ULPS = 6

NHWC = ("NHWC", "HWIO", "NHWC")
NCHW = ("NCHW", "OIHW", "NCHW")

# name: (form, lhs shape, rhs shape, conv kwargs, dtype, values)
#   form: fwd | dgrad (transpose wrt the input) | wgrad (transpose wrt the kernel)
#   values: "int" small integers (exact), "randn" random normal (ulps)
CASES = {
    "1x1": ("fwd", (2, 8, 8, 16), (1, 1, 16, 24), dict(strides=(1, 1), padding="VALID", dn=NHWC), "f32", "int"),
    "1x1_strided_nchw": ("fwd", (2, 16, 9, 9), (24, 16, 1, 1), dict(strides=(2, 2), padding="VALID", dn=NCHW),
                         "f32", "int"),
    "3x3_same": ("fwd", (2, 9, 9, 8), (3, 3, 8, 12), dict(strides=(1, 1), padding="SAME", dn=NHWC), "f32", "int"),
    "3x3_s2_nchw": ("fwd", (2, 8, 11, 11), (12, 8, 3, 3), dict(strides=(2, 2), padding=((1, 1), (1, 1)), dn=NCHW),
                    "f32", "int"),
    "3x3_rhs_dilated": ("fwd", (2, 12, 12, 4), (3, 3, 4, 6), dict(strides=(1, 1), padding=((2, 2), (2, 2)),
                                                                 rhs_dilation=(2, 2), dn=NHWC), "f32", "int"),
    "depthwise": ("fwd", (2, 10, 10, 12), (3, 3, 1, 12), dict(strides=(1, 1), padding="SAME", dn=NHWC, groups=12),
                  "f32", "int"),
    "depthwise_s2_mult2": ("fwd", (2, 11, 11, 6), (3, 3, 1, 12), dict(strides=(2, 2), padding=((1, 1), (1, 1)),
                                                                    dn=NHWC, groups=6), "f32", "int"),
    "grouped4": ("fwd", (2, 8, 8, 16), (3, 3, 4, 8), dict(strides=(1, 1), padding="SAME", dn=NHWC, groups=4),
                 "f32", "int"),
    "conv1d": ("fwd", (3, 20, 6), (5, 6, 8), dict(strides=(2,), padding=((2, 1),), dn=("NWC", "WIO", "NWC")),
               "f32", "int"),
    "conv3d": ("fwd", (2, 6, 6, 6, 4), (3, 3, 3, 4, 5), dict(strides=(1, 2, 1), padding="SAME",
                                                              dn=("NDHWC", "DHWIO", "NDHWC")), "f32", "int"),
    "negative_padding": ("fwd", (2, 10, 10, 3), (3, 3, 3, 4), dict(strides=(1, 1), padding=((-1, 2), (1, -2)),
                                                                  dn=NHWC), "f32", "int"),
    "dgrad_s2": ("dgrad", (2, 12, 12, 8), (3, 3, 8, 6), dict(strides=(2, 2), padding=((1, 1), (1, 1)), dn=NHWC),
                 "f32", "int"),
    "dgrad_s2_nchw": ("dgrad", (2, 8, 13, 13), (6, 8, 3, 3), dict(strides=(2, 2), padding=((1, 1), (1, 1)),
                                                                  dn=NCHW), "f32", "int"),
    "dgrad_depthwise_s2": ("dgrad", (2, 10, 10, 6), (3, 3, 1, 6), dict(strides=(2, 2), padding=((1, 1), (1, 1)),
                                                                       dn=NHWC, groups=6), "f32", "int"),
    "lhs_dilated_strided": ("fwd", (2, 7, 7, 4), (3, 3, 4, 5), dict(strides=(2, 1), padding=((1, 2), (2, 1)),
                                                                    lhs_dilation=(3, 2), dn=NHWC), "f32", "int"),
    "wgrad_s2": ("wgrad", (2, 12, 12, 8), (3, 3, 8, 6), dict(strides=(2, 2), padding=((1, 1), (1, 1)), dn=NHWC),
                 "f32", "int"),
    "wgrad_depthwise": ("wgrad", (3, 10, 10, 6), (3, 3, 1, 6), dict(strides=(1, 1), padding="SAME", dn=NHWC,
                                                                     groups=6), "f32", "int"),
    "wgrad_nchw": ("wgrad", (2, 6, 10, 10), (8, 6, 3, 3), dict(strides=(1, 1), padding="SAME", dn=NCHW),
                   "f32", "int"),
    "bf16": ("fwd", (2, 9, 9, 8), (3, 3, 8, 12), dict(strides=(1, 1), padding="SAME", dn=NHWC), "bf16", "int"),
    "f16_dgrad": ("dgrad", (2, 10, 10, 8), (3, 3, 8, 6), dict(strides=(2, 2), padding=((1, 1), (1, 1)), dn=NHWC),
                  "f16", "int"),
    "s8": ("fwd", (2, 9, 9, 8), (3, 3, 8, 12), dict(strides=(1, 1), padding="SAME", dn=NHWC), "s8", "int"),
    "f64_randn": ("fwd", (2, 9, 9, 8), (3, 3, 8, 12), dict(strides=(2, 1), padding="SAME", dn=NHWC), "f64",
                  "randn"),
    # random f32: small ones sum in f64, large ones (> F32_BLAS_MIN_MACS) in f32 BLAS
    "randn_small": ("fwd", (2, 9, 9, 8), (3, 3, 8, 12), dict(strides=(1, 1), padding="SAME", dn=NHWC), "f32",
                    "randn"),
    "randn_blas_fwd": ("fwd", (2, 16, 16, 32), (3, 3, 32, 64), dict(strides=(1, 1), padding="SAME", dn=NHWC),
                       "f32", "randn"),
    "randn_blas_dgrad": ("dgrad", (2, 24, 24, 32), (3, 3, 32, 48), dict(strides=(2, 2), padding=((1, 1), (1, 1)),
                                                                        dn=NHWC), "f32", "randn"),
    "randn_blas_wgrad": ("wgrad", (2, 16, 16, 32), (3, 3, 32, 64), dict(strides=(1, 1), padding="SAME", dn=NHWC),
                         "f32", "randn"),
    "randn_blas_first_layer_dgrad": ("dgrad", (2, 32, 32, 3), (3, 3, 3, 64),
                                     dict(strides=(2, 2), padding=((1, 1), (1, 1)), dn=NHWC), "f32", "randn"),
    "randn_depthwise": ("fwd", (2, 16, 16, 32), (3, 3, 1, 32), dict(strides=(1, 1), padding="SAME", dn=NHWC,
                                                                    groups=32), "f32", "randn"),
}


def _np_dtype(name):
    import ml_dtypes
    return {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16,
            "s8": np.int8}[name]


def _conv(kw, dtype_name):
    from jax import lax
    kwargs = dict(window_strides=kw["strides"], padding=kw["padding"], dimension_numbers=kw["dn"],
                  lhs_dilation=kw.get("lhs_dilation"), rhs_dilation=kw.get("rhs_dilation"),
                  feature_group_count=kw.get("groups", 1))
    if dtype_name == "s8":
        import jax.numpy as jnp
        kwargs["preferred_element_type"] = jnp.int32
    return lambda x, w: lax.conv_general_dilated(x, w, **kwargs)


def make_case(name):
    """(HLO text, inputs) of one case, from JAX."""
    import jax
    import jax.numpy as jnp
    form, xs, ws, kw, dtn, values = CASES[name]
    dt = _np_dtype(dtn)
    f = _conv(kw, dtn)
    rng = np.random.default_rng(sum(map(ord, name)))
    ys = jax.eval_shape(f, jax.ShapeDtypeStruct(xs, dt), jax.ShapeDtypeStruct(ws, dt)).shape

    def draw(shape):
        if values == "int":
            return rng.integers(-4, 5, shape).astype(dt)
        return rng.standard_normal(shape).astype(dt)
    if form == "fwd":
        fn, args = f, (draw(xs), draw(ws))
    elif form == "dgrad":
        def fn(gy, w):
            return jax.linear_transpose(lambda x: f(x, w), jnp.zeros(xs, dt))(gy)[0]
        args = (draw(ys), draw(ws))
    else:
        def fn(x, gy):
            return jax.linear_transpose(lambda w: f(x, w), jnp.zeros(ws, dt))(gy)[0]
        args = (draw(xs), draw(ys))
    return jax.jit(fn).lower(*args).as_text("hlo"), args


def regenerate():
    import jax
    jax.config.update("jax_enable_x64", True)          # the f64 case; the others name their types
    from hlo_cli.tools.xla_reference import run_with_xla
    DATA.mkdir(parents=True, exist_ok=True)
    for name in CASES:
        text, args = make_case(name)
        outs = run_with_xla(text, args)
        (DATA / f"{name}.hlo").write_text(text)
        np.savez_compressed(DATA / f"{name}.npz", **{f"arg{k}": _store(a) for k, a in enumerate(args)},
                            **{f"out{k}": _store(o) for k, o in enumerate(outs)})
        print(name, [a.shape for a in args], [o.shape for o in outs])


def _store(a):
    a = np.asarray(a)
    return a.view(np.uint16) if a.dtype.itemsize == 2 and a.dtype.kind not in "iu" else a


def _load(name):
    text = (DATA / f"{name}.hlo").read_text()
    dt = _np_dtype(CASES[name][4])
    with np.load(DATA / f"{name}.npz") as z:
        args = [z[f"arg{k}"] for k in range(2)]
        out = z["out0"]
    if dt(0).itemsize == 2:
        args = [a.view(dt) for a in args]
        out = out.view(dt)
    return text, args, out


def _ours(text, args):
    res = run(parse(text), *args)
    return np.asarray(res[0] if isinstance(res, (tuple, list)) else res)


def _scale(text, args):
    """sum |x| * |w| under every output: the module run on |x|, |w| in f64."""
    big = [np.abs(np.asarray(a, np.float64)) for a in args]
    t = text.replace("f32[", "f64[").replace("bf16[", "f64[").replace("f16[", "f64[")
    return np.abs(_ours(t, big))


def _ulps(ours, want, scale):
    eps = np.finfo(np.float32).eps if want.dtype != np.float64 else np.finfo(np.float64).eps
    err = np.abs(ours.astype(np.float64) - want.astype(np.float64))
    return float((err / (eps * np.maximum(scale, np.finfo(np.float64).tiny))).max())


EXACT = [n for n, c in CASES.items() if c[5] == "int"]
ULPS_CASES = [n for n, c in CASES.items() if c[5] == "randn"]


@pytest.mark.parametrize("name", EXACT)
def test_exact_cases_bit_for_bit(name):
    text, args, want = _load(name)
    ours = _ours(text, args)
    assert ours.dtype == want.dtype and ours.shape == want.shape
    bits = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
    np.testing.assert_array_equal(ours.view(bits), want.view(bits), err_msg=name)


@pytest.mark.parametrize("name", ULPS_CASES)
def test_ulps_cases_within_bound(name):
    text, args, want = _load(name)
    ours = _ours(text, args)
    assert ours.dtype == want.dtype and ours.shape == want.shape
    u = _ulps(ours, want, _scale(text, args))
    assert u <= ULPS, f"{name}: {u:.2f} ulps of sum |products| from XLA"


def test_table_covers_every_strategy():
    """Each of _fast_conv's strategies runs on some case of the table."""
    from hlo_cli.interpreter.ops import convolution as conv
    seen = set()
    real = conv._fast_conv

    def spy(*a, **k):
        out = real(*a, **k)
        seen.add(spy.last)
        return out
    orig = {n: getattr(conv, n) for n in ("_gemm_parts", "_depthwise_parts", "_products_parts", "_reduce_parts")}

    def tag(n, strategy):
        def f(*a, **k):
            spy.last = strategy
            return orig[n](*a, **k)
        return f
    try:
        conv._fast_conv = spy
        for n, s in (("_gemm_parts", "gemm"), ("_depthwise_parts", "depthwise"), ("_products_parts", "products"),
                     ("_reduce_parts", "reduce")):
            setattr(conv, n, tag(n, s))
        for name in CASES:
            text, args, _ = _load(name)
            _ours(text, args)
    finally:
        conv._fast_conv = real
        for n, f in orig.items():
            setattr(conv, n, f)
    assert seen == {"gemm", "depthwise", "products", "reduce"}


@pytest.mark.slow
def test_goldens_are_xla_today():
    """The committed texts and results are what JAX and XLA give now (needs jax)."""
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    for name in CASES:
        text, args, want = _load(name)
        got = run_with_xla(text, args)[0]
        np.testing.assert_array_equal(np.asarray(got).view(np.uint8), want.view(np.uint8), err_msg=name)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    regenerate()
