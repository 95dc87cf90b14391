"""Loop-invariant code motion before a run (XLA's WhileLoopInvariantCodeMotion): to be written.

`hoist_loop_invariants(module)` returns the module to run: the same module, or one whose while
loops no longer recompute, every iteration, values that do not change across iterations.
"""
from __future__ import annotations

from ..ir.module import Module


def hoist_loop_invariants(module: Module) -> Module:
    """The module to run when no hook watches the instructions (see the module docstring)."""
    return module
