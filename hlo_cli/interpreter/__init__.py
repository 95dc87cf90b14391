"""The NumPy interpreter: XLA's semantics, vectorized, with hooks for every executed instruction.

Importing the package (or one of its light modules: memory, inputs, values...) loads neither the
evaluator nor the evaluation rules: `EvalContext`, `InstructionEvent`, `RunOptions` and `run_module`
come from the evaluator on first use, and the registry loads the rules (ops/) on its first lookup.
"""
from __future__ import annotations

import sys
import types

from .registry import EVAL_RULES, defer_rules, evaluator, rule_for

__all__ = ["EvalContext", "InstructionEvent", "RunOptions", "run_module", "EVAL_RULES", "evaluator",
           "rule_for", "run"]

_FROM_EVALUATOR = frozenset({"EvalContext", "InstructionEvent", "RunOptions", "run_module"})


def __getattr__(name: str):
    if name in _FROM_EVALUATOR:
        from importlib import import_module
        value = getattr(import_module(__name__ + ".evaluator"), name)   # the submodule, not the decorator
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register_rules() -> None:
    from . import ops  # noqa: F401  (registers every evaluation rule)


defer_rules(_register_rules)


class _Package(types.ModuleType):
    """The package's module: importing the submodule `evaluator` must not replace the package's
    attribute `evaluator` (the registry's decorator, as when the package imported it eagerly)."""

    def __setattr__(self, name, value):
        if name == "evaluator" and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


def run(module_or_text, *args, hook=None, inputs=None, **options):
    """Run a module (a Module, or HLO text) on `args` (one array per entry parameter, in order;
    or `inputs={name: array}`) and return the result: an ndarray, or a tuple for tuple results.

    `hook(event)` is called after every executed instruction with an InstructionEvent (computation,
    instruction, value, execution count, operand values).  Options: seed, max_iterations,
    elided_constants ("zeros"/"random"), replica_id, partition_id, check_values.
    """
    from ..ir.module import Module
    from .evaluator import RunOptions, run_module
    from .inputs import bind
    if isinstance(module_or_text, Module):
        module = module_or_text
    else:
        from ..parser import parse
        module = parse(module_or_text)
    values = bind(module.entry_computation.parameters, args, inputs)
    return run_module(module, values, RunOptions(**options), hook)
