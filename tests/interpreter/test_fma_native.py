"""XLA CPU's contracted multiply-add computed by the processor's FMA (hlo_cli/interpreter/hwfma.py)
against the exact NumPy emulation (ops/elementwise.fma with the native kernels off): the same bits
on values full of what an FMA must get right (NaN of both signs, infinities, zeros of both signs,
subnormals that DAZ reads as zeros, results that FTZ flushes, f32 sums exactly halfway between two
f32 values, f64 products whose low part decides the rounding), in every sign variant, through the
rule, the compiled step, its bare form and fused regions; the machine code holds real fused
multiply-adds; the caller's MXCSR is left as it was; HLO_NATIVE=0 and the cost model keep the
NumPy path."""
from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("llvmlite")

from hlo_cli.interpreter import hwfma, run_module  # noqa: E402
from hlo_cli.interpreter.inputs import bind  # noqa: E402
from hlo_cli.interpreter.ops import elementwise  # noqa: E402
from hlo_cli.interpreter.values import leaves  # noqa: E402
from hlo_cli.parser import parse  # noqa: E402

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
SIGNS = [(False, False), (False, True), (True, False), (True, True)]


@pytest.fixture(autouse=True)
def _native(monkeypatch, tmp_path_factory):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "hwfma-cache"))
    monkeypatch.setenv("HLO_NATIVE", "strict")
    got = hwfma.fma(np.ones(1), np.ones(1), np.ones(1), False, False)
    if got is None:
        pytest.skip("no FMA instruction or LLVM here")


def _numpy(fn, *args, monkeypatch):
    """fn(*args) on the NumPy path (HLO_NATIVE=0)."""
    monkeypatch.setenv("HLO_NATIVE", "0")
    try:
        return fn(*args)
    finally:
        monkeypatch.setenv("HLO_NATIVE", "strict")


def _bits(v):
    v = np.asarray(v)
    return v.dtype.str, v.shape, np.ascontiguousarray(v).tobytes()


def _edges(dt):
    fi = np.finfo(dt)
    tiny, sub = fi.tiny, fi.smallest_subnormal
    return np.array([0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -7.25, tiny, -tiny, sub, -sub, tiny * 0.75, fi.max,
                     -fi.max, fi.eps, 1 + fi.eps, np.inf, -np.inf, np.nan, -np.nan, 2.0 ** -75,
                     1.5 * 2.0 ** -63, 1.0 + 2.0 ** -12], dt)


def _values(dt):
    """Hypothesis arrays of `dt` mixing any bit patterns, the edges and ordinary numbers."""
    width = 32 if dt == F32 else 64
    pattern = st.integers(0, 2 ** width - 1).map(
        lambda b: np.array([b], np.uint32 if width == 32 else np.uint64).view(dt)[0])
    normal = st.floats(-1e3, 1e3, width=width)
    edge = st.sampled_from(list(_edges(dt)))
    return st.lists(st.one_of(pattern, normal, edge), min_size=1, max_size=40).map(lambda v: np.array(v, dt))


@st.composite
def _triples(draw, dt):
    a = draw(_values(dt))
    n = a.size
    b = draw(_values(dt).filter(lambda v: v.size >= 1))
    c = draw(_values(dt).filter(lambda v: v.size >= 1))
    return a, np.resize(b, n).astype(dt), np.resize(c, n).astype(dt)


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("signs", SIGNS, ids=lambda s: f"np{int(s[0])}na{int(s[1])}")
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_native_fma_gives_the_numpy_paths_bits(dt, signs, data, monkeypatch):
    a, b, c = data.draw(_triples(dt))
    want = _numpy(elementwise.fma, a, b, c, *signs, monkeypatch=monkeypatch)
    assert _bits(elementwise.fma(a, b, c, *signs)) == _bits(want)
    direct = hwfma.fma(a, b, c, *signs)
    if np.isnan(want).any():
        assert direct is None                       # (a NaN: the rule decides its sign)
    else:
        assert _bits(direct) == _bits(want)


def _midpoints(n, seed):
    """f32 (a, b, c) whose exact a*b + c lies exactly halfway between two f32 values (the f64 sum
    is exact there: rounding it to f32 is the case the NumPy path repairs), n of them."""
    rng = np.random.default_rng(seed)
    a = (rng.integers(1 << 11, 1 << 12, 8 * n) * 2.0 ** -11).astype(F32)      # 12-bit mantissas
    b = (rng.integers(1 << 11, 1 << 12, 8 * n) * 2.0 ** -12).astype(F32)
    c = (1 + rng.random(8 * n)).astype(F32) * rng.choice(np.array([-1, 1], F32), 8 * n)
    s = a.astype(F64) * b + c
    half = (s.view(np.uint64) & np.uint64((1 << 29) - 1)) == np.uint64(1 << 28)
    assert half.sum() >= n
    return a[half][:n], b[half][:n], c[half][:n]


