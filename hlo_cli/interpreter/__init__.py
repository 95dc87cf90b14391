"""The NumPy interpreter: XLA's semantics, vectorized, with hooks for every executed instruction."""
from __future__ import annotations

from .evaluator import EvalContext, InstructionEvent, RunOptions, run_module
from .registry import EVAL_RULES, evaluator, rule_for
from . import ops  # noqa: F401,E402  (registers every evaluation rule)

__all__ = ["EvalContext", "InstructionEvent", "RunOptions", "run_module", "EVAL_RULES", "evaluator",
           "rule_for", "run"]


def run(module_or_text, *args, hook=None, inputs=None, **options):
    """Run a module (a Module, or HLO text) on `args` (one array per entry parameter, in order;
    or `inputs={name: array}`) and return the result: an ndarray, or a tuple for tuple results.

    `hook(event)` is called after every executed instruction with an InstructionEvent (computation,
    instruction, value, execution count, operand values).  Options: seed, max_iterations,
    elided_constants ("zeros"/"random"), replica_id, partition_id, check_values.
    """
    from ..ir.module import Module
    from .inputs import bind
    if isinstance(module_or_text, Module):
        module = module_or_text
    else:
        from ..parser import parse
        module = parse(module_or_text)
    values = bind(module.entry_computation.parameters, args, inputs)
    return run_module(module, values, RunOptions(**options), hook)
