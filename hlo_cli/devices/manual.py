"""shard_map regions of a module before partitioning: where global values become per-device ones.

JAX lowers a `shard_map` body into a module of global values as: the global operand, a custom call
that cuts it into the devices' pieces (Shardy: ``xla.sdy.GlobalToLocalShape`` with
``xla.sdy.in_shardings`` and ``xla.sdy.manual_axes``; GSPMD: a ``Sharding`` custom call then
``SPMDFullToShardShape``), the body (a ``call`` of ``xla.sdy.manual_computation_body*``, or the
instructions inline) operating on the pieces with collectives inside, and a custom call joining
the pieces again (``xla.sdy.LocalToGlobalShape`` / ``SPMDShardToFullShape``).  Here the cut makes
a Stacked value over the running devices, the body runs stacked like a partitioned program, and
the join gives each device the reassembled global value -- held once when every device agrees.
Axes that are not manual stay whole: a device holds the global extent along them.
"""
from __future__ import annotations


from ..errors import HloEvalError
from ..errors import instruction_diagnostic as _diag
from ..topology.sharding import leaf_shardings, manual_merge, manual_split, merge, split
from .values import Stacked, grouped

_SPLIT = ("xla.sdy.GlobalToLocalShape", "SPMDFullToShardShape")
_JOIN = ("xla.sdy.LocalToGlobalShape", "SPMDShardToFullShape")
JOIN_TARGETS = frozenset(_JOIN)     # the joins: each device's value needs the other devices' pieces


def _error(inst, msg):
    return HloEvalError(f"{inst.name}: {msg}", [_diag(inst, f"{inst.name}: {msg}", "R022")])


def _result_leaves(shape):
    return list(shape.tuple_shapes) if shape.is_tuple else [shape]


def run(sp, inst, operands, devs):
    target = inst.attrs.get("custom_call_target")
    n = len(devs)
    if target in _SPLIT or target in _JOIN:
        results = _result_leaves(inst.shape)
        if len(operands) != len(results):
            raise _error(inst, f"{target} has {len(operands)} operands for {len(results)} results")
        try:
            sharding = manual_split(inst, sp.module) if target in _SPLIT else manual_merge(inst, sp.module)
            per_leaf = leaf_shardings(sharding, inst.shape)
        except HloEvalError as e:
            if not e.diagnostics:
                e.diagnostics = [_diag(inst, f"{inst.name}: {e}", "R022")]
            raise
        outs = []
        for o, s, shape in zip(operands, per_leaf, results):
            if isinstance(o.value, tuple):
                raise _error(inst, f"{target} of a tuple operand")
            stacked = o.stacked(n)
            if target in _SPLIT:
                outs.append(split(stacked, s, tuple(shape.dims), devices=devs, partitions=sp.grid.partitions))
            else:
                outs.append(merge(stacked, s, tuple(shape.dims), devices=devs, partitions=sp.grid.partitions))
        value = Stacked(tuple(outs) if inst.shape.is_tuple else outs[0])
        # joined: every device of a group holds the same global value, kept once per distinct value
        return grouped(value, n) if target in _JOIN else value
    if target == "xla.sdy.ManualComputation":
        # the older single-call form: the called body takes and gives the devices' pieces
        body = inst.called_computations[0]
        return sp.call(body, operands, devs)
    raise _error(inst, f"custom-call {target} is not a manual-region call")