@pytest.mark.parametrize("signs", SIGNS, ids=lambda s: f"np{int(s[0])}na{int(s[1])}")
def test_midpoints_and_large_arrays(signs, monkeypatch):
    a, b, c = _midpoints(50_000, 1)
    want = _numpy(elementwise.fma, a, b, c, *signs, monkeypatch=monkeypatch)
    assert _bits(hwfma.fma(a, b, c, *signs)) == _bits(want)
    rng = np.random.default_rng(2)
    for dt in (F32, F64):                      # over several blocks of the NumPy path
        x, y, z = (rng.standard_normal(70_001).astype(dt) * s for s in (1.0, 1e-20, 1e-38))
        want = _numpy(elementwise.fma, x, y, z, *signs, monkeypatch=monkeypatch)
        assert _bits(elementwise.fma(x, y, z, *signs)) == _bits(want)


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
def test_ftz_and_daz_are_xlas(dt, monkeypatch):
    """Subnormal operands are zeros; a result below the smallest normal after rounding is flushed,
    one that rounds up to it is not (x86's tininess after rounding)."""
    tiny = np.finfo(dt).tiny
    eps = np.finfo(dt).eps
    sub = np.finfo(dt).smallest_subnormal
    a = np.array([sub, 1.0, tiny, -tiny, eps / 2, 1.0], dt)
    b = np.array([1e30 if dt == F32 else 1e300, sub, 1.0, -tiny, tiny, tiny], dt)
    c = np.array([1.0, 1.0, -tiny * eps, tiny, -tiny, 0.0], dt)
    got = hwfma.fma(a, b, c, False, False)
    want = _numpy(elementwise.fma, a, b, c, False, False, monkeypatch=monkeypatch)
    assert _bits(got) == _bits(want)
    assert not np.any((got != 0) & (np.abs(got) < tiny))        # no subnormal comes out


def test_the_callers_flags_are_kept():
    """The kernel sets FTZ/DAZ for its own loop only: NumPy's subnormal arithmetic afterwards is
    IEEE's again (and a caller holding the flags keeps them)."""
    sub = np.array([1e-40], F32)
    hwfma.fma(np.ones(4, F32), np.ones(4, F32), np.ones(4, F32), False, False)
    assert (sub * np.float32(0.5))[0] != 0
    from hlo_cli.interpreter.fpenv import hardware
    hw = hardware()
    if hw is None:
        return
    fset, on, off = hw
    fset(on)
    try:
        hwfma.fma(np.ones(4, F32), np.ones(4, F32), np.ones(4, F32), False, False)
        assert (sub * np.float32(0.5))[0] == 0
    finally:
        fset(off)


def _instructions(keys):
    asm = hwfma.assembly(keys)
    return asm, {ln.split()[0] for ln in asm.splitlines() if ln.strip().startswith("v")}


@pytest.mark.parametrize("pattern", [(1, 1, 1), (0, 1, 0)])
def test_the_machine_code_is_fused_multiply_adds(pattern):
    """Each kernel's loop is packed FMA instructions (the sign variants where every operand
    moves: vfmadd, vfmsub, vfnmadd, vfnmsub; a negated row-invariant operand may be negated once
    before the loop), never a separate multiply, add or subtract."""
    for dt, kind in ((F32, "ps"), (F64, "pd")):
        asm, ops = _instructions([(dt, p, q, pattern) for p, q in SIGNS])
        fmas = {o for o in ops if o.startswith(("vfmadd", "vfmsub", "vfnmadd", "vfnmsub")) and o.endswith(kind)}
        if pattern == (1, 1, 1):
            assert {o[:-5] for o in fmas} == {"vfmadd", "vfmsub", "vfnmadd", "vfnmsub"}
        else:
            assert fmas
        assert not any(o.startswith(("vmul", "vadd", "vsub")) for o in ops), ops
        assert "vldmxcsr" in ops and "vstmxcsr" in ops


