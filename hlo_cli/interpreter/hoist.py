"""Loop-invariant code motion before a run (what XLA's WhileLoopInvariantCodeMotion does).

`hoist_loop_invariants(module)` returns the module to run: the same module object when nothing is
worth moving (most modules), or one whose while loops no longer recompute, every iteration, values
that do not change across iterations.  The rewrite, per while loop (nested loops too: innermost
first, so a value hoisted out of an inner loop can leave the outer one as well):

- the loop state's invariant elements: root tuple operand i is get-tuple-element(param, i),
  directly or through a copy or a shape-preserving bitcast (array elements only, as XLA);
- the body's invariant instructions: constants, those elements, and pure instructions whose
  operands are all invariant.  Pure: no side effects, no rng, no io, no collectives, no custom
  calls, no async wrappers, no control dependencies, and the same for every computation they
  call; replica-id and partition-id are pure (a loop runs on one device).  A pure `call` mixing
  invariant and varying operands is inlined first (XLA inlines every call before this pass; JAX
  wraps a fori_loop's or scan's body in one), so the invariant part of its callee can move; a
  call whose callee has nothing to move stays a call (inlined, its products could meet equal ones
  of the body, which XLA's CSE shares, and the loop would contract other multiply-adds);
- the ones worth moving: XLA leaves bitcast, broadcast, iota, reverse, slice, transpose, tuple,
  reshape and constants in place unless an instruction that is moved needs them (they would only
  make a large loop state out of small operands); here an instruction is also not worth moving on
  its own when it is a small element-wise or data-movement op (fewer than MIN_ELEMENTS elements in
  and out: a scalar add costs what the get-tuple-element replacing it costs), or when its result
  is much larger than its operands (a broadcast-like fusion);
- those are computed once before the loop (the cheap invariants they need too, copied), the
  values the body still reads appended to the loop state (condition and body take the wider
  tuple), each read in the body through a get-tuple-element `<name>.invariant`; what only the
  moved instructions read leaves the body.  The while keeps its name and its users see the
  original result: get-tuple-element indices are unchanged, and a use of the whole tuple gets a
  tuple of the original elements.  Side effects stay where they are, with what they read.  The
  body and condition keep their names too, unless another instruction still calls the originals.

Moved instructions keep their names (a fresh one only if the name is taken where they land) and
their source locations, so errors still point at them.  Like XLA, loops known to run at most once
are left alone (a known_trip_count, or a counter compared against a constant); a loop whose trip
count is not known and turns out to be zero now computes the hoisted values once, as XLA's does.
Only values are moved: no hook watches a run that uses this (evaluator.run_module and
devices.run_devices call it only without one), so no event is lost.  The rewrite is cached per
module object; values are bit for bit those of the loop as written.
`HLO_HOIST=0` in the environment turns it off (to compare, or to rule it out).
"""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from ..ir.attributes import ComputationRef
from ..ir.module import Computation, Instruction, Module
from ..ir.opcodes import ASYNC, COLLECTIVE, CONTROL_FLOW, DEVICE_ID, IO, OPCODES, READS_RNG, has_trait, with_trait
from ..ir.shape import Shape
from .memory import result_bytes
from .schedule import reachable, text_order

# an instruction this small (elements of its result and of its largest operand) is not worth a
# loop-state element of its own unless it calls a computation or is a linear-algebra op
MIN_ELEMENTS = 256

# an instruction whose result is this much larger than its operands (and at least this large)
# only moves with a user that moves (XLA's hoist_size_inflation_ratio, which XLA CPU leaves unset):
# a broadcast-like fusion or element-wise op is cheap to recompute and would hold its large value
# through the whole loop.  Not the _COMPUTE ops: a dot whose result is 13x its f8 operands (the
# issue's f8 GEMM loop) is the very thing to compute once, and its value was live in every
# iteration anyway.
_INFLATION = 8
_INFLATE_MIN_BYTES = 1 << 20
_COMPUTE = frozenset({"dot", "convolution", "ragged-dot", "scaled-dot", "fft", "cholesky", "triangular-solve",
                      "call", "while", "conditional", "sort", "reduce", "reduce-window", "select-and-scatter",
                      "scatter", "gather", "batch-norm-training", "batch-norm-inference", "batch-norm-grad"})

