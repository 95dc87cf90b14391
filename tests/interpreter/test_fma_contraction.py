"""XLA CPU's FMA contraction (hlo_cli/interpreter/contraction.py, ops/elementwise.fma).

* `fma` equals a * b + c computed exactly (fractions) and rounded once, on random and edge values
  (hypothesis), with DAZ/FTZ;
* live against XLA CPU (slow): each pattern of SEMANTICS.md's "FMA contraction" jitted by JAX, its
  text before and after XLA's optimizations run by hlo on every execution path (compiled steps,
  tier-2 code, fused regions, the generic loop under a hook) and compared bit for bit;
* the Keras sample (samples/tensorflow/keras_train_step, slow): with its reduces, dots and convolutions
  given XLA's values, the rest (batch norm's FMAs included) is XLA's bit for bit;
* the fast forms: the bare f32 FMA under the processor's flags (float runs, loop mode) against
  `fma` and exact rationals, f64 double-rounding cases, the FMA steps inside one float run;
  `HLO_FMA=0` (two roundings).
"""
from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hlo_cli.interpreter import run
from hlo_cli.interpreter.contraction import ENV
from hlo_cli.interpreter.ops.elementwise import fma
from hlo_cli.interpreter.values import leaves

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)


def _flush_in(x, dt):
    tiny = np.finfo(dt).tiny
    return 0.0 * np.sign(x) if (x != 0 and abs(x) < tiny) else x


def exact_fma(a, b, c, dt):
    """a * b + c rounded once to `dt` (round to nearest even), subnormal operands read as zeros
    and a subnormal result written as a zero of its sign (XLA CPU's DAZ/FTZ)."""
    a, b, c = (dt.type(_flush_in(float(x), dt)) for x in (a, b, c))
    if not all(np.isfinite([a, b, c])):
        if np.isfinite(a) and np.isfinite(b) and not np.isnan(c):
            return c                            # (the exact product never overflows to meet it)
        with np.errstate(all="ignore"):
            return dt.type(np.float64(a) * np.float64(b) + np.float64(c)) if dt == F32 else a * b + c
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    if exact == 0:
        with np.errstate(all="ignore"):
            return dt.type(a * b + c) if a * b == -c else dt.type(0.0)
    if _tiny(exact, dt):
        return dt.type(-0.0) if exact < 0 else dt.type(0.0)
    return _round(exact, dt)


def _tiny(q: Fraction, dt) -> bool:
    """x86's FTZ test: `q` rounded to the type's precision with an unbounded exponent is below the
    smallest normal (tininess after rounding: XLA CPU's f32 a*b-c is -0.0 for 2^-24, 2^-126, 2^-126,
    whose exact value 2^-150 below 2^-126 rounds to 2^-126 only in the bounded format)."""
    m = abs(q)
    e = m.numerator.bit_length() - m.denominator.bit_length()
    if Fraction(2) ** e > m:
        e -= 1
    unit = Fraction(2) ** (e - (24 if dt == F32 else 53) + 1)
    return round(m / unit) * unit < Fraction(float(np.finfo(dt).tiny))


def _round(q: Fraction, dt):
    """The rational `q` rounded to nearest even in `dt`."""
    if dt == F64:
        try:
            return F64.type(float(q))           # Python's int division rounds correctly
        except OverflowError:
            return F64.type(np.inf if q > 0 else -np.inf)
    # f32: the two f32 neighbours of q's f64 rounding, the nearer (ties to even) exactly
    with np.errstate(all="ignore"):
        d = float(q) if abs(q) < 2 ** 1000 else (np.inf if q > 0 else -np.inf)
        near = np.float32(d)
        cands = {near, np.nextafter(near, np.float32(np.inf)), np.nextafter(near, np.float32(-np.inf))}
    finite = [c for c in cands if np.isfinite(c)]
    if not finite:
        return near
    best = min(finite, key=lambda c: (abs(Fraction(float(c)) - q), int(np.float32(c).view(np.uint32)) & 1))
    big = Fraction(float(np.finfo(np.float32).max)) + Fraction(2) ** 103     # max + half an ulp
    if abs(q) >= big:
        return np.float32(np.inf if q > 0 else -np.inf)
    return best