def test_hlo_native_0_and_the_cost_model_keep_numpy(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_NATIVE", "0")
    assert hwfma.mode() == "off"
    assert hwfma.fma(np.ones(3), np.ones(3), np.ones(3), False, False) is None
    monkeypatch.delenv("HLO_NATIVE")
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path))         # (nothing compiled yet)
    for key, value in (("kernels", None), ("saved", 0.0), ("spent", 0.0), ("cost", None)):
        monkeypatch.setitem(hwfma._state, key, value)
    assert hwfma.mode() == "auto"
    small = np.ones(8, F32)
    for _ in range(20):                            # small arrays: not worth compiling
        assert hwfma.fma(small, small, small, False, False) is None
    assert not hwfma.ready()
    big = np.ones(1 << 25, F32)                     # work enough to pay for it at once
    assert hwfma.fma(big, big, big, False, False) is not None
    assert hwfma.fma(small, small, small, False, False) is not None      # (the same kernel)
    hwfma._state["saved"] = hwfma._state["spent"]
    one = np.broadcast_to(np.float32(2), small.shape)
    assert hwfma.fma(small, one, small, False, False) is None           # another kernel: not yet
    monkeypatch.setenv("HLO_NATIVE", "1")
    assert hwfma.fma(small, one, small, False, False) is not None       # (HLO_NATIVE=1: compiled)


def test_operands_of_any_layout_and_threads(monkeypatch):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 300)).astype(F32)
    b = rng.standard_normal(300).astype(F32)
    c = np.float32(0.25)
    col = rng.standard_normal((64, 1)).astype(F32)
    cube = rng.standard_normal((4, 16, 75)).astype(F32)
    cases = [(a, np.broadcast_to(b, a.shape), np.broadcast_to(c, a.shape)), (a.T, a.T, a.T[::-1]),
             (a[:, ::3], a[:, 1::3], a[:, 2::3]), (np.broadcast_to(col, a.shape), a, a[::-1]),
             (cube, np.broadcast_to(cube[:, :1], cube.shape), np.broadcast_to(cube[:1], cube.shape)),
             (a[:, :1], b[:1], np.float32(3.0)), (a[2], a[3], a[4, ::-1])]
    for x, y, z in cases:
        want = _numpy(elementwise.fma, x, y, z, False, True, monkeypatch=monkeypatch)
        assert _bits(elementwise.fma(x, y, z, False, True)) == _bits(want)
        shape = np.broadcast_shapes(np.shape(x), np.shape(y), np.shape(z))
        xs = [np.broadcast_to(np.asarray(v, F32), shape) for v in (x, y, z)]
        assert _bits(hwfma.fma(*xs, False, True)) == _bits(want)
    big = [rng.standard_normal(1 << 18).astype(F64) for _ in range(3)]
    want = _bits(_numpy(elementwise.fma, *big, True, False, monkeypatch=monkeypatch))
    got = []
    threads = [threading.Thread(target=lambda: got.append(_bits(hwfma.fma(*big, True, False)))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert got == [want] * 4


_CHAIN = """HloModule chain

ENTRY main {{
  a = {t}[{n}] parameter(0)
  b = {t}[{n}] parameter(1)
  c = {t}[{n}] parameter(2)
  d = {t}[{n}] parameter(3)
  m0 = {t}[{n}] multiply(a, b)
  q0 = {t}[{n}] add(m0, c)
  m1 = {t}[{n}] multiply(q0, d)
  q1 = {t}[{n}] subtract(c, m1)
  m2 = {t}[{n}] multiply(c, d)
  ROOT q2 = {t}[{n}] subtract(m2, q1)
}}
"""


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("n", [5, 70_000])
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "generic"])
def test_programs_give_the_same_bits(t, n, compiled, monkeypatch):
    """A chain of contractions (compiled steps, fused regions of large arrays, the generic loop)
    with edge values among the operands."""
    dt = F32 if t == "f32" else F64
    rng = np.random.default_rng(n)
    args = [rng.standard_normal(n).astype(dt) for _ in range(4)]
    for v in args:
        v[: min(n, len(_edges(dt)))] = rng.permutation(_edges(dt))[:n]
    text = _CHAIN.format(t=t, n=n)

    def run():
        module = parse(text)
        out = run_module(module, bind(module.entry_computation.parameters, args), compiled=compiled)
        return [_bits(v) for v in leaves(out)]
    assert run() == _numpy(run, monkeypatch=monkeypatch)


_LOOP = """HloModule loop

cond {{
  p = (s32[], {t}[64], {t}[64], {t}[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(40)
  ROOT lt = pred[] compare(i, n), direction=LT
}}

body {{
  p = (s32[], {t}[64], {t}[64], {t}[64]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  x = {t}[64] get-tuple-element(p), index=1
  b = {t}[64] get-tuple-element(p), index=2
  c = {t}[64] get-tuple-element(p), index=3
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  m = {t}[64] multiply(x, b)
  y = {t}[64] subtract(c, m)
  ROOT t = (s32[], {t}[64], {t}[64], {t}[64]) tuple(i1, y, b, c)
}}

ENTRY main {{
  x = {t}[64] parameter(0)
  b = {t}[64] parameter(1)
  c = {t}[64] parameter(2)
  z = s32[] constant(0)
  s = (s32[], {t}[64], {t}[64], {t}[64]) tuple(z, x, b, c)
  w = (s32[], {t}[64], {t}[64], {t}[64]) while(s), condition=cond, body=body
  ROOT r = {t}[64] get-tuple-element(w), index=1
}}
"""


