"""The shape-rule registry: one pure rule per opcode, registered by decorator against the opcode table.

A rule is called as ``rule(operands, attrs, ctx)`` and returns the result Shape (layouts are
ignored: the checker compares without layouts unless asked).  It raises ``ShapeRuleError`` with a
message in the house template::

    <opcode>: <what> must <constraint>, got <actual> for <operand shapes>

``operands`` are the operand Shapes in order; ``attrs`` the instruction's decoded attributes (a
dict, see hlo_cli/ir/attributes.py); ``ctx`` gives what a pure rule cannot know by itself:

- ``ctx.declared``: the instruction's declared result shape.  Rules for opcodes whose result is not
  a function of the operands (broadcast's output dims, reshape, iota, rng, parameter, constant,
  custom-call, infeed, recv, ...) take their dimensions from it and check what can be checked.
- ``ctx.computation(name)``: ``(parameter shapes, result shape)`` of a called computation, for
  reduce/map/sort/call/while/conditional/fusion/scatter/select-and-scatter/all-reduce...
- ``ctx.opcode``: the spelling being checked (several opcodes share a rule).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ..ir.opcodes import async_generic, registrar
from ..ir.shape import MAX_SHAPE_DEPTH, Shape, shape_depth


class ShapeRuleError(ValueError):
    """A violated shape rule; the checker adds the location and the instruction's name."""

    def __init__(self, message: str, code: str = "S000"):
        super().__init__(message)
        self.code = code


@dataclass
class RuleContext:
    opcode: str
    declared: Shape | None = None
    computations: Mapping[str, tuple[list[Shape], Shape]] = field(default_factory=dict)
    replica_count: int | None = None       # module header values (XLA's default: 1)
    num_partitions: int | None = None

    def computation(self, name: str) -> tuple[list[Shape], Shape]:
        try:
            return self.computations[name]
        except KeyError:
            raise ShapeRuleError(f"{self.opcode}: called computation '{name}' is not defined") from None


Rule = Callable[[Sequence[Shape], Mapping, RuleContext], Shape]
RULES: dict[str, Rule] = {}


#: `@rule(*opcodes)` registers a shape rule for one or more opcodes (text spellings from the opcode table)
rule = registrar(RULES, "shape rules")


def shapes_text(shapes: Sequence[Shape]) -> str:
    """Operand shapes in HLO notation, for messages: (f32[2,3], s32[])."""
    return "(" + ", ".join(s.to_str(False) for s in shapes) + ")"


def fail(opcode: str, what: str, constraint: str, actual, operands: Sequence[Shape], code: str = "S000"):
    """Raise the house-style message."""
    raise ShapeRuleError(f"{opcode}: {what} must {constraint}, got {actual} for {shapes_text(operands)}", code)


def rule_of(opcode: str) -> Rule | None:
    """The shape rule of `opcode`, or None; `<op>-start/-update/-done` sugar for an `<op>` of the opcode
    table takes async-start's / async-update's / async-done's rule."""
    fn = RULES.get(opcode)
    if fn is None:
        generic = async_generic(opcode)
        if generic is not None:
            fn = RULES.get(generic)
    return fn


def home(opcode: str) -> str | None:
    """The module that holds `opcode`'s shape rule (the rule's own module, seen through the decorators
    that wrap it), or None when it has none.  The opcode table is the index of every opcode's homes:
    this gives the shape rule's, the interpreter registry's `rule_for` the evaluation rule's
    (tests/test_opcode_homes.py pairs them)."""
    fn = rule_of(opcode)
    if fn is None:
        return None
    return getattr(fn, "__wrapped__", fn).__module__


def infer_shape(opcode: str, operands: Sequence[Shape], attrs: Mapping, ctx: RuleContext | None = None) -> Shape:
    """The result shape XLA's rules give for this instruction (raises ShapeRuleError)."""
    fn = rule_of(opcode)
    if fn is None:
        raise ShapeRuleError(f"{opcode}: no shape rule for this opcode", "S001")
    result = fn(operands, attrs, ctx or RuleContext(opcode))
    if result is not None and result.tuple_shapes is not None and shape_depth(result) > MAX_SHAPE_DEPTH:
        # the operands are within the limit (declared shapes are checked by the parser, inferred ones
        # here), so no rule recursed deeper than the limit plus a few levels
        fail(opcode, "the result's tuples", f"nest at most {MAX_SHAPE_DEPTH} deep (hlo's limit; XLA's parser "
             "allows 32768)", f"{shape_depth(result)} levels", operands, "S002")
    return result


def computation_shapes(module) -> dict[str, tuple[list[Shape], Shape]]:
    """(parameter shapes, result shape) of every computation of a module, for RuleContext."""
    out = {}
    for comp in module.computations:
        params = comp.parameters
        root = comp.by_name.get(comp.root)
        out[comp.name] = ([p.shape for p in params], root.shape if root is not None else None)
    return out


def context_for(module, instruction, comp_shapes=None) -> RuleContext:
    """The RuleContext of one instruction of a parsed module."""
    return RuleContext(instruction.opcode, instruction.shape,
                       comp_shapes if comp_shapes is not None else computation_shapes(module),
                       module.attrs.get("replica_count", 1), module.attrs.get("num_partitions", 1))


def operand_shapes(computation, instruction) -> list[Shape]:
    by = computation.by_name
    return [by[o].shape for o in instruction.operands]
