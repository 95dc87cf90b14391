"""batch-norm-training / -inference / -grad at the sizes where XLA CPU sums with YNNPACK (from
4096 elements) and the interpreter takes its blocked path, against XLA CPU: committed goldens
(tests/data/batch_norm, made by make_goldens.py there) for NHWC, NCHW and feature-first layouts in
f32, bf16 and f64, and (slow, needs JAX) live runs at convnet sizes.

How close (jaxlib 0.10.2, x86-64): XLA's sums run in YNNPACK's order, which ynn_sum reproduces
for these layouts (mean and variance bit for bit, in the layout XLA gives the operand: a
convolution's result as [batch, spatial..., feature]); where it does not (ynn_sum declines) we
sum in f64 and round once.  XLA's rsqrt is an approximation (not correctly rounded), so
normalized outputs differ in the last bits; sums that cancel (grad_offset, grad_scale with
zero-mean gradients) differ by more ulps of their small results but by a few f32 roundings of
the summed magnitudes.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.interpreter import run
from hlo_cli.interpreter.ops import linalg as la

DATA = Path(__file__).resolve().parents[1] / "data" / "batch_norm"


def _load_module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


mg = _load_module(DATA / "make_goldens.py", "batch_norm_goldens")

EPS = {"f32": 2.0 ** -23, "bf16": 2.0 ** -7, "f64": 2.0 ** -52}


def _load(name, et):
    import ml_dtypes
    z = np.load(DATA / f"{name}.npz")
    cast = (lambda a: a.view(ml_dtypes.bfloat16)) if et == "bf16" else (lambda a: a)
    return {k: cast(z[k]) for k in z.files}


def _scale(a: np.ndarray, fi: int) -> np.ndarray:
    """Per-feature magnitude of an operand, broadcast against it."""
    red = tuple(d for d in range(a.ndim) if d != fi)
    return np.abs(a.astype(np.float64)).max(axis=red, keepdims=True)


def assert_close(ours, want, et, bound, what):
    """|ours - want| <= 4 roundings of `bound` (the magnitudes the value was computed from;
    measured: at most 0.11 x 16 roundings on the goldens)."""
    assert ours.dtype == want.dtype and ours.shape == want.shape, what
    err = np.abs(ours.astype(np.float64) - want.astype(np.float64))
    tol = 4 * EPS[et] * bound
    assert (err <= tol).all(), f"{what}: worst {float(np.max(err / tol)):.2f} x tolerance"


def check(op, outs, d, et, shape, fi):
    """Each output against XLA's, with a bound from the inputs' magnitudes."""
    red = tuple(k for k in range(len(shape)) if k != fi)
    x = d["x"].astype(np.float64)
    n = x.size // shape[fi]
    keep = [1 if k != fi else shape[fi] for k in range(len(shape))]
    s = np.abs(d["s"].astype(np.float64)).reshape(keep)
    if op == "training":
        mean = x.mean(axis=red, keepdims=True)
        sd = np.sqrt(x.var(axis=red, keepdims=True) + mg.EPSILON)
        xs = _scale(x, fi)
        bounds = [(xs + np.abs(mean)) / sd * s + np.abs(d["o"].astype(np.float64)).reshape(keep),
                  xs.reshape(-1), (xs * xs).reshape(-1)]
    elif op == "inference":
        v = d["v"].astype(np.float64).reshape(keep)
        bounds = [(np.abs(x) + np.abs(d["m"].astype(np.float64)).reshape(keep)) * s / np.sqrt(v + mg.EPSILON)
                  + np.abs(d["o"].astype(np.float64)).reshape(keep)]
    else:
        g = d["g"].astype(np.float64)
        v = d["v"].astype(np.float64).reshape(keep)
        xm = np.abs(x - d["m"].astype(np.float64).reshape(keep))
        sgxm = (np.abs(g) * xm).sum(axis=red, keepdims=True)
        rs = 1 / np.sqrt(v + mg.EPSILON)
        bounds = [s * rs / n * (np.abs(g) * n + np.abs(g).sum(axis=red, keepdims=True) + sgxm * xm * rs * rs),
                  (sgxm * rs).reshape(-1), np.abs(g).sum(axis=red)]
    for j, (o, b) in enumerate(zip(outs, bounds)):
        want = d[f"{op}{j}"]
        assert_close(np.asarray(o), want, et, np.broadcast_to(b, want.shape), f"{op} output {j}")


CASES = [(name, et, shape, fi, op) for name, et, shape, fi, ops in mg.LAYOUTS for op in ops]


@pytest.mark.parametrize("name, et, shape, fi, op", CASES, ids=[f"{c[0]}-{c[4]}" for c in CASES])
def test_batch_norm_golden(name, et, shape, fi, op):
    d = _load(name, et)
    args = [d[a] for a in mg.ARGS[op]]
    outs = run(mg.text(op, et, shape, fi), *args)
    check(op, outs if isinstance(outs, (tuple, list)) else [outs], d, et, shape, fi)


@pytest.mark.parametrize("op", ["training", "inference", "grad"])
def test_blocked_results_do_not_depend_on_threads(op, monkeypatch):
    """Blocks are fixed by the shape, block sums added in block order: 1 or 2 threads, same bits."""
    name, et, shape, fi, _ = mg.LAYOUTS[0]
    d = _load(name, et)
    text = mg.text(op, et, shape, fi)
    args = [d[a] for a in mg.ARGS[op]]
    monkeypatch.setattr(la, "_BN_BLOCK", 512)           # many blocks
    two = run(text, *args)
    monkeypatch.setattr(la, "threads", lambda: 1)
    one = run(text, *args)
    for a, b in zip(two if isinstance(two, tuple) else [two], one if isinstance(one, tuple) else [one]):
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


@pytest.mark.parametrize("name", ["nhwc_f32", "nhwc_f64", "nchw_f32", "cnhw_f32"])
def test_training_statistics_are_xla_bit_for_bit(name):
    """Mean and variance in YNNPACK's order over every layout of the goldens (NHWC's N, H, W
    included: two leading reduced dims before the feature dim)."""
    _, et, shape, fi, _ = next(lay for lay in mg.LAYOUTS if lay[0] == name)
    d = _load(name, et)
    outs = run(mg.text("training", et, shape, fi), *[d[a] for a in mg.ARGS["training"]])
    for j in (1, 2):
        assert np.asarray(outs[j]).tobytes() == d[f"training{j}"].tobytes()


def test_blocked_training_flushes_denormals():
    """Subnormal inputs read as zero (DAZ) and subnormal results are flushed (FTZ), as XLA CPU."""
    x = np.full((2, 8, 8, 32), 1e-40, np.float32)
    x[0, 0, 0, :] = 1.0
    s = np.full(32, 2e-38, np.float32)
    o = np.zeros(32, np.float32)
    y, mean, var = run(mg.text("training", "f32", (2, 8, 8, 32), 3), x, s, o)
    assert np.all(mean == np.float32(1 / 128))       # the denormals counted as 0
    assert np.all(y[0, 0, 0] > 1e-37)                 # (1 - mean) * rsqrt(var) * 2e-38: normal
    assert np.all(y[1] == 0) and np.signbit(y[1]).all()   # -mean * rsqrt(var) * 2e-38 flushed to -0


@pytest.mark.slow
@pytest.mark.parametrize("shape, fi", [((8, 56, 56, 32), 3), ((8, 32, 56, 56), 1), ((32, 160, 7, 7), 1)])
@pytest.mark.parametrize("op", ["training", "inference", "grad"])
def test_batch_norm_against_xla_at_convnet_sizes(shape, fi, op):
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    d = mg.inputs("f32", shape, fi, 7)
    text = mg.text(op, "f32", shape, fi)
    args = [d[a] for a in mg.ARGS[op]]
    want = run_with_xla(text, args)
    d.update({f"{op}{j}": w for j, w in enumerate(want)})
    outs = run(text, *args)
    check(op, outs if isinstance(outs, (tuple, list)) else [outs], d, "f32", shape, fi)


def test_blocked_grad_reads_denormal_gradients_as_zero():
    """g = 1e-39 everywhere: 128 of them per feature would sum to a normal 1.3e-37, but XLA CPU
    reads them as zeros (DAZ): every result is 0 (checked against XLA)."""
    x = np.random.default_rng(0).standard_normal((2, 8, 8, 32)).astype(np.float32)
    g = np.full(x.shape, 1e-39, np.float32)
    one, zero = np.ones(32, np.float32), np.zeros(32, np.float32)
    for out in run(mg.text("grad", "f32", x.shape, 3), x, one, zero, one, g):
        assert not np.asarray(out).any()


def test_wide_fma_is_the_single_rounding_fma():
    """The blocked loops' _fma_wide (f64 per-feature operands, NCHW blocks, out aliasing an
    operand) gives fma_once's bits: exact products and sums landing halfway between two f32 values
    included (integer-valued data makes many of them)."""
    rng = np.random.default_rng(3)
    shape = (4, 16, 96)
    for t in range(12):
        a = (rng.standard_normal(shape) * np.exp2(rng.integers(-20, 20, shape))).astype(np.float32)
        if t % 3 == 0:
            a = np.round(a * 64).astype(np.float32)
        b = (rng.standard_normal((1, 16, 1)) * np.exp2(rng.integers(-20, 20, (1, 16, 1)))).astype(np.float32)
        c = (rng.standard_normal(shape) * np.exp2(rng.integers(-40, 40, shape))).astype(np.float32)
        if t % 2:
            c = c[:1, :, :1].copy()
        want = la.fma_once(a, b, c, np.dtype(np.float32))
        for sl in [(slice(None),) * 3, (slice(None), slice(None), slice(5, 70))]:
            bw = np.broadcast_to(b.astype(np.float64), (1, 16, 96))[sl].copy() if t % 4 == 0 else b.astype(np.float64)
            cs = c if c.shape[2] == 1 else c[sl]
            out = a[sl].copy()
            la._fma_wide(out, bw, cs if t % 4 else cs.astype(np.float64), out)
            assert np.array_equal(out.view(np.uint32), want[sl].view(np.uint32))


def _conv_bn(n, c_in, hw, c_out, labels):
    """A 1x1 convolution (`labels`: bf01 or b01f) feeding a batch norm; root (mean, var, NaN
    channels of y)."""
    nchw = labels == "bf01"
    xs = f"{n},{c_in},{hw},{hw}" if nchw else f"{n},{hw},{hw},{c_in}"
    ys = f"{n},{c_out},{hw},{hw}" if nchw else f"{n},{hw},{hw},{c_out}"
    ws = f"{c_out},{c_in},1,1" if nchw else f"1,1,{c_in},{c_out}"
    dl = "bf01_oi01->bf01" if nchw else "b01f_01io->b01f"
    fi, red = (1, "0,2,3") if nchw else (3, "0,1,2")
    return f"""HloModule m
