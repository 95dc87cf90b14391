"""Computations prepared for fast execution: the evaluator's fast path.

Running an instruction through the generic loop costs a list of operands, an indirect rule call,
the rule's own decoding of its attributes and element types, and the shape check: a fixed cost
per instruction that dominates a model of small arrays or a loop of thousands of iterations.  Here
each computation is prepared once per module into a list of steps:

* constants, and the pure ops applied only to constants (broadcast, reshape, convert, arithmetic,
  ...), are evaluated at preparation time (read-only arrays shared by every run);
* the common instructions get a specialised callable chosen from their static shapes and element
  types (the prepare stages of the rules in hlo_cli/interpreter/ops/), e.g. ``np.add`` with XLA CPU's flushing of subnormal
  results; integer ops write into the buffer of an operand that dies there when nothing else can
  see that buffer (``_in_place``);
* every other instruction calls its evaluation rule exactly as the generic loop does;
* runs of elementwise steps over large arrays of one shape become REGION steps, executed block by
  block so that intermediate values stay in cache (``_fuse``);
* calls and fusions of small computations are inlined: the callee's steps run in the caller, on
  value slots of their own (``_inline``), so a loop body with its callees is one list of steps;
* the result check of the generic loop stays (dtype and dims of every array result, ``conforms``
  for tuples), and each value is dropped after its last use, so peak memory follows the live set.

The steps run in a loop (tier 1).  A computation that has run more than HOT_CALLS times -- a loop
body, a computation called from many places -- also becomes generated Python code (tier 2, written
by the one code generator, codegen.py, as are fused regions and whole loops): one
function whose local variables hold the values, which removes the loop's dispatch.  There, runs of
f32/f64 arithmetic steps share one setting of the processor's FTZ/DAZ flags and one NaN check of
the values leaving the run (``_float_runs``; a NaN sends the run back to the kernels from the first
step where two NaNs met, ``_nan_meets``).  A while loop whose condition and body are compiled
runs in ``run_while``: once both are generated code it calls them directly, the bookkeeping of
run_compiled done once per loop; once it has run loopgen.LOOPGEN_AFTER iterations, a loop of small
arrays becomes one generated function, condition and body inside one ``while`` (loopgen.py).  (Generating
code for everything costs more than it saves: compiling a 15,000-instruction entry computation
takes Python longer than running it.)

Errors keep their location: the step being run, or the line of generated code an exception came
from, names the instruction.  Hooks (dumps, --check-finite) use the generic loop, which hands every
value to them; results are the same either way (tests/interpreter/test_compiled.py).

The prepared form depends on the module only, never on a run's inputs or options other than the
result check, so it is cached per module and reused by later runs.  Every `hlo run` is a first run,
so preparing is kept cheap: XLA's clones (a fusion per call site, a loop body per random draw) are
prepared once and shared by structure (``fingerprint``, ``_rebound``), generated source is compiled
once per text, and the cyclic garbage collector rests while a module is being prepared.
"""
from __future__ import annotations

import functools
import gc

import numpy as np

from ..errors import HloEvalError
from ..ir.attributes import ComputationRef, InlineComputation
from ..ir.module import Computation, Module
from .kernels import ELEMENT, FOLDED, PURE, REGION, RULE, SAME, TUPLE, WITH_EC, Static, capabilities, fold_constant
from .registry import prepare
from .contraction import contract
from .fpenv import hardware
from . import loopgen as _loopgen
from . import native as _native
from .per_module import module_cache
from .hooks import Level, track
from .located import EVAL_ERRORS, bad_result, limit_error, located_error, reraise_at
from .codegen import computation_function, first_meet, nanfree, raising_line, region_function
from .steps import GROUP, Step
from .parallel import blas_single, run_parts, split, threads
from .values import conforms



# a computation is turned into Python code once it has run this many times (loop bodies, called
# computations); before that, and for the entry computation, its steps run in a loop
HOT_CALLS = 4



# Steps are made by the thousand while a module is prepared: built with tuple's own constructor
# (a NamedTuple's __new__ and _replace are Python functions, several times slower)
_new_step = tuple.__new__


def _with_frees_of(st: Step, frees) -> Step:
    """`st` with `frees` as the slots it frees."""
    return _new_step(Step, (st[0], st[1], st[2], st[3], st[4], st[5], frees))

