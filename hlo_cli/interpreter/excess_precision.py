"""XLA CPU's excess precision: where a narrow float result reaches a `convert` to its wide type
unrounded.

XLA CPU computes bf16 arithmetic in f32 (its float-normalization-bf16 pass, FloatNormalization with
CpuFloatSupport): the op runs on f32 operands with an f32 result, and a convert back to bf16 is
inserted for its users.  With `xla_allow_excess_precision` (on by default) a user that is itself a
`convert` bf16 -> f32 is not given the rounded value: it is replaced by the f32 result.  So in

    m = bf16[4] multiply(p, q)
    r = f32[4] convert(m)

`r` holds the f32 products, not the products rounded to bf16; any other user of `m` (an add, a
reshape, the result of the computation) still sees the rounded bf16 value.  The same normalization
turns the f8 types' arithmetic into f16 arithmetic (a `convert` to f16 gets the f16 value).  f16
itself is not normalized on CPU: a convert of an f16 op gets the f16-rounded value.

Measured through JAX (jaxlib 0.10.2) and read in XLA's float_normalization.cc / dot_decomposer.cc:
- the rule holds for the value-computing element-wise ops, dot and convolution; data movement,
  select, clamp, maximum/minimum, reduce and reduce-window give no difference (their wide value is
  the rounded one, or our rules already match XLA);
- only a direct `convert` user to exactly the wide type (f32 for bf16; f16 for the f8 types) sees
  the wide value, also through a get-tuple-element of a tuple instruction; a convert to f64 or f16
  of a bf16 op, or a convert after a reshape, gets the rounded value;
- a dot that XLA's DotDecomposer canonicalizes first (more than one contracting or non-contracting
  dimension per operand, batch dimensions not leading) or whose batch dimensions of size 1
  BatchDotSimplification removes is followed by a reshape: its convert gets the rounded value.

Not modelled (XLA inlines calls first, so the rule also crosses `call` boundaries there): a
`call` whose callee's root is such an op, or a callee parameter converted inside the callee.

`prepare(module)` rewrites the module the way XLA does: for each such op `h` it adds `h.wide`
(the op on operands converted to the wide type, with a wide result), `h` becomes
`convert(h.wide)` (computed once, rounded once) and the converts read `h.wide`.
`HLO_EXCESS_PRECISION=0` in the environment turns this off (the text's literal semantics).
"""
from __future__ import annotations

import dataclasses
import os

from ..ir.module import Computation, Instruction, Module
from ..ir.shape import Shape

# the narrow type -> the type XLA CPU computes it in (cpu_compiler.cc's FloatNormalization passes)
WIDE_TYPE = {
    "bf16": "f32",
    "f8e5m2": "f16", "f8e4m3": "f16", "f8e4m3fn": "f16", "f8e4m3b11fnuz": "f16",
    "f8e5m2fnuz": "f16", "f8e4m3fnuz": "f16", "f8e3m4": "f16", "f4e2m1fn": "f16",
    "f8e8m0fnu": "f32",
}

# ops whose wide result can differ from the rounded one (exact ops such as abs, negate, maximum,
# select or data movement are left out: rounding their wide result changes nothing)
_VALUE_OPS = frozenset({
    "add", "subtract", "multiply", "divide", "remainder", "power", "atan2",
    "acos", "acosh", "asin", "asinh", "atanh", "cbrt", "cosine", "cosh", "erf",
    "exponential", "exponential-minus-one", "log", "log-plus-one", "logistic",
    "rsqrt", "sine", "sinh", "sqrt", "tan", "tanh",
    "dot", "convolution",
})

ENV = "HLO_EXCESS_PRECISION"


