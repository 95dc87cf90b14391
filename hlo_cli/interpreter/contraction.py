"""XLA CPU's FMA contraction: where a multiply feeding an add or subtract is computed as one fused
multiply-add, rounded once.

XLA CPU compiles with LLVM's ``AllowFPOpFusion = Fast``: inside one generated loop, an f32 or f64
``fmul`` whose only use is an ``fadd``/``fsub`` (possibly through an ``fneg``) becomes an FMA.  A
loop is one fusion, so the rule is about the instructions XLA puts in one fusion
(hlo_cli/SEMANTICS.md, "FMA contraction", has the measurements):

* in a fused computation (after-optimization text) a multiply contracts into its user when that
  add/subtract (or negate, then add/subtract) is its only use -- an output of the fusion, or a
  second user, is a second use;
* in any other computation (before-optimization text, also loop bodies and reducers) XLA fuses
  first: a multiply whose users are all loop-fusible (elementwise or moving data) and end in
  different fusions is duplicated into each of them, and contracts into each add/subtract user; one
  whose users meet again downstream (one fusion, several uses), or that is an output or feeds a
  reduce, a dot or a tuple, stays a value of its own;
* when both operands of an add are such products, the first operand's multiply is contracted;
* a product of constants is folded by XLA first (a rounded constant): not contracted;
* bf16 and f16 do not contract (their product is rounded to the narrow type before the add), nor
  complex numbers (whose multiply is its own rule).

`contract(plan, module)` rewrites a schedule's plan (schedule.Plan): a contracted add/subtract reads
the multiply's operands and the addend and runs `fma_rule`, whose sign variant is fixed per
instruction.  A multiply nothing else reads computes nothing on the compiled path (a placeholder
value, dropped at once); the generic loop keeps it (`keep_products`: its hooks and dumps see every
instruction's value, and a contracted add's operands start with its own, the rounded product and
the addend, then the multiply's).  The compiler's `_prepare_steps` and the evaluator's generic loop both run on
the rewritten plan, so every execution path (compiled steps, generated code, fused regions, whole
loops, --profile, hooks) gives the same bits.
"""
from __future__ import annotations

import os

import numpy as np

from ..ir.opcodes import ELEMENTWISE, has_trait
from .kernels import Fast, declare, flag_free
from .ops.elementwise import fma, fma_kernel
from .per_module import cached
from .schedule import Plan, free_after
from .values import np_dtype

CONTRACTED_TYPES = frozenset({"f32", "f64"})
# data movement XLA CPU's loop fusion takes besides the elementwise ops (local to this rule)
_LOOP_FUSIBLE_MOVES = frozenset({"broadcast", "reshape", "bitcast", "transpose", "reverse", "slice",
                                 "concatenate", "pad", "dynamic-slice", "copy", "iota"})
_CLOSURE_MAX = 512                  # instructions followed downstream before giving up (no contraction)


ENV = "HLO_FMA"