@pytest.mark.slow
@pytest.mark.parametrize("t", ["f32", "f64"])
def test_native_loops_contract_as_xla_does(t, monkeypatch, tmp_path):
    """A while loop compiled by native.py (numba) computes its contracted multiply-subtract with
    the processor's FMA (vfnmadd in its machine code) and gives the compiled steps' bits; with
    HLO_FMA=0 both round twice."""
    pytest.importorskip("numba")
    from hlo_cli.interpreter.per_module import cached
    dt = F32 if t == "f32" else F64
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(64).astype(dt) * 0.9 for _ in range(3)]
    args[0][:4] = [np.inf, -0.0, np.finfo(dt).tiny, np.finfo(dt).smallest_subnormal]
    text = _LOOP.format(t=t)
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path))         # (compiled here: its machine code)

    def run(mode):
        monkeypatch.setenv("HLO_NATIVE", mode)
        module = parse(text)
        out = run_module(module, bind(module.entry_computation.parameters, args))
        return module, [_bits(v) for v in leaves(out)]
    for fma in ("1", "0"):
        monkeypatch.setenv("HLO_FMA", fma)
        module, fast = run("strict")
        (_, _, plan), = cached(module, "native-loops", dict).values()
        assert plan and plan.fn is not None
        asm = "\n".join(plan.fn.inspect_asm().values())
        assert fast == run("0")[1]
        assert ("vfnmadd" in asm) == (fma == "1")


def test_walks_of_operand_layouts():
    """The 2-d walk each layout gets: rows of contiguous output elements, each operand's row step
    and column step (0: broadcast along the row, 1: contiguous) in elements; False: copied first."""
    f = np.zeros((6, 5, 4), F32)
    plan = hwfma._plan
    assert plan(f.shape, (f.strides,) * 3, 4) == (1, 120, 0, 0, 0, (1, 1, 1))
    row = np.broadcast_to(np.zeros(4, F32), f.shape)
    assert plan(f.shape, (f.strides, row.strides, f.strides), 4) == (30, 4, 4, 0, 4, (1, 1, 1))
    col = np.broadcast_to(np.zeros((6, 5, 1), F32), f.shape)
    assert plan(f.shape, (col.strides, f.strides, f.strides), 4) == (30, 4, 1, 4, 4, (0, 1, 1))
    one = np.broadcast_to(np.float32(1), f.shape)
    assert plan(f.shape, (one.strides, one.strides, one.strides), 4) == (1, 120, 0, 0, 0, (0, 0, 0))
    mid = np.broadcast_to(np.zeros((6, 1, 4), F32), f.shape)
    assert plan(f.shape, (mid.strides, f.strides, f.strides), 4) is False
    t = f.transpose(2, 1, 0)
    assert plan(t.shape, (t.strides, t.strides, t.strides), 4) is False


def test_numpy_scalars_and_subclasses_are_read_as_arrays(monkeypatch):
    """A NumPy scalar (a rank-0 step's value) or an array subclass is never handed to the kernel as
    it is (the kernel reads an ndarray's own fields)."""
    x = np.float32(1.5)
    got = hwfma.fma(x, np.float32(2.0), np.float32(-0.25), False, False)
    assert got.shape == () and got == np.float32(2.75)
    m = np.ones((2, 2), F64).view(np.matrix)
    want = _numpy(elementwise.fma, np.asarray(m), np.asarray(m), np.asarray(m), True, True, monkeypatch=monkeypatch)
    assert _bits(hwfma.fma(m, m, m, True, True)) == _bits(want)


def test_rounding_is_to_nearest_whatever_the_callers_mode(monkeypatch):
    """The kernel rounds to nearest even (XLA's mode) even when the calling thread rounds towards
    zero, and gives the caller its own mode back."""
    import ctypes
    import ctypes.util
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    toward_zero, nearest = 0xC00, 0
    a = np.full(8, 1.0 + 2.0 ** -23, F32)
    c = np.full(8, 3 * 2.0 ** -25, F32)                 # a*a + c lies above a midpoint: RN rounds up
    want = _numpy(elementwise.fma, a, a, c, False, False, monkeypatch=monkeypatch)
    assert libm.fesetround(toward_zero) == 0
    try:
        got = hwfma.fma(a, a, c, False, False)
        mode = libm.fegetround()
    finally:
        libm.fesetround(nearest)
    assert mode == toward_zero
    assert _bits(got) == _bits(want)
