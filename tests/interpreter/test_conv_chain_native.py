"""The convolution FMA chains (ops/convolution.py: _fma_chain_window, _fma_chain) run by hwfma's
chain kernel against the NumPy chain (HLO_NATIVE=0, which the goldens of test_conv_order.py and
test_conv_fma_chain.py tie to XLA): the same bits, NaN payloads included, on values full of what a
chain must get right (NaN, infinities, zeros of both signs, subnormals that DAZ reads as zeros,
sums that FTZ flushes, sums halfway between two f32 values, overflow), for every window, stride,
padding, layout, output width (padded to the kernel's lanes or not) and block split; the kernel is
really used, a block with a NaN takes the NumPy chain, the caller's MXCSR is left as it was, and
HLO_NATIVE=0 keeps the NumPy path."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

pytest.importorskip("llvmlite")

from hlo_cli.interpreter import hwfma, run  # noqa: E402
from hlo_cli.interpreter.ops import convolution as CV  # noqa: E402
from hlo_cli.ir.attributes import WindowDim  # noqa: E402
from hlo_cli.parser import parse  # noqa: E402

F32 = np.dtype(np.float32)
_FI = np.finfo(np.float32)
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, 3.0, 1.0 + 2.0 ** -12, 1.0 + 2.0 ** -23, 2.0 ** -12, float(_FI.tiny),
         -float(_FI.tiny), float(_FI.smallest_subnormal), -float(_FI.smallest_subnormal),
         float(_FI.tiny) * 0.75, 2.0 ** -70, float(_FI.max), -float(_FI.max), np.inf, -np.inf, np.nan]


@pytest.fixture(autouse=True)
def _native(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "hwfma-cache"))
    monkeypatch.setenv("HLO_NATIVE", "strict")
    if hwfma.chain_kernel(1, 32) is None:
        pytest.skip("no FMA instruction or LLVM here")


def _both(fn, *args):
    """(fn(*args) on the native chain, fn(*args) on the NumPy chain)."""
    mp = pytest.MonkeyPatch()
    try:
        native = fn(*args)
        mp.setenv("HLO_NATIVE", "0")
        return native, fn(*args)
    finally:
        mp.undo()


def _same_bits(a, b):
    assert a.dtype == b.dtype == F32 and a.shape == b.shape
    assert np.array_equal(np.ascontiguousarray(a).view(np.uint32), np.ascontiguousarray(b).view(np.uint32))


def _values(draw, shape, hostile):
    """f32 values: normal ones, and (hostile) the edge values and any f32 (NaN payloads too)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    v = rng.standard_normal(shape).astype(F32)
    if hostile:
        some = draw(hnp.arrays(F32, 12, elements=st.sampled_from(EDGES).map(np.float32)
                               | st.floats(width=32)))
        flat = v.reshape(-1)
        at = rng.random(flat.size) < hostile
        flat[at] = rng.choice(some, int(at.sum()))
    return v


@st.composite
def windows(draw):
    n, c = draw(st.integers(1, 2)), draw(st.integers(1, 4))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    o = draw(st.sampled_from([9, 12, 16, 17, 25, 32, 40, 48, 64]))
    h, w = draw(st.integers(3, 9)), draw(st.integers(3, 9))
    strides = draw(st.sampled_from([(1, 1), (2, 2), (1, 2), (3, 1)]))
    pads = ((draw(st.integers(0, 2)), draw(st.integers(0, 2))), (draw(st.integers(0, 2)), draw(st.integers(0, 2))))
    hostile = draw(st.sampled_from([0.0, 0.02, 0.3]))
    x = _values(draw, (n, c, h, w), hostile)
    wt = _values(draw, (o, c, kh, kw), hostile)
    if draw(st.booleans()):                     # (an NHWC operand: a strided view)
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    return x, wt, strides, pads, draw(st.booleans()), draw(st.integers(1, 3))