class Compiled:
    """One computation prepared for fast runs: `steps` (`Step`s: steps.py), run by a loop
    (`run_steps`); after HOT_CALLS runs also `fn`, the same steps as generated Python code
    ``fn(ec, args) -> root value``."""
    __slots__ = ("comp", "steps", "params", "root", "n", "check", "calls", "fn", "code", "line_step",
                 "root_clean", "lean", "loops", "_level")

    def __init__(self, comp: Computation, steps: list[Step], params, root, n, check):
        self.comp, self.steps, self.params, self.root, self.n = comp, steps, params, root, n
        self.check = check
        self.calls = 0
        self.root_clean = False
        self.fn = self.code = None
        self.line_step: dict[int, int] = {}
        self.lean = None
        self.loops = None                       # loopgen.fast_loop's, per condition
        self._level = None

    def level(self, ec) -> Level:
        """The level (hooks.py) this computation publishes its position on while `ec` runs it (one
        per computation, made on its first run)."""
        lv = self._level
        if lv is None:
            lv = self._level = Level(ec, self.comp.name, self.n)
            lv.line_step = self.line_step
            lv.steps = self.steps
        lv.ec = ec
        return lv

    # -- tier 1: a loop over the steps --------------------------------------------------
    def _lean(self):
        """(steps, initial values, root slot) for the step loop: the steps that do work, as plain
        tuples of a Step's fields (the loop unpacks them; a tuple unpacks faster than a NamedTuple).
        Folded values are in the initial values (they are shared read-only arrays the steps hold
        anyway), and a SAME step whose result needs no check (an inlined call's parameter, XLA's
        no-op broadcast) is dropped, its users reading the slot it copied; the slots to free after
        each step are worked out again for the steps kept (each value still dropped after its last
        use).  A large entry computation (transformer.hlo: 26,000 steps, a third of them such) runs
        once per run in this loop."""
        template = [None] * self.n
        alias: dict[int, int] = {}
        kept = []
        for st in self.steps:
            if st.kind == FOLDED:
                template[st.slot] = st.payload
                continue
            if st.kind == SAME and st.expect is None:
                j = st.operands[0]
                alias[st.slot] = alias.get(j, j)
                continue
            if alias:
                st = st._replace(operands=tuple([alias.get(j, j) for j in st.operands]))
            kept.append(st)
        root = alias.get(self.root, self.root)
        frees = _free_lists(kept, root, lambda j: template[j] is None)
        steps = [_with_frees_of(st, f) for st, f in zip(kept, frees)]
        hw = hardware()
        if hw is not None:                          # runs of f32/f64 arithmetic: one GROUP step each
            steps = _grouped(steps, root, hw)
        self.lean = lean = ([tuple(st) for st in steps], template, root)
        return lean

    @staticmethod
    def _group(vals, pay):
        """A GROUP step of the step loop: what generated code does with a run of f32/f64
        arithmetic steps (``_float_runs``): their bare ufuncs under one setting of the FTZ/DAZ
        flags, one NaN check of the values leaving the run (a NaN runs it again step by step,
        where the rules give NaN signs: from the first step where two NaNs met, when its steps are
        nan_exact -- ``_nan_meets``), then the steps' result checks and frees in order."""
        raw, sub, outs, (fset, on, off), plain, meets = pay
        fset(on)
        try:
            _run_plain(vals, raw)
        finally:
            fset(off)
        step = None
        try:
            if not nanfree(*[vals[j] for j in outs]):
                start = 0
                if meets is not None:
                    at = first_meet(*[vals[j] for _q, a, b in meets for j in (a, b)])
                    start = meets[at][0] if at < len(meets) else len(plain)
                _run_plain(vals, plain[start:], locate=True)
            for step in sub:
                _kind, _pay, _ops, k, inst, ex, free = step
                if ex is not None:
                    check_result(vals[k], ex, inst)
                for j in free:
                    vals[j] = None
        except (HloEvalError,) + EVAL_ERRORS as e:
            reraise_at(e, inst if step is not None else None)

    def run_steps(self, ec, args, timer=None, level=None):
        """The computation's root value for `args`: the step loop (tier 1).  `timer` (profiling.py:
        --profile) None, or an object whose ``enter(n) -> t0`` and ``leave(n, t0)`` the loop calls
        around its n-th step, and ``stopped(n, depth, t0)`` when a step raised (`depth`: what its
        ``start()`` returned when the loop began); the loop then runs every step as prepared
        (`steps`, not the lean form), so that each has its row.  `level` (hooks.Level): where the
        loop publishes its iterator over the steps (the step being run)."""
        if timer is None:
            lean = self.lean
            if lean is None:
                lean = self._lean()
            steps, template, root = lean
            vals = template.copy()
        else:
            steps, root = self.steps, self.root
            vals = [None] * self.n
            depth = timer.start()
            t0, n = 0.0, -1
        for pnum, slot in self.params:
            vals[slot] = args[pnum]
        ndarray = np.ndarray
        step = None
        cursor = iter(steps)
        if level is not None:
            level.walked, level.cursor = steps, cursor
        try:
            for step in cursor:
                kind, pay, ops, k, inst, ex, free = step
                if timer is not None:
                    n += 1
                    t0 = timer.enter(n)
                if kind == PURE:
                    v = pay(*[vals[j] for j in ops])
                elif kind == RULE:
                    v = pay(inst, [vals[j] for j in ops], ec)
                elif kind == FOLDED:
                    v = pay
                elif kind == ELEMENT:
                    v = vals[ops[0]][pay]
                elif kind == WITH_EC:
                    v = pay(ec, *[vals[j] for j in ops])
                elif kind == TUPLE:
                    v = tuple([vals[j] for j in ops])
                elif kind == REGION:
                    outs = pay.run(*[vals[j] for j in ops])
                    for j, v in zip(k, outs):
                        vals[j] = v
                    for j in free:
                        vals[j] = None
                    if timer is not None:
                        timer.leave(n, t0)
                    continue
                elif kind == GROUP:
                    self._group(vals, pay)
                    continue
                else:
                    v = vals[ops[0]]
                if ex is not None:
                    if ex.__class__ is tuple:
                        if v.__class__ is not ndarray or v.dtype != ex[0] or v.shape != ex[1]:
                            bad_result(inst, v)
                    elif conforms(v, ex) is not None:
                        bad_result(inst, v)
                vals[k] = v
                for j in free:
                    vals[j] = None
                if timer is not None:
                    timer.leave(n, t0)
        except BaseException as e:
            # (with a timer, the step that stopped -- an error, ^C -- keeps the time it took: a
            # profile of a run interrupted in a long step shows that step)
            if timer is not None:
                timer.stopped(n, depth, t0)
            if isinstance(e, (HloEvalError,) + EVAL_ERRORS):
                reraise_at(e, inst if step is not None else None)
            raise
        return vals[root]

    # -- tier 2: generated code -----------------------------------------------------------
    def generate(self):
        """`fn`: the steps as one generated function (codegen.computation_function), runs of
        f32/f64 arithmetic (``_float_runs``) under one setting of the processor's flags."""
        runs = _float_runs(self.steps, self.root) if hardware() is not None else {}
        self.fn, at = computation_function(self.comp.name, self.params, self.steps, self.root, runs)
        self.code = self.fn.__code__
        self.line_step.update(at)        # (in place: a level made before holds this dict)

    def step_at(self, tb):
        """The instruction whose line of generated code raised (from a traceback), or None."""
        k = raising_line(tb, self.code, self.line_step)
        return None if k is None else self.by_step(k)

    def by_step(self, k):
        """The instruction of the step writing slot `k` (a fused region: its first slot), or None."""
        for step in self.steps:
            if step.produced[0] == k:
                return step.inst
        return None


