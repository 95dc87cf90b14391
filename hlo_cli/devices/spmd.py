"""One program on several simulated devices, evaluated once for all of them.

Every device of an SPMD run executes the same instructions; only the values differ.  So a
computation is walked once, and each value is either held once (`Uniform`: the same on every
device) or stacked over the devices running it (`Stacked`, a leading device axis, values.py):

* an instruction whose operands are all uniform and which cannot observe the device (no
  collective, no replica-id / partition-id, nothing it calls does) runs once, through the
  single-device evaluator (compiled fast path included): constants, iotas, the global values of a
  module before partitioning;
* a value that some devices hold alike is kept once per distinct value (`Grouped`): inputs
  replicated along a mesh axis, an all-reduce's or all-gather's result (the same on every device of
  its group); an instruction on such values runs once per distinct combination of its operands
  (layer norms and optimizer updates that the sharding repeats on every "model" device run once per
  "data" row; faster on the 8-device transformer step of benchmarks/bench_spmd.py, bit-identical);
* element-wise, data-movement and tuple instructions run once on the stacked values (the rule sees
  the instruction with a leading dimension added, and the attributes that name dimensions shifted);
* every other instruction (dot, reduce, sort, scatter, convolution, custom calls, a fusion or loop
  that never looks at the device) runs device by device through the single-device rules, so its
  values are bit-identical to a single-device run of that device's program.  A fusion goes through
  the compiled fast path (compiler.py) once per device: walking its computation once on stacked
  values instead was slower on the 8-device transformer step (benchmarks/bench_spmd.py), whose
  time is NumPy work, not per-instruction dispatch;
* collectives are operations along the device axis within their groups (collectives.py), through
  the run's Devices object (runtime.py): values cross devices only there;
* control flow that diverges (a conditional whose branch depends on the device, a while loop whose
  trip count does) splits the devices into subsets that continue separately; a collective whose group
  reaches outside the subset that arrived at it is an error naming the instruction and what the
  other devices were doing -- never a hang, never a silently wrong value.

Before partitioning, a module holds global values (uniform here) and shard_map bodies: the
Shardy (``xla.sdy.GlobalToLocalShape`` / ``LocalToGlobalShape``) and GSPMD
(``SPMDFullToShardShape`` / ``SPMDShardToFullShape``) custom calls split a global value into the
devices' pieces and join them again, and the body between them runs stacked like a partitioned
program.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..errors import HloEvalError
from ..errors import instruction_diagnostic as _diag
from ..interpreter.custom_call_targets import SHARD_TARGETS
from ..interpreter.evaluator import MAX_DEPTH, InstructionEvent
from ..interpreter.hooks import Level, track
from ..interpreter.located import limit_error, run_located
from ..interpreter.schedule import Plan
from ..interpreter.values import TOKEN, conforms, describe, np_dtype, zeros
from ..ir.opcodes import COLLECTIVE, CONTROL_FLOW, DEVICE_ID, ELEMENTWISE, STRUCTURAL, with_trait
from ..ir.shape import Shape
from .values import Grouped, Stacked, Uniform, devices_text, first_seen, map_leaves, stack, take, who

# operations whose value depends on which device runs them: the collectives that exchange values
# (their -done halves only pass the exchanged value on) and the device's own ids
COLLECTIVES = with_trait(COLLECTIVE) - with_trait(STRUCTURAL)
DEVICE_IDS = with_trait(DEVICE_ID)
PEER_IO = frozenset({"send", "recv"})

# rules that only move values or tuple elements around: they work on stacked structures unchanged
_STRUCTURAL = with_trait(STRUCTURAL)
# element-wise rules run once on the stacked values; `copy` too (XLA's IsOpElementwise counts it,
# the table's ELEMENTWISE trait does not)
_ELEMENTWISE = with_trait(ELEMENTWISE) | {"copy"}
# data movement with the dimension attributes shifted past the device axis
_SHIFTED = {"broadcast": "dimensions", "transpose": "dimensions", "reverse": "dimensions",
            "concatenate": "dimensions", "reshape": None, "slice": "slice"}
# collectives whose result is the same on every device of a group
_SAME_IN_GROUP = frozenset({"all-reduce", "all-reduce-start", "all-gather", "collective-broadcast"})
# calls whose computations the walk runs itself (control flow, fusions, async-start), or per device
# (a custom call's); the others apply theirs to whole arrays through the single-device rules
_WALKED_CALLS = with_trait(CONTROL_FLOW) | {"fusion", "async-start", "custom-call"}


@dataclass
class DeviceEvent(InstructionEvent):
    """A hook event of a multi-device run: `devices` None when `value` is the same on every device
    (held once), else the device ids its leading axis runs over."""
    devices: tuple[int, ...] | None = None


def _called(inst) -> tuple[str, ...]:
    return inst.called_computations


def device_dependent(module) -> set[str]:
    """Names of the computations whose values can depend on the device running them."""
    dep: set[str] = set()
    comps = module.computations
    direct = {}
    for c in comps:
        d = False
        for i in c.instructions:
            if i.opcode in COLLECTIVES or i.opcode in DEVICE_IDS or i.opcode in PEER_IO:
                d = True
            elif i.opcode == "custom-call" and i.attrs.get("custom_call_target") in SHARD_TARGETS:
                d = True
        direct[c.name] = d
        if d:
            dep.add(c.name)
    changed = True
    while changed:
        changed = False
        for c in comps:
            if c.name in dep:
                continue
            if any(n in dep for i in c.instructions for n in _called(i)):
                dep.add(c.name)
                changed = True
    return dep


class Spmd:
    """Walks computations for a set of devices; `devices` is the run's Devices (runtime.py)."""

    def __init__(self, module, devices, hook=None, progress=None):
        self.module = module
        self.devices = devices
        self.grid = devices.grid
        self.hook = hook
        self.progress = progress
        self.dependent = device_dependent(module)
        self.ec0 = devices.global_context
        self.executed = 0
        self.counts: dict[tuple[str, str], int] = {}
        self.notes: list[str] = []          # what the devices outside the running subset are doing
        self._proxies: dict = {}
        self._plans: dict = {}
        self.mailbox: dict = {}             # channel id -> (send instruction, stacked value, devices)
        self.depth = 0
        self.levels = track().levels            # where the walk is, for the progress display (hooks.py)

    # -- what the progress display and the profiler read (interpreter/watch.py) ----------
    @property
    def device_count(self) -> int:
        return self.grid.count

    def total_executed(self) -> int:
        return self.executed + self.devices.executed()

    def total_loop_iterations(self) -> int:
        return self.devices.loop_iterations + self.devices.context_loop_iterations()

    # -- computations ------------------------------------------------------------------
    def call(self, name: str, args: list, devs: tuple[int, ...]):
        """Run computation `name` on `devs` with DeviceValues `args`; returns a DeviceValue."""
        if name not in self.dependent and all(isinstance(a, Uniform) for a in args):
            return Uniform(self.ec0.call(name, [a.value for a in args]))
        plan = self._plan(name)
        vals = plan.bind(args)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise HloEvalError(f"computations call each other more than {MAX_DEPTH} deep (recursion?)")
        levels = self.levels
        lv = Level(self, plan.comp.name, len(plan.insts))
        lv.insts, lv.devices = plan.insts, len(devs)
        levels.append(lv)                        # where the walk is (interpreter/hooks.py)
        try:
            check = self.ec0.options.check_values
            for k, inst in enumerate(plan.insts):
                lv.k = k
                if inst.opcode == "parameter":
                    value, operands = vals[k], ()
                else:
                    operands = [vals[j] for j in plan.operand_idx[k]]
                    value = vals[k] = run_located(inst, self.step, inst, plan.rules[k], operands, devs)
                    if check:
                        self._check(inst, value, len(devs))
                self.executed += 1
                if self.hook is not None:
                    self._report(plan.comp, inst, value, operands, devs)
                for j in plan.free_after[k]:
                    vals[j] = None
            if self.progress is not None:
                self.progress(self.executed + self.devices.executed())
            return vals[plan.root]
        finally:
            self.depth -= 1
            del levels[-1]

    def _report(self, comp, inst, value, operands, devs):
        """The hook's event for one executed instruction: the value once when every device of the
        run holds it alike, else per device (or per device of the subset running)."""
        key = (comp.name, inst.name)
        c = self.counts[key] = self.counts.get(key, 0) + 1
        if isinstance(value, Uniform) and len(devs) == self.grid.count:
            self.hook(DeviceEvent(comp, inst, value.value, c, [o.value for o in operands], None))
        else:
            self.hook(DeviceEvent(comp, inst, value.stacked(len(devs)), c,
                                  [o.stacked(len(devs)) for o in operands], tuple(devs)))

    def _plan(self, name: str):
        """The single-device plan, or for a computation holding sends and recvs one in program
        order (a send runs where the text has it, before the recv-done that takes its data)."""
        plan = self._plans.get(name)
        if plan is None:
            plan = self.ec0.plan(name)
            if any(i.opcode in PEER_IO for i in plan.comp.instructions):
                plan = Plan(plan.comp, in_program_order=True)
            self._plans[name] = plan
        return plan

    def _check(self, inst, value, n):
        if type(value) is Grouped:
            value, n = Stacked(value.rows), len(set(value.classes))
        v = value.value
        if isinstance(value, Uniform):
            why = conforms(v, inst.shape)
        elif isinstance(v, np.ndarray):
            if v.shape[:1] != (n,):
                why = f"{v.shape[0] if v.ndim else 'no'} device rows for {n} devices"
            else:
                why = conforms(v[0, ...], inst.shape)
        else:
            why = conforms(value.at(0), inst.shape) if n else None
        if why is not None:
            shown = describe(v if isinstance(value, Uniform) else value.at(0))
            raise HloEvalError(
                f"{inst.name}: {inst.opcode} produced a value that does not match its shape "
                f"{inst.shape.to_str(False)}: {why}",
                [_diag(inst, f"{inst.name}: {inst.opcode} produced {shown}, which does not match its shape "
                             f"{inst.shape.to_str(False)}: {why}", "R012")])

    # -- one instruction -----------------------------------------------------------------
    def step(self, inst, rule, operands, devs):
        op = inst.opcode
        uniform = all(isinstance(o, Uniform) for o in operands)
        if op in COLLECTIVES:
            return self._collective(inst, operands, devs)
        if op in DEVICE_IDS:
            ids = [self.grid.replica_of(d) if op == "replica-id" else self.grid.partition_of(d) for d in devs]
            return Stacked(np.asarray(ids, dtype=np_dtype(inst.shape)))
        if (op in PEER_IO or op == "recv-done") and not inst.attrs.get("is_host_transfer"):
            return self._peer(inst, operands, devs)
        if op == "custom-call" and inst.attrs.get("custom_call_target") in SHARD_TARGETS:
            return self._shard_call(inst, operands, devs)
        dependent = op in _WALKED_CALLS and any(c in self.dependent for c in _called(inst))
        if uniform and not dependent:
            return Uniform(rule(inst, [o.value for o in operands], self.ec0))
        if dependent:
            return self._control(inst, rule, operands, devs)
        if any(type(o) is Grouped for o in operands):
            if not any(type(o) is Stacked for o in operands):
                return self._grouped(inst, rule, operands, devs)
            operands = [Stacked(o.value) if type(o) is Grouped else o for o in operands]
        return self._pure(inst, rule, operands, devs)

    def _grouped(self, inst, rule, operands, devs):
        """A pure instruction on values held once per distinct value: computed once per distinct
        combination of its operands' values, for one device of each."""
        parts = [o for o in operands if type(o) is Grouped]
        n = len(devs)
        classes, reps = first_seen(tuple(o.classes[i] for o in parts) for i in range(n))
        sub = []
        for o in operands:
            if type(o) is Grouped:
                idx = np.asarray([o.classes[r] for r in reps], dtype=np.intp)
                sub.append(Stacked(map_leaves(lambda a: a[idx], o.rows)))
            else:
                sub.append(o)
        res = self._pure(inst, rule, sub, tuple(devs[r] for r in reps))
        if type(res) is Uniform:
            return res
        if len(reps) == 1:
            return Uniform(res.at(0))
        if len(reps) == n:
            return res
        return Grouped(res.value, tuple(classes))

    def _pure(self, inst, rule, operands, devs):
        """An instruction that does not look at the device, on Uniform and Stacked operands."""
        op = inst.opcode
        n = len(devs)
        if op in _STRUCTURAL:
            return Stacked(rule(inst, [o.stacked(n) for o in operands], self.ec0))
        if op in _ELEMENTWISE or op in _SHIFTED:
            proxy = self._proxy(inst, operands, n)
            if proxy is not None:
                return Stacked(rule(proxy, [o.stacked(n) for o in operands], self.ec0))
        return self.per_device(inst, rule, operands, devs)

    def per_device(self, inst, rule, operands, devs):
        """The single-device rule on each device's operands, results stacked."""
        out: list = []
        rows = None                  # array results go straight into one [devices, ...] buffer
        for i, d in enumerate(devs):
            ec = self.devices.context(d)
            try:
                v = rule(inst, [o.at(i) for o in operands], ec)
            except HloEvalError as e:
                e.args = (f"on device {d}: {e.args[0] if e.args else e}",) + tuple(e.args[1:])
                raise
            if rows is None and i == 0 and type(v) is np.ndarray:
                rows = np.empty((len(devs),) + v.shape, v.dtype)
            if rows is not None and type(v) is np.ndarray and v.shape == rows.shape[1:] and v.dtype == rows.dtype:
                rows[i] = v
            elif rows is not None:           # an ill-formed result: stack what there is, the check names it
                out = [rows[k] for k in range(i)] + [v]
                rows = None
            else:
                out.append(v)
        if rows is not None:
            return Stacked(rows)
        if not out:
            return Stacked(map_leaves(lambda a: a[:0], zeros(inst.shape)))
        return stack(out)

    def _proxy(self, inst, operands, n):
        """`inst` as it applies to values with a leading device axis, or None when it cannot."""
        key = (id(inst), n)
        hit = self._proxies.get(key)
        if hit is not None:
            return hit[0]
        proxy = None
        shape = inst.shape
        if not shape.is_tuple and not shape.is_dynamic and shape.element_type not in ("token", "opaque") \
                and all(isinstance(o.value, np.ndarray) for o in operands):
            op = inst.opcode
            new_shape = Shape.array(shape.element_type, (n,) + tuple(shape.dims))
            ok = True
            attrs = dict(inst.attrs)
            if op in _ELEMENTWISE:
                # element-wise over equal dims (or scalar operands XLA allows in some forms: run per device)
                ok = all(tuple(o.value.shape[1:] if isinstance(o, Stacked) else o.value.shape) == tuple(shape.dims)
                         for o in operands)
            else:
                what = _SHIFTED[op]
                if what == "dimensions":
                    dims = tuple(attrs.get("dimensions") or ())
                    attrs["dimensions"] = ((0,) + tuple(d + 1 for d in dims)) if op in ("broadcast", "transpose") \
                        else tuple(d + 1 for d in dims)
                elif what == "slice":
                    spec = attrs["slice"]
                    first = type(spec.dimensions[0])(0, n, 1) if spec.dimensions else None
                    if first is None:
                        ok = False
                    else:
                        attrs["slice"] = type(spec)((first,) + tuple(spec.dimensions))
                if op == "broadcast" and isinstance(operands[0], Uniform):
                    ok = False                       # a uniform operand: broadcast it once, per device
            if ok:
                proxy = replace(inst, shape=new_shape, attrs=attrs)
        self._proxies[key] = (proxy, inst)           # the instruction kept alive with its id
        return proxy

    # -- collectives and peers -----------------------------------------------------------------
    def _collective(self, inst, operands, devs):
        n = len(devs)
        from .collectives import OutsideSubset
        try:
            value = self.devices.exchange(inst, [o.stacked(n) for o in operands], devs)
        except OutsideSubset as e:
            raise self._divergence(inst, e.group, e.missing, devs) from None
        if inst.opcode in _SAME_IN_GROUP:
            return self._by_group(inst, value, devs)
        return Stacked(value)

    def _by_group(self, inst, value, devs):
        """A collective's result, which every device of a group holds alike, held once per group."""
        from ..topology.grid import collective_groups
        try:
            groups = collective_groups(inst, self.grid)
        except HloEvalError:
            return Stacked(value)
        where = {d: k for k, g in enumerate(groups) for d in g}
        if any(d not in where for d in devs):
            return Stacked(value)
        classes, reps = first_seen(where[d] for d in devs)
        if len(reps) == len(devs):
            return Stacked(value)
        idx = np.asarray(reps, dtype=np.intp)
        rows = map_leaves(lambda a: a[idx], value)
        if len(reps) == 1:
            return Uniform(map_leaves(lambda a: a[0, ...], rows))
        return Grouped(rows, tuple(classes))

    def _divergence(self, inst, group, missing, devs):
        present = [d for d in group if d not in set(missing)]
        msg = (f"{inst.name}: {inst.opcode} over devices {{{devices_text(group)}}} was reached by "
               f"{who(present)} only: {who(missing)} did not reach it")
        if self.notes:
            msg += " (" + "; ".join(self.notes) + ")"
        msg += "; a collective must be reached by every device of its group"
        return HloEvalError(msg, [_diag(inst, msg, "R020")])

    def _peer(self, inst, operands, devs):
        """send / recv / recv-done between devices.  A send is held until a recv takes it: the
        oldest pending send on the recv's channel, else the oldest with the same source-target
        pairs (XLA's GPU pipelines give a send and its recv different channels).  A recv issued
        before its send (XLA's decomposer schedules recv first) gets its data at recv-done."""
        n = len(devs)
        if inst.opcode == "send":
            self.mailbox.setdefault("sends", []).append((inst, operands[0].stacked(n), tuple(devs)))
            return Stacked((operands[0].stacked(n), np.zeros((n,), np.uint32), TOKEN))
        if inst.opcode == "recv":
            data = self._receive(inst, devs, final=False)
            return Stacked((data, np.zeros((n,), np.uint32), TOKEN))
        # recv-done: data still pending is received now
        state = operands[0].stacked(n)
        data = state[0]
        pending = self.mailbox.setdefault("pending", {})
        if id(data) in pending:
            recv_inst, rdevs, _ = pending.pop(id(data))
            data = self._receive(recv_inst, rdevs, final=True, at=inst)
        return Stacked((data, TOKEN))

    def _receive(self, recv, devs, final: bool, at=None):
        n = len(devs)
        sends = self.mailbox.setdefault("sends", [])
        channel = recv.attrs.get("channel_id")
        from ..topology.grid import send_recv_pairs
        pick = next((k for k, (s, _, _) in enumerate(sends) if s.attrs.get("channel_id") == channel), None)
        if pick is None:
            mine = send_recv_pairs(recv, self.grid)
            if mine is not None:
                pick = next((k for k, (s, _, _) in enumerate(sends) if send_recv_pairs(s, self.grid) == mine), None)
        if pick is None:
            if not final:
                shape = recv.shape.tuple_shapes[0]
                data = np.zeros((n,) + tuple(shape.dims), np_dtype(shape))
                self.mailbox.setdefault("pending", {})[id(data)] = (recv, tuple(devs), data)
                return data
            where = at or recv
            msg = (f"{where.name}: recv {recv.name} on channel {channel} has no matching send on devices "
                   f"{devices_text(devs)} (none on its channel or with its source-target pairs)")
            raise HloEvalError(msg, [_diag(where, msg, "R021")])
        send_inst, value, sdevs = sends.pop(pick)
        if tuple(sdevs) != tuple(devs):
            msg = (f"{recv.name}: recv on channel {channel} runs on devices {devices_text(devs)} but the "
                   f"send {send_inst.name} ran on devices {devices_text(sdevs)}")
            if self.notes:
                msg += " (" + "; ".join(self.notes) + ")"
            raise HloEvalError(msg, [_diag(recv, msg, "R020")])
        return self.devices.route(send_inst, recv, value, devs)

    # -- control flow ---------------------------------------------------------------------
    def _control(self, inst, rule, operands, devs):
        op = inst.opcode
        n = len(devs)
        if op in ("call", "fusion"):
            return self.call(_called(inst)[0], operands, devs)
        if op == "async-start":
            result = self.call(inst.attrs["calls"].name, operands, devs)
            rest = tuple(np.broadcast_to(z, (n,) + z.shape) if isinstance(z, np.ndarray) else z
                         for z in (zeros(s) for s in inst.shape.tuple_shapes[2:]))
            return Stacked((tuple(o.stacked(n) for o in operands), result.stacked(n)) + rest)
        if op == "while":
            return self._while(inst, operands[0], devs)
        if op == "conditional":
            return self._conditional(inst, operands, devs)
        if op == "custom-call":
            return self.per_device(inst, rule, operands, devs)   # a custom call's own computations
        raise HloEvalError(f"{op} with computations that depend on the device cannot run on several devices")

    def _while(self, inst, state, devs):
        cond = inst.attrs["condition"].name
        body = inst.attrs["body"].name
        limit = self.ec0.options.max_iterations
        active = tuple(devs)
        done: dict[int, object] = {}            # device -> final state (one device's value)
        it = 0
        pushed = 0
        here = self.levels[-1] if self.levels else None     # the level running this while instruction
        try:
            while active:
                if here is not None:
                    here.iteration = it + 1
                p = self.call(cond, [state], active)
                if isinstance(p, Uniform):
                    go = [bool(np.asarray(p.value))] * len(active)
                else:
                    go = [bool(x) for x in np.asarray(p.value).reshape(len(active))]
                if not any(go) and not done:
                    return state                 # every device leaves together: nothing to unstack
                if not all(go):
                    stay = [i for i, g in enumerate(go) if g]
                    leave = [i for i, g in enumerate(go) if not g]
                    for i in leave:
                        done[active[i]] = state.at(i)
                    if not stay:
                        break
                    self.notes.append(f"{who([active[i] for i in leave])} left the while loop {inst.name} "
                                      f"after {it} iteration{'s' if it != 1 else ''}, "
                                      f"{who([active[i] for i in stay])} went on")
                    pushed += 1
                    state = take(state, stay)
                    active = tuple(active[i] for i in stay)
                if limit is not None and it >= limit:
                    raise limit_error(limit, cond)
                state = self.call(body, [state], active)
                it += 1
                self.devices.loop_iterations += 1
        finally:
            del self.notes[len(self.notes) - pushed:]
            if here is not None:
                here.iteration = None
        return stack([done[d] for d in devs])

    def _conditional(self, inst, operands, devs):
        sel = operands[0]
        if "branch_computations" in inst.attrs:
            names = [c.name for c in inst.attrs["branch_computations"]]
        else:
            names = [inst.attrs["true_computation"].name, inst.attrs["false_computation"].name]

        def branch_of(x) -> int:
            x = np.asarray(x)
            if x.dtype == np.bool_:
                return 0 if bool(x) else 1
            k = int(x)
            return len(names) - 1 if k < 0 or k >= len(names) else k
        if isinstance(sel, Uniform):
            b = branch_of(sel.value)
            return self.call(names[b], [operands[1 + b]], devs)
        picks = [branch_of(x) for x in np.asarray(sel.value).reshape(len(devs))]
        if len(set(picks)) == 1:
            b = picks[0]
            return self.call(names[b], [operands[1 + b]], devs)
        results: dict[int, object] = {}
        for b in sorted(set(picks)):
            pos = [i for i, p in enumerate(picks) if p == b]
            sub = tuple(devs[i] for i in pos)
            others = [f"{who([devs[i] for i, p in enumerate(picks) if p == c])} took "
                      f"branch {c} ({names[c]})" for c in sorted(set(picks)) if c != b]
            self.notes.append(f"conditional {inst.name}: {who(sub)} took branch {b} "
                              f"({names[b]}), " + ", ".join(others))
            try:
                r = self.call(names[b], [take(operands[1 + b], pos)], sub)
            finally:
                self.notes.pop()
            for j, i in enumerate(pos):
                results[i] = r.at(j)
        return stack([results[i] for i in range(len(devs))])

    # -- shard_map regions ------------------------------------------------------------------
    def _shard_call(self, inst, operands, devs):
        from . import manual
        return manual.run(self, inst, operands, devs)
