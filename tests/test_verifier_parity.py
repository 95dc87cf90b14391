"""Rules that were once stricter (or looser) than XLA's verifier, each pinned both ways to what
xla/service/hlo_verifier.cc decides (the function is named in each test):

- broadcast: ShapeVerifier::HandleBroadcast wants every operand dimension's size in the result
  dimension it maps to; a size-1 dimension is *not* expanded (that is StableHLO's
  broadcast_in_dim, which reaches XLA as a reshape and a broadcast), so `f32[1] -> f32[3],
  dimensions={0}` stays an error;
- output_to_operand_aliasing: buffer shapes b(s) match s for async-start (always) and for the Pin
  and Unpin custom calls (Shape::Equal().IgnoreBuffer()), not for other custom calls or fusions;
  a custom call with the frontend attribute xla_skip_custom_call_alias_shape_check is not compared;
- rng-bit-generator: HandleRngBitGenerator asks nothing of the state but that the result's first
  element matches it; `hlo run` reports the states XLA CPU cannot expand (u64[2] / u64[3] only).
"""
from __future__ import annotations

import pytest

from hlo_cli.checker import check_module
from hlo_cli.errors import HloEvalError
from hlo_cli.interpreter.evaluator import run_module
from hlo_cli.parser import parse


def errors(text: str):
    module = parse(text, "t.hlo")
    return [d for d in check_module(module, text) if d.severity == "error"]


# ----------------------------------------------------------------------------- broadcast

@pytest.mark.parametrize("operand, result, dims, ok", [
    ("f32[3]", "f32[3,2]", "{0}", True),
    ("f32[1]", "f32[1,4]", "{0}", True),
    ("f32[]", "f32[5]", "{}", True),
    ("f32[1]", "f32[3]", "{0}", False),          # size 1 is not expanded by HLO's broadcast
    ("f32[1,3]", "f32[2,3]", "{0,1}", False),
])
def test_broadcast_keeps_the_operand_sizes(operand, result, dims, ok):
    text = f"HloModule m\nENTRY e {{\n  p = {operand} parameter(0)\n  ROOT b = {result} broadcast(p), dimensions={dims}\n}}\n"
    errs = errors(text)
    if ok:
        assert not errs, [d.message for d in errs]
    else:
        assert [d.instruction for d in errs] == ["b"]
        assert "must have the operand's size" in errs[0].message
        assert ("does not expand a size-1 dimension" in errs[0].message) == operand.startswith("f32[1")


# ----------------------------------------------------------------------------- aliasing with buffers

def _custom_call(target: str, operand: str, result: str, extra: str = "") -> str:
    return (f"HloModule m\nENTRY e {{\n  p = {operand} parameter(0)\n  ROOT c = {result} custom-call(p), "
            f"custom_call_target=\"{target}\", output_to_operand_aliasing={{{{}}: (0, {{}})}}{extra}\n}}\n")


@pytest.mark.parametrize("target, operand, result, ok", [
    ("Pin", "f32[4,16]", "b(f32[4,16])", True),
    ("Unpin", "b(f32[4,16])", "f32[4,16]", True),
    ("foo", "b(f32[4,16])", "b(f32[4,16])", True),
    ("foo", "f32[4,16]", "b(f32[4,16])", False),         # only Pin and Unpin ignore the buffer
    ("Pin", "f32[4,16]", "b(f32[4,8])", False),          # ... not the shape inside it
])
def test_custom_call_buffer_aliasing(target, operand, result, ok):
    errs = errors(_custom_call(target, operand, result))
    if ok:
        assert not errs, [d.message for d in errs]
    else:
        assert [d.instruction for d in errs] == ["c"] and "the aliased output {}" in errs[0].message


def test_custom_call_alias_shape_check_can_be_skipped():
    text = _custom_call("foo", "f32[4]", "s32[7]", ', frontend_attributes={xla_skip_custom_call_alias_shape_check="1"}')
    assert not errors(text)
    # the indices are still checked
    bad = text.replace("(0, {})", "(3, {})")
    assert "operand number must be in [0, 1)" in errors(bad)[0].message


ASYNC = """HloModule m
pin {
  a = f32[4] parameter(0)
  ROOT r = b(f32[4]) custom-call(a), custom_call_target="Pin", output_to_operand_aliasing={{}: (0, {})}
}
ENTRY e {
  p = f32[4] parameter(0)
  s = ((f32[4]), b(f32[4]), s32[]) async-start(p), calls=pin, output_to_operand_aliasing={%s: (0, {})}
  ROOT d = b(f32[4]) async-done(s)
}
"""


def test_async_start_aliases_a_buffer_with_its_array():
    """HandleAsyncStart compares with IgnoreBuffer(): the wrapped result b(f32[4]) aliases the
    f32[4] operand; the s32[] context does not."""
    assert not errors(ASYNC % "{1}")
    errs = errors(ASYNC % "{2}")
    assert [d.instruction for d in errs] == ["s"] and "the aliased output {2}" in errs[0].message


FUSION = """HloModule m
fused {
  a = %s parameter(0)
  ROOT n = %s copy(a)
}
ENTRY e {
  p = %s parameter(0)
  ROOT f = %s fusion(p), kind=kLoop, calls=fused, output_to_operand_aliasing={{}: (0, {})}
}
"""