def check_result(v, expect, inst):
    """The result check of a step (a Step's `expect`, not None) on its value `v`."""
    if expect.__class__ is tuple:
        if v.__class__ is not np.ndarray or v.dtype != expect[0] or v.shape != expect[1]:
            bad_result(inst, v)
    elif conforms(v, expect) is not None:
        bad_result(inst, v)


def _run_plain(vals, items, locate=False):
    """Run (kind, fn, operand slots, slot, instruction) items of the kinds a GROUP step holds on
    `vals`; `locate`: an error is located at the item's instruction."""
    inst = None
    try:
        for kind, fn, ops, k, inst in items:
            if kind == PURE:
                vals[k] = fn(*[vals[j] for j in ops])
            elif kind == ELEMENT:
                vals[k] = vals[ops[0]][fn]
            elif kind == TUPLE:
                vals[k] = tuple([vals[j] for j in ops])
            else:
                vals[k] = vals[ops[0]]
    except (HloEvalError,) + EVAL_ERRORS as e:
        if not locate:
            raise
        reraise_at(e, inst)


def _grouped(steps: list[Step], root, hw) -> list[Step]:
    """The steps with each run of f32/f64 arithmetic (``_float_runs``) made one GROUP step, whose
    payload is (the items run under the flags -- bare ufuncs --, the run's steps as plain tuples,
    the slots to NaN-check, the flag setters, the items run again with the flags clear)."""
    groups = _float_runs(steps, root)
    out = []
    n = 0
    while n < len(steps):
        group = groups.get(n)
        if group is None:
            out.append(steps[n])
            n += 1
            continue
        end, outs, meets = group
        sub = steps[n:end]
        raw = []
        for st in sub:
            u = capabilities(st.payload).hw_ufunc if st.kind == PURE else None
            if u is not None and st.inst.shape.rank == 0:
                u = functools.partial(_rank0, u)
            raw.append((st.kind, u if u is not None else st.payload, st.operands, st.slot, st.inst))
        plain = tuple((st.kind, st.payload, st.operands, st.slot, st.inst) for st in sub)
        pay = (tuple(raw), tuple(tuple(st) for st in sub), tuple(outs), hw, plain, meets)
        out.append(Step(GROUP, pay, (), sub[0].slot, sub[0].inst, None, ()))
        n = end
    return out


def _free_lists(steps, root, droppable=None) -> list[tuple]:
    """The slots to free after each of `steps`, in the order they run: a value after its last use
    (if `droppable(slot)`, when given), a value nothing reads at once; never the root."""
    last: dict[int, int] = {}
    for i, st in enumerate(steps):
        for j in st.operands:
            last[j] = i
    frees: list[list[int]] = [[] for _ in steps]
    for j, i in last.items():
        if j != root and (droppable is None or droppable(j)):
            frees[i].append(j)
    for i, st in enumerate(steps):
        for j in st.produced:
            if j not in last and j != root:
                frees[i].append(j)
    return [tuple(f) for f in frees]


def _rank0(u, *a):
    return np.asarray(u(*a))