def _same_bits(x, y):
    x, y = np.asarray(x), np.asarray(y)
    if np.isnan(x) and np.isnan(y):
        return True
    return x.tobytes() == y.tobytes()


def _floats(dt):
    width = 32 if dt == F32 else 64
    return st.floats(width=width, allow_nan=False, allow_infinity=False, allow_subnormal=True)


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_fma_is_rounded_once(dt, data):
    a, b, c = (dt.type(data.draw(_floats(dt))) for _ in range(3))
    got = fma(np.array([a], dt), np.array([b], dt), np.array([c], dt))[0]
    assert _same_bits(got, exact_fma(a, b, c, dt)), (a, b, c, got, exact_fma(a, b, c, dt))


def test_f32_midpoints_are_rounded_once():
    """Sums that land exactly halfway between two f32 values in f64 (the double-rounding case):
    a * b = 1 + 2^-24 (an f32 midpoint) exactly, c tiny either side."""
    a = np.float32(1 + 2 ** -12)
    b = np.float32(1 + 2 ** -12)             # a * b = 1 + 2^-11 + 2^-24
    for c in (np.float32(2 ** -60), np.float32(-2 ** -60), np.float32(2 ** -80), np.float32(0)):
        got = fma(np.array([a]), np.array([b]), np.array([c]))[0]
        assert _same_bits(got, exact_fma(a, b, c, F32)), (c, got)
    rng = np.random.default_rng(3)
    n = 1 << 15                              # products near midpoints, random addends
    a = (1 + rng.integers(0, 1 << 12, n) * 2.0 ** -12).astype(np.float32)
    b = (1 + rng.integers(0, 1 << 12, n) * 2.0 ** -12).astype(np.float32)
    c = (rng.standard_normal(n) * 2.0 ** -40).astype(np.float32)
    got = fma(a, b, c)
    want = np.array([exact_fma(x, y, z, F32) for x, y, z in zip(a, b, c)], np.float32)
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("dt", [F32, F64], ids=["f32", "f64"])
def test_fma_edge_values(dt):
    fi = np.finfo(dt)
    vals = np.array([0.0, -0.0, 1.0, -1.0, fi.tiny, -fi.tiny, fi.tiny / 4, -fi.tiny / 4, fi.max, -fi.max,
                     fi.eps, 1 + fi.eps, 3.0, 1e-20, np.inf, -np.inf], dt)
    a, b, c = (g.reshape(-1) for g in np.meshgrid(vals, vals, vals, indexing="ij"))
    with np.errstate(all="ignore"):
        got = fma(a, b, c)
    for i in range(a.size):
        want = exact_fma(a[i], b[i], c[i], dt)
        if np.isnan(want):
            assert np.isnan(got[i]) and np.signbit(got[i]), (a[i], b[i], c[i])    # x86's default NaN
        else:
            assert _same_bits(got[i], want), (a[i], b[i], c[i], got[i], want)


def test_f64_double_rounding_cases():
    """f64 products whose low part puts the sum on (or next to) a tie of the final rounding, with
    addends that push it either way or cancel the high part (the round-to-odd step decides), in
    one block and across blocks, each sign variant."""
    r = np.random.default_rng(11)
    n = (1 << 14) + 300
    a = 1 + r.integers(0, 1 << 26, n) * 2.0 ** -26
    b = 1 + r.integers(0, 1 << 26, n) * 2.0 ** -27
    c = r.choice([1.0, -1.0], n) * 2.0 ** r.integers(-200, 3, n).astype(float)
    c[::7] = -(a[::7] * b[::7])                  # cancellation: the low part is the result
    c[::11] = 0.0
    for signs in ((False, False), (True, False), (False, True), (True, True)):
        with np.errstate(all="ignore"):
            got = fma(a, b, c, *signs)
        idx = np.r_[0:600, n - 400:n]
        want = np.array([exact_fma(-a[i] if signs[0] else a[i], b[i], -c[i] if signs[1] else c[i], F64)
                         for i in idx])
        assert got[idx].tobytes() == want.tobytes(), signs