def test_fusion_does_not_alias_a_buffer_with_an_array():
    """HandleFusion compares with ShapeUtil::Compatible, which tells b(s) from s."""
    assert not errors(FUSION % (("f32[4]",) * 4))
    bad = "HloModule m\nfused {\n  a = f32[4] parameter(0)\n  ROOT n = b(f32[4]) custom-call(a), " \
          "custom_call_target=\"Pin\", output_to_operand_aliasing={{}: (0, {})}\n}\nENTRY e {\n" \
          "  p = f32[4] parameter(0)\n  ROOT f = b(f32[4]) fusion(p), kind=kCustom, calls=fused, " \
          "output_to_operand_aliasing={{}: (0, {})}\n}\n"
    errs = errors(bad)
    assert [d.instruction for d in errs] == ["f"] and "the aliased output {}" in errs[0].message


# ----------------------------------------------------------------------------- rng-bit-generator

RBG = """HloModule m
ENTRY e {
  s = %s parameter(0)
  ROOT r = %s rng-bit-generator(s), algorithm=rng_philox
}
"""


@pytest.mark.parametrize("state, result, ok", [
    ("u64[2]", "(u64[2], u32[8])", True),
    ("f32[4]", "(f32[4], u32[8])", True),          # XLA's own hlo_extractor test has such a state
    ("(s32[], f32[2])", "((s32[], f32[2]), u32[8])", True),
    ("f32[4]", "u32[8]", True),                    # a bare bits shape: nothing is checked
    ("u64[2]", "(u64[3], u32[8])", False),         # the new state must match the state
    ("u64[2]", "(u64[2], u32[8], u32[8])", False),
])
def test_rng_bit_generator_state(state, result, ok):
    errs = errors(RBG % (state, result))
    assert bool(errs) != ok, [d.message for d in errs]


def test_run_reports_a_state_xla_cpu_cannot_expand():
    import numpy as np
    text = RBG % ("f32[4]", "(f32[4], u32[8])")
    with pytest.raises(HloEvalError) as info:
        run_module(parse(text, "t.hlo"), [np.zeros(4, np.float32)])
    d = info.value.diagnostics[0]
    assert (d.line, d.instruction) == (4, "r")
    assert "XLA CPU takes a u64[2] or u64[3] state, got f32[4]" in d.message


# ----------------------------------------------------------------------------- unbounded dynamism

@pytest.mark.parametrize("shape, ok", [("f32[<=8,4]", True), ("f32[?,4]", False), ("(f32[2], s32[?])", False)])
def test_unbounded_dynamic_dimensions_are_rejected(shape, ok):
    """HloVerifier's Preprocess: 'Unbounded dynamism is disabled' unless allow_unbounded_dynamism
    (off by default, and in XLA CPU's pipeline); bounded dimensions <=N are fine."""
    errs = errors(f"HloModule m\nENTRY e {{\n  ROOT p = {shape} parameter(0)\n}}\n")
    if ok:
        assert not errs
    else:
        assert [(d.code, d.line, d.column) for d in errs] == [("C127", 3, 12)]
        assert "unbounded dynamic dimension '?'" in errs[0].message


# ----------------------------------------------------------------------------- asynchronous pairs

COPY = """HloModule m
ENTRY e {
  p = f32[4] parameter(0)
  %s
}
"""


@pytest.mark.parametrize("body, where", [
    ("s = (f32[4], f32[4], u32[]) copy-start(p)\n  ROOT d = f32[4] copy-done(s)", None),
    # a control_dep custom call is not a user (VerifySingleUser skips it)
    ("s = (f32[4], f32[4], u32[]) copy-start(p)\n  c = f32[4] custom-call(s), custom_call_target=\"control_dep\"\n"
     "  ROOT d = f32[4] copy-done(s)", None),
    ("s = (f32[4], f32[4], u32[]) copy-start(p)\n  d1 = f32[4] copy-done(s)\n  d2 = f32[4] copy-done(s)\n"
     "  ROOT t = (f32[4], f32[4]) tuple(d1, d2)", ("s", "exactly one user, a copy-done, got %d1 (copy-done), %d2")),
    ("ROOT s = (f32[4], f32[4], u32[]) copy-start(p)", ("s", "exactly one user, a copy-done, got none")),
    ("t = (f32[4], f32[4], u32[]) tuple(p, p, u32[] constant(0))\n  ROOT d = f32[4] copy-done(t)",
     ("d", "the operand must be one copy-start, got %t (tuple)")),
])
def test_asynchronous_pairs(body, where):
    """VerifyAsynchronousInstructionPairs: a start has one user, its done; a done one operand, its start."""
    errs = [d for d in errors(COPY % body) if d.code == "C128"]
    if where is None:
        assert not errs, [d.message for d in errs]
    else:
        assert [d.instruction for d in errs] == [where[0]] and where[1] in errs[0].message, errs


def test_all_reduces_are_all_layout_constrained_or_none():
    """VerifyLayoutConstrainedAllReduce: no mix of constrain_layout=true and false in one module."""
    text = """HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  p = f32[8] parameter(0)
  a = f32[8] all-reduce(p), replica_groups={}, to_apply=add%s
  b = f32[8] all-reduce(p), replica_groups={}, to_apply=add, constrain_layout=true
  ROOT t = (f32[8], f32[8]) tuple(a, b)
}
"""
    errs = [d for d in errors(text % "") if d.code == "C129"]
    assert [d.instruction for d in errs] == ["b"] and "(False for %a), got True" in errs[0].message
    assert not [d for d in errors(text % ", constrain_layout=true") if d.code == "C129"]