def _float_runs(steps, root) -> dict:
    """{first step: (end, slots to check)} for the runs of steps that generated code may run
    under one setting of the FTZ/DAZ flags: f32/f64 arithmetic steps of the processor's fast path
    (hw_ufunc) with nonempty results, and between them steps that do no float arithmetic (views,
    tuples, folded values); at least two arithmetic steps.  The slots to check: the arithmetic
    results read outside the run's arithmetic (or the root, or unused)."""
    def arith(st):
        return st.kind == PURE and capabilities(st.payload).hw_ufunc is not None and \
            st.inst.shape.num_elements > 0
    def neutral(st):
        return st.kind in (FOLDED, ELEMENT, TUPLE, SAME) or (st.kind == PURE and capabilities(st.payload).flag_free)
    users: dict[int, list] = {}
    for n, st in enumerate(steps):
        for j in st.operands:
            users.setdefault(j, []).append(n)
    out = {}
    n = 0
    while n < len(steps):
        if not arith(steps[n]):
            n += 1
            continue
        end = n
        m = n
        count = 0
        while m < len(steps) and (arith(steps[m]) or neutral(steps[m])):
            if arith(steps[m]):
                count += 1
                end = m + 1
            m += 1
        if count >= 2:
            members = {steps[i].slot for i in range(n, end) if arith(steps[i])}
            at = {steps[i].slot: i for i in range(n, end)}
            checks = []
            for k in members:
                us = users.get(k, [])
                if k == root or not us or any(not (n <= u < end and steps[u].slot in members) for u in us):
                    checks.append(k)
            meets = _nan_meets(steps[n:end], arith)
            if meets is not None:
                checks = _meet_checks(checks, meets)
            out[n] = (end, sorted(checks, key=lambda k: at.get(k, -1)), meets)
        n = max(end, n + 1)
    return out


def _nan_meets(run, arith):
    """For a run whose arithmetic steps are all nan_exact (kernels.Capabilities): ((position in the
    run, operand slot, operand slot), ...) for its steps whose bits need the rule where two NaNs
    meet (not nan_pairs), in order; None when a step is not nan_exact (a NaN: the whole run again,
    step by step).  NaN propagates through the run's arithmetic, so a NaN leaving the run is the
    rule's unless two NaNs met in one of these steps: only from the first such step on is the run
    run again (codegen.first_meet)."""
    meets = []
    for q, st in enumerate(run):
        if arith(st):
            cap = capabilities(st.payload)
            if not cap.nan_exact or len(st.operands) != 2:
                return None
            if not cap.nan_pairs:
                meets.append((q, st.operands[0], st.operands[1]))
    return tuple(meets)


def _meet_checks(checks, meets):
    """The slots to NaN-check for a run with `meets` (_nan_meets): none when no step needs the
    rule; else the fewer of the values leaving the run and the meeting steps' first operands (two
    NaNs meet in a step only where its first operand holds one, and a NaN in an operand reaches a
    value leaving the run)."""
    if not meets:
        return []
    firsts = list(dict.fromkeys(a for _q, a, _b in meets))
    return firsts if len(firsts) < len(checks) else checks


def compiled(module: Module, name: str, check: bool, param_clean=None) -> Compiled:
    """`name` compiled (cached per module); `param_clean`: which parameters are known to hold no
    subnormals (a call site's knowledge), or None."""
    per = module_cache(module)
    key = (name, check, param_clean)
    c = per.get(key)
    if c is None:
        comp = module.computation_map.get(name)
        if comp is None:
            raise HloEvalError(f"computation '{name}' is not defined")
        busy = per.setdefault("compiling", set())
        outermost = not busy
        # preparing makes many small objects that live (steps, closures, tuples): Python's cyclic
        # garbage collector would walk the whole module's IR again and again meanwhile (a quarter
        # of a large module's preparation), for no garbage: paused while the outermost call runs
        paused = outermost and gc.isenabled()
        if paused:
            gc.disable()
        busy.add(key)
        try:
            c = per[key] = _prepare(comp, check, param_clean, module, per)
        finally:
            busy.discard(key)
            if paused:
                gc.enable()
    return c


def _prepare(comp: Computation, check: bool, param_clean, module: Module, per: dict) -> Compiled:
    """compile_computation, or for a structural twin of a computation prepared before (same
    instructions but for their names) the twin's steps on its own instructions (``_rebound``)."""
    if comp.is_entry:                           # (no twin: not worth its fingerprint)
        return compile_computation(comp, check, param_clean, module)
    twins = per.setdefault("twins", {})
    tkey = (fingerprint(module, comp.name, per), check, param_clean)
    twin = twins.get(tkey)
    if twin is not None and twin.comp is not comp:
        return _rebound(twin, comp)
    c = compile_computation(comp, check, param_clean, module)
    if _shareable(c):
        twins.setdefault(tkey, c)
    return c


def compile_computation(comp: Computation, check: bool, param_clean=None, module=None) -> Compiled:
    """The steps of `comp`: constants folded, common instructions specialised (the rules' prepare stages, registry.prepare)."""
    from .schedule import Plan
    plan = Plan(comp)

    def callee(name, clean):
        if module is None or name not in module.computation_map:
            return None
        if (name, check, clean) in module_cache(module).get("compiling", ()):
            return None
        return compiled(module, name, check, clean)
    static = Static(comp, param_clean, callee, module)
    levels = track().levels
    lv = Level(None, comp.name, len(plan.insts), preparing=True)
    lv.insts = plan.insts
    levels.append(lv)
    try:
        steps, elementwise, in_place, fresh = _prepare_steps(plan, static, check, lv)
    finally:
        del levels[-1]
    steps, n = _inline(steps, len(plan.insts), check)
    steps = _fuse(steps, elementwise, plan, in_place)
    c = Compiled(comp, steps, plan.param_slots, plan.root, n, check)
    c.root_clean = static.clean.get(plan.root, False)
    return c