@settings(max_examples=60, deadline=None)
@given(windows())
def test_window_chain_native_equals_numpy(case):
    x, w, strides, pads, hw, rows = case
    dims = tuple(WindowDim(size=k, stride=s, padding_low=p[0], padding_high=p[1])
                 for k, s, p in zip(w.shape[2:], strides, pads))
    out = tuple((size + p[0] + p[1] - k) // s + 1 for size, k, s, p in zip(x.shape[2:], w.shape[2:], strides, pads))
    if min(out) < 1:
        return
    old = CV.FMA_CHAIN_BLOCK
    CV.FMA_CHAIN_BLOCK = rows * out[1] * w.shape[0]          # several blocks even for small shapes
    try:
        native, numpy = _both(CV._fma_chain_window, x[None], w[None], dims, out, hw)
    finally:
        CV.FMA_CHAIN_BLOCK = old
    _same_bits(native, numpy)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(2, 16), st.sampled_from([(1,), (5,), (3, 4), (2, 7)]),
       st.sampled_from([25, 28, 32, 41, 48, 96]), st.sampled_from([0.0, 0.02, 0.3]), st.booleans(),
       st.integers(1, 40), st.data())
def test_pointwise_chain_native_equals_numpy(n, k, spatial, o, hostile, hw, block, data):
    x = _values(data.draw, (1, n, k) + spatial, hostile)
    w = _values(data.draw, (1, o, k) + (1,) * len(spatial), hostile)
    old = CV.FMA_CHAIN_BLOCK
    CV.FMA_CHAIN_BLOCK = block * o                           # blocks that end inside an image
    try:
        native, numpy = _both(CV._fma_chain, x, w, hw)
    finally:
        CV.FMA_CHAIN_BLOCK = old
    _same_bits(native, numpy)


def test_the_kernel_runs_and_a_nan_block_takes_the_numpy_chain(monkeypatch):
    calls, nans = [], []
    real = hwfma._Chain.__call__

    def spy(self, *a):
        got = real(self, *a)
        calls.append(True)
        nans.append(got)
        return got
    monkeypatch.setattr(hwfma._Chain, "__call__", spy)
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 12, 12)).astype(F32)
    x[0, 1, 0, 5, 5] = np.nan
    x[0, 1, 1, 5, 5] = np.inf                   # (two NaN patterns: the NumPy chain decides)
    w = np.random.default_rng(1).standard_normal((1, 32, 3, 3, 3)).astype(F32)
    dims = (WindowDim(size=3, stride=2, padding_low=1, padding_high=1),) * 2
    monkeypatch.setattr(CV, "FMA_CHAIN_BLOCK", 32 * 6)
    seen = []
    real_rows = CV._chain_rows
    monkeypatch.setattr(CV, "_chain_rows", lambda *a: seen.append(1) or real_rows(*a))
    native = CV._fma_chain_window(x, w, dims, (6, 6), True)
    assert len(calls) == 12 and any(nans) and not all(nans) and len(seen) == sum(nans)
    monkeypatch.setenv("HLO_NATIVE", "0")
    _same_bits(native, CV._fma_chain_window(x, w, dims, (6, 6), True))
    assert len(calls) == 12


def test_the_rule_and_goldens_through_the_native_chain(monkeypatch):
    """A whole convolution instruction (the stem's class) gives the NumPy chain's bits natively."""
    text = """HloModule m
ENTRY e {
  x = f32[2,3,33,33] parameter(0)
  w = f32[32,3,3,3] parameter(1)
  ROOT c = f32[2,32,17,17] convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
}
"""
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((2, 3, 33, 33)).astype(F32), rng.standard_normal((32, 3, 3, 3)).astype(F32)]
    native, numpy = _both(lambda: np.asarray(run(parse(text, "m"), *args)))
    _same_bits(native, numpy)


def test_mxcsr_is_restored_and_the_off_switch_holds(monkeypatch):
    x = np.ones((1, 1, 20, 4, 4), F32)
    w = np.ones((1, 32, 20, 1, 1), F32)
    CV._fma_chain(x, w, True)
    tiny = np.array([np.finfo(F32).tiny], F32)
    assert (tiny * np.float32(0.5))[0] != 0                  # subnormals still come out of NumPy
    monkeypatch.setenv("HLO_NATIVE", "0")
    assert hwfma.chain_kernel(10**12, 32) is None


def test_the_chain_kernel_is_cached_and_holds_vector_fmas(tmp_path, monkeypatch):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path))
    kernels = hwfma._Kernels()
    kernels[("chain", 16)]
    assert list(tmp_path.glob("hwfma/*/chain_f32_16_*.o"))
    assert kernels.cached(("chain", 16)) and not kernels.cached(("chain", 32))
    asm = hwfma.assembly([("chain", 32)])
    assert "vfmadd" in asm and "vmulps" not in asm and "vaddps" not in asm


