"""XLA CPU's excess precision (interpreter/excess_precision.py): a bf16 op whose result a convert
to f32 reads gives that convert the unrounded f32 value; every other user sees the bf16 rounding.

The golden numbers were measured with XLA CPU (jaxlib 0.10.2); the rule cases are also run against
XLA itself when JAX is importable."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from hlo_cli import parse, run
from hlo_cli.interpreter import run_module
from hlo_cli.interpreter.excess_precision import ENV, apply, wide_producers
from hlo_cli.interpreter.values import leaves

BF16 = ml_dtypes.bfloat16

# /work/helpers/repro/h9/bf16_excess_precision.hlo: a bf16 product converted to f32
REPRO = """HloModule bf16_excess_precision, entry_computation_layout={(bf16[4]{0})->f32[4]{0}}

ENTRY %main (p: bf16[4]) -> f32[4] {
  %p = bf16[4]{0} parameter(0)
  %c = bf16[] constant(0.707)
  %b = bf16[4]{0} broadcast(%c), dimensions={}
  %m = bf16[4]{0} multiply(%p, %b)
  ROOT %r = f32[4]{0} convert(%m)
}
"""
REPRO_ARG = np.array([0.5390625, -0.6640625, 0.625, -2.21875], dtype=BF16)
# XLA CPU's result, bit for bit: the f32 products of the bf16 values (0.707 is 0.70703125 in bf16)
REPRO_XLA = np.array([1052976128, 3203425280, 1055014912, 3217607680], dtype=np.uint32).view(np.float32)


def _module(body: str, extra: str = "") -> str:
    return f"HloModule m\n{extra}\nENTRY e {{\n{body}\n}}\n"


def _args(*shapes, dtype=BF16, seed=0):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s).astype(np.float32).astype(dtype) for s in shapes]


def _run(text: str, args):
    return [np.asarray(v) for v in leaves(run(parse(text), *args))]


def test_repro_matches_xla_bit_for_bit():
    (out,) = _run(REPRO, [REPRO_ARG])
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out.view(np.uint32), REPRO_XLA.view(np.uint32))
    # the unrounded products, not the products rounded to bf16
    assert not np.array_equal(out, out.astype(BF16).astype(np.float32))


def test_switched_off_gives_the_texts_literal_rounding(monkeypatch):
    monkeypatch.setenv(ENV, "0")
    (out,) = _run(REPRO, [REPRO_ARG])
    expected = (REPRO_ARG.astype(np.float32) * np.float32(BF16(0.707))).astype(BF16).astype(np.float32)
    np.testing.assert_array_equal(out, expected)


P2 = "p = bf16[8] parameter(0)\n q = bf16[8] parameter(1)"
_MUL = "f {\n x = bf16[8] parameter(0)\n y = bf16[8] parameter(1)\n ROOT z = bf16[8] multiply(x, y)\n}\n"

# name -> (module text, argument shapes, [(output index, unrounded?)]): whether XLA CPU hands the
# output the f32 value (True) or the bf16-rounded one (False); measured with jaxlib 0.10.2
CASES = {
    "multiply": (_module(f"{P2}\n m = bf16[8] multiply(p, q)\n ROOT r = f32[8] convert(m)"),
                 [(8,), (8,)], [(0, True)]),
    "exponential": (_module(f"{P2}\n m = bf16[8] exponential(p)\n ROOT r = f32[8] convert(m)"),
                    [(8,), (8,)], [(0, True)]),
    "divide": (_module(f"{P2}\n m = bf16[8] divide(p, q)\n ROOT r = f32[8] convert(m)"),
               [(8,), (8,)], [(0, True)]),
    # integers past 256 are not bf16 numbers: the f32 iota
    "iota": (_module(f"{P2}\n m = bf16[300] iota(), iota_dimension=0\n ROOT r = f32[300] convert(m)"),
             [(8,), (8,)], [(0, True)]),
    # a reshape between the op and the convert: rounded
    "through_reshape": (_module(f"{P2}\n m = bf16[8] multiply(p, q)\n s = bf16[2,4] reshape(m)\n"
                                " ROOT r = f32[2,4] convert(s)"), [(8,), (8,)], [(0, False)]),
    # clamp / maximum of a product: their operand is the rounded product
    "through_maximum": (_module(f"{P2}\n m = bf16[8] multiply(p, q)\n x = bf16[8] maximum(m, q)\n"
                                " ROOT r = f32[8] convert(x)"), [(8,), (8,)], [(0, False)]),
    # one producer, a convert user and a bf16 user: wide for the first, rounded for the second and root
    "two_users": (_module(f"{P2}\n m = bf16[8] multiply(p, q)\n c = f32[8] convert(m)\n d = bf16[8] add(m, q)\n"
                          " ROOT t = (f32[8], bf16[8], bf16[8]) tuple(c, d, m)"), [(8,), (8,)],
                  [(0, True), (1, False), (2, False)]),
    # a chain: the add reads the rounded product, and its own convert gets the f32 sum
    "chain": (_module(f"{P2}\n m = bf16[8] multiply(p, q)\n c = f32[8] convert(m)\n n = bf16[8] add(m, q)\n"
                      " d = f32[8] convert(n)\n ROOT t = (f32[8], f32[8]) tuple(c, d)"), [(8,), (8,)],
              [(0, True), (1, True)]),
    # convert to f64 or f16: the bf16-rounded value, converted
    "to_f64": (_module(f"{P2}\n m = bf16[8] multiply(p, q)\n ROOT r = f64[8] convert(m)"), [(8,), (8,)],
               [(0, False)]),
    "to_f16": (_module(f"{P2}\n m = bf16[8] multiply(p, q)\n ROOT r = f16[8] convert(m)"), [(8,), (8,)],
               [(0, False)]),
    # through a get-tuple-element of a tuple instruction
    "through_tuple": (_module(f"{P2}\n m = bf16[8] multiply(p, q)\n t = (bf16[8]) tuple(m)\n"
                              " g = bf16[8] get-tuple-element(t), index=0\n ROOT r = f32[8] convert(g)"),
                      [(8,), (8,)], [(0, True)]),
    "dot": (_module("p = bf16[4,8] parameter(0)\n q = bf16[8,3] parameter(1)\n m = bf16[4,3] dot(p, q), "
                    "lhs_contracting_dims={1}, rhs_contracting_dims={0}\n ROOT r = f32[4,3] convert(m)"),
            [(4, 8), (8, 3)], [(0, True)]),
    "dot_transposed": (_module("p = bf16[8,4] parameter(0)\n q = bf16[3,8] parameter(1)\n m = bf16[4,3] dot(p, q), "
                               "lhs_contracting_dims={0}, rhs_contracting_dims={1}\n ROOT r = f32[4,3] convert(m)"),
                       [(8, 4), (3, 8)], [(0, True)]),
    "dot_batch": (_module("p = bf16[2,4,8] parameter(0)\n q = bf16[2,8,3] parameter(1)\n m = bf16[2,4,3] dot(p, q), "
                          "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
                          "rhs_contracting_dims={1}\n ROOT r = f32[2,4,3] convert(m)"),
                  [(2, 4, 8), (2, 8, 3)], [(0, True)]),
    # dots XLA reshapes first (DotDecomposer, BatchDotSimplification): rounded
    "dot_two_free_dims": (_module("p = bf16[2,3,8] parameter(0)\n q = bf16[8,5] parameter(1)\n m = bf16[2,3,5] "
                                  "dot(p, q), lhs_contracting_dims={2}, rhs_contracting_dims={0}\n"
                                  " ROOT r = f32[2,3,5] convert(m)"), [(2, 3, 8), (8, 5)], [(0, False)]),
    "dot_two_contracting": (_module("p = bf16[4,2,8] parameter(0)\n q = bf16[2,8,3] parameter(1)\n m = bf16[4,3] "
                                    "dot(p, q), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,1}\n"
                                    " ROOT r = f32[4,3] convert(m)"), [(4, 2, 8), (2, 8, 3)], [(0, False)]),
    "dot_batch_not_leading": (_module("p = bf16[4,2,8] parameter(0)\n q = bf16[2,8,3] parameter(1)\n m = bf16[2,4,3] "
                                      "dot(p, q), lhs_batch_dims={1}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
                                      "rhs_contracting_dims={1}\n ROOT r = f32[2,4,3] convert(m)"),
                              [(4, 2, 8), (2, 8, 3)], [(0, False)]),
    "dot_batch_of_one": (_module("p = bf16[1,4,8] parameter(0)\n q = bf16[1,8,3] parameter(1)\n m = bf16[1,4,3] "
                                 "dot(p, q), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
                                 "rhs_contracting_dims={1}\n ROOT r = f32[1,4,3] convert(m)"),
                         [(1, 4, 8), (1, 8, 3)], [(0, False)]),
    "convolution": (_module("p = bf16[1,3,8,8] parameter(0)\n q = bf16[4,3,3,3] parameter(1)\n m = bf16[1,4,6,6] "
                            "convolution(p, q), window={size=3x3}, dim_labels=bf01_oi01->bf01\n"
                            " ROOT r = f32[1,4,6,6] convert(m)"), [(1, 3, 8, 8), (4, 3, 3, 3)], [(0, True)]),
    # XLA inlines calls first: a call's convert reads the callee's root wide, a callee's convert of
    # its parameter reads the caller's operand wide (each call site on its own)
    "call": (_module(f"{P2}\n m = bf16[8] call(p, q), to_apply=f\n ROOT r = f32[8] convert(m)", _MUL),
             [(8,), (8,)], [(0, True)]),
    "call_twice": (_module(f"{P2}\n m = bf16[8] call(p, q), to_apply=f\n n = bf16[8] call(q, p), to_apply=f\n"
                           " r = f32[8] convert(m)\n s = f32[8] convert(n)\n k = bf16[8] add(m, n)\n"
                           " ROOT t = (f32[8], f32[8], bf16[8]) tuple(r, s, k)", _MUL), [(8,), (8,)],
                   [(0, True), (1, True), (2, False)]),
    "call_nested": (_module(f"{P2}\n m = bf16[8] call(p, q), to_apply=h\n ROOT r = f32[8] convert(m)",
                            _MUL + "h {\n x = bf16[8] parameter(0)\n y = bf16[8] parameter(1)\n"
                                   " ROOT w = bf16[8] call(y, x), to_apply=f\n}\n"), [(8,), (8,)], [(0, True)]),
    "callee_converts_parameter": (
        _module(f"{P2}\n m = bf16[8] multiply(p, q)\n n = bf16[8] call(m), to_apply=g\n r = f32[8] convert(n)\n"
                " ROOT t = (f32[8], bf16[8]) tuple(r, n)",
                "g {\n x = bf16[8] parameter(0)\n c = f32[8] convert(x)\n d = bf16[8] add(x, x)\n"
                " e = f32[8] convert(d)\n s = f32[8] add(c, e)\n k = bf16[8] convert(s)\n"
                " ROOT z = bf16[8] multiply(k, x)\n}\n"),
        [(8,), (8,)], [(0, True), (1, False)]),
    # a call returning a tuple: its elements are rounded
    "call_tuple": (_module(f"{P2}\n m = (bf16[8], bf16[8]) call(p, q), to_apply=f2\n"
                           " g = bf16[8] get-tuple-element(m), index=0\n h = bf16[8] get-tuple-element(m), index=1\n"
                           " r = f32[8] convert(g)\n ROOT o = (f32[8], bf16[8]) tuple(r, h)",
                           "f2 {\n x = bf16[8] parameter(0)\n y = bf16[8] parameter(1)\n z = bf16[8] multiply(x, y)\n"
                           " w = bf16[8] add(x, y)\n ROOT t = (bf16[8], bf16[8]) tuple(z, w)\n}\n"),
                   [(8,), (8,)], [(0, False), (1, False)]),
    # a while loop's result: rounded
    "while": (_module("p = bf16[8] parameter(0)\n z = s32[] constant(0)\n t = (s32[], bf16[8]) tuple(z, p)\n"
                      " w = (s32[], bf16[8]) while(t), condition=cond, body=body\n"
                      " g = bf16[8] get-tuple-element(w), index=1\n ROOT r = f32[8] convert(g)",
                      "cond {\n t = (s32[], bf16[8]) parameter(0)\n i = s32[] get-tuple-element(t), index=0\n"
                      " c = s32[] constant(3)\n ROOT k = pred[] compare(i, c), direction=LT\n}\n"
                      "body {\n t = (s32[], bf16[8]) parameter(0)\n i = s32[] get-tuple-element(t), index=0\n"
                      " x = bf16[8] get-tuple-element(t), index=1\n one = s32[] constant(1)\n"
                      " j = s32[] add(i, one)\n h = bf16[] constant(1.1)\n hb = bf16[8] broadcast(h), dimensions={}\n"
                      " y = bf16[8] multiply(x, hb)\n ROOT r = (s32[], bf16[8]) tuple(j, y)\n}\n"),
              [(8,)], [(0, False)]),
    # a callee passing its parameter on through an exact op: the rounded value
    "callee_negates_parameter": (
        _module(f"{P2}\n m = bf16[8] multiply(p, q)\n n = bf16[8] call(m), to_apply=g\n ROOT r = f32[8] convert(n)",
                "g {\n x = bf16[8] parameter(0)\n ROOT y = bf16[8] negate(x)\n}\n"), [(8,), (8,)], [(0, False)]),
}

F16_CASES = {
    # f16 is not normalized on CPU: the f16-rounded value
    "f16_multiply": (_module("p = f16[8] parameter(0)\n q = f16[8] parameter(1)\n m = f16[8] multiply(p, q)\n"
                             " ROOT r = f32[8] convert(m)"), [(8,), (8,)], [(0, False)], np.float16),
    # the f8 types are computed in f16: a convert to f16 gets the f16 value, one to f32 the f8 one
    "f8_to_f16": (_module("p = f8e4m3fn[8] parameter(0)\n q = f8e4m3fn[8] parameter(1)\n"
                          " m = f8e4m3fn[8] multiply(p, q)\n ROOT r = f16[8] convert(m)"), [(8,), (8,)],
                  [(0, True)], ml_dtypes.float8_e4m3fn),
    "f8_to_f32": (_module("p = f8e4m3fn[8] parameter(0)\n q = f8e4m3fn[8] parameter(1)\n"
                          " m = f8e4m3fn[8] multiply(p, q)\n ROOT r = f32[8] convert(m)"), [(8,), (8,)],
                  [(0, False)], ml_dtypes.float8_e4m3fn),
}


def _all_cases():
    for name, (text, shapes, expect) in CASES.items():
        yield name, text, shapes, expect, BF16
    for name, (text, shapes, expect, dtype) in F16_CASES.items():
        yield name, text, shapes, expect, dtype


ALL = {c[0]: c[1:] for c in _all_cases()}


@pytest.mark.parametrize("name", list(ALL))
def test_rule_wide_or_rounded(name, monkeypatch):
    """Each case's outputs are wide where the table says so: they differ from the literal (rounded)
    semantics there, and equal it elsewhere."""
    text, shapes, expect, dtype = ALL[name]
    args = _args(*shapes, dtype=dtype)
    ours = _run(text, args)
    monkeypatch.setenv(ENV, "0")
    literal = _run(text, args)
    for k, wide in expect:
        same = np.array_equal(ours[k].astype(np.float64), literal[k].astype(np.float64))
        assert same != wide, f"{name} out{k}: expected {'the wide' if wide else 'the rounded'} value"


@pytest.mark.parametrize("name", list(ALL))
def test_rule_matches_xla(name):
    """The same cases against XLA CPU itself: element types and values (dots and convolutions to
    f32 accumulation accuracy, exp to 1 f32 ulp (XLA's own approximation), the rest bit for bit)."""
    pytest.importorskip("jax")
    from hlo_cli.tools.xla_reference import run_with_xla
    text, shapes, _expect, dtype = ALL[name]
    args = _args(*shapes, dtype=dtype)
    ours = _run(text, args)
    xla = [np.asarray(v) for v in run_with_xla(text, args)]
    assert len(ours) == len(xla)
    sums = "dot" in name or "convolution" in name or "exponential" in name
    for k, (a, b) in enumerate(zip(ours, xla)):
        assert a.dtype == b.dtype, f"{name} out{k}"
        if sums:
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64), rtol=1e-6, atol=1e-7,
                                       err_msg=f"{name} out{k}")
        else:
            np.testing.assert_array_equal(a.astype(np.float64), b.astype(np.float64), err_msg=f"{name} out{k}")


