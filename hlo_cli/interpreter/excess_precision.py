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

Where the rule applies (XLA's float_normalization.cc / dot_decomposer.cc; hlo_cli/SEMANTICS.md):
- the rule holds for the value-computing element-wise ops, dot, convolution and iota (a bf16
  iota's convert gets 257, not 256); data movement, select, clamp, maximum/minimum give no
  difference (their wide value is the rounded one), and neither do reduce and reduce-window (XLA
  rounds after each step of their bf16 reducer, as our rules do);
- only a direct `convert` user to exactly the wide type (f32 for bf16; f16 for the f8 types) sees
  the wide value, also through a get-tuple-element of a tuple instruction (XLA's HLO -> StableHLO
  -> HLO import, which JAX and our reference run take, folds those pairs; XLA given the HLO
  directly would round there); a convert to f64 or f16
  of a bf16 op, or a convert after a reshape, gets the rounded value;
- a dot that XLA's DotDecomposer canonicalizes first (more than one contracting or non-contracting
  dimension per operand, batch dimensions not leading) or whose batch dimensions of size 1
  BatchDotSimplification removes is followed by a reshape: its convert gets the rounded value.

XLA inlines every call first (FlattenCallGraph, CallInliner), so the rule crosses `call`
boundaries: a call's convert reads the callee's root wide, and a callee's convert of a parameter
reads the caller's operand wide.  Such a callee is cloned (`f.wide`) for the call sites concerned.
A get-tuple-element of a call returning a tuple, and the results of while and conditional, are
rounded (XLA normalizes the tuple's elements one by one).

`prepare(module)` rewrites the module the way XLA does: for each such op `h` it adds `h.wide`
(the op on operands converted to the wide type, with a wide result), `h` becomes
`convert(h.wide)` (computed once, rounded once) and the converts read `h.wide`.  Runs (and
their hooks: dumps, --check-finite) see these extra instructions; the names of the text keep
their declared types.
`HLO_EXCESS_PRECISION=0` in the environment turns this off (the text's literal semantics).
"""
from __future__ import annotations

import dataclasses
import os

from ..ir.attributes import ComputationRef
from ..ir.module import Computation, Instruction, Module
from ..ir.shape import Shape
from .per_module import cached

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
    "dot", "convolution", "iota",
})

ENV = "HLO_EXCESS_PRECISION"


def enabled() -> bool:
    """Whether runs follow XLA CPU's excess precision (`HLO_EXCESS_PRECISION=0` turns it off)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _canonical_dot(inst: Instruction, insts: dict) -> bool:
    """XLA's DotDecomposer leaves the dot alone (no reshape after it) and BatchDotSimplification
    finds no size-1 batch dimension to remove."""
    for side, operand in (("lhs", inst.operands[0]), ("rhs", inst.operands[1])):
        shape = insts[operand].shape if operand in insts else None
        if shape is None or shape.is_tuple:
            return False
        contracting = tuple(inst.attrs.get(f"{side}_contracting_dims") or ())
        batch = tuple(inst.attrs.get(f"{side}_batch_dims") or ())
        if len(contracting) != 1 or len(batch) + 2 < len(shape.dims):
            return False
        if batch != tuple(range(len(batch))) or any(d >= len(shape.dims) or shape.dims[d] == 1 for d in batch):
            return False
    return True


def _source(comp_insts: dict, inst: Instruction) -> Instruction:
    """`inst`, looked through get-tuple-element(tuple(...)) pairs."""
    while inst.opcode == "get-tuple-element" and inst.operands:
        t = comp_insts.get(inst.operands[0])
        if t is None or t.opcode != "tuple":
            break
        k = inst.attrs.get("index", 0)
        nxt = comp_insts.get(t.operands[k]) if isinstance(k, int) and 0 <= k < len(t.operands) else None
        if nxt is None:
            break
        inst = nxt
    return inst


def _wide_of(inst: Instruction, out_type: str) -> str | None:
    """The wide type if `out_type` is the type `inst`'s narrow result is computed in, else None."""
    if inst.shape.is_tuple:
        return None
    wide = WIDE_TYPE.get(inst.shape.element_type)
    return wide if wide is not None and wide == out_type else None


class _Planner:
    """Which values of which computation some convert reads wide.

    XLA inlines every call before normalizing (FlattenCallGraph, CallInliner), so the rule crosses
    `call` boundaries: a call's convert reads the callee's root wide, and a convert of a callee
    parameter reads the caller's operand wide.  Here a callee concerned is cloned per call site
    shape: its root made wide, and/or some of its parameters taking the wide value."""

    def __init__(self, module: Module):
        self.comps = module.computation_map
        self._converted: dict[str, dict[int, str]] = {}

    def callee(self, inst: Instruction) -> Computation | None:
        if inst.opcode != "call":
            return None
        names = inst.called_computations
        return self.comps.get(names[0]) if len(names) == 1 else None

    def can_widen(self, comp: Computation, inst: Instruction, wide_params=frozenset()) -> bool:
        """Whether `inst` (array-shaped, narrow) has a wide value: an op XLA computes wide, a call
        whose callee's root has one, a parameter given one."""
        if inst.opcode in _VALUE_OPS:
            if inst.opcode == "dot":
                return _canonical_dot(inst, comp.by_name)
            return True
        if inst.opcode == "parameter":
            return inst.parameter_number in wide_params
        callee = self.callee(inst)
        if callee is not None:
            root = _source(callee.by_name, callee.root_instruction)
            return (not root.shape.is_tuple and root.shape.element_type == inst.shape.element_type
                    and self.can_widen(callee, root))
        return False

    def converted_params(self, comp: Computation) -> dict[int, str]:
        """Parameter number -> wide type, for the parameters of `comp` a convert reads wide."""
        got = self._converted.get(comp.name)
        if got is not None:
            return got
        out = self._converted[comp.name] = {}
        insts = comp.by_name
        for u in comp.instructions:
            if u.opcode == "convert" and len(u.operands) == 1 and u.operands[0] in insts:
                h = _source(insts, insts[u.operands[0]])
                if h.opcode == "parameter" and _wide_of(h, u.shape.element_type) and not u.shape.is_tuple:
                    out[h.parameter_number] = u.shape.element_type
        return out

    def plan(self, comp: Computation, wide_params=frozenset(), wide_root: bool = False):
        """(values read wide: name -> wide type, per call: the callee parameters given a wide value)."""
        insts = comp.by_name
        wide: dict[str, str] = {}
        call_params: dict[str, frozenset] = {}

        def want(inst: Instruction, out_type: str) -> bool:
            h = _source(insts, inst)
            if _wide_of(h, out_type) and self.can_widen(comp, h, wide_params):
                wide[h.name] = out_type
                return True
            return False

        for u in comp.instructions:
            if u.opcode == "convert" and len(u.operands) == 1 and u.operands[0] in insts and not u.shape.is_tuple:
                want(insts[u.operands[0]], u.shape.element_type)
            callee = self.callee(u)
            if callee is not None:
                given = frozenset(k for k, w in self.converted_params(callee).items()
                                  if k < len(u.operands) and u.operands[k] in insts and want(insts[u.operands[k]], w))
                if given:
                    call_params[u.name] = given
        for p in comp.instructions:        # a wide parameter arrives wide whoever reads it
            if p.opcode == "parameter" and p.parameter_number in wide_params:
                wide[p.name] = WIDE_TYPE[p.shape.element_type]
        if wide_root:
            root = _source(insts, comp.root_instruction)
            wide[root.name] = WIDE_TYPE[root.shape.element_type]
        return wide, call_params


def wide_producers(comp: Computation, module: Module | None = None) -> dict[str, str]:
    """For each instruction of `comp` whose value some convert reads unrounded: its name -> the
    wide element type."""
    module = module or Module("m", (dataclasses.replace(comp, is_entry=True),), comp.name)
    return _Planner(module).plan(comp)[0]


def _with_type(shape: Shape, element_type: str) -> Shape:
    return dataclasses.replace(shape, element_type=element_type)


class _Rewriter:
    def __init__(self, module: Module):
        self.module = module
        self.planner = _Planner(module)
        self.taken = {i.name for _, i in module.instructions()} | {c.name for c in module.computations}
        self.clones: dict[tuple, str] = {}
        self.new_comps: list[Computation] = []

    def fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}.{k}"
        self.taken.add(name)
        return name

    def clone(self, comp: Computation, wide_params: frozenset, wide_root: bool) -> str:
        """The name of `comp` rewritten with these parameters arriving wide and/or its root wide."""
        key = (comp.name, wide_params, wide_root)
        if key not in self.clones:
            name = self.clones[key] = self.fresh(f"{comp.name}.wide")
            wide, call_params = self.planner.plan(comp, wide_params, wide_root)
            body = self.rewrite(comp, wide, call_params, wide_params, wide_root)
            self.new_comps.append(dataclasses.replace(body, name=name, is_entry=False, params=None,
                                                      result_shape=None))
        return self.clones[key]

    def rewrite(self, comp: Computation, wide: dict, call_params: dict, wide_params=frozenset(),
                wide_root: bool = False) -> Computation:
        insts = comp.by_name
        wide_name = {h: self.fresh(f"{h}.wide") for h in wide}
        upcast: dict[tuple[str, str], str] = {}      # (operand, wide type) -> its convert's name
        new: list[Instruction] = []
        for inst in comp.instructions:
            w = wide.get(inst.name)
            callee = self.planner.callee(inst)
            if callee is not None and (w is not None or inst.name in call_params):
                given = call_params.get(inst.name, frozenset())
                target = self.clone(callee, given, w is not None)
                attrs = {k: ComputationRef(target) if isinstance(v, ComputationRef) and v.name == callee.name else v
                         for k, v in inst.attrs.items()}
                operands = tuple(wide_name[_source(insts, insts[o]).name] if k in given else o
                                 for k, o in enumerate(inst.operands))
                call = dataclasses.replace(inst, operands=operands, attrs=attrs, operand_shapes=None)
                if w is None:
                    new.append(call)
                    continue
                new.append(dataclasses.replace(call, name=wide_name[inst.name], shape=_with_type(inst.shape, w)))
                new.append(Instruction(inst.name, "convert", inst.shape, (wide_name[inst.name],), loc=inst.loc))
                continue
            if w is not None:
                narrow = inst.shape.element_type
                if inst.opcode == "parameter":
                    new.append(dataclasses.replace(inst, name=wide_name[inst.name], shape=_with_type(inst.shape, w)))
                else:
                    operands = []
                    for o in inst.operands:
                        oshape = insts[o].shape
                        if oshape.is_tuple or oshape.element_type != narrow:
                            operands.append(o)
                            continue
                        key = (o, w)
                        if key not in upcast:
                            upcast[key] = self.fresh(f"{o}.{w}")
                            new.append(Instruction(upcast[key], "convert", _with_type(oshape, w), (o,), loc=inst.loc))
                        operands.append(upcast[key])
                    new.append(dataclasses.replace(inst, name=wide_name[inst.name], shape=_with_type(inst.shape, w),
                                                   operands=tuple(operands), operand_shapes=None))
                # the narrow value, rounded once from the wide one, for every other user
                new.append(Instruction(inst.name, "convert", inst.shape, (wide_name[inst.name],), loc=inst.loc))
                continue
            if inst.opcode == "convert" and len(inst.operands) == 1 and not inst.shape.is_tuple:
                src = insts.get(inst.operands[0])
                h = _source(insts, src) if src is not None else None
                if h is not None and h.name in wide and inst.shape.element_type == wide[h.name]:
                    inst = dataclasses.replace(inst, operands=(wide_name[h.name],), operand_shapes=None)
            new.append(inst)
        root = wide_name[_source(insts, comp.root_instruction).name] if wide_root else comp.root
        return dataclasses.replace(comp, instructions=tuple(new), root=root)


def apply(module: Module) -> Module:
    """`module` with XLA CPU's excess precision made explicit (the same module if nothing changes)."""
    if not any(i.shape.element_type in WIDE_TYPE for _, i in module.instructions() if not i.shape.is_tuple):
        return module
    rw = _Rewriter(module)
    plans = {c.name: rw.planner.plan(c) for c in module.computations}
    if not any(w or cp for w, cp in plans.values()):
        return module
    comps = tuple(rw.rewrite(c, *plans[c.name]) if any(plans[c.name]) else c for c in module.computations)
    return dataclasses.replace(module, computations=comps + tuple(rw.new_comps))


def prepare(module: Module) -> Module:
    """The module a run evaluates: `apply(module)` unless turned off; cached per module."""
    if not enabled():
        return module
    return cached(module, "excess_precision", lambda: apply(module))
