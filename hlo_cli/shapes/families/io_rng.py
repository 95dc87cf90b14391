"""Shape rules of the io and rng families.

infeed, outfeed, send, send-done, recv, recv-done (token plumbing), rng, rng-bit-generator,
rng-get-and-update-state.

The data shapes of infeed, recv, rng and rng-bit-generator's bits are not functions of the
operands: they come from the declared shape, and the rules check the rest (token structure,
parameter types, the state shape).

Sources: XLA's ``ShapeVerifier::Handle{Infeed,Outfeed,Send,SendDone,Recv,RecvDone,Rng,
RngBitGenerator,RngGetAndUpdateState}`` (xla/service/hlo_verifier.cc) and the operation semantics
(RngUniform, RngNormal, RngBitGenerator, Send/Recv in ../shared/spec/004_*).
"""
from __future__ import annotations

from ..registry import fail, rule
from .reduction import (array, compatible, declared_shape, expect_count, is_array, is_scalar, is_token,
                        is_tuple, kind, scalar, strip, token, tup, txt)


def _expect_token(ctx, operands, i: int) -> None:
    if not is_token(operands[i]):
        fail(ctx.opcode, f"operand {i}", "be a token[]", txt(operands[i]), operands)


def _expect_transfer_state(ctx, operands, what: str):
    """The (data, u32[] context, token[]) value of a send or recv."""
    s = operands[0]
    ok = (is_tuple(s) and len(s.tuple_shapes) == 3 and compatible(s.tuple_shapes[1], scalar("u32"))
          and is_token(s.tuple_shapes[2]))
    if not ok:
        fail(ctx.opcode, "operand 0", f"be a {what} value (data, u32[], token[])", txt(s), operands)
    return s


def _received(ctx, operands, rest, rest_text: str):
    """infeed(token) and recv(token): the declared (data, rest...) with the data shape as declared."""
    expect_count(ctx, operands, 1, 1)
    _expect_token(ctx, operands, 0)
    d = declared_shape(ctx, operands)
    if not is_tuple(d) or len(d.tuple_shapes) != 1 + len(rest):
        fail(ctx.opcode, "the result shape", f"be (data shape, {rest_text})", txt(d), operands)
    return tup([strip(d.tuple_shapes[0]), *rest])


@rule("infeed")
def infer_infeed(operands, attrs, ctx):
    """infeed(token) -> (data, token[]); the data shape is the declared one."""
    return _received(ctx, operands, [token()], "token[]")


@rule("outfeed")
def infer_outfeed(operands, attrs, ctx):
    """outfeed(data, token) -> token[]; outfeed_shape, when given, is the data's shape."""
    expect_count(ctx, operands, 2, 2)
    _expect_token(ctx, operands, 1)
    shape = attrs.get("outfeed_shape")
    if shape is not None and not compatible(shape, operands[0]):
        fail(ctx.opcode, "outfeed_shape", f"be the shape of operand 0 ({txt(operands[0])})", txt(shape), operands)
    return token()


@rule("send")
def infer_send(operands, attrs, ctx):
    """send(data, token) -> (data, u32[] context, token[])."""
    expect_count(ctx, operands, 2, 2)
    _expect_token(ctx, operands, 1)
    return tup([strip(operands[0]), scalar("u32"), token()])


@rule("send-done")
def infer_send_done(operands, attrs, ctx):
    """send-done(send) -> token[]."""
    expect_count(ctx, operands, 1, 1)
    _expect_transfer_state(ctx, operands, "send")
    return token()


@rule("recv")
def infer_recv(operands, attrs, ctx):
    """recv(token) -> (data, u32[] context, token[]); the data shape is the declared one."""
    return _received(ctx, operands, [scalar("u32"), token()], "u32[], token[]")


@rule("recv-done")
def infer_recv_done(operands, attrs, ctx):
    """recv-done(recv) -> (data, token[])."""
    expect_count(ctx, operands, 1, 1)
    s = _expect_transfer_state(ctx, operands, "recv")
    return tup([strip(s.tuple_shapes[0]), token()])


@rule("rng")
def infer_rng(operands, attrs, ctx):
    """rng(a, b) (uniform on [a, b)) or rng(mu, sigma) (normal): scalar parameters of the result's
    element type; the result's dimensions are the declared ones."""
    op = ctx.opcode
    expect_count(ctx, operands, 2, 2)
    a, b = operands
    if not is_scalar(a) or not is_scalar(b):
        fail(op, "the two parameters", "be scalars", f"{txt(a)} and {txt(b)}", operands)
    d = declared_shape(ctx, operands)
    if not is_array(d):
        fail(op, "the result shape", "be an array", txt(d), operands)
    if a.element_type != b.element_type or a.element_type != d.element_type:
        fail(op, "the parameter and result element types", "be the same",
             f"{a.element_type}, {b.element_type} -> {d.element_type}", operands)
    dist = str(attrs.get("distribution"))
    et = a.element_type
    if dist == "rng_uniform":
        if kind(et) not in ("float", "int", "uint", "pred"):
            fail(op, "the element type of rng_uniform", "be floating-point, integral or pred", et, operands)
    elif dist == "rng_normal":
        if kind(et) != "float":
            fail(op, "the element type of rng_normal", "be floating-point", et, operands)
    else:
        fail(op, "distribution", "be rng_uniform or rng_normal", dist, operands)
    return strip(d)


@rule("rng-bit-generator")
def infer_rng_bit_generator(operands, attrs, ctx):
    """rng-bit-generator(state) -> (new state, random bits); the new state has the state's shape,
    the bits shape is the declared one.  Like XLA's verifier (HandleRngBitGenerator), nothing else
    is asked of the state: its shape per algorithm (u64[2] for ThreeFry, u64[2] or u64[3] for
    Philox) is what XLA CPU's expander needs to compile it, which `hlo run` reports."""
    op = ctx.opcode
    expect_count(ctx, operands, 1, 1)
    state = operands[0]
    d = declared_shape(ctx, operands)
    if not is_tuple(d):
        return strip(d)         # XLA accepts a bare bits shape
    if len(d.tuple_shapes) != 2:
        fail(op, "the result shape", "be (state shape, bits shape)", txt(d), operands)
    return tup([strip(state), strip(d.tuple_shapes[1])])


@rule("rng-get-and-update-state")
def infer_rng_get_and_update_state(operands, attrs, ctx):
    """rng-get-and-update-state() -> u64[2]."""
    expect_count(ctx, operands, 0, 0)
    return array("u64", [2])
