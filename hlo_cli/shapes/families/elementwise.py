"""Shape rules of the elementwise family: unary, binary, compare, select, clamp and the converts.

XLA's rules (``ShapeInference::Infer{Unary,Binary,Ternary}OpShape``, ``InferConvertShape``,
``InferBitcastConvertShape``, ``InferStochasticConvertShape``, ``InferReducePrecisionShape``) as
the HLO verifier applies them:

* HLO has no implicit broadcasting: the operands of unary, binary and compare instructions must
  have the dimensions of the result (the verifier's "Implicit broadcast is not allowed in HLO").
  Only ``select`` (a scalar ``pred``) and ``clamp`` (scalar ``min``/``max``) accept scalars.
* Operands must have the same element type: shape inference tolerates mixed floating-point
  precisions, but the verifier (``allow_mixed_precision=false``, its default) rejects them.
* Element types per opcode are enforced once, by the factory that registers the rule.
* Dynamic dimensions propagate: a result dimension is dynamic when the corresponding operand
  dimension is (for binary ops: either operand's).

The small helpers at the top are shared by the other families of this package.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ...ir.attributes import comparison_order_of_type
from ...ir.dtypes import ELEMENT_TYPES
from ...ir.shape import UNBOUNDED, Shape
from ..registry import ShapeRuleError, fail, rule, shapes_text
from .reduction import compatible_dim, is_array, is_scalar

# ----------------------------------------------------------------------------- diagnostic codes

#: operand dimensions differ where HLO needs them equal (an implicit broadcast); the checker can
#: offer an explicit ``broadcast`` as a fix.
IMPLICIT_BROADCAST = "S101"
#: an element type the opcode does not accept, or mixed element types.
ELEMENT_TYPE = "S102"
#: a malformed attribute (dimension numbers out of range, repeated, unsorted, ...).
ATTRIBUTE = "S103"
#: the result shape cannot be inferred and was not declared.
UNDECLARED = "S104"


# ----------------------------------------------------------------------------- shared helpers

def kind(shape: Shape) -> str:
    """pred | int | uint | float | complex | token | opaque | tuple | buffer."""
    if shape.is_tuple:
        return "buffer" if shape.element_type == "buffer" else "tuple"
    et = ELEMENT_TYPES.get(shape.element_type)
    return et.kind if et is not None else shape.element_type


def bits(element_type: str) -> int:
    return ELEMENT_TYPES[element_type].bits


def dims_text(shape: Shape) -> str:
    """The bracketed dimensions of an array shape as HLO prints them: [2,<=3]."""
    text = shape.to_str(False)
    return text[text.index("["):] if "[" in text else text


def seq(values) -> str:
    return "{" + ",".join(str(v) for v in values) + "}"


def array(element_type: str, dims, dynamic=None) -> Shape:
    """A result array shape with the default layout (shapes are immutable: one object per distinct
    shape is shared, a large module asks for the same few thousand many times)."""
    key = (element_type, tuple(dims), None if dynamic is None else tuple(dynamic))
    s = _ARRAYS.get(key)
    if s is None:
        if len(_ARRAYS) >= _MAX_ARRAYS:
            _ARRAYS.clear()
        s = _ARRAYS[key] = Shape.array(key[0], key[1], dynamic=key[2])
    return s


_ARRAYS: dict = {}
_MAX_ARRAYS = 1 << 16


def like(shape: Shape, element_type: str | None = None) -> Shape:
    """`shape` (an array or a tuple) rebuilt with default layouts, optionally with a new element type."""
    if shape.is_tuple:
        if shape.element_type == "buffer":
            return shape
        return Shape.tuple_of(like(s) for s in shape.tuple_shapes)
    if not is_array(shape):
        return Shape.array(shape.element_type)
    return array(element_type or shape.element_type, shape.dims, shape.dynamic)


def require_known(opcode: str, operands: Sequence[Shape | None]) -> None:
    """Operands whose shape is unknown (a shape-less instruction XLA could not infer either)."""
    for o in operands:
        if o is None:
            break
    else:
        return
    missing = [i for i, o in enumerate(operands) if o is None]
    if missing:
        text = "(" + ", ".join("?" if o is None else o.to_str(False) for o in operands) + ")"
        raise ShapeRuleError(
            f"{opcode}: every operand shape must be known, got none for operand "
            f"{', '.join(map(str, missing))} for {text}")


def require_array(opcode: str, operands: Sequence[Shape], index: int, what: str | None = None) -> Shape:
    s = operands[index]
    if not is_array(s):
        fail(opcode, what or f"operand {index}", "be an array", s.to_str(False), operands)
    return s


def require_declared(opcode: str, ctx, operands: Sequence[Shape], array_only: bool = True) -> Shape:
    d = getattr(ctx, "declared", None)
    if d is None:
        fail(opcode, "the result shape", "be written (XLA cannot infer it for this opcode)", "none",
             operands, UNDECLARED)
    if array_only and not is_array(d):
        fail(opcode, "the result shape", "be an array", d.to_str(False), operands)
    return d


def dims_attr(opcode: str, attrs, name: str, operands: Sequence[Shape], default=None) -> tuple[int, ...]:
    v = attrs.get(name, default)
    if v is None:
        fail(opcode, f"the attribute {name}", "be given", "none", operands, ATTRIBUTE)
    return tuple(int(x) for x in v)


def int_attr(opcode: str, attrs, name: str, operands: Sequence[Shape], default=None) -> int:
    v = attrs.get(name, default)
    if v is None:
        fail(opcode, f"the attribute {name}", "be given", "none", operands, ATTRIBUTE)
    return int(v)


def same_dims(a: Shape, b: Shape) -> bool:
    """The same dimension sizes, ignoring element types, dynamic flags and layouts (XLA's
    ShapeUtil::CompatibleIgnoringElementType)."""
    return a.rank == b.rank and all(compatible_dim(x, y) for x, y in zip(a.dims, b.dims))


def merge_dims(shapes: Sequence[Shape]) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """The dimensions of same-shaped operands: a static size wins over `?`, dynamic if any is."""
    dims = list(shapes[0].dims)
    dyn = list(shapes[0].dynamic)
    for s in shapes[1:]:
        for i, (d, f) in enumerate(zip(s.dims, s.dynamic)):
            if dims[i] == UNBOUNDED and d != UNBOUNDED:
                dims[i], dyn[i] = d, f
            elif d == UNBOUNDED and dims[i] != UNBOUNDED:
                pass
            else:
                dyn[i] = dyn[i] or f
    return tuple(dims), tuple(dyn)


# ----------------------------------------------------------------------------- element type classes

@dataclass(frozen=True)
class Kinds:
    """A set of element-type kinds (or, with `types`, of element types) and its wording."""
    kinds: frozenset
    words: tuple[str, ...]
    types: frozenset | None = None

    @property
    def text(self) -> str:
        w = self.words
        return w[0] if len(w) == 1 else ", ".join(w[:-1]) + " or " + w[-1]

    def __or__(self, other: "Kinds") -> "Kinds":
        assert self.types is None and other.types is None
        return Kinds(self.kinds | other.kinds, self.words + other.words)

    def accepts(self, shape: Shape) -> bool:
        if self.types is not None:
            return shape.element_type in self.types
        return kind(shape) in self.kinds


PRED = Kinds(frozenset({"pred"}), ("pred",))
SIGNED = Kinds(frozenset({"int"}), ("signed integer",))
INTEGRAL = Kinds(frozenset({"int", "uint"}), ("integer",))
FLOAT = Kinds(frozenset({"float"}), ("floating-point",))
COMPLEX = Kinds(frozenset({"complex"}), ("complex",))
NUMERIC = INTEGRAL | FLOAT | COMPLEX
ANY = Kinds(frozenset({"pred", "int", "uint", "float", "complex"}), ("an array element type",))
NOT_PRED = Kinds(NUMERIC.kinds, ("integer", "floating-point", "complex (not pred)"))

_COMPONENT = {"c64": "f32", "c128": "f64"}


def check_kind(opcode: str, operands: Sequence[Shape], index: int, allowed: Kinds,
               what: str = "the element type") -> None:
    s = operands[index]
    if not allowed.accepts(s):
        fail(opcode, what, f"be {allowed.text}", s.element_type, operands, ELEMENT_TYPE)


def check_same_element_type(opcode: str, operands: Sequence[Shape], indices: Sequence[int],
                            what: str = "the operands' element types") -> None:
    types = [operands[i].element_type for i in indices]
    if len(set(types)) > 1:
        fail(opcode, what, "be the same (mixed precision is not allowed)", " vs ".join(types),
             operands, ELEMENT_TYPE)


def check_same_dims(opcode: str, operands: Sequence[Shape], indices: Sequence[int],
                    what: str = "the operands' dimensions") -> None:
    first = operands[indices[0]]
    for i in indices[1:]:
        if not same_dims(first, operands[i]):
            fail(opcode, what,
                 "be equal (HLO has no implicit broadcasting)",
                 " vs ".join(dims_text(operands[j]) for j in indices), operands, IMPLICIT_BROADCAST)


def family(*opcodes: str):
    """Register a rule; operands whose shape is unknown are reported before the rule runs."""
    def deco(fn):
        def checked(operands, attrs, ctx):
            require_known(ctx.opcode, operands)
            return fn(list(operands), attrs, ctx)
        checked.__name__ = fn.__name__
        checked.__doc__ = fn.__doc__
        checked.__wrapped__ = fn
        rule(*opcodes)(checked)
        return fn
    return deco


def check_arity(opcode: str, operands: Sequence[Shape], n: int) -> None:
    if len(operands) != n:
        fail(opcode, "the operand count", f"be {n}", len(operands), operands)


def one_operand(opcode: str, operands: Sequence[Shape]) -> Shape:
    """The one array operand of `opcode(x)`."""
    check_arity(opcode, operands, 1)
    return require_array(opcode, operands, 0, "the operand")


def require_operand_type(opcode: str, x: Shape, out: Shape, operands: Sequence[Shape]) -> None:
    """The result `out` has the element type of the operand `x`."""
    if out.element_type != x.element_type:
        fail(opcode, "the result element type", f"be the operand's ({x.element_type})",
             out.element_type, operands)


# ----------------------------------------------------------------------------- unary ops

def unary(opcode: str, allowed: Kinds, result: Callable[[str], str] | None = None) -> None:
    """Register `opcode(x)`: x's element type in `allowed`; the result has x's dimensions and the
    element type `result(x.element_type)` (x's own by default)."""
    def infer(operands, attrs, ctx):
        check_arity(ctx.opcode, operands, 1)
        x = require_array(ctx.opcode, operands, 0, "the operand")
        check_kind(ctx.opcode, operands, 0, allowed)
        return like(x, result(x.element_type) if result else None)
    infer.__name__ = "infer_" + opcode.replace("-", "_")
    infer.__doc__ = f"{opcode}(x): x is {allowed.text}; result: x's dimensions."
    family(opcode)(infer)


def _component(et: str) -> str:
    return _COMPONENT.get(et, et)


# floating-point only (XLA's InferUnaryOpShape: floor, ceil, rounding, cbrt, erf)
for _op in ("floor", "ceil", "round-nearest-afz", "round-nearest-even", "cbrt", "erf"):
    unary(_op, FLOAT)
# floating-point or complex
for _op in ("cosine", "sine", "tan", "exponential", "exponential-minus-one", "log", "log-plus-one",
            "logistic", "rsqrt", "sqrt", "tanh", "acos", "acosh", "asin", "asinh", "atanh", "cosh",
            "sinh"):
    unary(_op, FLOAT | COMPLEX)
unary("real", FLOAT | COMPLEX, _component)
unary("imag", FLOAT | COMPLEX, _component)
unary("abs", SIGNED | FLOAT | COMPLEX, _component)          # |c64| is f32; unsigned is rejected
unary("sign", SIGNED | FLOAT | COMPLEX)
unary("negate", INTEGRAL | FLOAT | COMPLEX)
unary("count-leading-zeros", INTEGRAL)
unary("popcnt", INTEGRAL)
unary("not", PRED | INTEGRAL)
unary("is-finite", FLOAT, lambda et: "pred")


# ----------------------------------------------------------------------------- binary ops

def binary(opcode: str, allowed: Kinds, result: Callable[[str], str] | None = None) -> None:
    """Register `opcode(lhs, rhs)`: same element type (in `allowed`), same dimensions."""
    def infer(operands, attrs, ctx):
        op = ctx.opcode
        check_arity(op, operands, 2)
        require_array(op, operands, 0, "the lhs")
        require_array(op, operands, 1, "the rhs")
        check_kind(op, operands, 0, allowed)
        check_same_element_type(op, operands, (0, 1))
        check_same_dims(op, operands, (0, 1))
        dims, dyn = merge_dims(operands)
        et = operands[0].element_type
        return array(result(et) if result else et, dims, dyn)
    infer.__name__ = "infer_" + opcode.replace("-", "_")
    infer.__doc__ = f"{opcode}(lhs, rhs): {allowed.text}, same type and dimensions."
    family(opcode)(infer)


for _op in ("add", "multiply", "maximum", "minimum"):
    binary(_op, ANY)
for _op in ("subtract", "divide", "power"):
    binary(_op, NOT_PRED)
binary("remainder", INTEGRAL | FLOAT)          # no pred; complex is rejected by XLA's pipeline
binary("atan2", FLOAT | COMPLEX)
binary("complex", Kinds(frozenset({"float"}), ("f32", "f64"), frozenset({"f32", "f64"})),
       lambda et: {"f32": "c64", "f64": "c128"}[et])     # real and imaginary parts
for _op in ("and", "or", "xor"):
    binary(_op, PRED | INTEGRAL)
for _op in ("shift-left", "shift-right-arithmetic", "shift-right-logical", "mulhi"):
    binary(_op, INTEGRAL)


# ----------------------------------------------------------------------------- compare

def _comparison_types(element_type_kind: str) -> tuple[str, ...]:
    """The `type=` values XLA's verifier accepts for an operand kind."""
    if element_type_kind == "float":
        return ("FLOAT", "TOTALORDER")
    if element_type_kind == "complex":
        return ("FLOAT",)
    if element_type_kind == "int":
        return ("SIGNED",)
    return ("UNSIGNED",)                       # uint and pred


@family("compare")
def infer_compare(operands, attrs, ctx):
    """compare(lhs, rhs), direction=D[, type=T]: same type and dimensions; result pred."""
    op = ctx.opcode
    check_arity(op, operands, 2)
    require_array(op, operands, 0, "the lhs")
    require_array(op, operands, 1, "the rhs")
    check_same_element_type(op, operands, (0, 1))
    check_same_dims(op, operands, (0, 1))
    direction = attrs.get("direction")
    if direction is None:
        fail(op, "the attribute direction", "be given", "none", operands, ATTRIBUTE)
    if str(direction) not in ("EQ", "NE", "GE", "GT", "LE", "LT"):
        fail(op, "direction", "be one of EQ, NE, GE, GT, LE, LT", direction, operands, ATTRIBUTE)
    ctype = attrs.get("type")
    if ctype is not None:
        allowed = _comparison_types(kind(operands[0]))
        if str(ctype) not in allowed:
            fail(op, "type", f"be {' or '.join(allowed)} for {operands[0].element_type} operands",
                 ctype, operands, ATTRIBUTE)
    order = attrs.get("order")
    if order is not None:
        # the newest XLA's order=: any order for floats (and integers, where all three order the
        # same way); a complex compare is an equality test, so only PARTIAL (its default) means
        # something; beside type= the two must say the same thing
        if kind(operands[0]) == "complex" and str(order) != "PARTIAL":
            fail(op, "order", f"be PARTIAL for {operands[0].element_type} operands", order,
                 operands, ATTRIBUTE)
        if ctype is not None and kind(operands[0]) == "float" \
                and comparison_order_of_type(str(ctype)) != str(order):
            fail(op, "order", f"agree with type={ctype}", order, operands, ATTRIBUTE)
    dims, dyn = merge_dims(operands)
    return array("pred", dims, dyn)


# ----------------------------------------------------------------------------- select / clamp

@family("select")
def infer_select(operands, attrs, ctx):
    """select(pred, on_true, on_false): pred is pred, scalar or shaped like the branches, which
    have the same type and dimensions."""
    op = ctx.opcode
    check_arity(op, operands, 3)
    pred = require_array(op, operands, 0, "the predicate")
    require_array(op, operands, 1, "on_true")
    require_array(op, operands, 2, "on_false")
    if pred.element_type != "pred":
        fail(op, "the predicate's element type", "be pred", pred.element_type, operands, ELEMENT_TYPE)
    check_same_element_type(op, operands, (1, 2), "the element types of on_true and on_false")
    check_same_dims(op, operands, (1, 2), "the dimensions of on_true and on_false")
    if pred.rank != 0 and not same_dims(pred, operands[1]):
        fail(op, "the predicate's dimensions",
             "be those of on_true and on_false, or [] (a scalar predicate)",
             f"{dims_text(pred)} vs {dims_text(operands[1])}", operands, IMPLICIT_BROADCAST)
    shaped = [operands[1], operands[2]] + ([pred] if pred.rank else [])
    dims, dyn = merge_dims(shaped)
    return array(operands[1].element_type, dims, dyn)


@family("clamp")
def infer_clamp(operands, attrs, ctx):
    """clamp(min, operand, max): one element type; min and max scalars or shaped like operand."""
    op = ctx.opcode
    check_arity(op, operands, 3)
    require_array(op, operands, 0, "min")
    x = require_array(op, operands, 1, "the operand")
    require_array(op, operands, 2, "max")
    check_same_element_type(op, operands, (0, 1, 2), "the element types of min, operand and max")
    for i, name in ((0, "min"), (2, "max")):
        b = operands[i]
        if b.rank != 0 and not same_dims(b, x):
            fail(op, f"the dimensions of {name}", "be those of the operand, or [] (a scalar bound)",
                 f"{dims_text(b)} vs {dims_text(x)}", operands, IMPLICIT_BROADCAST)
    return like(x)


# ----------------------------------------------------------------------------- converts

@family("convert")
def infer_convert(operands, attrs, ctx):
    """convert(x): any array to the declared element type, same dimensions."""
    op = ctx.opcode
    x = one_operand(op, operands)
    d = require_declared(op, ctx, operands)
    return like(x, d.element_type)


@family("bitcast-convert")
def infer_bitcast_convert(operands, attrs, ctx):
    """bitcast-convert(x): reinterpret the bits; a narrower result type adds a minor dimension of
    the width ratio, a wider one removes a minor dimension that must equal the ratio."""
    op = ctx.opcode
    x = one_operand(op, operands)
    d = require_declared(op, ctx, operands)
    new = d.element_type
    if (kind(x) == "complex") != (kind(d) == "complex"):
        fail(op, "the conversion", "not mix complex and real types", f"{x.element_type} to {new}",
             operands, ELEMENT_TYPE)
    bi, bo = bits(x.element_type), bits(new)
    if max(bi, bo) % min(bi, bo):
        fail(op, "the bit widths", "divide one another", f"{bi} ({x.element_type}) and {bo} ({new})",
             operands, ELEMENT_TYPE)
    if bi == bo:
        return like(x, new)
    ratio = max(bi, bo) // min(bi, bo)
    if bi > bo:
        return array(new, x.dims + (ratio,), x.dynamic + (False,))
    if x.rank == 0 or x.dims[-1] != ratio:
        fail(op, "the operand's last dimension",
             f"be the bit width ratio {ratio} ({x.element_type} to {new})",
             dims_text(x) if x.rank else "a scalar", operands)
    return array(new, x.dims[:-1], x.dynamic[:-1])


@family("stochastic-convert")
def infer_stochastic_convert(operands, attrs, ctx):
    """stochastic-convert(x, random): x floating-point, random unsigned of x's width and dimensions;
    the result has the declared element type."""
    op = ctx.opcode
    check_arity(op, operands, 2)
    x = require_array(op, operands, 0, "the operand")
    r = require_array(op, operands, 1, "the random bits")
    check_kind(op, operands, 0, FLOAT, "the operand's element type")
    if kind(r) != "uint":
        fail(op, "the random bits' element type", "be unsigned integer", r.element_type, operands,
             ELEMENT_TYPE)
    if bits(r.element_type) != bits(x.element_type):
        fail(op, "the random bits' width", f"be the operand's ({bits(x.element_type)} bits)",
             f"{bits(r.element_type)} bits", operands, ELEMENT_TYPE)
    check_same_dims(op, operands, (0, 1))
    d = require_declared(op, ctx, operands)
    return like(x, d.element_type)


@family("reduce-precision")
def infer_reduce_precision(operands, attrs, ctx):
    """reduce-precision(x), exponent_bits=E, mantissa_bits=M: x floating-point, E >= 1, M >= 0."""
    op = ctx.opcode
    x = one_operand(op, operands)
    check_kind(op, operands, 0, FLOAT)
    e = int_attr(op, attrs, "exponent_bits", operands)
    m = int_attr(op, attrs, "mantissa_bits", operands)
    if e < 1:
        fail(op, "exponent_bits", "be at least 1", e, operands, ATTRIBUTE)
    if m < 0:
        fail(op, "mantissa_bits", "be non-negative", m, operands, ATTRIBUTE)
    return like(x)


__all__ = ["Kinds", "PRED", "SIGNED", "INTEGRAL", "FLOAT", "COMPLEX", "NUMERIC", "ANY", "NOT_PRED",
           "IMPLICIT_BROADCAST", "ELEMENT_TYPE", "ATTRIBUTE", "UNDECLARED", "kind", "bits",
           "is_array", "is_scalar", "dims_text", "seq", "array", "like", "require_known",
           "require_array", "require_declared", "dims_attr", "int_attr", "compatible_dim",
           "same_dims", "merge_dims", "check_kind", "check_same_element_type", "check_same_dims",
           "family", "check_arity", "one_operand", "require_operand_type", "unary", "binary", "shapes_text"]
