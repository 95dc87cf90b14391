"""Shape rules of the io and rng families: infeed, outfeed, send, send-done, recv, recv-done, rng,
rng-bit-generator, rng-get-and-update-state.

Valid cases: every instruction of these opcodes in samples/{ops,syntax,jax} infers its declared
shape (layouts ignored).  Invalid cases: a table of (operands, instruction, expected message
fragment), written as small HLO modules; every message follows the house template
`<opcode>: <what> must <constraint>, got <actual> for <operand shapes>`.
"""
from __future__ import annotations


import pytest

from .rules_harness import S, TEMPLATE, RuleTests, context, opcode_of, samples  # noqa: F401

from hlo_cli.shapes import RULES, infer_shape
from hlo_cli.shapes.registry import RuleContext, ShapeRuleError


OPCODES = ("infeed", "outfeed", "send", "send-done", "recv", "recv-done", "rng", "rng-bit-generator",
           "rng-get-and-update-state")

XLA_REJECTS: dict[str, str] = {}


# ----------------------------------------------------------------------------- harness


COMPS: dict[str, str] = {}

_H = RuleTests(COMPS, XLA_REJECTS)
_context, _samples, _check_sample = context, samples, _H.check_sample
_module, infer, expect_error = _H.module, _H.infer, _H.expect_error


# ----------------------------------------------------------------------------- valid cases

def test_every_opcode_has_a_rule():
    assert all(op in RULES for op in OPCODES)


