"""`hlo shrink`: reduce a module while a condition still holds.

The candidate is always a module with its inputs: the entry computation's instructions, its ROOT,
and a value for each parameter.  Reductions, tried in a fixed order until none applies (or the time
budget is spent), each kept only when the condition still holds on the result:

  1. cut the prefix: for a position P of the entry's execution order, every value computed before P
     and read at or after P becomes a parameter holding its value (from a run of the candidate),
     and everything before P goes; the largest P that keeps the condition is found by bisection;
  2. lower the ROOT: the ROOT becomes one of its operands (the outputs that are not needed go);
  3. remove outputs: a ROOT tuple keeps half, then all but one, of its operands;
  4. inline: a call or fusion of the entry becomes its computation's instructions (names kept
     when free), so that cuts can go inside it;
  5. fewer loop trips: a while loop whose condition compares with an integer constant gets a
     smaller one (halved, down to 1);
  6. cut single instructions: each instruction (from the ROOT up) becomes a parameter holding its value;
  7. with `constants`, at the end: every parameter a constant holding its value (no inputs needed).

Dead instructions (nothing the ROOT needs) and unused parameters and computations are dropped after
each step.  Deterministic: the same module, inputs and condition give the same steps.  Every
attempt goes into the log (what was tried, whether it was kept, the instruction count, the time).

Conditions (`Condition.holds(module, inputs) -> bool`): `nan` (the run makes a NaN or Inf, first at
the same instruction as in the original: `hlo run --check-finite`'s judgement), `mismatch_xla` (hlo's
results differ from XLA CPU's), `error` (hlo's run or check fails with a message containing a text),
`expect` (the results still differ from recorded ones: the outputs kept are matched to the recorded
ones by position; no value is cut into a parameter, which would carry the difference in by itself), `command` (a shell command, `{}` replaced by the candidate module's path and
`{inputs}` by its inputs' .npz, exits 0: C-Reduce's convention for "still interesting").
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import dataclasses
import os
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import HloError, HloInputError
from ..pipeline.io import leaves_with_shapes
from ..ir.module import Instruction, Module
from ..ir.shape import Shape
from . import slicing


@dataclass
class Candidate:
    """A module with its inputs: INSTS (the entry's instructions, parameters included), ROOT, VALUES
    (parameter name -> value), the computations besides the entry, and for each result leaf its
    position among the original module's result leaves."""
    insts: list
    root: str
    values: dict
    comps: dict
    outputs: list
    source: Module

    def module(self) -> Module:
        """The candidate as a Module (parameters numbered in order; only the computations it calls)."""
        num, out = 0, []
        for i in self.insts:
            if i.opcode == "parameter":
                out.append(dataclasses.replace(i, parameter_number=num))
                num += 1
            else:
                out.append(i)
        ent = slicing.Computation(f"{self.source.name}.entry", tuple(out), self.root, is_entry=True)
        tmp = dataclasses.replace(self.source, computations=tuple(self.comps.values()) + (ent,), entry=ent.name)
        comps = slicing.callees(tmp, slicing.called_by(out))
        attrs = {k: v for k, v in self.source.attrs.items() if k not in ("entry_computation_layout",
                                                                           "input_output_alias", "buffer_donor")}
        return Module(self.source.name, tuple(comps) + (ent,), ent.name, attrs, self.source.stack_frames)

    def args(self) -> list:
        return [self.values[i.name] for i in self.insts if i.opcode == "parameter"]

    @property
    def size(self) -> int:
        return sum(1 for i in self.insts if i.opcode != "parameter")


def _dce(c: Candidate) -> Candidate:
    by = {i.name: i for i in c.insts}
    live, stack = set(), [c.root]
    while stack:
        n = stack.pop()
        if n in live or n not in by:
            continue
        live.add(n)
        stack.extend(by[n].operands)
    insts = [i for i in c.insts if i.name in live]
    values = {k: v for k, v in c.values.items() if k in live}
    return dataclasses.replace(c, insts=insts, values=values)


def from_module(module: Module, args) -> Candidate:
    entry = module.entry_computation
    params = entry.parameters
    values = {p.name: a for p, a in zip(params, args)}
    drop = ("control-predecessors",)
    insts = [dataclasses.replace(i, attrs={k: v for k, v in i.attrs.items() if k not in drop})
             for i in entry.instructions]
    root_shape = entry.root_instruction.shape
    n = sum(1 for _ in root_shape.leaves()) if root_shape.is_tuple else 1
    comps = {c.name: c for c in module.computations if not c.is_entry}
    return _dce(Candidate(insts, entry.root, values, comps, list(range(n)), module))


# ----------------------------------------------------------------------------- conditions

class Condition(ABC):
    name = "condition"
    # whether values may be cut into parameters holding the run's values: not for a comparison with
    # recorded results, which a parameter holding the run's (differing) value would satisfy by itself
    allows_cuts = True

    @abstractmethod
    def holds(self, module: Module, args: list, outputs: list) -> bool:
        """Whether the bug is still there in MODULE run on ARGS (giving OUTPUTS)."""

    def describe(self) -> str:
        return self.name

    def close(self):
        pass


def _run(module, args, options, hook=None):
    from ..interpreter import run_module
    return run_module(module, list(args), options, hook)


class NanCondition(Condition):
    """The run makes a NaN or Inf, first (as --check-finite judges) at the same instruction as the
    first candidate's."""
    name = "nan"

    def __init__(self, options):
        self.options = options
        self.target = None

    def holds(self, module, args, outputs):
        from ..pipeline.finite import FiniteGuard, NonFinite
        guard = FiniteGuard(module)
        try:
            _run(module, args, self.options, guard)
        except NonFinite:
            rep = guard.report
            if self.target is None:
                self.target = rep["instruction"]
            return rep["instruction"] == self.target
        except HloError:
            return False
        return False

    def describe(self):
        return f"a NaN or Inf first made by %{self.target}" if self.target else "a NaN or Inf"


class ErrorCondition(Condition):
    name = "error"

    def __init__(self, text: str, options):
        self.text, self.options = text, options

    def holds(self, module, args, outputs):
        from ..checker import check_module
        from ..ir.printer import format_module
        text = format_module(module)
        errs = [d for d in check_module(module, text, warnings=False) if d.severity == "error"]
        msgs = [d.message for d in errs]
        if not errs:
            try:
                _run(module, args, self.options)
                return False
            except HloError as e:
                msgs = [str(e)] + [d.message for d in e.diagnostics]
        return any(self.text in m for m in msgs)

    def describe(self):
        return f"an error containing {self.text!r}"


def _leaves(module, result):
    shape = module.entry_computation.root_instruction.shape
    return [np.asarray(v) for v, _ in leaves_with_shapes(result, shape)]


class ExpectCondition(Condition):
    """hlo's results still differ from the recorded REFERENCE (keys out0...: the original module's
    result leaves), each kept output compared with the recorded one of its original position."""
    name = "expect"
    allows_cuts = False

    def __init__(self, reference: dict, rtol, atol, options):
        self.reference, self.rtol, self.atol, self.options = reference, rtol, atol, options

    def holds(self, module, args, outputs):
        from ..diff.values import compare_leaves
        try:
            got = _leaves(module, _run(module, args, self.options))
        except HloError:
            return False
        for g, k in zip(got, outputs):
            want = self.reference.get(f"out{k}")
            if want is None or not isinstance(want, np.ndarray):
                continue
            if compare_leaves([want], [g], self.rtol, self.atol)["status"] != "agree":
                return True
        return False

    def describe(self):
        return "results that differ from the recorded ones"


class XlaMismatchCondition(Condition):
    """hlo's results differ from XLA CPU's on the same inputs (XLA refusing the module: not held)."""
    name = "mismatch xla"

    def __init__(self, rtol, atol, options):
        from .xla_worker import XlaWorker
        self.rtol, self.atol, self.options = rtol, atol, options
        self.worker = XlaWorker()

    def holds(self, module, args, outputs):
        from ..diff.values import compare_leaves
        from .xla_worker import XlaCrash, XlaRefused
        try:
            got = _leaves(module, _run(module, args, self.options))
        except HloError:
            return False
        plain = dataclasses.replace(module, computations=tuple(slicing.plain_computation(module, c)
                                                               for c in module.computations))
        flat = []
        for a, p in zip(args, module.entry_computation.parameters):
            flat.extend(np.asarray(v) for v, _ in leaves_with_shapes(a, p.shape))
        try:
            xla = self.worker.run(slicing.text_of(plain), flat)
        except (XlaRefused, XlaCrash):
            return False
        if len(xla) != len(got):
            return False
        return any(compare_leaves([np.asarray(w)], [g], self.rtol, self.atol)["status"] != "agree"
                   for w, g in zip(xla, got))

    def close(self):
        self.worker.close()


class CommandCondition(Condition):
    """COMMAND exits 0 (`{}`: the candidate module's path; `{inputs}`: its inputs' .npz)."""
    name = "command"

    def __init__(self, command: str, timeout: float | None = None):
        if "{}" not in command:
            raise HloInputError(f"--until-command {command!r}: put {{}} where the module's path goes")
        self.command, self.timeout = command, timeout
        self.dir = tempfile.mkdtemp(prefix="hlo-shrink-")

    def holds(self, module, args, outputs):
        from ..pipeline.io import storable
        from ..ir.printer import format_module
        path = os.path.join(self.dir, "candidate.hlo")
        inputs = os.path.join(self.dir, "candidate.inputs.npz")
        with open(path, "w") as f:
            f.write(format_module(module))
        params = module.entry_computation.parameters
        np.savez(inputs, **{p.name: storable(np.asarray(a)) for p, a in zip(params, args)})
        cmd = self.command.replace("{inputs}", shlex.quote(inputs)).replace("{}", shlex.quote(path))
        try:
            proc = subprocess.run(cmd, shell=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0

    def describe(self):
        return f"`{self.command}` exits 0"

    def close(self):
        import shutil
        shutil.rmtree(self.dir, ignore_errors=True)


# ----------------------------------------------------------------------------- reductions

def _capture(c: Candidate, options) -> dict:
    """The value of every entry instruction of the candidate's run (first execution)."""
    module = c.module()
    entry = module.entry_computation.name
    out = {}

    def hook(ev):
        if ev.computation.name == entry and ev.instruction.name not in out:
            v = ev.value
            out[ev.instruction.name] = tuple(_copy(x) for x in v) if isinstance(v, tuple) else _copy(v)
    try:
        _run(module, c.args(), options, hook)
    except HloError:
        pass
    except BaseException as e:          # noqa: BLE001 -- a guard's stop: what ran is captured
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
    return out


def _copy(v):
    if isinstance(v, tuple):
        return tuple(_copy(x) for x in v)
    return np.array(v, copy=True) if isinstance(v, np.ndarray) else v


def _as_parameter(c: Candidate, names: set, values: dict) -> Candidate | None:
    """NAMES (instructions of C) become parameters holding VALUES; None when a value is missing or
    holds a token."""
    insts, vals = [], dict(c.values)
    taken = {i.name for i in c.insts}
    for i in c.insts:
        if i.name in names:
            if i.name not in values or slicing.is_token(i.shape) or i.opcode == "parameter":
                return None
            new, v = slicing.as_parameters(i.name, i.shape, values[i.name], i.loc)
            if any(x.name in taken and x.name != i.name for x in new):
                return None
            insts.extend(new)
            vals.update(v)
        else:
            insts.append(i)
    return _dce(dataclasses.replace(c, insts=insts, values=vals))


def _as_constants(c: Candidate) -> Candidate | None:
    """C with every parameter a constant holding its value (None when there is none)."""
    if not c.values:
        return None
    insts = [dataclasses.replace(slicing.constant(i.name, i.shape, c.values[i.name]), loc=i.loc)
             if i.opcode == "parameter" else i for i in c.insts]
    return dataclasses.replace(c, insts=insts, values={})


def _prefix_cut(c: Candidate, p: int, values: dict):
    """C with every value computed before position P and read at or after it as a parameter (C
    itself when there is none; None when a value is missing)."""
    kinds = {i.name: i.opcode for i in c.insts}
    before = {i.name for i in c.insts[:p]}
    live = {o for i in c.insts[p:] for o in i.operands if o in before} | ({c.root} & before)
    cut = {n for n in live if kinds[n] != "parameter"}
    if not cut:
        return c
    return _as_parameter(c, cut, values)


def _inline(c: Candidate, inst: Instruction) -> Candidate | None:
    """C with the call or fusion INST replaced by its computation's instructions (their names kept
    when free; the callee's ROOT takes INST's name).  None when the callee's ROOT is a parameter."""
    callee = c.comps.get(inst.called_computations[0]) if inst.called_computations else None
    if callee is None or callee.root_instruction.opcode == "parameter":
        return None
    taken = {i.name for i in c.insts}
    fresh = all(i.name not in taken for i in callee.instructions if i.opcode != "parameter")
    prefix = "" if fresh else inst.name + "."
    names = {p.name: inst.operands[p.parameter_number] for p in callee.parameters}
    new = []
    for i in callee.instructions:
        if i.opcode == "parameter":
            continue
        nm = inst.name if i.name == callee.root else prefix + i.name
        names[i.name] = nm
        new.append(dataclasses.replace(i, name=nm, operands=tuple(names[o] for o in i.operands),
                                       attrs={k: v for k, v in i.attrs.items() if k != "control-predecessors"}))
    insts = []
    for i in c.insts:
        insts.extend(new if i.name == inst.name else [i])
    return _dce(dataclasses.replace(c, insts=insts))


def _loop_bounds(c: Candidate):
    """(while instruction, condition computation, constant instruction, value) of the entry's loops
    whose condition compares with an integer constant."""
    out = []
    for i in c.insts:
        if i.opcode != "while":
            continue
        cond = c.comps.get(i.attrs["condition"].name)
        if cond is None:
            continue
        for x in cond.instructions:
            if x.opcode == "compare":
                for o in x.operands:
                    k = cond.by_name[o]
                    if k.opcode == "constant" and k.shape.rank == 0 and k.shape.element_type[0] in "su" \
                            and k.literal is not None:
                        out.append((i, cond, k, int(np.asarray(k.literal.value).reshape(()))))
    return out


def _with_bound(c: Candidate, cond, const, value: int) -> Candidate:
    lit = slicing.constant(const.name, const.shape, np.asarray(value, dtype=np.asarray(const.literal.value).dtype))
    lit = dataclasses.replace(lit, loc=const.loc)
    insts = tuple(lit if x.name == const.name else x for x in cond.instructions)
    comps = dict(c.comps)
    comps[cond.name] = dataclasses.replace(cond, instructions=insts)
    return dataclasses.replace(c, comps=comps)


@dataclass
class ShrinkResult:
    candidate: Candidate
    start_size: int
    log: list = field(default_factory=list)
    seconds: float = 0.0
    budget_spent: bool = False
    condition: str = ""

    @property
    def module(self) -> Module:
        return self.candidate.module()


class _Budget(Exception):
    pass


def shrink(module: Module, args, condition: Condition, *, time_budget: float = 600.0, options=None,
           on_step=None, constants: bool = False) -> ShrinkResult:
    """Reduce MODULE (on ARGS) while CONDITION holds (see the module docstring); CONSTANTS: at the
    end, make every parameter a constant holding its value when the condition still holds.  Raises
    HloInputError when the condition does not hold on MODULE itself."""
    from ..interpreter import RunOptions
    options = options or RunOptions()
    t0 = time.perf_counter()
    log: list = []
    best = from_module(module, args)
    if not condition.holds(best.module(), best.args(), best.outputs):
        raise HloInputError(f"the condition ({condition.describe()}) does not hold on the module as given: "
                            f"nothing to shrink")
    start = best.size
    smallest = [best]             # (inlining grows the module for the cuts it allows: the smallest is the result)

    def attempt(kind: str, what: str, cand: Candidate | None, keep: bool = True, grow: bool = False) -> bool:
        nonlocal best
        if cand is None or (cand.size >= best.size and not grow):
            return False
        if time.perf_counter() - t0 > time_budget:
            raise _Budget()
        t = time.perf_counter()
        ok = condition.holds(cand.module(), cand.args(), cand.outputs)
        log.append({"step": len(log) + 1, "kind": kind, "tried": what, "kept": ok, "instructions": cand.size,
                    "seconds": round(time.perf_counter() - t, 4)})
        if on_step:
            on_step(log[-1])
        if ok and keep:
            best = cand
        if ok and cand.size < smallest[0].size:
            smallest[0] = cand
        return ok

    spent = False
    try:
        changed = True
        while changed:
            changed = False
            # 1. cut the prefix (bisection over the execution order)
            values = _capture(best, options) if condition.allows_cuts else {}
            base = best
            lo, hi = 0, len(base.insts) if condition.allows_cuts else 0   # the cut at lo holds; at hi not
            kept = None
            while hi - lo > 1:
                mid = (lo + hi) // 2
                cand = _prefix_cut(base, mid, values)
                if cand is base:                # nothing computed before MID: nothing to cut there
                    lo = mid
                    continue
                if cand is not None and attempt("cut-prefix", f"everything before instruction {mid} of "
                                                              f"{len(base.insts)} as parameters", cand, keep=False):
                    lo, kept = mid, cand
                else:
                    hi = mid
            if kept is not None and kept.size < best.size:
                best = kept
                changed = True
            # 2. lower the ROOT, 3. remove outputs
            while True:
                by = {i.name: i for i in best.insts}
                root = by[best.root]
                done = False
                if root.opcode == "tuple" and len(root.operands) > 1:
                    n = len(root.operands)
                    keep_sets = [list(range(n // 2)), list(range(n // 2, n))] + \
                                [[k] for k in range(n)]
                    for keep in keep_sets:
                        cand = _keep_outputs(best, root, keep)
                        if attempt("remove-outputs", f"keep outputs {keep[:8]}{'...' if len(keep) > 8 else ''} of "
                                                     f"{n}", cand):
                            done = changed = True
                            break
                if not done and (condition.allows_cuts or root.opcode == "tuple"):
                    # (a comparison with recorded results compares whole results: a ROOT lowered
                    # inside one would be compared with the recorded value of another quantity)
                    for o in root.operands:
                        op = by.get(o)
                        if op is None or op.opcode == "parameter" or slicing.is_token(op.shape):
                            continue
                        cand = _dce(dataclasses.replace(best, root=o, outputs=_outputs_of(best, root, o)))
                        if attempt("lower-root", f"ROOT := %{o}", cand):
                            done = changed = True
                            break
                if not done:
                    break
            # 4. inline calls and fusions (more instructions, kept for the cuts they allow inside)
            for inst in list(best.insts) if condition.allows_cuts else []:
                if inst.opcode in ("call", "fusion") and any(i.name == inst.name for i in best.insts):
                    cand = _inline(best, inst)
                    if attempt("inline", f"inline %{inst.name}", cand, grow=True):
                        changed = True
            # 5. fewer loop trips
            for w, cond, const, value in _loop_bounds(best):
                v = value
                while abs(v) > 1:
                    v = v // 2 if v > 0 else -((-v) // 2)
                    if not attempt("loop-trips", f"%{w.name}: bound {value} -> {v}",
                                   _with_bound(best, cond, const, v), grow=True):
                        break
                    value = v
            # 6. cut single instructions, from the ROOT up
            values = _capture(best, options) if condition.allows_cuts else {}
            for inst in reversed(list(best.insts) if condition.allows_cuts else []):
                if inst.name == best.root or inst.opcode in ("parameter", "constant"):
                    continue
                if inst.name not in {i.name for i in best.insts}:
                    continue
                cand = _as_parameter(best, {inst.name}, values)
                if attempt("to-parameter", f"%{inst.name} as a parameter", cand):
                    changed = True
    except _Budget:
        spent = True
    if best.size > smallest[0].size:
        best = smallest[0]
    if constants and not spent:
        # 7. the parameters as constants holding their values: a module that needs no inputs
        cand = _as_constants(best)
        if cand is not None:
            t = time.perf_counter()
            ok = condition.holds(cand.module(), cand.args(), cand.outputs)
            log.append({"step": len(log) + 1, "kind": "to-constants", "tried": "every parameter as a constant",
                        "kept": ok, "instructions": cand.size, "seconds": round(time.perf_counter() - t, 4)})
            if on_step:
                on_step(log[-1])
            if ok:
                best = cand
    return ShrinkResult(best, start, log, time.perf_counter() - t0, spent, condition.describe())


def _outputs_of(c: Candidate, root, o) -> list:
    """The original result positions of the ROOT tuple's operand O."""
    by = {i.name: i for i in c.insts}
    pos = 0
    for x in root.operands:
        s = by[x].shape
        n = sum(1 for _ in s.leaves()) if s.is_tuple else 1
        if x == o:
            return c.outputs[pos:pos + n] if root.opcode == "tuple" else c.outputs
        pos += n
    return c.outputs


def _keep_outputs(c: Candidate, root, keep: list) -> Candidate:
    by = {i.name: i for i in c.insts}
    ops = [root.operands[k] for k in keep]
    outs, pos = [], 0
    for k, x in enumerate(root.operands):
        s = by[x].shape
        n = sum(1 for _ in s.leaves()) if s.is_tuple else 1
        if k in keep:
            outs.extend(c.outputs[pos:pos + n])
        pos += n
    new_root = dataclasses.replace(root, operands=tuple(ops),
                                   shape=Shape.tuple_of([by[o].shape for o in ops]))
    insts = [new_root if i.name == root.name else i for i in c.insts]
    return _dce(dataclasses.replace(c, insts=insts, outputs=outs))


def write(res: ShrinkResult, out: str, inputs_out: str, force: bool = False, log_path: str | None = None) -> dict:
    """The shrunk module (OUT), its inputs (INPUTS_OUT, keyed by parameter name) and the log; never
    replacing a file unless FORCE (HloInputError)."""
    import json
    from pathlib import Path

    from ..pipeline.io import replace_file, storable, write_new
    from ..ir.printer import format_module
    put = replace_file if force else write_new
    mod = res.module
    text = format_module(mod).encode()
    paths = {"module": str(put(Path(out), lambda f: f.write(text), "--output") or out)}
    params = mod.entry_computation.parameters
    if params:
        arrays = {p.name: storable(np.asarray(a)) for p, a in zip(params, res.candidate.args())}
        paths["inputs"] = str(put(Path(inputs_out), lambda f: np.savez(f, **arrays), "--output") or inputs_out)
    if log_path:
        data = (json.dumps({"condition": res.condition, "instructions_before": res.start_size,
                            "instructions_after": res.candidate.size, "seconds": res.seconds,
                            "time_budget_spent": res.budget_spent, "attempts": res.log}, indent=1) + "\n").encode()
        paths["log"] = str(put(Path(log_path), lambda f: f.write(data), "--log") or log_path)
    return paths


def output_paths(module_file: str, output: str | None, force: bool, log_path: str | None) -> tuple:
    """(the shrunk module's path, its inputs' path): OUTPUT, else STEM.shrunk.hlo beside the
    working directory, and OUTPUT's stem + .inputs.npz; an HloInputError when one of them (or
    LOG_PATH) exists and FORCE does not allow replacing it."""
    stem = Path(module_file).name.split(".")[0] if module_file != "-" else "stdin"
    out = Path(output or f"{stem}.shrunk.hlo")
    out_stem = out.name[:-len(out.suffix)] if out.suffix else out.name
    out_inputs = out.with_name(out_stem + ".inputs.npz")
    if not force:
        there = [str(p) for p in (out, out_inputs) if p.exists() or p.is_symlink()]
        if log_path and Path(log_path).exists():
            there.append(log_path)
        if there:
            raise HloInputError(f"{', '.join(there)} already exist{'s' if len(there) == 1 else ''}; pass --force to "
                                f"replace")
    return out, out_inputs


def condition(module, options, rtol: float, atol: float, nan: bool = False, mismatch: str | None = None,
              error: str | None = None, expect: str | None = None, command: str | None = None):
    """The condition a shrunk module must keep (exactly one of NAN, MISMATCH xla, ERROR text,
    EXPECT's recorded results, COMMAND), run with the interpreter's OPTIONS."""
    if nan:
        return NanCondition(options)
    if mismatch:
        from .reference import require_jax
        require_jax()
        return XlaMismatchCondition(rtol, atol, options)
    if error is not None:
        return ErrorCondition(error, options)
    if expect is not None:
        from ..pipeline.compare import load_results_of
        return ExpectCondition(load_results_of(expect, module), rtol, atol, options)
    return CommandCondition(command)