def _prepare_steps(plan, static, check: bool, lv):
    """The steps of a plan's instructions (compile_computation), the instruction being prepared
    published on `lv`; also the slots of elementwise steps, of steps that may write into an operand,
    of steps whose value is a new array of a plain ufunc."""
    steps = []
    fresh: dict[int, bool] = {}                 # steps whose value is a new array of a plain ufunc
    elementwise: set[int] = set()
    in_place: set[int] = set()                  # steps that may write into an operand's buffer
    contract(plan, static.module)               # XLA CPU's FMAs (contraction.py)
    for k, inst in enumerate(plan.insts):
        lv.k = k
        if inst.opcode == "parameter":
            static.record(k, inst, None)
            continue
        ops = plan.operand_idx[k]
        fast = None
        try:
            folded = fold_constant(inst, [static.const.get(j) for j in ops])
            if folded is not None:
                static.record(k, inst, folded)
        except MemoryError as e:                # folding evaluates the instruction: say which
            raise located_error(inst, e) from e
        if folded is not None:
            kind, pay = FOLDED, folded
        else:
            own = capabilities(plan.rules[k]).prepare   # (a rule's own stage: contraction.py)
            fast = prepare(inst, ops, static) if own is None else own(inst, ops, static)
            static.record(k, inst, None, fast, plan.rules[k])
            if fast is None:
                kind, pay = RULE, plan.rules[k]
            else:
                kind, pay = fast.kind, fast.fn
                if fast.ufunc is not None:
                    writer = _in_place(fast, inst, ops, k, plan, static, fresh)
                    if writer is not None:
                        pay = writer
                        in_place.add(k)
                    fresh[k] = True
        ex = None
        if check and kind != FOLDED and not _implied(kind, inst, ops, static, fast):
            ex = plan.expect[k] if plan.expect[k] is not None else inst.shape
        steps.append(_new_step(Step, (kind, pay, ops, k, inst, ex, plan.free_after[k])))
        if fast is not None and folded is None and fast.elementwise and kind == PURE:
            elementwise.add(k)
        elif kind == RULE and getattr(pay, "elementwise", False) and _same_dims(inst, ops, static):
            elementwise.add(k)
    return steps, elementwise, in_place, fresh


# ============================================================================ structural twins
# XLA clones computations: a fusion per call site, a threefry loop body per random draw.  Clones
# differ in their names only, and preparing each again is most of a large module's first run.  A
# computation's fingerprint stands for its structure (opcodes, shapes, operand positions, attributes
# but metadata, small literals, the fingerprints of the computations it calls); computations of one
# fingerprint prepare into the same steps, so the second takes the first's steps with its own
# instructions in them (errors, --profile and dumps name its own).  Only computations whose steps all
# come from their own instructions are shared (no inlined callees, no calls, no fused regions).

_SMALL_LITERAL = 256        # elements: larger constants make their computation a fingerprint of its own
_NOT_SHARED = object()


def fingerprint(module: Module, name: str, per: dict | None = None) -> int:
    """A small integer standing for the structure of computation `name` of `module`: equal for
    computations equal but for their names (per module)."""
    per = module_cache(module) if per is None else per
    memo = per.setdefault("fingerprint", {})
    fp = memo.get(name)
    if fp is None:
        memo[name] = fp = ("open", name)                 # a recursive call: never equal to another
        comp = module.computation_map.get(name)
        structures = per.setdefault("structures", {})
        key = _structure(module, comp, per) if comp is not None else None
        try:
            fp = structures.setdefault(key, len(structures)) if key is not None else None
        except TypeError:                               # an attribute that does not hash
            fp = None
        if fp is None:
            fp = structures.setdefault((_NOT_SHARED, name), len(structures))
        memo[name] = fp
    return fp


def _structure(module, comp, per):
    """A value equal for computations equal but for their names (unhashable when an attribute
    does not hash: such a computation is not shared)."""
    index = {inst.name: j for j, inst in enumerate(comp.instructions)}
    refs = (ComputationRef, InlineComputation)
    out = [index[comp.root], comp.is_entry]
    for inst in comp.instructions:
        lit = inst.literal
        if lit is not None:
            val = getattr(lit, "value", None)
            if isinstance(val, np.ndarray) and val.size <= _SMALL_LITERAL and not getattr(lit, "elided", False):
                lit = (val.dtype.str, val.shape, val.tobytes())
            else:
                lit = _NOT_SHARED, id(inst)
        attrs = []
        for k, v in inst.attrs.items():          # (XLA's clones keep the attributes' order)
            if k == "metadata":
                continue
            t = v.__class__
            if t in refs:
                v = "computation", fingerprint(module, v.name, per)
            elif t is tuple and v:
                if k == "control-predecessors":
                    v = tuple(index.get(n, n) for n in v)
                elif v[0].__class__ in refs:
                    v = tuple(("computation", fingerprint(module, x.name, per)) for x in v)
            attrs.append((k, v))
        out.append((inst.opcode, inst.shape, tuple([index.get(o, o) for o in inst.operands]),
                    inst.parameter_number, lit, tuple(attrs)))
    return tuple(out)


# steps whose payload holds other compiled computations (the call and while prepare stages in ops/control.py)
_CALLING = frozenset(("call", "fusion", "while"))


