"""Control flow, async wrappers, collectives (single-device meaning), tokens and io."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ...errors import HloEvalError
from ...ir.opcodes import OPCODES
from ..kernels import WITH_EC, Fast, declare, flushed_type
from ..located import limit_error
from ..registry import EVAL_RULES, evaluator, prepares, rule_for
from ..values import TOKEN, np_dtype, zeros


@evaluator("call")
def eval_call(inst, args, ec):
    """The to_apply computation on the operands."""
    return ec.call(inst.attrs["to_apply"].name, args)


@evaluator("fusion")
def eval_fusion(inst, args, ec):
    """The fused computation on the operands (any fusion kind: fusion only changes how XLA emits code)."""
    return ec.call(inst.attrs["calls"].name, args)


@evaluator("while")
def eval_while(inst, args, ec):
    """Repeat body while condition holds; --max-iterations turns a runaway loop into a clear error."""
    cond = inst.attrs["condition"].name
    body = inst.attrs["body"].name
    limit = ec.options.max_iterations
    state = args[0]
    n = 0
    while bool(np.asarray(ec.call(cond, [state]))):
        if limit is not None and n >= limit:
            raise limit_error(limit, cond)
        state = ec.call(body, [state])
        n += 1
        ec.loop_iterations += 1
    return state


@evaluator("conditional")
def eval_conditional(inst, args, ec):
    """A pred selects true_computation/false_computation; an s32 index selects branch_computations[i],
    and an index out of range selects the last branch (as XLA defines it)."""
    sel = np.asarray(args[0])
    if sel.ndim:                 # inside a scalar computation applied to whole arrays (ec.apply)
        return _per_element_branches(inst, sel, args, ec)
    if sel.dtype == np.bool_:
        name = inst.attrs["true_computation"].name if bool(sel) else inst.attrs["false_computation"].name
        operand = args[1] if bool(sel) else args[2]
        return ec.call(name, [operand])
    branches = inst.attrs["branch_computations"]
    k = int(sel)
    if k < 0 or k >= len(branches):
        k = len(branches) - 1
    return ec.call(branches[k].name, [args[1 + k]])


def _per_element_branches(inst, sel, args, ec):
    """A conditional of a reducer, comparator or combiner applied to whole arrays: every branch
    runs on all the elements and each element takes the result of its own branch."""
    if sel.dtype == np.bool_:
        names = [inst.attrs["false_computation"].name, inst.attrs["true_computation"].name]
        operands = [args[2], args[1]]
        k = sel.astype(np.int64)
    else:
        names = [b.name for b in inst.attrs["branch_computations"]]
        operands = list(args[1:])
        n = len(names)
        k = np.where((sel < 0) | (sel >= n), n - 1, sel).astype(np.int64)
    results = [ec.call(name, [operand]) for name, operand in zip(names, operands)]

    def pick(values):
        out = np.asarray(values[0])
        for b in range(1, len(values)):
            out = np.where(k == b, values[b], out)
        return out
    if isinstance(results[0], tuple):
        return tuple(pick([r[j] for r in results]) for j in range(len(results[0])))
    return pick(results)


# ----------------------------------------------------------------------------- async

def _wrapped(inst, ec):
    """The instruction an async-start stands for: `calls=` names a computation, or the `<op>-start`
    sugar names the op itself (the instruction's own attributes belong to it)."""
    return inst.opcode[: -len("-start")] if inst.opcode != "async-start" else None


@evaluator("async-start")
def eval_async_start(inst, args, ec):
    """Runs the wrapped computation at once; the value is ((operands...), result, context...)."""
    base = _wrapped(inst, ec)
    if base is None:
        result = ec.call(inst.attrs["calls"].name, args)
    else:
        fn = EVAL_RULES.get(base)
        if fn is None or base not in OPCODES:
            raise HloEvalError(f"cannot evaluate the wrapped op {base}")
        inner_shape = inst.shape.tuple_shapes[1]
        inner = replace(inst, opcode=base, shape=inner_shape)
        result = fn(inner, args, ec)
    rest = tuple(zeros(s) for s in inst.shape.tuple_shapes[2:])
    return (tuple(args), result) + rest


@evaluator("async-update")
def eval_async_update(inst, args, ec):
    """The async state passes through."""
    return args[0]


@evaluator("async-done")
def eval_async_done(inst, args, ec):
    """The wrapped computation's result (element 1 of the async state)."""
    return args[0][1]


# all-reduce-start / collective-permute-start / all-gather-start / copy-start and their -done:
# on one device the started operation completes immediately.

@evaluator("copy-start")
def eval_copy_start(inst, args, ec):
    """(operand, copy of operand, context)."""
    return (args[0], args[0]) + tuple(zeros(s) for s in inst.shape.tuple_shapes[2:])


@evaluator("copy-done")
def eval_copy_done(inst, args, ec):
    """The copied value (element 1)."""
    return args[0][1]


def _done(inst, args, ec):
    """The completed collective's result: element 1 of a start tuple, or the value itself."""
    v = args[0]
    if isinstance(v, tuple) and not inst.shape.is_tuple:
        return v[1]
    if isinstance(v, tuple) and inst.shape.is_tuple and len(v) > 1 and isinstance(v[1], tuple) \
            and len(v[1]) == len(inst.shape.tuple_shapes):
        return v[1]
    return v


for _op in ("all-reduce-done", "all-gather-done", "collective-permute-done"):
    if _op in OPCODES:
        EVAL_RULES[_op] = _done


# ----------------------------------------------------------------------------- collectives

def _group_size(inst, ec) -> int:
    groups = inst.attrs.get("replica_groups")
    if groups is None:
        return 1
    gs = groups.groups() if hasattr(groups, "groups") and callable(groups.groups) else groups.groups
    for g in gs:
        if ec.replica_id in g:
            return len(g)
    return 1


def _single_device(inst, ec):
    n = _group_size(inst, ec)
    if n != 1:
        raise HloEvalError(f"{inst.opcode} over a group of {n} devices needs {n} replicas; "
                           f"the module's header declares one device: give the device count with --replicas N or "
                           f"--partitions N (or replica_count= / num_partitions= in the header)")


@evaluator("all-reduce", "all-reduce-start", "collective-broadcast")
def eval_all_reduce(inst, args, ec):
    """On a group of one device the reduction of one contribution is the contribution itself."""
    _single_device(inst, ec)
    return args[0] if len(args) == 1 else tuple(args)


@evaluator("all-gather", "all-gather-start", "reduce-scatter", "all-to-all")
def eval_all_gather(inst, args, ec):
    """On a group of one device gathering, scattering and exchanging leave the operand unchanged."""
    _single_device(inst, ec)
    if inst.opcode == "all-gather-start":
        return (args[0] if len(args) == 1 else tuple(args), args[0] if len(args) == 1 else tuple(args))
    return args[0] if len(args) == 1 else tuple(args)


@evaluator("collective-permute", "collective-permute-start")
def eval_collective_permute(inst, args, ec):
    """Each device receives from the source that names it; a device nobody sends to gets zeros."""
    pairs = inst.attrs.get("source_target_pairs", ())
    me = ec.replica_id
    sources = [s for s, t in pairs if t == me]
    if any(s != me for s in sources) or any(s == me and t != me for s, t in pairs):
        raise HloEvalError(f"collective-permute between devices {list(pairs)} needs several devices; the "
                           "module's header declares one: give the device count with --replicas N or --partitions N")
    out = args[0] if sources else zeros(inst.shape if not inst.opcode.endswith("-start")
                                        else inst.shape.tuple_shapes[1])
    if inst.opcode.endswith("-start"):
        return (args[0], out) + tuple(zeros(s) for s in inst.shape.tuple_shapes[2:])
    return out


@evaluator("ragged-all-to-all")
def eval_ragged_all_to_all(inst, args, ec):
    """One device: output[output_offsets[0] : +recv_sizes[0]] = input[input_offsets[0] : +send_sizes[0]]."""
    _single_device(inst, ec)
    data, output, in_off, send, out_off, recv = args[:6]
    out = np.array(output, copy=True)
    n = int(np.asarray(send).reshape(-1)[0])
    i0 = int(np.asarray(in_off).reshape(-1)[0])
    o0 = int(np.asarray(out_off).reshape(-1)[0])
    out[o0:o0 + n] = np.asarray(data)[i0:i0 + n]
    return out


@evaluator("replica-id")
def eval_replica_id(inst, args, ec):
    """This device's replica number (0 when running one device)."""
    return np.asarray(ec.replica_id, dtype=np_dtype(inst.shape))


@evaluator("partition-id")
def eval_partition_id(inst, args, ec):
    """This device's partition number (0 when running one device)."""
    return np.asarray(ec.partition_id, dtype=np_dtype(inst.shape))


# ----------------------------------------------------------------------------- io

def _channels(ec) -> dict:
    ch = getattr(ec, "channels", None)
    if ch is None:
        ch = ec.channels = {}
    return ch


@evaluator("send")
def eval_send(inst, args, ec):
    """Puts the value on its channel for the matching recv of this run; (operand, context, token)."""
    _channels(ec).setdefault(inst.attrs.get("channel_id"), []).append(args[0])
    return (args[0], np.zeros((), np.uint32), TOKEN)


@evaluator("send-done")
def eval_send_done(inst, args, ec):
    """The send has completed: a token."""
    return TOKEN


@evaluator("recv")
def eval_recv(inst, args, ec):
    """Takes the value a send of this run put on the same channel; (data, context, token)."""
    queue = _channels(ec).get(inst.attrs.get("channel_id"))
    if not queue:
        raise HloEvalError(f"recv on channel {inst.attrs.get('channel_id')} has no matching send "
                           "in this run (hlo run has no host or peer device to receive from)")
    return (queue.pop(0), np.zeros((), np.uint32), TOKEN)


@evaluator("recv-done")
def eval_recv_done(inst, args, ec):
    """(data, token) of a completed recv."""
    return (args[0][0], TOKEN)


@evaluator("outfeed")
def eval_outfeed(inst, args, ec):
    """Records the value (hlo run reports outfed values) and returns a token."""
    out = getattr(ec, "outfeed", None)
    if out is None:
        out = ec.outfeed = []
    out.append(args[0])
    return TOKEN


@evaluator("infeed")
def eval_infeed(inst, args, ec):
    """Takes the next value from the infeed queue given to the run."""
    queue = getattr(ec, "infeed", None)
    if not queue:
        raise HloEvalError(f"infeed has no data (the run was given no infeed values)")
    return (queue.pop(0), TOKEN)


# ============================================================================ prepare stages
# (registry.prepare: once per instruction at compile time; kernels.py)

@prepares("call", "fusion")
def _prepare_call(inst, ops, st):
    """The callee compiled for what is known of its arguments (so its parameters skip the DAZ
    pass when the caller's values are clean); its root's cleanliness comes back."""
    name = inst.attrs["to_apply" if inst.opcode == "call" else "calls"].name
    callee = st.callee(name, tuple(st.clean.get(j, False) for j in ops)) if st.callee else None
    if callee is None:                          # recursion: the plain call
        def fn(ec, *args):
            return ec.call(name, args)
        return Fast(fn, WITH_EC, clean=not flushed_type(inst.shape))

    def fn(ec, *args):
        return ec.run_compiled(callee, args)
    declare(fn, callee=callee)                  # (compiler._inline)
    fast = Fast(fn, WITH_EC, clean=callee.root_clean)
    fast.callee = callee
    return fast


@prepares("while")
def _prepare_while(inst, ops, st):
    """A while loop whose condition and body are compiled: EvalContext.run_while.  With --profile
    or a progress callback, the rule (per-call runs)."""
    if st.callee is None or len(ops) != 1:
        return None
    cname, bname = inst.attrs["condition"].name, inst.attrs["body"].name
    cond, body = st.callee(cname, None), st.callee(bname, None)
    if cond is None or body is None:
        return None
    rule = rule_for("while")

    def fn(ec, state):
        if ec.profile is not None or ec.progress is not None:
            return rule(inst, [state], ec)
        return ec.run_while(cond, body, state, ec.options.max_iterations, cname)
    return Fast(fn, WITH_EC, clean=not flushed_type(inst.shape))