def enabled() -> bool:
    """Whether runs follow XLA CPU's excess precision (`HLO_EXCESS_PRECISION=0` turns it off)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _canonical_dot(inst: Instruction, shapes: dict) -> bool:
    """XLA's DotDecomposer leaves the dot alone (no reshape after it) and BatchDotSimplification
    finds no size-1 batch dimension to remove."""
    for side, operand in (("lhs", inst.operands[0]), ("rhs", inst.operands[1])):
        shape = shapes.get(operand)
        if shape is None or shape.is_tuple:
            return False
        contracting = tuple(inst.attrs.get(f"{side}_contracting_dims") or ())
        batch = tuple(inst.attrs.get(f"{side}_batch_dims") or ())
        if len(contracting) != 1 or len(batch) + 2 < len(shape.dims):
            return False
        if batch != tuple(range(len(batch))) or any(shape.dims[d] == 1 for d in batch):
            return False
    return True


def _source(comp_insts: dict, inst: Instruction) -> Instruction:
    """`inst`, looked through get-tuple-element(tuple(...)) pairs."""
    while inst.opcode == "get-tuple-element" and inst.operands:
        t = comp_insts.get(inst.operands[0])
        if t is None or t.opcode != "tuple":
            break
        nxt = comp_insts.get(t.operands[int(inst.attrs.get("index", 0))])
        if nxt is None:
            break
        inst = nxt
    return inst


def wide_producers(comp: Computation) -> dict[str, str]:
    """For each instruction of `comp` whose value some convert reads unrounded: its name -> the
    wide element type."""
    insts = comp.by_name
    shapes = {i.name: i.shape for i in comp.instructions}
    out: dict[str, str] = {}
    for u in comp.instructions:
        if u.opcode != "convert" or u.shape.is_tuple or len(u.operands) != 1:
            continue
        src = insts.get(u.operands[0])
        if src is None:
            continue
        h = _source(insts, src)
        if h.shape.is_tuple or h.opcode not in _VALUE_OPS:
            continue
        wide = WIDE_TYPE.get(h.shape.element_type)
        if wide is None or u.shape.element_type != wide:
            continue
        if h.opcode == "dot" and not _canonical_dot(h, shapes):
            continue
        out[h.name] = wide
    return out


def _with_type(shape: Shape, element_type: str) -> Shape:
    return dataclasses.replace(shape, element_type=element_type)


def _rewrite(comp: Computation, wide: dict[str, str], taken: set) -> Computation:
    insts = comp.by_name

    def fresh(base: str) -> str:
        name, k = base, 1
        while name in taken:
            k += 1
            name = f"{base}.{k}"
        taken.add(name)
        return name

    wide_name = {h: fresh(f"{h}.wide") for h in wide}
    upcast: dict[tuple[str, str], str] = {}      # (operand, wide type) -> its convert's name
    new: list[Instruction] = []
    for inst in comp.instructions:
        w = wide.get(inst.name)
        if w is not None:
            narrow = inst.shape.element_type
            operands = []
            for o in inst.operands:
                oshape = insts[o].shape
                if oshape.is_tuple or oshape.element_type != narrow:
                    operands.append(o)
                    continue
                key = (o, w)
                if key not in upcast:
                    upcast[key] = fresh(f"{o}.{w}")
                    new.append(Instruction(upcast[key], "convert", _with_type(oshape, w), (o,), loc=inst.loc))
                operands.append(upcast[key])
            wname = wide_name[inst.name]
            new.append(dataclasses.replace(inst, name=wname, shape=_with_type(inst.shape, w),
                                           operands=tuple(operands), operand_shapes=None))
            # the narrow value, rounded once from the wide one, for every other user
            new.append(Instruction(inst.name, "convert", inst.shape, (wname,), loc=inst.loc))
            continue
        if inst.opcode == "convert" and len(inst.operands) == 1 and not inst.shape.is_tuple:
            src = insts.get(inst.operands[0])
            h = _source(insts, src) if src is not None else None
            if h is not None and h.name in wide and inst.shape.element_type == wide[h.name]:
                inst = dataclasses.replace(inst, operands=(wide_name[h.name],), operand_shapes=None)
        new.append(inst)
    return dataclasses.replace(comp, instructions=tuple(new))


def apply(module: Module) -> Module:
    """`module` with XLA CPU's excess precision made explicit (the same module if nothing changes)."""
    plans = {c.name: wide_producers(c) for c in module.computations}
    if not any(plans.values()):
        return module
    taken = {i.name for _, i in module.instructions()}
    comps = tuple(_rewrite(c, plans[c.name], taken) if plans[c.name] else c for c in module.computations)
    return dataclasses.replace(module, computations=comps)


def prepare(module: Module) -> Module:
    """The module a run evaluates: `apply(module)` unless turned off; cached per module."""
    if not enabled():
        return module
    from .compiler import module_cache
    per = module_cache(module)
    got = per.get("excess_precision")
    if got is None:
        got = per["excess_precision"] = apply(module)
    return got