def test_fma_f64_far_ranges():
    """Huge operands (Dekker's split would overflow) and products near underflow: exact."""
    a = np.array([2.0 ** 1000, 3.0 * 2 ** 990, 2.0 ** -500, 1.5 * 2 ** -520, 1e300, 7e-310 * 2 ** 60])
    b = np.array([1.5, 2.0 ** 30, 2.0 ** -480 * 1.25, 2.0 ** -500, -1e10, 3.0])
    c = np.array([-2.0 ** 1000, 1.0, 2.0 ** -980, -2.0 ** -1020, 1e308, 0.0])
    with np.errstate(all="ignore"):
        got = fma(a, b, c)
    for i in range(a.size):
        assert _same_bits(got[i], exact_fma(a[i], b[i], c[i], F64)), i


# ============================================================================ live, against XLA CPU

def _patterns():
    """name -> (function of jnp arrays, number of operands): the patterns SEMANTICS.md measures."""
    import jax.numpy as jnp
    from jax import lax
    return {
        "a*b+c": (lambda a, b, c: a * b + c, 3),
        "c+a*b": (lambda a, b, c: c + a * b, 3),
        "a*b-c": (lambda a, b, c: a * b - c, 3),
        "c-a*b": (lambda a, b, c: c - a * b, 3),
        "-(a*b)+c": (lambda a, b, c: -(a * b) + c, 3),
        "-(a*b)-c": (lambda a, b, c: -(a * b) - c, 3),
        "a*b+c*d": (lambda a, b, c, d: a * b + c * d, 4),
        "a*b-c*d": (lambda a, b, c, d: a * b - c * d, 4),
        "ab used twice, apart": (lambda a, b, c, d: (a * b + c, a * b + d), 4),
        "ab an output too": (lambda a, b, c: (a * b + c, a * b), 3),
        "ab and ba (one value to XLA's CSE)": (lambda a, b, c: (c - a * b, b * a), 3),
        "ab used twice, one loop": (lambda a, b, c: (a * b + c) * (a * b), 3),
        "ab+c, ab*d": (lambda a, b, c, d: (a * b + c, a * b * d), 4),
        "ab+c, sum(ab)": (lambda a, b, c: (a * b + c, jnp.sum(a * b)), 3),
        "a*3.3+c": (lambda a, c: a * 3.3 + c, 2),
        "chain": (lambda a, b, c, d, e: (a * b + c) * d + e, 5),
        "loop": (lambda a, b, c: lax.fori_loop(0, 40, lambda i, x: x * b + c, a), 3),
        "where": (lambda a, b, c: jnp.where(a > 0, a * b + c, a * c - b), 3),
        "batch norm": (_batch_norm, 4),
    }


def _batch_norm(x, m, v, g):
    """Keras's training-mode batch norm as TensorFlow writes it (samples/tensorflow/keras_train_step):
    `scale = rsqrt(var + eps) * gamma`, the shift `beta - mean * scale` computed once and broadcast
    into the loop of `x * scale + shift`; both contract.  The statistics are operands here (XLA's
    reduction order is another rule)."""
    scale = v[0] * g[0]
    return x * scale + (g[1] - m[0] * scale)


def _inputs(n, k, dt, seed):
    r = np.random.default_rng(seed)
    return [r.standard_normal(n).astype(dt) for _ in range(k)]


@pytest.fixture(scope="module")
def jax_x64():
    jax = pytest.importorskip("jax")
    with jax.enable_x64(True):
        yield jax


