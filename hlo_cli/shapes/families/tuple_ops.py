"""Shape rules of tuples, tokens and the leaves of a computation: tuple, get-tuple-element,
parameter, constant, opt-barrier, domain, after-all, add-dependency.

XLA: ``ShapeInference::InferVariadicOpShape`` (tuple), ``InferGetTupleElementShape``, and the HLO
verifier's checks of the others (a constant has its literal's shape, opt-barrier and domain pass
their operand's shape through, after-all joins tokens, add-dependency's second operand is a token).
"""
from __future__ import annotations

from ..registry import fail
from .elementwise import (ATTRIBUTE, UNDECLARED, check_arity, family, int_attr, kind, like,
                          require_declared)


@family("tuple")
def infer_tuple(operands, attrs, ctx):
    """tuple(xs...): (x0, x1, ...)."""
    from ...ir.shape import Shape
    return Shape.tuple_of(like(s) for s in operands)


@family("get-tuple-element")
def infer_get_tuple_element(operands, attrs, ctx):
    """get-tuple-element(t), index=i: element i of the tuple t."""
    op = ctx.opcode
    check_arity(op, operands, 1)
    t = operands[0]
    if kind(t) != "tuple":
        fail(op, "the operand", "be a tuple", t.to_str(False), operands)
    i = int_attr(op, attrs, "index", operands)
    n = len(t.tuple_shapes)
    if not 0 <= i < n:
        fail(op, "index", f"be in [0, {n}) for a tuple of {n} element{'s' if n != 1 else ''}", i,
             operands, ATTRIBUTE)
    return like(t.tuple_shapes[i])


@family("parameter")
def infer_parameter(operands, attrs, ctx):
    """parameter(N): the declared shape."""
    check_arity(ctx.opcode, operands, 0)
    return like(require_declared(ctx.opcode, ctx, operands, array_only=False))


def _same_ignoring_layout(a, b) -> bool:
    a, b = a.without_layout(), b.without_layout()
    if a.is_tuple or b.is_tuple:
        return (a.is_tuple and b.is_tuple and len(a.tuple_shapes) == len(b.tuple_shapes)
                and all(_same_ignoring_layout(x, y) for x, y in zip(a.tuple_shapes, b.tuple_shapes)))
    # XLA's literal shapes drop the bound marker (<=), so compare sizes and types only
    return a.element_type == b.element_type and a.dims == b.dims


@family("constant")
def infer_constant(operands, attrs, ctx):
    """constant(literal): the literal's shape, which must be the declared one.

    The literal is read from ``attrs['literal']`` (the checker passes the instruction's literal
    there; constants have no attribute of that name)."""
    op = ctx.opcode
    check_arity(op, operands, 0)
    lit = attrs.get("literal")
    lit_shape = getattr(lit, "shape", None)
    declared = getattr(ctx, "declared", None)
    if declared is None:
        if lit_shape is None:
            fail(op, "the result shape", "be written", "none", operands, UNDECLARED)
        return like(lit_shape)
    bad = [leaf for leaf in declared.leaves() if kind(leaf) in ("token", "opaque")]
    if bad:
        fail(op, "the constant's shape", "hold only arrays (a literal cannot be a token or opaque)",
             declared.to_str(False), operands)
    if lit_shape is not None and not _same_ignoring_layout(lit_shape, declared):
        fail(op, "the literal's shape", f"be the declared shape {declared.to_str(False)}",
             lit_shape.to_str(False), operands)
    return like(declared)


@family("opt-barrier")
def infer_opt_barrier(operands, attrs, ctx):
    """opt-barrier(x): x's shape (usually a tuple)."""
    check_arity(ctx.opcode, operands, 1)
    return like(operands[0])


@family("domain")
def infer_domain(operands, attrs, ctx):
    """domain(x), domain={...}: x's shape."""
    check_arity(ctx.opcode, operands, 1)
    return like(operands[0])


@family("after-all")
def infer_after_all(operands, attrs, ctx):
    """after-all(tokens...): token[].  XLA's verifier (HandleAfterAll) checks only the result, so
    operands of any shape are accepted, as XLA's own parser tests have them (StableHLO's after_all
    takes tokens only)."""
    from ...ir.shape import Shape
    return Shape.array("token")


@family("add-dependency")
def infer_add_dependency(operands, attrs, ctx):
    """add-dependency(x, token): x's shape."""
    op = ctx.opcode
    check_arity(op, operands, 2)
    if kind(operands[1]) != "token":
        fail(op, "operand 1", "be a token", operands[1].to_str(False), operands)
    return like(operands[0])

