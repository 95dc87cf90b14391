"""Cutting instructions out of a module into new, self-contained modules (isolate, extract, shrink).

A piece of a computation becomes the entry computation of a new module: the values it reads from
outside the piece become parameters (or constants, or `after-all()` for a token), the computations
its instructions call come along, and a fusion can be taken as its fused computation's instructions
(`inline`), so that XLA sees plain operations.  Instructions keep their attributes except the ones
that tie them to the module they came from (metadata's stack frames, control predecessors) or to its
devices (sharding, unless asked to keep it).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir.literal import Literal
from ..ir.module import Computation, Instruction, Module
from ..ir.shape import Shape

TIED = ("metadata", "control-predecessors", "origin", "statistics")


def strip(inst: Instruction, name: str, operands, keep_sharding: bool = False, keep_layout: bool = False) -> Instruction:
    """INST renamed NAME, reading OPERANDS, without the attributes that tie it to its module (and,
    unless KEEP_LAYOUT, with the default layout: XLA compiles a module from the start and chooses;
    a custom call keeps its layout, which its library reads: LAPACK's column-major buffers)."""
    drop = TIED if keep_sharding else TIED + ("sharding",)
    attrs = {k: v for k, v in inst.attrs.items() if k not in drop}
    shape = inst.shape if keep_layout or inst.opcode == "custom-call" else plain_shape(inst.shape)
    return dataclasses.replace(inst, name=name, operands=tuple(operands), attrs=attrs, operand_shapes=None,
                               shape=shape)


def plain_shape(shape: Shape) -> Shape:
    """SHAPE with the default layout everywhere."""
    if shape.is_tuple:
        return Shape.tuple_of(plain_shape(s) for s in shape.tuple_shapes)
    if shape.element_type in ("token", "opaque"):
        return shape
    return Shape.array(shape.element_type, shape.dims, dynamic=shape.dynamic)


def _major_to_minor(shape: Shape) -> list[int]:
    lay = shape.layout
    if lay is None or len(lay.minor_to_major) != shape.rank:
        return list(range(shape.rank))
    return list(reversed(lay.minor_to_major))


def lower(inst: Instruction, name: str, operands, operand_shapes) -> list[Instruction]:
    """INST as instructions that mean the same without layouts: a bitcast (a reinterpretation of
    the bytes in their layouts, which XLA takes only from its own layout assignment) becomes a
    transpose to the operand's physical order, a reshape, and a transpose from the result's
    physical order; everything else is `strip`ped."""
    if inst.opcode != "bitcast" or not operand_shapes or operand_shapes[0].is_tuple:
        return [strip(inst, name, operands)]
    if operand_shapes[0].element_type != inst.shape.element_type:
        if operand_shapes[0].dims == inst.shape.dims:       # the same bits read as another type
            return [Instruction(name, "bitcast-convert", plain_shape(inst.shape), tuple(operands), loc=inst.loc)]
        return [strip(inst, name, operands)]
    src, dst = operand_shapes[0], inst.shape
    out, cur = [], operands[0]
    ps = _major_to_minor(src)
    if ps != list(range(src.rank)):
        out.append(Instruction(name + ".t0", "transpose", plain_shape(Shape.array(src.element_type,
                               [src.dims[i] for i in ps])), (cur,), {"dimensions": tuple(ps)}, loc=inst.loc))
        cur = out[-1].name
    pd = _major_to_minor(dst)
    phys = Shape.array(dst.element_type, [dst.dims[i] for i in pd])
    back = [pd.index(i) for i in range(dst.rank)]
    if pd == list(range(dst.rank)):
        out.append(Instruction(name, "reshape", phys, (cur,), loc=inst.loc))
    else:
        out.append(Instruction(name + ".r", "reshape", phys, (cur,), loc=inst.loc))
        out.append(Instruction(name, "transpose", plain_shape(dst), (name + ".r",), {"dimensions": tuple(back)},
                               loc=inst.loc))
    return out


def parameter(name: str, number: int, shape: Shape, loc=None, keep_layout: bool = False) -> Instruction:
    kw = {"loc": loc} if loc is not None else {}
    return Instruction(name, "parameter", shape if keep_layout else plain_shape(shape), parameter_number=number,
                       **kw)


def constant(name: str, shape: Shape, value) -> Instruction:
    """A constant holding VALUE (an array of SHAPE's element type; a tuple of them for a tuple)."""
    return Instruction(name, "constant", shape, literal=_literal(shape, value))


def _literal(shape: Shape, value) -> Literal:
    if shape.is_tuple:
        return Literal(shape, tuple(_literal(s, v) for s, v in zip(shape.tuple_shapes, value)))
    return Literal(shape, np.asarray(value).reshape(shape.dims))


def as_parameters(name: str, shape: Shape, value, loc=None, make=None) -> tuple[list, dict]:
    """Instructions giving VALUE (of SHAPE) under NAME from parameters: a parameter per array leaf
    (a tuple becomes the `tuple` of its leaves' parameters, named NAME.0, NAME.1...; a token an
    `after-all()`).  MAKE(name, shape, value), when given, makes each leaf's instruction instead (a
    constant...) and returns (instruction, value or None).  Returns (instructions, {parameter name:
    value}); parameters are numbered 0 (number them when assembling)."""
    insts: list = []
    values: dict = {}

    def go(n, s, v):
        if s.element_type == "token":
            insts.append(Instruction(n, "after-all", s, **({"loc": loc} if loc is not None else {})))
            return
        if s.is_tuple:
            parts = []
            for k, (t, x) in enumerate(zip(s.tuple_shapes, v)):
                go(f"{n}.{k}", t, x)
                parts.append(f"{n}.{k}")
            insts.append(Instruction(n, "tuple", s, tuple(parts), **({"loc": loc} if loc is not None else {})))
            return
        if make is not None:
            inst, val = make(n, s, v)
        else:
            inst, val = parameter(n, 0, s, loc, keep_layout=True), np.asarray(v)
        insts.append(inst)
        if val is not None:
            values[n] = val
    go(name, shape, value)
    return insts, values


def token(name: str) -> Instruction:
    return Instruction(name, "after-all", Shape("token"))


def is_token(shape: Shape) -> bool:
    return shape.element_type == "token" or (shape.is_tuple and any(is_token(s) for s in shape.tuple_shapes))


def callees(module: Module, names) -> list[Computation]:
    """The computations NAMES name and every computation they call, in the module's order."""
    cmap = module.computation_map
    want, stack = set(), list(names)
    while stack:
        n = stack.pop()
        if n in want or n not in cmap:
            continue
        want.add(n)
        for i in cmap[n].instructions:
            stack.extend(i.called_computations)
    return [c for c in module.computations if c.name in want and not c.is_entry]


def inline(module: Module, comp: Computation, args: list[str], emit, prefix: str,
           into_fusions: bool = True) -> str:
    """Emit COMP's instructions (renamed PREFIX + name) reading ARGS for its parameters, nested
    fusions inlined too when INTO_FUSIONS; returns the name of the value its root gives."""
    names: dict[str, str] = {}
    for p in comp.parameters:
        names[p.name] = args[p.parameter_number]
    for inst in comp.instructions:
        if inst.opcode == "parameter":
            continue
        ops = [names[o] for o in inst.operands]
        if into_fusions and inst.opcode == "fusion":
            callee = module.computation_map[inst.called_computations[0]]
            names[inst.name] = inline(module, callee, ops, emit, prefix + inst.name + ".", into_fusions)
            continue
        shapes = [comp.by_name[o].shape for o in inst.operands]
        for new in lower(inst, prefix + inst.name, ops, shapes):
            emit(new)
        names[inst.name] = prefix + inst.name
    return names[comp.root]


def called_by(instructions) -> list[str]:
    out = []
    for i in instructions:
        out.extend(i.called_computations)
    return out


def plain_computation(module: Module, comp: Computation) -> Computation:
    """COMP as XLA takes it from the start of its pipeline: fusions inlined, bitcasts lowered,
    default layouts (see `lower`)."""
    out: list[Instruction] = []
    for p in comp.parameters:
        out.append(parameter(p.name, p.parameter_number, p.shape, p.loc))
    root = inline(module, comp, [p.name for p in comp.parameters], out.append, "")
    return dataclasses.replace(comp, instructions=tuple(out), root=root, params=None, result_shape=None)


def build_module(name: str, source: Module, entry: list[Instruction], root: str, attrs: dict | None = None,
                 extra: list[Computation] | None = None, plain: bool = True) -> Module:
    """A module NAME whose entry computation is ENTRY (ROOT named ROOT), with the computations of
    SOURCE its instructions call (and EXTRA ones), as `plain_computation` makes them when PLAIN."""
    comps = callees(source, called_by(entry))
    if plain:
        comps = [plain_computation(source, c) for c in comps]
    if extra:
        have = {c.name for c in comps}
        comps += [c for c in extra if c.name not in have]
    ent = Computation(f"{name}.entry", tuple(entry), root, is_entry=True)
    return Module(name, tuple(comps) + (ent,), ent.name, dict(attrs or {}))


def text_of(module: Module) -> str:
    """The module as XLA's parser reads it (hlo's printer, without metadata)."""
    from ..ir.printer import format_module
    return format_module(module, metadata=False)