def _texts_and_reference(jax, f, args):
    jitted = jax.jit(f)
    lowered = jitted.lower(*args)
    out = jitted(*args)
    ref = [np.asarray(v) for v in jax.tree_util.tree_leaves(out)]
    return {"hlo": lowered.as_text("hlo"), "opt": lowered.compile().as_text()}, ref


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["f32", "f64"])
@pytest.mark.parametrize("name", list(_patterns()))
def test_bit_equal_to_xla(jax_x64, name, dt):
    f, k = _patterns()[name]
    args = _inputs(1031, k, np.dtype(np.float32 if dt == "f32" else np.float64), 7)
    texts, ref = _texts_and_reference(jax_x64, f, args)
    for which, text in texts.items():
        for how in ("compiled", "hook"):
            kw = {"hook": lambda ev: None} if how == "hook" else {}
            ours = [np.asarray(v) for v in leaves(run(text, *args, **kw))]
            for k_, (a, b) in enumerate(zip(ours, ref)):
                assert a.tobytes() == b.tobytes(), \
                    f"{name} {dt} ({which}, {how}) out{k_}: {np.mean(a == b):.3f} of the elements equal"


_KERAS = Path(__file__).resolve().parents[2] / "samples" / "tensorflow" / "keras_train_step"
_ACCUMULATING = ("reduce", "dot", "convolution")   # XLA's own summation order (another rule)
_DEF = re.compile(r"\s*%([\w.\-]+) = (\S+\[[\d,]*\](?:\{[\d,]*\})?) ([\w-]+)\(")


def _rewrite_entry(text, extra, as_parameters=()):
    """The Keras sample's module with the instructions `extra` appended to its result tuple and those
    in `as_parameters` made parameters (after the 21 of the step, in order)."""
    lines = text.split("\n")
    lines[0] = lines[0].split(",")[0]                     # no aliasing, no entry layout
    shapes = {m[1]: m[2] for m in map(_DEF.match, lines) if m}
    root = next(i for i, line in enumerate(lines) if line.startswith("  ROOT %XLA_Retvals"))
    entry = next(i for i, line in enumerate(lines) if line.startswith("ENTRY"))
    result = re.match(r"\s*ROOT %\S+ = (\(.*\)) tuple\((.*?)\)(, metadata=.*)?$", lines[root])
    shape = result[1][:-1] + "".join(f", {shapes[n]}" for n in extra) + ")"
    lines[root] = f"  ROOT %result = {shape} tuple({result[2]}" + "".join(f", %{n}" for n in extra) + ")"
    lines[entry] = re.sub(r"-> \(.*\) \{$", f"-> {shape} {{", lines[entry])
    params = []
    for k, name in enumerate(as_parameters):
        i = next(i for i, line in enumerate(lines) if line.startswith(f"  %{name} = "))
        lines[i] = f"  %{name} = {shapes[name]} parameter({21 + k})"
        params.append(f", p{21 + k}: {shapes[name].split('{')[0]}")
    lines[entry] = lines[entry].replace(") -> (", "".join(params) + ") -> (", 1)
    return "\n".join(lines)