def enabled() -> bool:
    """Whether runs contract multiply-adds as XLA CPU does (`HLO_FMA=0` turns it off: each multiply
    and add rounded on its own, faster, not XLA's bits); read when a computation is prepared."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def contract(plan, module, keep_products: bool = False) -> None:
    """Rewrite `plan` in place so that each add/subtract XLA CPU contracts runs as one FMA.
    A multiply (or negate of one) that nothing reads any more computes nothing unless
    `keep_products` (the generic loop keeps them: its hooks see every instruction's value)."""
    if module is None or not enabled():
        return
    fused = plan.comp.name in fused_computations(module)
    found = contractions(plan, fused)
    if not found:
        return
    replaced = [j for k in found for j in plan.operand_idx[k]]
    for k, (a, b, c, negate_product, negate_addend) in found.items():
        if keep_products:
            # the instruction's own operands first (hooks see them), then the multiply's
            addend = plan.operand_idx[k].index(c)
            plan.operand_idx[k] = plan.operand_idx[k] + (a, b)
            plan.rules[k] = fma_rule(negate_product, negate_addend, addend)
        else:
            plan.operand_idx[k] = (a, b, c)
            plan.rules[k] = fma_rule(negate_product, negate_addend)
    _index_users(plan)
    if not keep_products:
        _drop_products(plan, replaced)
    plan.free_after = free_after(plan.operand_idx, plan.root)


def contracted_products(comp, module) -> dict[str, list[str]]:
    """{the name of each add/subtract of `comp` XLA CPU contracts: the names of the instructions
    folded into it (the multiply, and the negate between them if any)}: what a tool cutting a module
    into pieces (tools/extract.py) must keep together for the piece to compute the same bits."""
    if module is None or not enabled():
        return {}
    plan = Plan(comp)
    found = contractions(plan, comp.name in fused_computations(module))
    out: dict[str, list[str]] = {}
    for k, (_a, _b, other, _np, _na) in found.items():
        x, y = plan.operand_idx[k]
        j = y if x == other and y != other else x
        names = []
        while plan.insts[j].opcode == "negate":
            names.append(plan.insts[j].name)
            j = plan.operand_idx[j][0]
        names.append(plan.insts[j].name)
        out[plan.insts[k].name] = names
    return out


def _index_users(plan) -> None:
    plan.users.clear()
    for n, ops in enumerate(plan.operand_idx):
        for o in ops:
            plan.users.setdefault(o, []).append(n)


def _drop_products(plan, candidates) -> None:
    """The multiplies and negates among `candidates` (and the multiplies under such negates) that
    no instruction reads any more: no operands, a rule that makes a placeholder (never read, dropped
    after its step)."""
    todo = list(candidates)
    while todo:
        j = todo.pop()
        if plan.insts[j].opcode not in ("multiply", "negate") or j == plan.root or plan.users.get(j) \
                or not plan.operand_idx[j]:
            continue
        for o in plan.operand_idx[j]:
            users = plan.users.get(o)
            if users is not None and j in users:
                users.remove(j)
        todo.extend(plan.operand_idx[j])
        plan.operand_idx[j] = ()
        plan.rules[j] = _unread_rule


def _unread_rule(inst, args, ec):
    """The value of a product whose every use became an FMA: a zero-stride placeholder of its
    declared dtype and dims (no instruction reads it)."""
    return np.broadcast_to(np.zeros((), np_dtype(inst.shape)), tuple(inst.shape.dims))


_unread_rule.ftz_result = True


def _prepare_unread(inst, ops, st):
    """The compiled step of an unread product: its placeholder, no float arithmetic (a run of float
    steps under the processor's flags goes on across it)."""
    value = _unread_rule(inst, [], None)
    return Fast(flag_free(lambda: value), clean=True)


declare(_unread_rule, prepare=_prepare_unread)


def fused_computations(module) -> frozenset:
    """The names of the computations `fusion` instructions call (one generated loop each)."""
    def make():
        names = set()
        for comp in module.computations:
            for inst in comp.instructions:
                if inst.opcode == "fusion":
                    ref = inst.attrs.get("calls")
                    if ref is not None:
                        names.add(ref.name)
        return frozenset(names)
    return cached(module, "fma-fused-computations", make)


def contractions(plan, fused: bool) -> dict:
    """{add/subtract slot: (a slot, b slot, addend slot, negate the product, negate the addend)}."""
    insts, ops_of = plan.insts, plan.operand_idx
    twins = {} if fused else _cse_twins(plan)
    found = {}
    for k, inst in enumerate(insts):
        op = inst.opcode
        if op not in ("add", "subtract") or _etype(inst) not in CONTRACTED_TYPES:
            continue
        x, y = ops_of[k]
        for pos, j, other in ((0, x, y), (1, y, x)):
            product = _product(plan, j, k, fused, twins)
            if product is None:
                continue
            a, b, negated = product
            if op == "subtract":            # x - y: the product negated when it is y, else the addend
                negated, negate_addend = (not negated, False) if pos == 1 else (negated, True)
            else:
                negate_addend = False
            found[k] = (a, b, other, negated, negate_addend)
            break
    return found


def _cse_twins(plan) -> dict:
    """{slot: the slots of the same value}: before optimization XLA's CSE makes one instruction of
    identical multiplies and negates (JAX writes `a * b` twice when a program says it twice); its
    hash and comparison ignore the operand order of a commutative op (XLA's hlo_cse.cc), so `b * a`
    is the same value as `a * b`."""
    by_key: dict = {}
    for n, inst in enumerate(plan.insts):
        if inst.opcode in ("multiply", "negate"):
            ops = plan.operand_idx[n]
            key = tuple(sorted(ops)) if inst.opcode == "multiply" else ops
            by_key.setdefault((inst.opcode, inst.shape, key), []).append(n)
    return {n: group for group in by_key.values() if len(group) > 1 for n in group}


def _product(plan, j, k, fused: bool, twins: dict):
    """(a, b, negated) when the value in slot `j` is a multiply (or negate of one) that XLA CPU
    contracts into its user `k`, else None."""
    inst = plan.insts[j]
    want = _etype(plan.insts[k])
    negated = False
    if inst.opcode == "negate" and _etype(inst) == want and _single(plan, j, k, fused, twins):
        m = plan.operand_idx[j][0]
        if plan.insts[m].opcode != "multiply" or not _single(plan, m, j, fused, twins):
            return None
        j, inst, negated = m, plan.insts[m], True
    elif inst.opcode != "multiply" or not _single(plan, j, k, fused, twins):
        return None
    if _etype(inst) != want:
        return None
    a, b = plan.operand_idx[j]
    if _constant(plan, a) and _constant(plan, b):
        return None                     # XLA folds the product first: a rounded constant
    return a, b, negated


def _constant(plan, j, depth: int = 0) -> bool:
    """Whether XLA's constant folding makes slot `j` a constant: a constant, or data movement and
    elementwise arithmetic of constants only."""
    inst = plan.insts[j]
    if inst.opcode == "constant":
        return True
    ops = plan.operand_idx[j]
    if depth > 8 or not ops or not _loop_fusible(inst.opcode) or inst.opcode == "iota":
        return False
    return all(_constant(plan, o, depth + 1) for o in ops)


def _single(plan, j, k, fused: bool, twins: dict) -> bool:
    """Whether the value of `j` is, in the loop XLA generates for user `k`, used by `k` alone."""
    same = twins.get(j, (j,))
    if plan.root in same:
        return False
    users = [u for n in same for u in plan.users.get(n, ())]
    if users == [k]:
        return True
    if fused or not users:
        return False
    # before fusion: duplicated into each user's fusion when the users are all loop-fusible and
    # their fusions stay apart (no common consumer reached through loop-fusible instructions)
    if any(not _loop_fusible(plan.insts[u].opcode) for u in users) or users.count(k) != 1:
        return False
    seen: set[int] = set()
    for u in set(users):
        reach = _downstream(plan, u)
        if reach is None or reach & seen:
            return False
        seen |= reach
    return True


def _downstream(plan, u):
    """`u` and the instructions reached from it through loop-fusible users (None: too many)."""
    out, todo = {u}, [u]
    while todo:
        n = todo.pop()
        if n == plan.root:
            continue
        for v in plan.users.get(n, ()):
            if v not in out and _loop_fusible(plan.insts[v].opcode):
                out.add(v)
                todo.append(v)
                if len(out) > _CLOSURE_MAX:
                    return None
    return out


def _loop_fusible(opcode: str) -> bool:
    return has_trait(opcode, ELEMENTWISE) or opcode in _LOOP_FUSIBLE_MOVES


def _prepare_fma(negate_product: bool, negate_addend: bool):
    """The prepare stage of a contracted add/subtract (operands a, b, addend): a PURE elementwise
    kernel (fused regions take it); for f32 where the processor's flags read subnormals as zeros in
    conversions, declared with its bare form under the flags (``hw_ufunc``), so that it joins the
    compiler's runs of float steps and the loop mode's bare arithmetic."""
    def prep(inst, ops, st):
        dt = np_dtype(inst.shape)
        if dt not in (np.float32, np.float64) or len(ops) != 3:
            return None
        return Fast(fma_kernel(negate_product, negate_addend, dt), clean=True, elementwise=True)
    return prep


def _etype(inst):
    s = inst.shape
    return None if s.is_tuple else s.element_type


_RULES: dict = {}


def fma_rule(negate_product: bool, negate_addend: bool, addend: int | None = None):
    """The evaluation rule of a contracted add/subtract, called with the operands (a, b, addend)
    -- or, with `addend` (0 or 1), with the instruction's own two operands followed by a and b --:
    ``(-)a * b (-) addend`` rounded once (ops/elementwise.fma)."""
    key = (negate_product, negate_addend, addend)
    rule = _RULES.get(key)
    if rule is None:
        if addend is None:
            def rule(inst, args, ec):
                return fma(args[0], args[1], args[2], negate_product, negate_addend)
        else:
            def rule(inst, args, ec):
                return fma(args[2], args[3], args[addend], negate_product, negate_addend)
        rule.__name__ = "eval_fma"
        if addend is None:                  # the compiled path's operands: its own kernel
            declare(rule, prepare=_prepare_fma(negate_product, negate_addend))
        rule.elementwise = True             # element i from element i of the operands (fused regions)
        rule.ftz_result = True              # results hold no subnormals (the compiler's "clean")
        _RULES[key] = rule
    return rule