@pytest.mark.parametrize("name", ["two_users", "chain", "call_twice", "callee_converts_parameter", "dot"])
def test_compiled_and_generic_agree_bit_for_bit(name):
    text, shapes, _ = CASES[name]
    args = _args(*shapes)
    module = parse(text)
    fast = leaves(run_module(module, list(args)))
    slow = leaves(run_module(module, list(args), compiled=False))
    for a, b in zip(fast, slow):
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def test_hooked_run_gives_the_same_values():
    text = CASES["two_users"][0]
    args = _args((8,), (8,))
    seen = []
    plain = _run(text, args)
    hooked = [np.asarray(v) for v in leaves(run(parse(text), *args, hook=seen.append))]
    for a, b in zip(plain, hooked):
        np.testing.assert_array_equal(a.astype(np.float64), b.astype(np.float64))
    names = {ev.instruction.name: ev for ev in seen}
    # the declared bf16 value of `m` is still there for dumps, next to the f32 value XLA uses
    assert names["m"].value.dtype == BF16
    assert names["m.wide"].value.dtype == np.float32
    np.testing.assert_array_equal(names["m.wide"].value.astype(BF16), names["m"].value)


def test_modules_without_the_pattern_are_left_as_they_are():
    for text in (_module("p = f32[4] parameter(0)\n ROOT m = f32[4] multiply(p, p)"),
                 _module("p = bf16[4] parameter(0)\n ROOT m = bf16[4] multiply(p, p)"),
                 _module("p = bf16[4] parameter(0)\n m = bf16[4] negate(p)\n ROOT r = f32[4] convert(m)")):
        module = parse(text)
        assert apply(module) is module


def test_new_names_do_not_collide_with_the_texts():
    text = _module(f"{P2}\n m.wide = bf16[8] add(p, q)\n m = bf16[8] multiply(m.wide, q)\n"
                   " ROOT r = f32[8] convert(m)")
    module = apply(parse(text))
    names = [i.name for _, i in module.instructions()]
    assert len(names) == len(set(names))
    args = _args((8,), (8,))
    (out,) = _run(text, args)
    a, b = (x.astype(np.float32) for x in args)
    s = (a + b).astype(BF16).astype(np.float32)
    np.testing.assert_array_equal(out, s * b)


def test_wide_producers_names_the_ops_and_types():
    comp = parse(CASES["two_users"][0]).entry_computation
    assert wide_producers(comp) == {"m": "f32"}