@pytest.mark.slow
def test_keras_train_step_elementwise_part_is_xlas(jax_x64, monkeypatch):
    """The Keras sample (conv, training-mode batch norm, dense, Adam) with every reduce, dot and
    convolution made a parameter holding XLA's value: the rest -- elementwise, with the batch norm's
    contractions `beta - mean*scale`, `x*scale + shift` and its gradient's -- is XLA's bit for bit
    (the 20 results, the dense layer's input and the convolutions' gradient input), and without
    the contractions it is not.  Without the cut, XLA's and our summation orders differ."""
    from hlo_cli.tools.xla_reference import run_with_xla
    text = Path(f"{_KERAS}.hlo").read_text()
    cut = [m[1] for m in map(_DEF.match, text.split("\n")) if m and m[3] in _ACCUMULATING]
    with np.load(f"{_KERAS}.inputs.npz") as z:
        args = [z[f"arg{k}"] for k in range(21)]
    with np.load(f"{_KERAS}.expected.npz") as z:
        expected = [z[f"out{k}"] for k in range(20)]
    values = run_with_xla(_rewrite_entry(text, cut), args)
    assert all(np.array_equal(a, b) for a, b in zip(values, expected))
    cut_text = _rewrite_entry(text, ["Reshape.5", "AddN_1.3"], cut)
    xla = [np.asarray(v) for v in run_with_xla(cut_text, args + [np.asarray(v) for v in values[20:]])]
    ours = [np.asarray(v) for v in leaves(run(cut_text, *args, *values[20:]))]
    for k, (a, b) in enumerate(zip(ours, xla)):
        assert a.tobytes() == b.tobytes(), f"out{k}: {np.mean(a == b):.3f} of the elements equal"
    monkeypatch.setenv(ENV, "0")
    twice = [np.asarray(v) for v in leaves(run(cut_text, *args, *values[20:]))]
    assert not all(np.array_equal(a, b) for a, b in zip(twice[20:], xla[20:]))


@pytest.mark.slow
@pytest.mark.parametrize("which", ["hlo", "opt"])
def test_fused_regions_and_edge_values(jax_x64, which):
    """Arrays large enough for the compiler's fused regions, with edge values (subnormals, zeros,
    infinities, NaNs) spread through them."""
    f = lambda a, b, c: (a * b + c) * a - b  # noqa: E731
    n = 1 << 19
    args = _inputs(n, 3, np.float32, 11)
    edge = np.array([0.0, -0.0, 1e-40, -1e-40, 1.1754942e-38, np.inf, -np.inf, np.nan, -np.nan, 3e38, -3e38],
                    np.float32)
    r = np.random.default_rng(5)
    for x in args:
        pos = r.integers(0, n, 4000)
        x[pos] = edge[r.integers(0, edge.size, pos.size)]
    texts, ref = _texts_and_reference(jax_x64, f, args)
    ours = np.asarray(run(texts[which], *args))
    same = ours.view(np.uint32) == ref[0].view(np.uint32)
    assert same.all(), f"{np.count_nonzero(~same)} elements differ"


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_nan_signs_and_infinities(jax_x64, dt):
    """Every combination of NaNs of either sign, infinities, zeros and finite values: an operand's
    NaN comes out with its own sign even where the product or the addend is negated."""
    import itertools
    dt = np.dtype(np.float32 if dt == "f32" else np.float64)
    vals = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.0, 1e-40], dt)
    a, b, c = (np.array(x, dt) for x in zip(*itertools.product(vals, vals, vals)))
    for name in ("a*b+c", "c+a*b", "a*b-c", "c-a*b", "-(a*b)+c", "-(a*b)-c"):
        texts, ref = _texts_and_reference(jax_x64, _patterns()[name][0], [a, b, c])
        for which, text in texts.items():
            ours = np.asarray(run(text, a, b, c))
            assert ours.tobytes() == ref[0].tobytes(), f"{name} ({which})"


@pytest.mark.slow
@pytest.mark.parametrize("dt", ["c64", "c128"])
def test_complex_multiply_is_two_fmas(jax_x64, dt):
    """XLA's complex multiply: re = fma(ar, br, -(ai bi)), im = fma(ai, br, ar bi) (each with one
    product rounded), in both texts; edge values (infinities, NaNs, zeros, subnormal parts) too."""
    ct, ft = (np.complex64, np.float32) if dt == "c64" else (np.complex128, np.float64)
    r = np.random.default_rng(9)
    n = 2053
    parts = [r.standard_normal(n).astype(ft) for _ in range(4)]
    edge = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40 if ft == np.float32 else 1e-310, 1.0], ft)
    for p in parts:
        p[:40] = edge[r.integers(0, edge.size, 40)]
    a, b = np.empty(n, ct), np.empty(n, ct)
    a.real, a.imag, b.real, b.imag = parts
    texts, ref = _texts_and_reference(jax_x64, lambda x, y: x * y, [a, b])
    for which, text in texts.items():
        ours = np.asarray(run(text, a, b))
        same = (ours == ref[0]) | (np.isnan(ours.real) & np.isnan(ref[0].real)) | \
            (np.isnan(ours.imag) & np.isnan(ref[0].imag))
        assert same.all(), f"{which}: {np.count_nonzero(~same)} of {n} differ"
        finite = np.isfinite(ref[0])
        assert ours[finite].tobytes() == ref[0][finite].tobytes(), which