SUBNORMAL_CASES = {
    "stem": ("f32[1,3,9,9]", "f32[32,3,3,3]", "f32[1,32,5,5]", "size=3x3 stride=2x2 pad=1_1x1_1"),
    "pointwise": ("f32[2,32,5,7]", "f32[16,32,1,1]", "f32[2,16,5,7]", "size=1x1"),
    "pointwise_narrow": ("f32[2,12,5,7]", "f32[32,12,1,1]", "f32[2,32,5,7]", "size=1x1"),
}


@pytest.mark.slow
@pytest.mark.parametrize("native", ["strict", "0"])
@pytest.mark.parametrize("name", sorted(SUBNORMAL_CASES))
def test_subnormals_flush_as_xla_does(name, native, monkeypatch):
    """Subnormal operands read as zeros and subnormal partial sums flushed, on both chains, as XLA
    CPU (live) computes them (the NumPy chain left them unflushed before)."""
    jax = pytest.importorskip("jax")
    xs, ws, ys, window = SUBNORMAL_CASES[name]
    text = f"""HloModule m
ENTRY e {{
  x = {xs} parameter(0)
  w = {ws} parameter(1)
  ROOT c = {ys} convolution(x, w), window={{{window}}}, dim_labels=bf01_oi01->bf01
}}
"""
    module = parse(text, "m")
    shapes = [tuple(p.shape.dims) for p in module.entry_computation.parameters]
    rng = np.random.default_rng(7)
    x, w = (rng.standard_normal(s).astype(F32) for s in shapes)
    x[:, :, :2] *= np.float32(1e-39)                        # subnormal operands
    w[:8] *= np.float32(1e-20)                              # products and sums below f32's normals
    strides = (2, 2) if name == "stem" else (1, 1)
    pads = ((1, 1), (1, 1)) if name == "stem" else ((0, 0), (0, 0))
    conv = jax.jit(lambda a, b: jax.lax.conv_general_dilated(a, b, strides, pads,
                                                             dimension_numbers=("NCHW", "OIHW", "NCHW")))
    want = np.asarray(conv(x, w))
    monkeypatch.setenv("HLO_NATIVE", native)
    _same_bits(np.asarray(run(module, x, w)), want)


@pytest.mark.parametrize("nans, native_nan", [
    ([np.float32(np.nan)], True),                                       # one NaN: the kernel's own
    ([np.uint32(0xFFC00000).view(np.float32), np.float32(np.inf)], True),  # x86's default NaN and inf
    ([np.float32(np.nan), np.float32(np.inf)], False),                  # two NaN patterns possible
    ([np.uint32(0x7F800001).view(np.float32), np.uint32(0x7FC00001).view(np.float32)], True),  # sNaN
    ([np.uint32(0x7FC00001).view(np.float32), np.uint32(0x7FC00002).view(np.float32)], False),
])
def test_nan_blocks_stay_native_when_every_nan_is_one(nans, native_nan, monkeypatch):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 20, 6, 6)).astype(F32)
    flat = x.reshape(-1)
    for i, v in enumerate(nans):
        flat[rng.random(flat.size) < 0.05] = v
    w = rng.standard_normal((1, 32, 20, 1, 1)).astype(F32)
    seen = []
    real = CV._chain_rows
    monkeypatch.setattr(CV, "_chain_rows", lambda *a: seen.append(1) or real(*a))
    native = CV._fma_chain(x, w, True)
    assert np.isnan(native).any() and bool(seen) != native_nan
    monkeypatch.setenv("HLO_NATIVE", "0")
    _same_bits(native, CV._fma_chain(x, w, True))


@pytest.mark.parametrize("dtype", [np.float16, "bfloat16"])
def test_narrow_operands_are_read_as_f32(dtype):
    """bf16 / f16 operands (an f32 convolution of them) reach the chains as they are: the kernel reads
    them converted to f32, as the NumPy chain does."""
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16
    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 2, 3, 9, 9)).astype(dtype)
    w = rng.standard_normal((1, 32, 3, 3, 3)).astype(dtype)
    dims = (WindowDim(size=3, stride=2, padding_low=1, padding_high=1),) * 2
    native, numpy = _both(CV._fma_chain_window, x, w, dims, (5, 5), True)
    _same_bits(native, numpy)
    x1 = rng.standard_normal((1, 2, 12, 4, 4)).astype(dtype)
    w1 = rng.standard_normal((1, 48, 12, 1, 1)).astype(dtype)
    native, numpy = _both(CV._fma_chain, x1, w1, True)
    _same_bits(native, numpy)