def _shareable(c: Compiled) -> bool:
    """True when every step of `c` is one of its computation's own instructions, with a payload
    that depends on the instructions' structure only (no compiled callees, no fused region)."""
    own = {id(inst) for inst in c.comp.instructions}
    return all(st.kind != REGION and id(st.inst) in own and
               (st.kind != WITH_EC or st.inst.opcode not in _CALLING) for st in c.steps)


def _rebound(twin: Compiled, comp: Computation) -> Compiled:
    """`comp` prepared as its structural twin `twin` was: the twin's steps on `comp`'s instructions."""
    position = {id(inst): j for j, inst in enumerate(twin.comp.instructions)}
    mine = comp.instructions
    steps = [st._replace(inst=mine[position[id(st.inst)]]) for st in twin.steps]
    c = Compiled(comp, steps, twin.params, twin.root, twin.n, twin.check)
    c.root_clean = twin.root_clean
    return c


# a called computation (call, fusion) of at most this many steps is inlined into its caller
INLINE_MAX = 400


def _inline(steps, n: int, check: bool):
    """The steps with the calls of small compiled computations replaced by the callees' own
    steps, on value slots numbered from `n` on: one step per parameter (the caller's operand),
    the callee's steps, and the call's own step taking the callee's root.  No run_compiled per
    call then, and generated code sees the whole loop body.  Returns (steps, number of slots)."""
    out = []
    for st in steps:
        callee = capabilities(st.payload).callee if st.kind == WITH_EC else None
        if callee is None or callee.check != check or len(callee.steps) > INLINE_MAX or \
                len(st.operands) != len(callee.params):
            out.append(st)
            continue
        base = n
        n += callee.n
        params = {p.parameter_number: p for p in callee.comp.parameters}
        for pnum, slot in callee.params:
            out.append(Step(SAME, None, (st.operands[pnum],), base + slot, params[pnum], None, ()))
        for cs in callee.steps:
            k = tuple(base + j for j in cs.slot) if cs.kind == REGION else base + cs.slot
            out.append(cs._replace(operands=tuple(base + j for j in cs.operands), slot=k, frees=()))
        out.append(Step(SAME, None, (base + callee.root,), st.slot, st.inst, None, ()))
    return out, n


# ops whose results never share memory with their operands (so an operand of theirs can only be
# reached through its own variable)
_FRESH_RESULTS = frozenset("""add subtract multiply divide remainder power and or xor shift-left
shift-right-logical shift-right-arithmetic compare maximum minimum dot reduce""".split())


def _in_place(fast, inst, ops, k, plan, static, fresh):
    """For a plain-ufunc step: a callable writing the result into the buffer of an operand that
    dies at this step, if that operand is a new array made by a plain-ufunc step and every user of
    it makes a new array (so no view of it can be alive).  None if there is no such operand.
    Values computed in place are checked at run time too: they must own writable data."""
    shape = inst.shape
    users = plan.users
    for pos, j in enumerate(ops):
        if j not in plan.free_after[k] or not fresh.get(j) or j == plan.root:
            continue
        src = static.node(j).shape
        if src.is_tuple or src.element_type != shape.element_type or tuple(src.dims) != tuple(shape.dims):
            continue
        if not all(plan.insts[u].opcode in _FRESH_RESULTS for u in users.get(j, ())):
            continue
        uf = fast.ufunc
        plain = fast.fn
        if pos == 0:
            def fn(a, b):
                if a.flags.owndata and a.flags.writeable:
                    return uf(a, b, out=a)
                return plain(a, b)
        else:
            def fn(a, b):
                if b.flags.owndata and b.flags.writeable:
                    return uf(a, b, out=b)
                return plain(a, b)
        fn.plain = plain                        # (loopgen.py: for operands it keeps across iterations)
        return fn
    return None


# ============================================================================ fused regions
# A run of elementwise steps over large arrays of the same dims is executed block by block: each
# block (about FUSE_BLOCK elements, a slice along the leading dimensions) goes through every step of
# the run before the next block starts, so the intermediate values stay in the processor's caches
# instead of making a round trip through memory per step (what XLA's loop fusion achieves).  Only
# the values used after the run are materialized.  Elementwise steps compute element i from
# element i of their operands, so the result is the same as step by step, bit for bit.

FUSE_BLOCK = 1 << 16            # elements per block
# ... when the blocks are shared among threads: every NumPy call then hands the GIL over, and a
# handover has a fixed cost (higher in a virtual machine), so a thread needs more work per call
FUSE_BLOCK_THREADED = 1 << 17
FUSE_MIN = 4 * FUSE_BLOCK       # smaller arrays run step by step


def _same_dims(inst, ops, static) -> bool:
    """True when the result and every operand are arrays of the same dims (no scalar operands)."""
    s = inst.shape
    if s.is_tuple or s.is_dynamic:
        return False
    dims = tuple(s.dims)
    for j in ops:
        o = static.node(j).shape
        if o.is_tuple or o.is_dynamic or tuple(o.dims) != dims:
            return False
    return True


def _rule_fn(rule, inst):
    """An evaluation rule as a callable of the operand values (for region members)."""
    def fn(*values):
        return rule(inst, list(values), None)
    return fn


