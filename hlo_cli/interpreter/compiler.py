"""Computations compiled to straight-line Python: the evaluator's fast path.

Running an instruction through the generic loop costs a list of operands, a dictionary-free but
still indirect rule call, the rule's own decoding of its attributes and element types, and the
shape check: tens of microseconds, which dominate a model of small arrays or a loop of thousands
of iterations.  Here each computation is turned once into one Python function whose local
variables hold the values (``v<k>`` for step k of the plan), with

* constants, and the shape ops applied to them (broadcast, reshape, transpose, convert, ...),
  evaluated once at compile time (read-only arrays, shared by every run);
* for the common instructions a specialised callable chosen from the static shapes and element
  types (hlo_cli/interpreter/fastpaths.py), e.g. ``np.add`` with XLA CPU's flushing of
  subnormal results, or a shift whose amount is a compile-time constant;
* every other instruction calling its evaluation rule exactly as the generic loop does;
* the result check of the generic loop (dtype and dims of every array result, ``conforms`` for
  tuples), and ``del`` of each value after its last use, so peak memory follows the live set.

Errors keep their location: the line of the generated code an exception came from names the step,
and so the instruction.  Hooks (dumps, --check-finite) use the generic loop, which hands every
value to them; results are the same either way (tests/interpreter/test_compiled.py).

The compiled form depends on the module only, never on a run's inputs or options other than the
result check, so it is cached per module and reused by later runs.
"""
from __future__ import annotations

import itertools
import weakref

import numpy as np

from ..errors import HloEvalError
from ..ir.module import Computation, Module
from .fastpaths import Static, fold_constant, prepare
from .values import conforms, describe

_EVAL_ERRORS = (ValueError, TypeError, IndexError, KeyError, FloatingPointError, OverflowError,
                ZeroDivisionError, MemoryError, AttributeError)
_counter = itertools.count()
# id(module) -> {(computation, check): Compiled}; entries leave with their module
_CACHE: dict[int, dict] = {}


class Compiled:
    """One computation as a Python function ``fn(ec, args) -> root value``."""
    __slots__ = ("comp", "fn", "code", "steps", "line_step", "n_params")

    def __init__(self, comp: Computation, fn, code, steps, line_step, n_params):
        self.comp, self.fn, self.code = comp, fn, code
        self.steps, self.line_step, self.n_params = steps, line_step, n_params

    def step_at(self, tb):
        """The instruction whose line of generated code raised (from a traceback), or None."""
        inst = None
        while tb is not None:
            if tb.tb_frame.f_code is self.code:
                k = self.line_step.get(tb.tb_lineno)
                if k is not None:
                    inst = self.steps[k]
            tb = tb.tb_next
        return inst


def compiled(module: Module, name: str, check: bool) -> Compiled:
    per = _CACHE.get(id(module))
    if per is None:
        per = _CACHE[id(module)] = {}
        weakref.finalize(module, _CACHE.pop, id(module), None)
    c = per.get((name, check))
    if c is None:
        comp = module.computation_map.get(name)
        if comp is None:
            raise HloEvalError(f"computation '{name}' is not defined")
        c = per[(name, check)] = compile_computation(comp, check)
    return c


def compile_computation(comp: Computation, check: bool) -> Compiled:
    from .evaluator import _Plan
    plan = _Plan(comp)
    insts = plan.insts
    ns: dict = {"ndarray": np.ndarray, "_bad": _bad, "_conforms": conforms}
    lines = ["def run(ec, args):"]
    line_step: dict[int, int] = {}
    static = Static(comp)
    for pnum, slot in plan.param_slots:
        lines.append(f"    v{slot} = args[{pnum}]")
    for k, inst in enumerate(insts):
        if inst.opcode == "parameter":
            static.record(k, inst, None)
            continue
        ops = plan.operand_idx[k]
        args = ", ".join(f"v{j}" for j in ops)
        folded = fold_constant(inst, [static.const.get(j) for j in ops])
        if folded is not None:
            ns[f"K{k}"] = folded
            code = f"v{k} = K{k}"
            static.record(k, inst, folded)
        else:
            fast = prepare(inst, ops, static)
            static.record(k, inst, None, fast)
            if fast is None:
                ns[f"R{k}"], ns[f"I{k}"] = plan.rules[k], inst
                code = f"v{k} = R{k}(I{k}, [{args}], ec)"
            elif fast.inline is not None:
                code = f"v{k} = " + fast.inline.format(*(f"v{j}" for j in ops))
            else:
                ns[f"F{k}"] = fast.fn
                code = f"v{k} = F{k}(" + ("ec, " if fast.needs_ec else "") + args + ")"
        line_step[len(lines) + 1] = k
        lines.append("    " + code)
        if check and folded is None:
            ex = plan.expect[k]
            if ex is not None:
                ns[f"D{k}"], ns[f"S{k}"] = ex
                cond = f"v{k}.__class__ is not ndarray or v{k}.dtype != D{k} or v{k}.shape != S{k}"
            else:
                ns[f"H{k}"] = inst.shape
                cond = f"_conforms(v{k}, H{k}) is not None"
            line_step[len(lines) + 1] = k
            lines.append(f"    if {cond}: _bad(I{k}, v{k})")
            ns[f"I{k}"] = inst
        dead = [j for j in plan.free_after[k]]
        if dead:
            lines.append("    del " + ", ".join(f"v{j}" for j in dead))
    lines.append(f"    return v{plan.root}")
    filename = f"<hlo computation {comp.name} #{next(_counter)}>"
    exec(compile("\n".join(lines), filename, "exec"), ns)
    fn = ns["run"]
    return Compiled(comp, fn, fn.__code__, insts, line_step, len(plan.param_slots))


def _bad(inst, value):
    from .evaluator import _diag
    why = conforms(value, inst.shape) or "unexpected value"
    raise HloEvalError(
        f"{inst.name}: {inst.opcode} produced a value that does not match its shape "
        f"{inst.shape.to_str(False)}: {why}",
        [_diag(inst, f"{inst.name}: {inst.opcode} produced {describe(value)}, which does not "
                     f"match its shape {inst.shape.to_str(False)}: {why}", "R012")])


def run_compiled(ec, c: Compiled, args):
    """Run a compiled computation with the generic loop's error reporting and accounting."""
    from .evaluator import _diag
    if len(args) != c.n_params:
        raise HloEvalError(f"computation '{c.comp.name}' takes {c.n_params} arguments, got {len(args)}")
    ec.depth += 1
    if ec.depth > 500:
        ec.depth -= 1
        raise HloEvalError("computations call each other more than 500 deep (recursion?)")
    try:
        if ec.depth == 1:
            with np.errstate(all="ignore"):
                value = c.fn(ec, args)
        else:
            value = c.fn(ec, args)
    except HloEvalError as e:
        if not e.diagnostics:
            inst = c.step_at(e.__traceback__)
            if inst is not None:
                e.diagnostics = [_diag(inst, f"{inst.name}: {e}", "R010")]
        raise
    except _EVAL_ERRORS as e:
        inst = c.step_at(e.__traceback__)
        if inst is None:
            raise
        raise HloEvalError(f"{inst.name}: {inst.opcode} failed: {e}",
                           [_diag(inst, f"{inst.name}: {inst.opcode} failed: {type(e).__name__}: {e}",
                                  "R011")]) from e
    finally:
        ec.depth -= 1
    ec.executed += len(c.steps)
    if ec.progress is not None:
        ec.progress(ec.executed)
    return value
