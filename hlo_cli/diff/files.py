"""`hlo diff A B` on files: both modules read and checked as `hlo run` reads and checks one, the
inputs gathered as `hlo run` gathers them (the run pipeline's input step), then diff_modules.

    from hlo_cli.diff.files import DiffRequest, prepare, run
    plan = prepare(DiffRequest("a.hlo", "b.hlo", random_inputs=True))
    report = run(plan)          # a DiffReport (see core.py)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass
class DiffRequest:
    """Two module files (stages of dump directories already resolved to files) and how to run them."""
    module_a: str
    module_b: str
    module_a_choice: str | None = None
    module_b_choice: str | None = None
    inputs: tuple = ()
    inputs_npz: str | None = None
    random_inputs: bool = False
    seed: int = 0
    rtol: float = 1e-3
    atol: float = 1e-3
    output_sharding: str | None = None
    max_executions: int | None = None
    keep_bytes: int | None = None      # A's values kept in memory up to this (None: the library's default)
    max_iterations: int | None = None
    elided_constants: str | None = None
    check: bool = True
    use_cache: bool = True
    numerics: str = "auto"


@dataclass
class DiffPlan:
    """What the diff runs: the modules, their arguments and the interpreter's options."""
    request: DiffRequest
    a: Any
    b: Any
    args: list
    options: Any


def prepare(request: DiffRequest, note: Callable[[str], None] = lambda text: None) -> DiffPlan:
    """Read, check and compare the parameters of both modules, and gather the inputs (A's
    parameters decide names and shapes); NOTE hears what is worth saying (casts of inputs, the
    snapshot whose arguments are taken)."""
    from ..interpreter import RunOptions
    from ..interpreter.ops.numerics import resolve_together
    from ..pipeline.inputs import read_arguments
    from ..pipeline.prepare import load_checked, snapshot_of
    from .core import check_parameters
    req = request
    a, b = (load_checked(path, choice, req.check, req.elided_constants, req.use_cache, option)[0]
            for path, choice, option in ((req.module_a, req.module_a_choice, "--module-a"),
                                         (req.module_b, req.module_b_choice, "--module-b")))
    if req.output_sharding is not None:               # a bad one is a usage error before anything runs
        from ..pipeline.devices import parse_sharding
        parse_sharding(req.output_sharding, b)
    check_parameters(a, b)
    inputs_npz = req.inputs_npz
    if not req.inputs and not inputs_npz and not req.random_inputs:
        # a snapshot given as A or B: the arguments of its execution, as `hlo run SNAPSHOT.pb` takes them
        inputs_npz = next((p for p in (req.module_a, req.module_b) if snapshot_of(p) is not None), None)
        if inputs_npz:
            note(f"note: inputs: the arguments recorded in {inputs_npz}")
    args = read_arguments(a, req.inputs, inputs_npz, req.random_inputs, req.seed, note)
    options = RunOptions(seed=req.seed, max_iterations=req.max_iterations, elided_constants=req.elided_constants,
                         numerics=resolve_together((b, a), req.numerics))
    return DiffPlan(req, a, b, args, options)


def run(plan: DiffPlan, on_phase: Callable[[str], None] | None = None):
    """Run the plan's modules and compare them: the DiffReport."""
    from .core import diff_modules
    req = plan.request
    return diff_modules(plan.a, plan.b, plan.args, req.rtol, req.atol, options=plan.options, path_a=req.module_a,
                        path_b=req.module_b, keep_bytes=req.keep_bytes, max_executions=req.max_executions,
                        on_phase=on_phase, output_sharding=req.output_sharding)