_SHAPES = """HloModule shapes

ENTRY main {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(a, b)
  s = f32[] subtract(b, m)
  e = f64[0,3] parameter(2)
  me = f64[0,3] multiply(e, e)
  se = f64[0,3] add(me, e)
  x = f32[64,48] parameter(3)
  y = f32[48,64] parameter(4)
  xt = f32[48,64] transpose(x), dimensions={1,0}
  mt = f32[48,64] multiply(xt, y)
  st = f32[48,64] add(y, mt)
  ROOT t = (f32[], f64[0,3], f32[48,64]) tuple(s, se, st)
}
"""


@pytest.mark.parametrize("how", ["compiled", "hook", "unchecked"])
def test_scalars_empty_arrays_and_strided_operands(how):
    """Rank-0 values, empty arrays and a transposed (strided) operand, on each path: the FMA's
    bits (one rounding) everywhere."""
    r = np.random.default_rng(4)
    a, b = np.float32(1 + 2 ** -12), np.float32(-(1 + 2 ** -12))
    x = r.standard_normal((64, 48)).astype(np.float32)
    y = r.standard_normal((48, 64)).astype(np.float32)
    kw = {"hook": lambda ev: None} if how == "hook" else {"check_values": False} if how == "unchecked" else {}
    s, se, st = run(_SHAPES, np.array(a), np.array(b), np.zeros((0, 3)), x, y, **kw)
    assert _same_bits(s, exact_fma(-a, b, b, F32))
    assert se.shape == (0, 3) and se.dtype == F64
    want = np.array([exact_fma(p, q, z, F32) for p, q, z in zip(x.T.ravel(), y.ravel(), y.ravel())],
                    np.float32).reshape(48, 64)
    assert np.asarray(st).tobytes() == want.tobytes()


def test_hooks_see_the_instructions_own_operands():
    """Under a hook (dumps, --check-finite, isolate) every instruction runs, the multiply too, and
    a contracted add's event starts with its own operands: the rounded product and the addend."""
    text = """HloModule h
ENTRY main {
  a = f32[256] parameter(0)
  b = f32[256] parameter(1)
  c = f32[256] parameter(2)
  m = f32[256] multiply(a, b)
  ROOT s = f32[256] subtract(c, m)
}
"""
    r = np.random.default_rng(6)
    a, b, c = (r.standard_normal(256).astype(np.float32) for _ in range(3))
    events = {}
    got = run(text, a, b, c, hook=lambda ev: events.setdefault(ev.instruction.name, ev))
    assert np.asarray(events["m"].value).tobytes() == (a * b).tobytes()
    ops = events["s"].operands
    assert ops[0].tobytes() == c.tobytes() and ops[1].tobytes() == (a * b).tobytes()
    assert np.asarray(got).tobytes() == run(text, a, b, c).tobytes()
    want = np.array([exact_fma(-x, y, z, F32) for x, y, z in zip(a, b, c)], np.float32)
    assert np.asarray(got).tobytes() == want.tobytes()


# ============================================================================ the fast forms

def _bare(negate_product, negate_addend, a, b, c):
    """The bare f32 FMA (ops/elementwise.fma_bare) with the processor's flags set and float errors
    ignored, as a run of float steps calls it."""
    from hlo_cli.interpreter.fpenv import hardware
    from hlo_cli.interpreter.ops.elementwise import fma_bare
    fset, on, off = hardware()
    fset(on)
    try:
        with np.errstate(all="ignore"):
            return fma_bare(negate_product, negate_addend)(a, b, c)
    finally:
        fset(off)


