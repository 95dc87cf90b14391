"""`hlo run --check-finite`: stop a run at the first instruction that makes a NaN or an Inf out of
finite operands, and describe it (operands, first bad index, source location)."""
from __future__ import annotations

import numpy as np

from ..ir.opcodes import CONTROL_FLOW, PARAMETER_OR_CONSTANT, has_trait, with_trait
from .dumps import source_of
from .io import has_nonfinite, leaves_with_shapes, nonfinite_mask, scalar_str, stats


class NonFinite(BaseException):
    """Raised by the finiteness guard to stop the run (a BaseException, so that no rule's error
    handling can swallow it); the guard's `report` says where."""


# Instructions whose called computations run instruction by instruction under the hooks: their
# own instructions are judged, so the caller is not (a NaN a callee takes from a constant, like
# jnp.take's fill value, is not the call's fault).
# (control flow, and the fusions and generic async wrappers whose computations the evaluator also
# runs instruction by instruction: a fact of the evaluator, not of the opcodes)
_JUDGED_INSIDE = with_trait(CONTROL_FLOW) | frozenset({"fusion", "async-start", "async-update", "async-done"})


class FiniteGuard:
    """A run hook that stops the run (NonFinite) at the first instruction whose value holds a NaN or
    Inf that none of its operands held, and keeps its description in `report`.  Constants and
    parameters are where values come from, not where they go wrong: a -inf constant (a mask, a
    max-pool's initial value) is not reported, and neither is an input."""

    def __init__(self, module):
        self.module = module
        self.report = None

    def __call__(self, ev):
        inst = ev.instruction
        if has_trait(inst.opcode, PARAMETER_OR_CONSTANT) or inst.opcode in _JUDGED_INSIDE:
            return
        vals = [np.asarray(v) for v, _ in leaves_with_shapes(ev.value, inst.shape)]
        if not any(has_nonfinite(v) for v in vals):
            return
        devices = getattr(ev, "devices", None)        # a multi-device run: the devices of a stacked value
        if devices is not None:
            self._on_devices(ev, vals, tuple(devices))
            return
        from ..interpreter.values import leaves
        if any(has_nonfinite(np.asarray(v)) for op in ev.operands for v in leaves(op)):
            return
        self.report = nonfinite_report(self.module, ev, vals)
        raise NonFinite()

    def _on_devices(self, ev, vals, devices):
        """A value stacked over DEVICES: the devices where it holds a NaN or Inf that none of that
        device's operands held (an operand without the device axis is the same on every device)."""
        from ..interpreter.values import leaves
        n = len(devices)
        bad = np.zeros(n, bool)
        for v in vals:
            m = nonfinite_mask(v)
            if m is not None:
                bad |= m.reshape(n, -1).any(axis=1)
        stacked = stacked_operands(ev)
        for op, st in zip(ev.operands, stacked):
            for v in leaves(op):
                m = nonfinite_mask(np.asarray(v))
                if m is None or not m.any():
                    continue
                if st:
                    bad &= ~m.reshape(n, -1).any(axis=1)
                else:                       # held once: non-finite on every device
                    bad[:] = False
        if not bad.any():
            return
        where = [devices[k] for k in np.flatnonzero(bad)]
        first = int(np.flatnonzero(bad)[0])
        one = type(ev)(ev.computation, ev.instruction, row(ev.value, first), ev.count,
                       [row(op, first) if st else op for op, st in zip(ev.operands, stacked)])
        rep = nonfinite_report(self.module, one, [np.asarray(v) for v, _ in
                                                  leaves_with_shapes(one.value, ev.instruction.shape)])
        rep["devices"] = [int(d) for d in where]
        rep["device"] = int(devices[first])
        self.report = rep
        raise NonFinite()


def row(value, pos: int):
    """Device POS's value of a value whose array leaves are stacked over devices (a leading axis)."""
    if isinstance(value, tuple):
        return tuple(row(v, pos) for v in value)
    if isinstance(value, np.ndarray) and value.ndim:
        return value[pos]
    return value


def stacked_operands(ev) -> list[bool]:
    """For each operand of a stacked event, whether its value has the device axis (one more
    dimension than its instruction's shape) or is held once for every device."""
    by_name = ev.computation.by_name
    out = []
    for name, val in zip(ev.instruction.operands, ev.operands):
        shape = by_name[name].shape if name in by_name else None
        got = next(iter(leaves_with_shapes(val, shape)), None) if shape is not None else None
        out.append(got is not None and np.ndim(got[0]) == got[1].rank + 1)
    return out


def nonfinite_report(module, ev, vals) -> dict:
    """What the guard found: the instruction, its location and source, its values' statistics, the
    first non-finite index and value, and each operand's statistics and value at that index."""
    from ..interpreter.values import leaves
    inst, comp = ev.instruction, ev.computation
    rep = {"instruction": inst.name, "opcode": inst.opcode, "computation": comp.name,
           "location": f"{inst.loc.file}:{inst.loc.line}:{inst.loc.column}",
           "file": inst.loc.file, "line": inst.loc.line, "column": inst.loc.column,
           "execution": ev.count, "stats": [stats(v) for v in vals]}
    rep.update(source_of(module, inst))
    first = next((v for v in vals if has_nonfinite(v)), None)
    index = None
    if first is not None:
        index = tuple(int(i) for i in np.argwhere(nonfinite_mask(first))[0])
        rep["first_index"] = list(index)
        rep["first_value"] = scalar_str(first[index], first)
    ops = []
    for name, val in zip(inst.operands, ev.operands):
        entry = {"operand": name, "stats": [stats(np.asarray(v)) for v in leaves(val)]}
        arr = val if isinstance(val, np.ndarray) else None
        if arr is not None and first is not None and arr.shape == first.shape and index is not None:
            entry["value_at_first_index"] = scalar_str(arr[index], arr)
        ops.append(entry)
    rep["operands"] = ops
    return rep