class Region:
    """Steps `members` (kind PURE, elementwise, all of result dims `dims`) run block by block on
    the external `inputs` (slots), producing the values of `outputs` (slots).  The block loop is
    generated Python code: each block's values are local variables, deleted after their last use
    so that the live blocks stay in cache."""
    __slots__ = ("members", "inputs", "outputs", "dims", "blocks", "out_dtypes", "body", "code",
                 "line_member")

    def __init__(self, members, inputs, outputs, dims, dtypes):
        self.members, self.inputs, self.outputs, self.dims = members, inputs, outputs, dims
        self.out_dtypes = [dtypes[j] for j in outputs]
        self.blocks = _blocks(dims, FUSE_BLOCK_THREADED if threads() >= 2 else FUSE_BLOCK)
        self._generate(dtypes)

    def _generate(self, dtypes):
        """`body`: the block loop, generated (codegen.region_function)."""
        self.body, self.line_member = region_function(self.members, self.inputs, self.outputs, dtypes)
        self.code = self.body.__code__

    def member_at(self, tb):
        """The member instruction whose line of the block code raised (from a traceback)."""
        n = raising_line(tb, self.code, self.line_member)
        return None if n is None else self.members[n].inst

    def run(self, *values):
        outs = [np.empty(self.dims, dt) for dt in self.out_dtypes]
        body = self.body
        args = values + tuple(outs)

        def blocks(part):
            try:
                body(part, *args)
            except (HloEvalError,) + EVAL_ERRORS as e:
                reraise_at(e, self.member_at(e.__traceback__))
        run_parts(blocks, split(self.blocks, threads()))
        return outs