def _needs_casts():
    from hlo_cli.interpreter.kernels import hardware_casts
    if not hardware_casts():
        pytest.skip("the processor's flags do not apply to NumPy's conversions here (no bare FMA)")


@pytest.mark.parametrize("signs", [(False, False), (True, False), (False, True), (True, True)])
@pytest.mark.parametrize("n", [1, 300, (1 << 14) + 77], ids=["one", "small", "blocks"])
def test_bare_f32_fma_has_fmas_bits(signs, n):
    """Under the flags the bare form gives `fma`'s bits but for NaN signs, subnormal operands and
    results included, on edge values, midpoint cases and random ones, in one block and in many."""
    _needs_casts()
    fi = np.finfo(np.float32)
    edge = np.array([0.0, -0.0, 1.0, -1.0, fi.tiny, -fi.tiny, fi.tiny / 4, -fi.tiny / 4, fi.max, -fi.max,
                     fi.eps, 1 + fi.eps, 3.0, 1e-20, np.inf, -np.inf, 1 + 2 ** -12], np.float32)
    r = np.random.default_rng(n)
    a, b, c = (r.choice(edge, n) * r.choice([1, r.standard_normal()], n).astype(np.float32) for _ in range(3))
    mid = r.random(n) < 0.3                  # products near f32 midpoints, tiny addends
    a[mid] = (1 + r.integers(0, 1 << 12, mid.sum()) * 2.0 ** -12).astype(np.float32)
    b[mid] = (1 + r.integers(0, 1 << 12, mid.sum()) * 2.0 ** -12).astype(np.float32)
    c[mid] = (r.standard_normal(mid.sum()) * 2.0 ** -40).astype(np.float32)
    with np.errstate(all="ignore"):
        want = fma(a, b, c, *signs)
    got = _bare(*signs, a, b, c)
    nan = np.isnan(want)
    assert (np.isnan(got) == nan).all()
    assert got[~nan].tobytes() == want[~nan].tobytes()
    if n < 400:
        for i in np.flatnonzero(~nan):
            p, q = (-a[i] if signs[0] else a[i]), b[i]
            assert _same_bits(got[i], exact_fma(p, q, -c[i] if signs[1] else c[i], F32)), i


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_bare_f32_fma_is_rounded_once(data):
    _needs_casts()
    a, b, c = (np.float32(data.draw(_floats(F32))) for _ in range(3))
    got = _bare(False, True, np.array([a]), np.array([b]), np.array([c]))[0]
    assert _same_bits(got, exact_fma(a, b, -c, F32)), (a, b, c, got)


@settings(max_examples=150, deadline=None)
@given(data=st.data(), n=st.integers(1, 80), signs=st.tuples(st.booleans(), st.booleans()))
def test_small_array_fmas_are_rounded_once(data, n, signs):
    """The small-array path a loop step takes (fma_bare's common case, and `fma`) on arrays of drawn
    floats, products near f32 midpoints among them: each element rounded once, as the exact sum."""
    _needs_casts()
    draw = [data.draw(st.lists(_floats(F32), min_size=n, max_size=n)) for _ in range(3)]
    a, b, c = (np.array(v, np.float32) for v in draw)
    mid = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    k = int(mid.sum())
    a[mid] = (1 + np.arange(k) * 2.0 ** -12).astype(np.float32)
    b[mid] = (1 + np.arange(k)[::-1] * 2.0 ** -12).astype(np.float32)
    c[mid] = (c[mid] * np.float32(2.0 ** -100)).astype(np.float32)
    want = [exact_fma(-x if signs[0] else x, y, -z if signs[1] else z, F32) for x, y, z in zip(a, b, c)]
    for _ in range(2):                      # (the second call takes the common case: hwfma not asked)
        got = _bare(*signs, a, b, c)
        assert all(_same_bits(g, w) for g, w in zip(got, want))
    with np.errstate(all="ignore"):
        got = fma(a, b, c, *signs)
    assert all(_same_bits(g, w) for g, w in zip(got, want))