# XLA's NotWorthHoistingIndividually (constants and reshapes too, as XLA CPU runs the pass with its
# defaults); get-tuple-element, replica-id and partition-id cost nothing either
_CHEAP = frozenset({"constant", "bitcast", "broadcast", "iota", "reverse", "slice", "transpose", "tuple",
                    "reshape", "get-tuple-element", "replica-id", "partition-id"})

# always worth moving when invariant: each costs far more than a get-tuple-element
_HEAVY = frozenset({"dot", "convolution", "ragged-dot", "scaled-dot", "fft", "cholesky", "triangular-solve",
                    "fusion", "call", "while", "conditional", "map", "reduce", "reduce-window",
                    "select-and-scatter", "sort", "topk", "scan", "gather", "scatter",
                    "batch-norm-training", "batch-norm-inference", "batch-norm-grad"})

# not a function of the operands alone, or observable, or tied to the loop's position in time: the
# opcodes with these traits (random state, host and peer transfers, collectives, asynchronous
# halves), and these (parameters; custom calls; tokens and barriers that order other work;
# rng-bit-generator, whose state a loop threads through its iterations)
_IMPURE_TRAITS = (READS_RNG, IO, COLLECTIVE, ASYNC)
_IMPURE = frozenset({"parameter", "custom-call", "after-all", "add-dependency", "domain", "opt-barrier",
                     "rng-bit-generator"}) | with_trait(*_IMPURE_TRAITS)

# custom calls that make XLA leave the whole loop alone (SPMD shape changes, host offloading)
_BAIL_TARGETS = frozenset({"SPMDFullToShardShape", "SPMDShardShapeToFull", "MoveToDevice", "MoveToHost"})

_DISABLE = "_xla_disable_loop_instr_hoisting"

# the instructions through which a while loop can be reached (not fusions nor applied computations)
_CONTROL = with_trait(CONTROL_FLOW) | {"async-start", "custom-call"}

# nested calls inlined at most this deep
_INLINE_ROUNDS = 4


ENV = "HLO_HOIST"

_SAME = object()            # in a module's cache: "run the module itself"