def _blocks(dims, block=FUSE_BLOCK):
    """Index tuples of blocks of about `block` elements: ranges of one dimension, all of the
    following ones."""
    inner = 1
    d = len(dims)
    while d > 0 and inner * dims[d - 1] <= block:
        d -= 1
        inner *= dims[d]
    if d == 0:
        return [()]
    chunk = max(1, block // inner)
    from itertools import product
    out = []
    for prefix in product(*(range(n) for n in dims[:d - 1])):
        for lo in range(0, dims[d - 1], chunk):
            out.append(prefix + (slice(lo, min(lo + chunk, dims[d - 1])),))
    return out


def _fuse(steps, elementwise, plan, in_place=frozenset()):
    """The steps with their large elementwise steps grouped by dims into REGION steps.

    A group stays open while other steps run and is emitted just before the first step outside
    it that reads one of its values (or at the end), so steps of the same dims that other work
    separates (an optimizer's updates of many parameters, interleaved) still share one pass over
    memory.  Moving a member later is safe: it reads values computed earlier, which are still
    computed earlier, and nothing outside its group reads it before the group runs.  A step that
    writes into its operand's buffer (`in_place`) first closes the groups that read that operand.
    Free lists recomputed."""
    def size_ok(inst):
        n = 1
        for d in inst.shape.dims:
            n *= d
        return n >= FUSE_MIN and not inst.shape.is_dynamic
    out: list = []
    groups: dict[tuple, list] = {}              # dims -> the open group's steps
    owner: dict[int, tuple] = {}                # slot computed by an open group -> its dims
    reads: dict[tuple, set] = {}                # dims -> the slots the open group reads

    def close(key):
        run = groups.pop(key)
        reads.pop(key)
        for st in run:
            owner.pop(st.slot, None)
        # one large step is a region too when it can be split across threads
        if len(run) >= 2 or threads() >= 2:
            out.append(_region(run, plan))
        else:
            out.extend(run)
    for st in steps:
        k, inst = st.slot, st.inst
        key = tuple(inst.shape.dims) if k in elementwise and size_ok(inst) else None
        for j in st.operands:
            o = owner.get(j)
            if o is not None and o != key:
                close(o)
        if k in in_place:
            for o in [o for o, r in reads.items() if o != key and any(j in r for j in st.operands)]:
                close(o)
        if key is None:
            out.append(st)
            continue
        groups.setdefault(key, []).append(st)
        reads.setdefault(key, set()).update(st.operands)
        owner[k] = key
    for key in list(groups):
        close(key)
    return _with_frees(out, plan)


def _region(run, plan):
    members = {st.slot for st in run}
    inputs, seen = [], set()
    for st in run:
        for j in st.operands:
            if j not in members and j not in seen:
                seen.add(j)
                inputs.append(j)
    later_users = {}
    for m in members:
        for u in plan.users.get(m, ()):
            if u not in members:
                later_users[m] = True
    outputs = [st.slot for st in run if st.slot in later_users or st.slot == plan.root]
    dtypes = {st.slot: plan.expect[st.slot][0] for st in run}
    run = [st._replace(kind=PURE, payload=_rule_fn(st.payload, st.inst)) if st.kind == RULE else st for st in run]
    region = Region(run, inputs, outputs, tuple(run[0].inst.shape.dims), dtypes)
    return Step(REGION, region, tuple(inputs), tuple(outputs), run[-1].inst, None, ())


def _with_frees(steps, plan):
    """Free lists for the order `steps` run in: a value goes after its last use (a region uses its
    inputs); values nothing uses go at once; the root stays."""
    return [_with_frees_of(st, f) for st, f in zip(steps, _free_lists(steps, plan.root))]


def _implied(kind, inst, ops, static, fast=None) -> bool:
    """True when the result's shape follows from the operands' declared shapes (tuple, element),
    or was checked already: a call's result is its callee's root, which the callee (compiled with
    the check) checked against the same shape."""
    callee = getattr(fast, "callee", None)
    if callee is not None:
        return callee.check and callee.comp.root_instruction.shape == inst.shape
    if kind == TUPLE:
        return tuple(static.node(j).shape for j in ops) == tuple(inst.shape.tuple_shapes)
    if kind == ELEMENT:
        src = static.node(ops[0]).shape
        return src.is_tuple and src.tuple_shapes[inst.attrs["index"]] == inst.shape
    if kind == SAME:
        return static.node(ops[0]).shape == inst.shape
    return False


def run_compiled(ec, c: Compiled, args):
    """Run a compiled computation with the generic loop's error reporting and accounting; its
    level on the thread's track (hooks.py) says where it is meanwhile."""
    if len(args) != len(c.params):
        raise HloEvalError(f"computation '{c.comp.name}' takes {len(c.params)} arguments, got {len(args)}")
    ec.depth += 1
    if ec.depth > 500:
        ec.depth -= 1
        raise HloEvalError("computations call each other more than 500 deep (recursion?)")
    c.calls += 1
    if ec.profile is not None:           # --profile: tier 1 with a timer per step (profiling.py)
        run = ec.profile.runner(c)
    else:
        if c.fn is None and c.calls > HOT_CALLS:
            c.generate()
        run = c.fn if c.fn is not None else c.run_steps
    lv = c._level
    if lv is None:
        lv = c.level(ec)
    lv.ec = ec
    tier2 = run is c.fn
    lv.code = c.code if tier2 else None         # (else the step loop publishes its cursor)
    levels = ec.levels
    levels.append(lv)
    try:
        if ec.depth == 1:
            with np.errstate(all="ignore"), blas_single():
                value = run(ec, args) if tier2 else run(ec, args, level=lv)
        else:
            value = run(ec, args) if tier2 else run(ec, args, level=lv)
    except (HloEvalError, *EVAL_ERRORS) as e:
        reraise_at(e, c.step_at(e.__traceback__) if tier2 else None)
    finally:
        ec.depth -= 1
        del levels[-1]
    ec.executed += len(c.steps) + len(c.params)
    if ec.progress is not None:
        ec.progress(ec.executed)
    return value


def run_while(ec, cond: Compiled, body: Compiled, state, limit, name: str):
    """A while loop of compiled computations: what control.eval_while does through ec.call, with
    the bookkeeping of run_compiled done once for the loop instead of twice per iteration once
    both computations run as generated code (call counts and executed instructions added at the
    end, loop iterations counted as they go, errors located in the computation that raised).
    The iteration is published on the level running the while instruction (hooks.py)."""
    levels = ec.levels
    outer = levels[-1] if levels else Level(ec, "", None)
    n = 0
    try:
        while cond.fn is None or body.fn is None:           # tier 1 until both are hot
            outer.iteration = n + 1
            if not run_compiled(ec, cond, (state,)):
                return state
            if limit is not None and n >= limit:
                raise limit_error(limit, name)
            state = run_compiled(ec, body, (state,))
            n += 1
            ec.loop_iterations += 1
        if ec.depth >= 500:
            raise HloEvalError("computations call each other more than 500 deep (recursion?)")
        return _run_hot_while(ec, cond, body, state, limit, name, n, outer)
    finally:
        outer.iteration = outer.counting = None


def _run_hot_while(ec, cond, body, state, limit, name, n, outer):
    """run_while once condition and body are generated code: called directly (each on a level of
    its own while it runs), or the whole loop as one generated function (loopgen.py)."""
    cf, bf = cond.fn, body.fn
    ran_cond = ran_body = 0
    ec.depth += 1
    levels = ec.levels
    lc, lb = cond.level(ec), body.level(ec)
    lc.code, lb.code = cond.code, body.code
    levels.append(lc)
    c = cond
    # a loop running LOOPGEN_AFTER iterations (or one generated before) becomes one function
    later = 0 if _loopgen.known_loop(cond, body) else _loopgen.LOOPGEN_AFTER
    try:
        while True:
            outer.iteration = n + 1
            if n >= later:
                later = float("inf")
                fast = _native.fast_loop(cond, body, ec.module, state, ec) or _loopgen.fast_loop(cond, body, ec.module)
                if fast is not None:
                    c = body
                    lb.hidden = True                    # (its iterations: ec.loop_iterations)
                    levels[-1] = lb
                    outer.counting = (n + 1 - ec.loop_iterations, ec)
                    state, n, rc, rb, done = fast.run(ec, state, n, limit, name)
                    outer.counting = None
                    lb.hidden = False
                    ran_cond += rc
                    ran_body += rb
                    if done:
                        return state
            c = cond
            levels[-1] = lc
            go = cf(ec, (state,))
            ran_cond += 1
            if not go:
                break
            if limit is not None and n >= limit:
                raise limit_error(limit, name)
            c = body
            levels[-1] = lb
            state = bf(ec, (state,))
            ran_body += 1
            n += 1
            ec.loop_iterations += 1
    except (HloEvalError, *EVAL_ERRORS) as e:
        reraise_at(e, c.step_at(e.__traceback__))
    finally:
        del levels[-1]
        ec.depth -= 1
        cond.calls += ran_cond
        body.calls += ran_body
        ec.executed += ran_cond * (len(cond.steps) + len(cond.params)) + \
            ran_body * (len(body.steps) + len(body.params))
    return state