@pytest.mark.parametrize("path", _samples(OPCODES), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_samples_infer_their_declared_shape(path):
    assert _check_sample(path, OPCODES) > 0


SEND = "(f32[4], u32[], token[])"

VALID = [
    (["token[]"], '((f32[4], s32[]), token[]) infeed(p0), infeed_config="c"', "((f32[4], s32[]), token[])"),
    (["f32[4]", "token[]"], "token[] outfeed(p0, p1), outfeed_shape=f32[4]{0}", "token[]"),
    (["(f32[4], s32[])", "token[]"], "token[] outfeed(p0, p1)", "token[]"),
    (["f32[4]", "token[]"], f"{SEND} send(p0, p1), channel_id=1", SEND),
    ([SEND], "token[] send-done(p0), channel_id=1", "token[]"),
    (["token[]"], f"{SEND} recv(p0), channel_id=2", SEND),
    ([SEND], "(f32[4], token[]) recv-done(p0), channel_id=2", "(f32[4], token[])"),
    # RngUniform on [a, b) for floating-point, integral and pred types; RngNormal(mu, sigma)
    (["f32[]", "f32[]"], "f32[4,4] rng(p0, p1), distribution=rng_uniform", "f32[4,4]"),
    (["s32[]", "s32[]"], "s32[7] rng(p0, p1), distribution=rng_uniform", "s32[7]"),
    (["pred[]", "pred[]"], "pred[3] rng(p0, p1), distribution=rng_uniform", "pred[3]"),
    (["bf16[]", "bf16[]"], "bf16[8] rng(p0, p1), distribution=rng_normal", "bf16[8]"),
    # RngBitGenerator: (new state of the state's shape, random bits of the declared shape)
    (["u64[2]"], "(u64[2], u32[4,4]) rng-bit-generator(p0), algorithm=rng_three_fry", "(u64[2], u32[4,4])"),
    (["u64[3]"], "(u64[3], u64[8]) rng-bit-generator(p0), algorithm=rng_philox", "(u64[3], u64[8])"),
    (["u32[4]"], "(u32[4], u8[16]) rng-bit-generator(p0), algorithm=rng_default", "(u32[4], u8[16])"),
    # XLA's verifier asks nothing of the state (XLA's own hlo_extractor test uses an f32[4] one): the
    # state shapes XLA CPU compiles (u64[2] / u64[3]) are `hlo run`'s business
    (["f32[4]"], "(f32[4], u32[4]) rng-bit-generator(p0), algorithm=rng_default", "(f32[4], u32[4])"),
    (["(s32[], f32[2])"], "((s32[], f32[2]), u32[4]) rng-bit-generator(p0), algorithm=rng_philox",
     "((s32[], f32[2]), u32[4])"),
    (["f32[4]"], "u32[4] rng-bit-generator(p0), algorithm=rng_default", "u32[4]"),
    ([], "u64[2] rng-get-and-update-state(), delta=16", "u64[2]"),
]


@pytest.mark.parametrize("operands, line, expected", VALID)
def test_valid(operands, line, expected):
    assert infer(operands, line).without_layout() == S(expected).without_layout()


# ----------------------------------------------------------------------------- invalid cases

INVALID = [
    # --- infeed / outfeed
    ("infeed-operand", ["f32[]"], "(f32[4], token[]) infeed(p0)", "operand 0 must be a token[], got f32[]"),
    ("infeed-result", ["token[]"], "f32[4] infeed(p0)", "the result shape must be (data shape, token[]), got f32[4]"),
    ("outfeed-shape", ["f32[4]", "token[]"], "token[] outfeed(p0, p1), outfeed_shape=f32[5]{0}",
     "outfeed_shape must be the shape of operand 0 (f32[4]), got f32[5]"),
    ("outfeed-token", ["f32[4]", "f32[4]"], "token[] outfeed(p0, p1)", "operand 1 must be a token[], got f32[4]"),
    # --- send / recv and their -done (the token structure)
    ("send-token", ["f32[4]", "s32[]"], f"{SEND} send(p0, p1), channel_id=1", "operand 1 must be a token[], got s32[]"),
    ("send-done-operand", ["(f32[4], token[])"], "token[] send-done(p0), channel_id=1",
     "operand 0 must be a send value (data, u32[], token[]), got (f32[4], token[])"),
    ("recv-token", ["f32[4]"], f"{SEND} recv(p0), channel_id=2", "operand 0 must be a token[], got f32[4]"),
    ("recv-result", ["token[]"], "(f32[4], token[]) recv(p0), channel_id=2",
     "the result shape must be (data shape, u32[], token[]), got (f32[4], token[])"),
    ("recv-done-operand", ["(f32[4], s32[], token[])"], "(f32[4], token[]) recv-done(p0), channel_id=2",
     "operand 0 must be a recv value (data, u32[], token[]), got (f32[4], s32[], token[])"),
    # --- rng (operation semantics: scalar parameters of the output's type; normal is floating-point)
    ("rng-nonscalar-parameters", ["f32[2]", "f32[]"], "f32[4] rng(p0, p1), distribution=rng_uniform",
     "the two parameters must be scalars, got f32[2] and f32[]"),
    ("rng-types", ["f32[]", "f32[]"], "s32[4] rng(p0, p1), distribution=rng_uniform",
     "the parameter and result element types must be the same, got f32, f32 -> s32"),
    ("rng-parameter-types", ["f32[]", "f64[]"], "f32[4] rng(p0, p1), distribution=rng_uniform",
     "the parameter and result element types must be the same, got f32, f64 -> f32"),
    ("rng-normal-integer", ["s32[]", "s32[]"], "s32[4] rng(p0, p1), distribution=rng_normal",
     "the element type of rng_normal must be floating-point, got s32"),
    ("rng-uniform-complex", ["c64[]", "c64[]"], "c64[4] rng(p0, p1), distribution=rng_uniform",
     "the element type of rng_uniform must be floating-point, integral or pred, got c64"),
    ("rng-invalid-distribution", ["f32[]", "f32[]"], "f32[4] rng(p0, p1), distribution=rng_invalid",
     "distribution must be rng_uniform or rng_normal, got rng_invalid"),
    # --- rng-bit-generator
    ("rng-bit-generator-arity", ["u64[2]"], "(u64[2], u32[4], u32[4]) rng-bit-generator(p0), algorithm=rng_default",
     "the result shape must be (state shape, bits shape), got (u64[2], u32[4], u32[4])"),
]


@pytest.mark.parametrize("operands, line, fragment", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_invalid(operands, line, fragment):
    expect_error(fragment, operands, line)


def test_rng_bit_generator_new_state_follows_the_state():
    """The new state has the state's shape: a declared (u64[3], ...) for a u64[2] state is inferred
    as (u64[2], ...) and the checker reports the difference."""
    got = infer(["u64[2]"], "(u64[3], u32[4]) rng-bit-generator(p0), algorithm=rng_three_fry")
    assert got.without_layout() == S("(u64[2], u32[4])").without_layout()


@pytest.mark.parametrize("opcode, operands, attrs, fragment", [
    ("rng-get-and-update-state", ["u64[2]"], {"delta": 1}, "the operand count must be 0, got 1"),
    ("rng", ["f32[]", "f32[]"], {"distribution": "rng_uniform"},
     "the result shape must be declared (it is not a function of the operands), got none"),
    ("infeed", ["token[]"], {}, "the result shape must be declared"),
    ("send", ["f32[4]"], {}, "the operand count must be 2, got 1"),
])
def test_invalid_direct(opcode, operands, attrs, fragment):
    """Operand counts the parser itself refuses, and results that must be declared."""
    with pytest.raises(ShapeRuleError) as info:
        infer_shape(opcode, [S(s) for s in operands], attrs, RuleContext(opcode))
    assert fragment in str(info.value) and TEMPLATE.match(str(info.value)), str(info.value)


def test_invalid_table_covers_every_opcode():
    covered = {opcode_of(line) for _, _, line, _ in INVALID} | {"rng-get-and-update-state"}
    assert covered == set(OPCODES)