or {{
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT c = pred[] or(a, b)
}}
ENTRY e {{
  x = f32[{xs}] parameter(0)
  w = f32[{ws}] parameter(1)
  s = f32[{c_out}] parameter(2)
  o = f32[{c_out}] parameter(3)
  c = f32[{ys}] convolution(x, w), window={{size=1x1}}, dim_labels={dl}
  b = (f32[{ys}], f32[{c_out}], f32[{c_out}]) batch-norm-training(c, s, o), epsilon=1e-05, feature_index={fi}
  y = f32[{ys}] get-tuple-element(b), index=0
  mean = f32[{c_out}] get-tuple-element(b), index=1
  var = f32[{c_out}] get-tuple-element(b), index=2
  isnan = pred[{ys}] compare(y, y), direction=NE
  no = pred[] constant(false)
  nanch = pred[{c_out}] reduce(isnan, no), dimensions={{{red}}}, to_apply=or
  ROOT r = (f32[{c_out}], f32[{c_out}], pred[{c_out}]) tuple(mean, var, nanch)
}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("n, hw, labels", [(4, 40, "bf01"), (8, 56, "bf01"), (3, 40, "bf01"), (4, 40, "b01f")])
def test_convolution_fed_statistics_are_xla_bit_for_bit(n, hw, labels):
    """A batch norm of a convolution's result sums XLA's layout of it ([batch, spatial...,
    feature]): images over YNNPACK's tile (N and H cut), nearly constant channels of large
    values (negative variances, NaN channels): mean, variance, NaN channels exactly."""
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    text = _conv_bn(n, 16, hw, 32, labels)
    rng = np.random.default_rng(n * hw)
    shape = (n, 16, hw, hw) if labels == "bf01" else (n, hw, hw, 16)
    feat = (1, 16, 1, 1) if labels == "bf01" else (1, 1, 1, 16)
    level = rng.uniform(20, 60, feat).astype(np.float32)
    spread = np.where(np.arange(16) % 2 == 0, 1e-6, 0.5).astype(np.float32).reshape(feat)
    x = (level + spread * rng.standard_normal(shape)).astype(np.float32)
    w = rng.uniform(0, 1, (32, 16, 1, 1)).astype(np.float32)
    w[::2] *= (np.arange(16) % 2 == 0).astype(np.float32).reshape(1, 16, 1, 1)
    if labels == "b01f":
        w = np.ascontiguousarray(w.transpose(2, 3, 1, 0))
    s, o = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    want = run_with_xla(text, [x, w, s, o])
    got = run(text, x, w, s, o)
    assert want[2].any()                                # some NaN channels
    for g, wv in zip(got, want):
        assert np.asarray(g).tobytes() == np.asarray(wv).tobytes()


def _conv_bn_grad(n, hw, g_from):
    """batch-norm-grad of a 1x1 convolution's result (16 -> 32 features, NCHW) with the gradient
    `g_from`: a parameter (row-major), a convolution, or a select of a parameter (its layout
    is the parameter's)."""
    ys = f"{n},32,{hw},{hw}"
    g = {"parameter": f"  g = f32[{ys}] parameter(4)\n",
         "convolution": f"  g0 = f32[{n},16,{hw},{hw}] parameter(4)\n"
                        f"  g = f32[{ys}] convolution(g0, w), window={{size=1x1}}, dim_labels=bf01_oi01->bf01\n",
         "select": f"  g0 = f32[{ys}] parameter(4)\n  z = f32[] constant(0)\n"
                   f"  zb = f32[{ys}] broadcast(z), dimensions={{}}\n"
                   f"  pos = pred[{ys}] compare(c, zb), direction=GT\n  g = f32[{ys}] select(pos, g0, zb)\n"}[g_from]
    return f"""HloModule m
ENTRY e {{
  x = f32[{n},16,{hw},{hw}] parameter(0)
  w = f32[32,16,1,1] parameter(1)
  s = f32[32] parameter(2)
  m = f32[32] parameter(3)
  c = f32[{ys}] convolution(x, w), window={{size=1x1}}, dim_labels=bf01_oi01->bf01
{g}  v = f32[32] parameter(5)
  ROOT b = (f32[{ys}], f32[32], f32[32]) batch-norm-grad(c, s, m, v, g), epsilon=0.25, feature_index=1
}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("n, hw", [(4, 40), (2, 40)])
@pytest.mark.parametrize("g_from", ["parameter", "convolution", "select"])
def test_grad_sums_follow_the_gradients_layout(n, hw, g_from):
    """batch-norm-grad sums g and g * (x - mean) in the layout XLA gives g (a convolution's
    [batch, spatial..., feature], a parameter's row-major), the multiply inside YNNPACK's call
    (every tile its own call); var + epsilon = 1 makes rsqrt exact: all three results bit for
    bit."""
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    text = _conv_bn_grad(n, hw, g_from)
    rng = np.random.default_rng(n + hw)
    x = (rng.standard_normal((n, 16, hw, hw)) + 0.5).astype(np.float32)
    w = rng.uniform(0, 1, (32, 16, 1, 1)).astype(np.float32)
    s, m = rng.standard_normal(32).astype(np.float32), rng.standard_normal(32).astype(np.float32)
    g = rng.standard_normal((n, 16 if g_from == "convolution" else 32, hw, hw)).astype(np.float32)
    args = [x, w, s, m, g, np.full(32, 0.75, np.float32)]
    want = run_with_xla(text, args)
    for got, wv in zip(run(text, *args), want):
        assert np.asarray(got).tobytes() == np.asarray(wv).tobytes()


@pytest.mark.slow
@pytest.mark.parametrize("shape, fi", [((2, 4, 200, 200), 1), ((3, 5, 40000), 1)])
def test_statistics_over_rows_longer_than_a_tile_are_xla_bit_for_bit(shape, fi):
    """Rows of more than 128 KiB (NCHW images of 200 x 200): YNNPACK's scheduler order
    (ynn_sum.tiled_sum), mean and variance bit for bit (were f64 sums)."""
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    d = mg.inputs("f32", shape, fi, 3)
    text = mg.text("training", "f32", shape, fi)
    args = [d[a] for a in mg.ARGS["training"]]
    want = run_with_xla(text, args)
    got = run(text, *args)
    for j in (1, 2):
        assert np.asarray(got[j]).tobytes() == np.asarray(want[j]).tobytes()
