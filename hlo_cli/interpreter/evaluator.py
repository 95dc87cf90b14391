"""The evaluator: runs computations instruction by instruction on NumPy values.

Per computation a plan is built once (and reused on every call, so loop bodies pay no per-iteration
set-up): the instructions to run (those the root depends on, through operands and control
predecessors, plus side-effecting ones), in dependency order, each with its evaluation rule and
the slots of its operands resolved, and for each step the slots whose last use it is, so values are
freed as soon as their last user has run and peak memory follows the live set.

This instruction-by-instruction loop is the reference, and what runs under a hook (dumps,
--check-finite).  Without a hook, runs take the fast path of compiler.py, built from the same plans
and the same rules, which gives the same values.

No global state: everything a run needs is in the EvalContext (replica and partition ids, the rng,
options, hooks), so several replicas can later run side by side.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..errors import HloEvalError
from ..ir.module import Computation, Instruction, Module
from .allocator import keep_freed_memory
from .compiler import compiled, run_compiled, run_while
from .contraction import contract
from .excess_precision import prepare as prepare_excess_precision
from .hoist import hoist_loop_invariants
from .hooks import Level, track
from .located import bad_result, run_located
from .memory import preflight, resource_error
from .ops.numerics import module_mode, settle as settle_numerics
from .ops.numerics import resolve as resolve_numerics
from .parallel import blas_single
from .schedule import Plan
from .values import conforms

MAX_DEPTH = 500                    # computations calling computations, deeper is an error (recursion)


@dataclass
class RunOptions:
    seed: int = 0
    max_iterations: int | None = None          # a guard for while loops (None: unlimited)
    elided_constants: str | None = None        # None: refuse; "zeros" or "random": fill them
    replica_id: int = 0
    partition_id: int = 0
    check_values: bool = True                  # check every result against its declared shape
    profile: Any = None                        # --profile: an object with runner(compiled) (profiling.py)
    numerics: str | None = None                # None (auto), "cpu" or "gpu": whose arithmetic (numerics.py)


@dataclass
class InstructionEvent:
    """What a hook receives after each executed instruction."""
    computation: Computation
    instruction: Instruction
    value: Any
    count: int                                 # how many times this instruction has run (1-based)
    operands: list = field(default_factory=list)


def depth_error() -> HloEvalError:
    """Computations calling each other deeper than MAX_DEPTH (recursion)."""
    return HloEvalError(f"computations call each other more than {MAX_DEPTH} deep (recursion?)")


class EvalContext:
    """Everything one run needs; handed to every evaluation rule."""

    def __init__(self, module: Module, options: RunOptions | None = None,
                 hook: Callable[[InstructionEvent], None] | None = None,
                 progress: Callable[[int], None] | None = None, compiled_ok: bool = True):
        self.module = module
        self.options = options or RunOptions()
        self.hook = hook
        self.progress = progress
        self.replica_id = self.options.replica_id
        self.partition_id = self.options.partition_id
        self.rng = np.random.default_rng(self.options.seed)
        self.rng_states: dict = {}               # rng-get-and-update-state counters, per instruction
        self.executed = 0                        # instructions executed
        self.loop_iterations = 0
        self._plans: dict[str, Plan] = {}
        self._counts: dict[tuple[str, str], int] = {}
        self._comps = module.computation_map
        self.depth = 0
        self.compiled = compiled_ok
        self.batched = 0                         # > 0 inside apply(): nested calls are applied too
        self.profile = self.options.profile      # --profile: an object with runner(compiled) (profiling.py)
        self.levels = track().levels             # where this thread's run is (hooks.py)
        # "cpu" or "gpu" and the GPU's compute capability: numerics.py (a module settled by
        # run_module carries them; any other is resolved here)
        mode, gen = module_mode(module)
        if mode == "cpu" and self.options.numerics != "cpu":
            mode = resolve_numerics(module, self.options.numerics)
        self.numerics, self.gpu_generation = mode, gen

    # -- called computations --------------------------------------------------
    def plan(self, name: str) -> Plan:
        p = self._plans.get(name)
        if p is None:
            comp = self._comps.get(name)
            if comp is None:
                raise HloEvalError(f"computation '{name}' is not defined")
            p = self._plans[name] = Plan(comp)
            contract(p, self.module, keep_products=True)    # XLA CPU's FMAs (contraction.py)
        return p

    def call(self, name: str, args) -> Any:
        """Run computation `name` on `args` (one value per parameter) and return its root's value.
        Without a hook it runs compiled (compiler.py); with one, instruction by instruction.
        Inside a computation applied to whole arrays (apply) the callee is applied as well."""
        if self.batched:
            return self._run(self.plan(name), list(args), check=False, hook=False)
        if self.hook is None and self.compiled:
            return run_compiled(self, compiled(self.module, name, self.options.check_values), args)
        return self._run(self.plan(name), list(args), check=self.options.check_values, hook=True)

    def run_compiled(self, c, args) -> Any:
        """Run compiled computation `c` on `args` (the kernels of call and fusion, ops/control.py)."""
        return run_compiled(self, c, args)

    def run_while(self, cond, body, state, limit, name: str) -> Any:
        """A while loop of compiled computations (the kernel of while, ops/control.py)."""
        return run_while(self, cond, body, state, limit, name)

    def apply(self, name: str, args) -> Any:
        """Run a computation of scalars on whole arrays at once (reducers, comparators, map and
        scatter combiners): each parameter gets an array of values, results come back as arrays.
        Only element-wise instructions make sense in such a computation; no shape checks, no hooks,
        and the computations it calls (call, fusion) are applied the same way."""
        self.batched += 1
        try:
            return self._run(self.plan(name), list(args), check=False, hook=False)
        finally:
            self.batched -= 1

    def _run(self, plan: Plan, args: list, check: bool, hook: bool):
        vals = plan.bind(args)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise depth_error()
        levels = self.levels
        if levels:
            levels[-1].calls += 1
        lv = Level(self, plan.comp.name, len(plan.insts))
        lv.insts = plan.insts
        levels.append(lv)
        try:
            n = len(plan.insts)
            insts, rules, opidx, free = plan.insts, plan.rules, plan.operand_idx, plan.free_after
            expect = plan.expect
            ndarray = np.ndarray
            do_hook = hook and self.hook is not None
            for k in range(n):
                inst = insts[k]
                lv.k, lv.calls = k, 0
                if inst.opcode != "parameter":
                    operands = [vals[j] for j in opidx[k]]
                    value = vals[k] = run_located(inst, rules[k], inst, operands, self)
                else:
                    value = vals[k]
                    operands = []
                if check:
                    ex = expect[k]
                    if not (ex is not None and type(value) is ndarray and value.dtype == ex[0] and
                            value.shape == ex[1]) and conforms(value, inst.shape) is not None:
                        bad_result(inst, value)
                self.executed += 1
                if do_hook:
                    key = (plan.comp.name, inst.name)
                    c = self._counts.get(key, 0) + 1
                    self._counts[key] = c
                    self.hook(InstructionEvent(plan.comp, inst, value, c, operands))
                for j in free[k]:
                    vals[j] = None
            if self.progress is not None:
                self.progress(self.executed)
            return vals[plan.root]
        finally:
            self.depth -= 1
            del levels[-1]


def run_module(module: Module, args, options: RunOptions | None = None, hook=None, progress=None,
               compiled: bool = True):
    """Run the entry computation of `module` on `args` (values in parameter order).  `compiled`
    False runs every instruction through the generic loop (the reference the tests compare with).
    What no run could hold is refused before it starts (memory.preflight); running out of memory
    is an HloResourceError (exit code 4).  Narrow floats follow XLA CPU's excess precision
    (excess_precision.py; HLO_EXCESS_PRECISION=0 turns it off)."""
    module = prepare_excess_precision(module)
    if hook is None and compiled:
        module = hoist_loop_invariants(module)
    module, _, _ = settle_numerics(module, (options or RunOptions()).numerics)
    preflight(module)
    keep_freed_memory()
    ec = EvalContext(module, options, hook, progress, compiled)
    try:
        # BLAS single-threaded for the whole run, on either path: OpenBLAS's own threads sum
        # some products in another order than one thread does (seen on AMD EPYC), and the
        # generic loop must give the compiled path's bits
        with blas_single():
            return ec.call(module.entry, args)
    except MemoryError as e:        # outside any instruction's evaluation (preparing a computation)
        raise resource_error(None, e) from e
