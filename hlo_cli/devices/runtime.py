"""The devices of one run: the seam between the evaluator and where devices live.

`LocalDevices` keeps every device of a run in this process: one single-device evaluation context per
device (its replica and partition ids, its own random state), and the exchange at collectives as
NumPy operations along the device axis (collectives.py).  The SPMD evaluator (spmd.py) asks this
object for a device's context and for every exchange; it never loops over devices to move data
itself.  A backend that places devices in other processes or on other machines (Ray actors, Dask
workers) implements the same few members -- `grid`, `global_context`, `context(d)`,
`exchange(inst, operands, devices)`, `route(send, recv, value, devices)`, `executed()` -- and sends
the stacked rows to their owners instead of indexing them.
"""
from __future__ import annotations

from dataclasses import replace

from ..interpreter.evaluator import EvalContext, RunOptions


class LocalDevices:
    """All devices of `grid`, simulated in this process."""

    def __init__(self, module, grid, options: RunOptions | None = None, hook_for=None, compiled_ok: bool = True):
        self.module = module
        self.grid = grid
        self.options = options or RunOptions()
        self._hook_for = hook_for                # device id (None: global) -> hook for that context
        self._compiled = compiled_ok
        self._contexts: dict[int, EvalContext] = {}
        self.global_context = self._make(None)
        self.loop_iterations = 0

    def _make(self, d):
        if d is None:
            opts = self.options
        else:
            opts = replace(self.options, replica_id=self.grid.replica_of(d), partition_id=self.grid.partition_of(d),
                           seed=self.options.seed)
        hook = self._hook_for(d) if self._hook_for else None
        return EvalContext(self.module, opts, hook, None, self._compiled)

    def context(self, d: int) -> EvalContext:
        """Device `d`'s single-device evaluation context (created on first use)."""
        ec = self._contexts.get(d)
        if ec is None:
            ec = self._contexts[d] = self._make(d)
        return ec

    def executed(self) -> int:
        return self.global_context.executed + sum(ec.executed for ec in self._contexts.values())

    def context_loop_iterations(self) -> int:
        """The while-loop iterations the evaluation contexts ran themselves (single-device work)."""
        return self.global_context.loop_iterations + sum(ec.loop_iterations for ec in self._contexts.values())

    def exchange(self, inst, operands, devices):
        """Collective `inst` on operands stacked over `devices`: the results, stacked the same way."""
        from .collectives import run_collective
        return run_collective(inst, operands, tuple(devices), self.grid, self.global_context.apply)

    def route(self, send_inst, recv_inst, value, devices):
        """What each of `devices` receives at `recv_inst` from `send_inst`'s stacked `value`."""
        from .collectives import route_send_recv
        return route_send_recv(send_inst, recv_inst, value, tuple(devices), self.grid)