def enabled() -> bool:
    """Whether compiled runs hoist loop invariants (`HLO_HOIST=0` in the environment turns it off)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def hoist_loop_invariants(module: Module) -> Module:
    """The module to run when no hook watches the instructions (see the module docstring)."""
    if not enabled():
        return module
    from .per_module import module_cache
    per = module_cache(module)
    got = per.get("hoisted")
    if got is None:
        got = module
        if any(i.opcode == "while" for c in module.computations for i in c.instructions):
            try:
                got = Hoister(module).run()
            except (KeyError, IndexError, AttributeError, TypeError, ValueError):
                got = module        # a module the checker would refuse: the run reports it as written
        # (a module's cache must not hold the module itself: it would never be collected)
        per["hoisted"] = _SAME if got is module else got
        if got is not module:
            module_cache(got)["hoisted"] = _SAME     # hoisting again finds nothing new
    return module if got is _SAME else got


# ----------------------------------------------------------------------------- helpers

def _elements(shape: Shape) -> int:
    return sum(s.num_elements for s in shape.leaves())


def _ref_names(inst: Instruction) -> tuple[str, ...]:
    return inst.called_computations


def _int_constant(inst: Instruction | None) -> int | None:
    if inst is None or inst.opcode != "constant" or inst.literal is None or inst.shape.is_tuple:
        return None
    v = getattr(inst.literal, "value", None)
    if not isinstance(v, np.ndarray) or v.size != 1 or v.dtype.kind not in "iu":
        return None
    return int(v.reshape(()))


class _Fresh:
    """Names not yet used in a scope."""

    def __init__(self, names):
        self.used = set(names)

    def __call__(self, base: str, suffix: str = ".hoisted") -> str:
        name = base
        k = 0
        while name in self.used:
            k += 1
            name = f"{base}{suffix}" if k == 1 else f"{base}{suffix}.{k}"
        self.used.add(name)
        return name


class _Before:
    """The instructions a rewrite puts before a while loop (`insts`), and the loop's initial state
    elements as names there (`element`: an operand of the initial tuple, or a get-tuple-element of it)."""

    def __init__(self, w: Instruction, init: Instruction, fresh: _Fresh):
        self.w, self.init, self.fresh = w, init, fresh
        self.insts: list[Instruction] = []
        self._elems: dict[int, str] = {}

    def element(self, i: int, loc) -> str:
        if i not in self._elems:
            init = self.init
            if init.opcode == "tuple":
                self._elems[i] = init.operands[i]
            else:
                g = Instruction(self.fresh(f"{init.name}.{i}", ".elem"), "get-tuple-element",
                                self.w.shape.tuple_shapes[i], (init.name,), {"index": i}, loc=loc)
                self.insts.append(g)
                self._elems[i] = g.name
        return self._elems[i]


# ----------------------------------------------------------------------------- the rewrite

class Hoister:
    """The rewrite of one module (`run`), and its purity test (`pure_inst`: the code generator of
    whole loops asks it too)."""

    def __init__(self, module: Module):
        self.module = module
        self.comps: dict[str, Computation] = dict(module.computation_map)
        self.order: list[str] = [c.name for c in module.computations]
        self.names = _Fresh(self.comps)            # computation names
        self._pure: dict[str, bool] = {}
        self.changed = False

    # -- purity ----------------------------------------------------------------------
    def pure_inst(self, inst: Instruction) -> bool:
        op = inst.opcode
        if has_trait(op, DEVICE_ID):
            return True                            # a loop runs on one device
        if op in _IMPURE or op not in OPCODES:
            return False
        if inst.attrs.get("control-predecessors"):
            return False
        return all(self.pure_comp(c) for c in _ref_names(inst))

    def pure_comp(self, name: str) -> bool:
        got = self._pure.get(name)
        if got is not None:
            return got
        self._pure[name] = False                   # recursion: not pure
        comp = self.comps.get(name)
        ok = comp is not None and all(i.opcode == "parameter" or self.pure_inst(i) for i in comp.instructions)
        self._pure[name] = ok
        return ok

    # -- driver ----------------------------------------------------------------------
    def post_order(self, comps: dict | None = None) -> list[str]:
        """Computations reachable from the entry through control flow, callees first (loops are
        not found inside fusions or reducers)."""
        comps = self.comps if comps is None else comps
        out: list[str] = []
        seen: set[str] = set()
        stack = [(self.module.entry, False)]
        while stack:
            name, expanded = stack.pop()
            if expanded:
                out.append(name)
                continue
            if name in seen or name not in comps:
                continue
            seen.add(name)
            stack.append((name, True))
            for inst in comps[name].instructions:
                if inst.opcode in _CONTROL:
                    for c in reversed(_ref_names(inst)):
                        if c not in seen:
                            stack.append((c, False))
        return out

    def run(self) -> Module:
        for cname in self.post_order():
            for wname in [i.name for i in self.comps[cname].instructions if i.opcode == "while"]:
                self.hoist(cname, wname)
        if not self.changed:
            return self.module
        # computations only the old loops reached go (the text's own unreachable ones stay)
        reached_before = set(self.post_order(self.module.computation_map))
        reached = set(self.post_order(self.comps))
        keep = [n for n in self.order if n in reached or n not in reached_before]
        return dataclasses.replace(self.module, computations=tuple(self.comps[n] for n in keep))

    # -- one loop --------------------------------------------------------------------
    def hoist(self, cname: str, wname: str) -> None:
        """Move the invariants worth moving out of while loop `wname` of computation `cname`."""
        loop = self.candidate(cname, wname)
        if loop is None:
            return
        comp, w, body, cond, param, init, invariant_idx = loop
        got = self.movable(body, param, invariant_idx)
        if got is None:
            return
        body, worth = got
        bby = body.by_name

        # in the body, each worthy instruction becomes a get-tuple-element of the wider parameter;
        # the ones still read there get loop-state elements
        hoisted = {h.name for h in worth}
        stub = {h.name: dataclasses.replace(h, opcode="get-tuple-element", operands=(param.name,),
                                            attrs={"index": -1}, literal=None, operand_shapes=None)
                for h in worth}
        stubbed = {k: stub.get(k, v) for k, v in bby.items()}
        live_after = reachable(self.roots(body), stubbed)
        slots = [h for h in worth if h.name in live_after]
        if not slots:
            return

        # names: unique in the computations concerned (moved instructions keep theirs where free)
        taken = {i.name for i in comp.instructions} | {i.name for i in cond.instructions}
        taken.update(x for x in live_after if x not in hoisted)
        taken.add(param.name)
        fresh = _Fresh(taken)
        before = _Before(w, init, fresh)
        outer = self.outside(body, param, slots, before)

        # the wider loop state
        n = len(w.shape.tuple_shapes)
        wide = Shape.tuple_of(tuple(w.shape.tuple_shapes) + tuple(h.shape for h in slots))
        new_body = self.widen(body, wide, n, fresh, self.rename(body.name, cname, wname))
        new_body = self.read_state(new_body, body, param, wide, slots, hoisted, live_after, fresh, n)
        new_cond = self.widen(cond, wide, n, fresh, self.rename(cond.name, cname, wname))
        self.rewrite_caller(comp, w, init, wide, slots, outer, before, fresh, n, new_body, new_cond)

    def candidate(self, cname: str, wname: str):
        """(computation, while, body, condition, body parameter, initial state, invariant element
        indices) of a loop this pass may rewrite, or None."""
        comp = self.comps[cname]
        by = comp.by_name
        w = by[wname]
        if not w.shape.is_tuple or len(w.operands) != 1:
            return None
        fa = w.attrs.get("frontend_attributes")
        if fa is not None and _DISABLE in dict(getattr(fa, "items", ())):
            return None
        body = self.comps.get(getattr(w.attrs.get("body"), "name", None))
        cond = self.comps.get(getattr(w.attrs.get("condition"), "name", None))
        if body is None or cond is None:
            return None
        bparams = body.parameters
        if len(bparams) != 1 or len(cond.parameters) != 1:
            return None
        param = bparams[0]
        root = body.root_instruction
        n = len(w.shape.tuple_shapes)
        if root.opcode != "tuple" or len(root.operands) != n or param.shape != w.shape:
            return None
        for i in body.instructions:
            if i.opcode == "domain" or (i.opcode == "custom-call"
                                        and i.attrs.get("custom_call_target") in _BAIL_TARGETS):
                return None
        init = by.get(w.operands[0])
        if init is None:
            return None
        invariant_idx = self.invariant_elements(body, param, root)
        if not invariant_idx:
            return None
        bound = self.trip_bound(w, init, body, cond, param, root, comp)
        if bound is not None and bound <= 1:
            return None
        return comp, w, body, cond, param, init, invariant_idx

    def movable(self, body: Computation, param: Instruction, invariant_idx: set[int]):
        """(the body, the instructions worth moving out of it) or None: calls that mix invariant and
        varying operands are inlined first (XLA inlines every call before this pass), so the
        invariant part of their callee can move too."""
        invariant, worth = self.analyse(body, param, invariant_idx)
        for _ in range(_INLINE_ROUNDS):
            mixed = [i.name for i in body.instructions
                     if i.opcode == "call" and any(o in invariant for o in i.operands)
                     and i.name not in invariant and self.inlinable(i)]
            kept = False
            for name in mixed:
                # a call is inlined only where that lets part of its callee move (or a call inside
                # it, inlined next round): inlined for nothing, its products would meet the body's
                # equal ones (XLA's CSE) and change which multiply-adds contract into one FMA, so
                # the hoisted loop would not give the bits the loop as written gives
                old = {i.name for i in body.instructions}
                trial = self.inline(body, {name})
                t_invariant, t_worth = self.analyse(trial, param, invariant_idx)
                if any(w.name not in old for w in t_worth) or any(
                        i.name not in old and i.opcode == "call" and any(o in t_invariant for o in i.operands)
                        and i.name not in t_invariant and self.inlinable(i) for i in trial.instructions):
                    body, invariant, worth, kept = trial, t_invariant, t_worth, True
            if not kept:
                break
        return (body, worth) if worth else None

    @staticmethod
    def outside(body: Computation, param: Instruction, slots: list, before: "_Before") -> dict[str, str]:
        """The slots' values computed before the loop, with the invariants they need (copies):
        body name -> the name of its value in the caller (instructions added to `before.insts`)."""
        bby = body.by_name
        needed: set[str] = set()
        stack = [h.name for h in slots]
        while stack:
            x = stack.pop()
            if x in needed:
                continue
            needed.add(x)
            inst = bby[x]
            if not (inst.opcode == "get-tuple-element" and inst.operands[0] == param.name):
                stack.extend(inst.operands)
        outer: dict[str, str] = {}
        for inst in text_order(body):
            if inst.name not in needed:
                continue
            if inst.opcode == "get-tuple-element" and inst.operands[0] == param.name:
                outer[inst.name] = before.element(inst.attrs["index"], inst.loc)
                continue
            clone = dataclasses.replace(inst, name=before.fresh(inst.name),
                                        operands=tuple(outer[o] for o in inst.operands))
            before.insts.append(clone)
            outer[inst.name] = clone.name
        return outer

    @staticmethod
    def read_state(new_body: Computation, body: Computation, param: Instruction, wide: Shape, slots: list,
                   hoisted: set, live_after: set, fresh: _Fresh, n: int) -> Computation:
        """The widened body reading the slots from its state (get-tuple-element `<name>.invariant`)
        and passing them on; the moved instructions, and what only they read, leave it."""
        bby = body.by_name
        state = {h.name: (n + k, fresh(f"{h.name}.invariant", ".x")) for k, h in enumerate(slots)}
        bins = []
        for inst in new_body.instructions:
            if inst.name in state:
                k, name = state[inst.name]
                inst = dataclasses.replace(inst, name=name, opcode="get-tuple-element", operands=(param.name,),
                                           attrs={"index": k}, literal=None, operand_shapes=None)
            elif inst.name in hoisted or (inst.name in bby and inst.name not in live_after
                                          and inst.opcode != "parameter"):
                continue                            # moved, read only by moved instructions, or dead
            elif any(o in state for o in inst.operands):
                inst = dataclasses.replace(inst, operands=tuple(state[o][1] if o in state else o
                                                                for o in inst.operands), operand_shapes=None)
            if inst.name == new_body.root:
                inst = dataclasses.replace(inst, shape=wide, operand_shapes=None,
                                           operands=inst.operands + tuple(state[h.name][1] for h in slots))
            bins.append(inst)
        return dataclasses.replace(new_body, instructions=tuple(bins))

    def rewrite_caller(self, comp: Computation, w: Instruction, init: Instruction, wide: Shape, slots: list,
                       outer: dict, before: "_Before", fresh: _Fresh, n: int, new_body: Computation,
                       new_cond: Computation) -> None:
        """The caller with the while (same name, wider state; its users see the original tuple)
        after the values computed before it, and the new body and condition in the module."""
        cname, wname = comp.name, w.name
        if init.opcode == "tuple" and self.sole_user(comp, init.name, wname):
            new_init = dataclasses.replace(init, shape=wide,
                                           operands=init.operands + tuple(outer[h.name] for h in slots),
                                           operand_shapes=None)
            drop_init = True
        else:
            new_init = Instruction(fresh(f"{init.name}.wide", ".x"), "tuple", wide,
                                   tuple(before.element(i, w.loc) for i in range(n))
                                   + tuple(outer[h.name] for h in slots), loc=w.loc)
            drop_init = False
        attrs = dict(w.attrs)
        attrs["body"] = ComputationRef(new_body.name)
        attrs["condition"] = ComputationRef(new_cond.name)
        new_w = dataclasses.replace(w, shape=wide, operands=(new_init.name,), attrs=attrs, operand_shapes=None)
        whole_users = [i for i in comp.instructions
                       if wname in i.operands and i.opcode != "get-tuple-element"]
        narrow = None
        if whole_users or comp.root == wname:
            gtes = [Instruction(fresh(f"{wname}.{i}", ".elem"), "get-tuple-element", w.shape.tuple_shapes[i],
                                (wname,), {"index": i}, loc=w.loc) for i in range(n)]
            narrow = Instruction(fresh(f"{wname}.narrow", ".x"), "tuple", w.shape, tuple(g.name for g in gtes),
                                 loc=w.loc)
        out: list[Instruction] = []
        for inst in comp.instructions:
            if inst.name == init.name and drop_init:
                out.extend(before.insts)
                out.append(new_init)
                continue
            if inst.name == wname:
                if not drop_init:
                    out.extend(before.insts)
                    out.append(new_init)
                out.append(new_w)
                if narrow is not None:
                    out.extend(gtes)
                    out.append(narrow)
                continue
            if narrow is not None and wname in inst.operands and inst.opcode != "get-tuple-element":
                inst = dataclasses.replace(inst, operands=tuple(narrow.name if o == wname else o
                                                                for o in inst.operands),
                                           operand_shapes=None)
            out.append(inst)
        new_root = narrow.name if narrow is not None and comp.root == wname else comp.root
        self.comps[cname] = dataclasses.replace(comp, instructions=tuple(out), root=new_root)
        for c in (new_body, new_cond):
            if c.name not in self.comps:
                self.order.insert(self.order.index(cname), c.name)
            self.comps[c.name] = c
        self.changed = True

    # -- pieces ----------------------------------------------------------------------
    def roots(self, body: Computation) -> list[str]:
        """What a body runs for: its root and whatever is not pure (side effects stay put)."""
        return [body.root] + [i.name for i in body.instructions
                              if i.opcode != "parameter" and not self.pure_inst(i)]

    def analyse(self, body: Computation, param: Instruction, invariant_idx: set[int]):
        """The body's invariant instructions (names) and, in order, the ones worth moving."""
        bby = body.by_name
        controlled = {p for i in body.instructions for p in (i.attrs.get("control-predecessors", ()) or ())}
        live = reachable(self.roots(body), bby)
        invariant: set[str] = set()
        worth: list[Instruction] = []
        for inst in text_order(body):
            op = inst.opcode
            if op == "get-tuple-element" and inst.operands[0] == param.name:
                if inst.attrs.get("index") in invariant_idx:
                    invariant.add(inst.name)
                continue
            if op == "constant":
                invariant.add(inst.name)
                continue
            if op == "parameter" or inst.name in controlled or not self.pure_inst(inst):
                continue
            if not all(o in invariant for o in inst.operands):
                continue
            invariant.add(inst.name)
            if inst.name in live and self.worth(inst, bby):
                worth.append(inst)
        return invariant, worth

    def inlinable(self, call: Instruction) -> bool:
        callee = self.comps.get(getattr(call.attrs.get("to_apply"), "name", None))
        return (callee is not None and self.pure_inst(call)
                and sorted(p.parameter_number for p in callee.parameters) == list(range(len(call.operands))))

    def inline(self, body: Computation, calls: set[str]) -> Computation:
        """`body` with the `calls` (pure call instructions) replaced by their callees' instructions;
        those keep their names where the body does not use them already."""
        fresh = _Fresh(i.name for i in body.instructions)
        subst: dict[str, str] = {}
        out: list[Instruction] = []
        for inst in body.instructions:
            if inst.name not in calls:
                out.append(inst)
                continue
            callee = self.comps[inst.attrs["to_apply"].name]
            local: dict[str, str] = {}
            for p in callee.parameters:
                local[p.name] = inst.operands[p.parameter_number]
            for ci in text_order(callee):
                if ci.opcode == "parameter":
                    continue
                name = fresh(ci.name, ".inlined")
                local[ci.name] = name
                out.append(dataclasses.replace(ci, name=name, operands=tuple(local[o] for o in ci.operands)))
            subst[inst.name] = local[callee.root]
        if not subst:
            return body

        def resolve(x: str) -> str:
            while x in subst:
                x = subst[x]
            return x
        out = [dataclasses.replace(i, operands=tuple(resolve(o) for o in i.operands), operand_shapes=None)
               if any(o in subst for o in i.operands) else i for i in out]
        return dataclasses.replace(body, instructions=tuple(out), root=resolve(body.root))

    @staticmethod
    def sole_user(comp: Computation, name: str, user: str) -> bool:
        if comp.root == name:
            return False
        users = [i.name for i in comp.instructions
                 if name in i.operands or name in (i.attrs.get("control-predecessors", ()) or ())]
        return users == [user]

    @staticmethod
    def invariant_elements(body: Computation, param: Instruction, root: Instruction) -> set[int]:
        """Indices i whose root operand is get-tuple-element(param, i), through copies and bitcasts
        that keep the shape; array-shaped elements only."""
        bby = body.by_name
        out: set[int] = set()
        for i, o in enumerate(root.operands):
            inst = bby.get(o)
            while inst is not None and inst.opcode in ("copy", "bitcast") and inst.operands:
                src = bby.get(inst.operands[0])
                if src is None or src.shape != inst.shape:
                    break
                inst = src
            if (inst is not None and inst.opcode == "get-tuple-element" and inst.operands[0] == param.name
                    and inst.attrs.get("index") == i and not inst.shape.is_tuple):
                out.add(i)
        return out

    def worth(self, inst: Instruction, by: dict) -> bool:
        op = inst.opcode
        if op in _CHEAP:
            return False
        if op not in _COMPUTE:
            out = result_bytes(inst.shape) or 0
            if out >= _INFLATE_MIN_BYTES and out > _INFLATION * sum(result_bytes(by[o].shape) or 0
                                                                      for o in inst.operands if o in by):
                return False        # would hold a large value through the loop: only with its user
        if op in _HEAVY:
            return True
        biggest = max((_elements(by[o].shape) for o in inst.operands if o in by), default=0)
        return max(biggest, _elements(inst.shape)) >= MIN_ELEMENTS

    @staticmethod
    def trip_bound(w, init, body, cond, param, root, comp) -> int | None:
        """An upper bound of the loop's trip count if one is plain to see, else None."""
        bc = w.attrs.get("backend_config")
        j = getattr(bc, "json", None) if bc is not None else None
        if isinstance(j, dict):
            ktc = j.get("known_trip_count")
            if isinstance(ktc, dict):
                try:
                    return int(ktc.get("n"))
                except (TypeError, ValueError):
                    pass
        # a counter: cond is counter < constant, the body adds 1, the loop starts from a constant
        cby = cond.by_name
        croot = cond.root_instruction
        if croot.opcode != "compare" or croot.attrs.get("direction") != "LT" or len(croot.operands) != 2:
            return None
        lhs, rhs = cby.get(croot.operands[0]), cby.get(croot.operands[1])
        limit = _int_constant(rhs)
        if (lhs is None or limit is None or lhs.opcode != "get-tuple-element"
                or lhs.operands[0] != cond.parameters[0].name):
            return None
        k = lhs.attrs.get("index")
        if not isinstance(k, int) or not 0 <= k < len(root.operands):
            return None
        bby = body.by_name
        step = bby.get(root.operands[k])
        if step is None or step.opcode != "add" or len(step.operands) != 2:
            return None
        a, b = (bby.get(x) for x in step.operands)
        if _int_constant(b) != 1:
            a, b = b, a
        if (_int_constant(b) != 1 or a is None or a.opcode != "get-tuple-element" or a.operands[0] != param.name
                or a.attrs.get("index") != k):
            return None
        if init.opcode != "tuple":
            return None
        start = _int_constant(comp.by_name.get(init.operands[k]))
        if start is None:
            return None
        return max(0, limit - start)

    def rename(self, name: str, cname: str, wname: str) -> str:
        """The name of the rewritten `name`: the same when only the while `wname` (in `cname`) calls
        it (profiles and messages then name the computations as the text does), else a fresh one."""
        for cn, c in self.comps.items():
            for i in c.instructions:
                if i.opcode in _CONTROL and name in _ref_names(i) and not (cn == cname and i.name == wname):
                    return self.names(name)
        return name

    def widen(self, comp: Computation, wide: Shape, n: int, fresh: _Fresh, name: str) -> Computation:
        """A copy of `comp` (a loop body or condition) taking the wider state: its parameter gets
        the wider shape; a use of the whole parameter other than get-tuple-element gets a tuple of
        the original elements."""
        param = comp.parameters[0]
        whole = [i for i in comp.instructions
                 if param.name in i.operands and i.opcode != "get-tuple-element"]
        narrow_insts: list[Instruction] = []
        narrow = None
        if whole or comp.root == param.name:
            narrow_insts = [Instruction(fresh(f"{param.name}.{i}", ".elem"), "get-tuple-element",
                                        param.shape.tuple_shapes[i], (param.name,), {"index": i}, loc=param.loc)
                            for i in range(n)]
            narrow = Instruction(fresh(f"{param.name}.narrow", ".x"), "tuple", param.shape,
                                 tuple(g.name for g in narrow_insts), loc=param.loc)
            narrow_insts.append(narrow)
        out: list[Instruction] = []
        for inst in comp.instructions:
            if inst.name == param.name:
                out.append(dataclasses.replace(inst, shape=wide))
                out.extend(narrow_insts)
                continue
            if narrow is not None and param.name in inst.operands and inst.opcode != "get-tuple-element":
                inst = dataclasses.replace(inst, operands=tuple(narrow.name if o == param.name else o
                                                                for o in inst.operands), operand_shapes=None)
            out.append(inst)
        root = narrow.name if narrow is not None and comp.root == param.name else comp.root
        params = comp.params
        if params is not None:
            params = tuple((nm, wide if nm == param.name else s) for nm, s in params)
        result_shape = comp.result_shape
        if result_shape is not None and comp.root_instruction.opcode == "tuple" and result_shape == param.shape:
            result_shape = wide
        return dataclasses.replace(comp, name=name, instructions=tuple(out), root=root,
                                   params=params, result_shape=result_shape, is_entry=False)