_RUN = """HloModule r
ENTRY main {
  a = f32[64] parameter(0)
  b = f32[64] parameter(1)
  c = f32[64] parameter(2)
  m = f32[64] multiply(a, b)
  s = f32[64] add(m, c)
  d = f32[64] divide(s, b)
  n = f32[64] multiply(d, c)
  t = f32[64] subtract(a, n)
  ROOT u = f32[64] add(t, s)
}
"""


def test_fma_steps_join_float_runs():
    """The contracted steps are PURE kernels with a bare form (kernels.Capabilities.hw_ufunc): the
    compiler's run of float steps under one setting of the flags goes through them (one run: the
    unread products are placeholders that do no float arithmetic), and every tier gives the FMA's
    bits."""
    _needs_casts()
    from hlo_cli import parse
    from hlo_cli.interpreter.compiler import _float_runs, compiled
    from hlo_cli.interpreter.kernels import PURE, capabilities
    module = parse(_RUN)
    c = compiled(module, "main", True)
    fmas = [st for st in c.steps if st.inst.name in ("s", "t")]
    assert all(st.kind == PURE and capabilities(st.payload).hw_ufunc is not None for st in fmas)
    runs = _float_runs(c.steps, c.root)
    assert len(runs) == 1
    (first, (end, *_)), = runs.items()
    arith = [n for n, st in enumerate(c.steps) if st.kind == PURE and capabilities(st.payload).hw_ufunc]
    assert len(arith) == 4 and first == arith[0] and end == arith[-1] + 1
    r = np.random.default_rng(9)
    a, b, cc = (r.standard_normal(64).astype(np.float32) for _ in range(3))
    s = np.array([exact_fma(x, y, z, F32) for x, y, z in zip(a, b, cc)], np.float32)
    d = s / b
    t = np.array([exact_fma(-x, y, z, F32) for x, y, z in zip(d, cc, a)], np.float32)
    want = (t + s).tobytes()
    for kw in ({}, {"hook": lambda ev: None}, {"check_values": False}):
        assert np.asarray(run(_RUN, a, b, cc, **kw)).tobytes() == want, kw


_ONE = """HloModule one
ENTRY main {
  a = f64[64] parameter(0)
  b = f64[64] parameter(1)
  c = f64[64] parameter(2)
  m = f64[64] multiply(a, b)
  ROOT s = f64[64] add(m, c)
}
"""


@pytest.mark.parametrize("value", ["0", "off"])
def test_hlo_fma_0_rounds_twice(monkeypatch, value):
    """HLO_FMA=0: no contraction, the multiply and the add each rounded (NumPy's bits), on the
    compiled path and the generic loop; unset: the FMA's."""
    r = np.random.default_rng(10)
    a, b, c = (r.standard_normal(64).astype(np.float32) for _ in range(3))
    fa, fb, fc = np.full(64, 1 + 2 ** -30), np.full(64, 1 - 2 ** -30), np.full(64, -1.0)
    monkeypatch.setenv("HLO_FMA", value)
    two = (a * b + c) / b
    two = (a - two * c) + (a * b + c)
    for kw in ({}, {"hook": lambda ev: None}):
        assert np.asarray(run(_RUN, a, b, c, **kw)).tobytes() == two.tobytes()
        assert not np.asarray(run(_ONE, fa, fb, fc, **kw)).any()     # the product's -2^-60 rounded away
    monkeypatch.delenv("HLO_FMA")
    for kw in ({}, {"hook": lambda ev: None}):
        assert (np.asarray(run(_ONE, fa, fb, fc, **kw)) == -2.0 ** -60).all()
