"""`hlo isolate`: every instruction run alone on XLA CPU on hlo's own operand values, compared with hlo's.

How: hlo runs the module with a hook.  For each executed instruction (the first `executions`
executions of it) the hook makes a job: a one-instruction module (a fusion as one unit: its fused
computation's instructions inlined, so XLA sees plain operations; a loop, call or conditional with
the computations it calls) whose parameters are the instruction's operands, and the operands' values
as hlo computed them.  Jobs are batched: one module with many independent roots (a tuple of them) is
one XLA compile; a job identical to an earlier one (the same instruction text over operands of the
same shapes and the same bits) is not run again.  Batches go to a long-lived XLA child process
(tools.xla_worker); a batch XLA refuses is split until the refused instructions are alone.  Each
result is compared with hlo's value as `--expect` compares (|hlo - xla| <= atol + rtol * |xla|).

Because every instruction gets hlo's operand values, a mismatch is where hlo and XLA compute
something different from the same inputs.  The report orders mismatches by execution: the causes
(mismatching instructions none of whose operands mismatched, and no instruction inside which
mismatched: a fusion or loop around a mismatching instruction is its symptom) first, then the rest.
`into_fusions` runs hlo once more and isolates the instructions inside each mismatching fusion.

A program on several devices runs on hlo's devices; an instruction is isolated per device on that
device's operand values (identical devices' jobs fall together), a collective on all devices at once
(XLA CPU with as many host devices, each device's operands).

`reference_module`: XLA runs each instruction as that module writes it (the same computation and
name) instead of MODULE's: the instructions of an edited module whose changes change values.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
import time
from dataclasses import dataclass, field

import numpy as np

from ..diff.values import compare_leaves
from ..errors import HloInputError
from ..ir.opcodes import COLLECTIVE, DEVICE_ID, IO, has_trait
from ..ir.printer import format_instruction
from ..pipeline.finite import row, stacked_operands
from ..pipeline.io import leaves_with_shapes
from . import slicing
from .xla_worker import XlaCrash, XlaRefused, XlaWorker

MATCHED, MISMATCH, REFUSED, SKIPPED = "MATCHED", "MISMATCH", "XLA-REFUSED", "SKIPPED"
STATUSES = (MATCHED, MISMATCH, REFUSED, SKIPPED)

# what is not isolated, and why (the reason is the report's note)
_PLUMBING = {"parameter": "an input", "tuple": "no computation (its leaves are its operands)",
             "get-tuple-element": "no computation (a leaf of its operand)",
             "after-all": "a token", "add-dependency": "no computation",
             "copy-start": "a copy between memory spaces", "copy-done": "a copy between memory spaces",
             "async-start": "an asynchronous pair: its computation's instructions are isolated",
             "async-update": "an asynchronous pair", "async-done": "an asynchronous pair",
             "optimization-barrier": "no computation",
             "rng": "random numbers: hlo's generator is not XLA's",
             "rng-get-and-update-state": "random number state: hlo's generator is not XLA's"}


@dataclass
class Node:
    """One instruction of the module (computation, name) and what isolating it found."""
    computation: str
    name: str
    opcode: str
    seq: int                                  # the run's order of its first execution
    status: str = SKIPPED
    note: str | None = None
    result: dict | None = None                # the comparison shown (the first mismatching one)
    executions: int = 0
    compared: int = 0
    device: int | None = None                 # the device of the mismatch shown
    mismatch_seq: int | None = None
    max_abs_diff: float = 0.0
    max_rel_diff: float = 0.0
    inside: str | None = None                 # the fusion whose instruction it is (into_fusions)


@dataclass
class _Job:
    node: tuple
    seq: int
    params: list                              # (shape, [leaves]) per operand (None: a token)
    body: list                                # instructions, parameters referred to as %P<k>
    root: str
    out_shape: object
    hlo_leaves: list
    device: int | None = None
    count: int = 1
    key: bytes | None = None
    shape_key: bytes | None = None
    bytes: int = 0
    duplicates: list = field(default_factory=list)   # (node, hlo leaves, device, seq) of identical jobs


class IsolateReport:
    """What `isolate` found; `to_json()` gives the documented dictionary (its `pairs` and
    `first_differences` have the form of `hlo diff --format json`, so `hlo graph --overlay` draws it)."""

    def __init__(self, module, nodes: dict, rtol: float, atol: float, path: str | None, stats: dict,
                 filtered: int, shard):
        self.module, self.nodes, self.rtol, self.atol = module, nodes, rtol, atol
        self.path, self.stats, self.filtered, self.shard = path, stats, filtered, shard
        self.result_leaves = None              # hlo's results (one device)
        self.outputs = None                    # recorded-reference mode: the output rows
        self.localized = None

    @property
    def ordered(self) -> list:
        return sorted(self.nodes.values(), key=lambda n: n.seq)

    def counts(self) -> dict:
        c = {s: 0 for s in STATUSES}
        for n in self.nodes.values():
            c[n.status] += 1
        return c

    @property
    def mismatches(self) -> list:
        return sorted((n for n in self.nodes.values() if n.status == MISMATCH),
                      key=lambda n: (n.mismatch_seq, n.seq))

    def _operands(self, n: Node) -> list:
        comp = self.module.computation_map.get(n.computation)
        if comp is None:
            return []
        inst = comp.by_name[n.name]
        return [self.nodes.get((n.computation, o)) for o in inst.operands]

    def _inner_mismatch(self, n: Node) -> str | None:
        """A mismatching instruction inside the computations N calls (a fusion, loop, call)."""
        comp = self.module.computation_map.get(n.computation)
        inst = comp.by_name[n.name] if comp is not None else None
        if inst is None or not inst.called_computations:
            return None
        inner = {c.name for c in slicing.callees(self.module, inst.called_computations)}
        for m in self.mismatches:
            if m.computation in inner and m is not n:
                return m.name
        return None

    def classify(self) -> tuple[list, list]:
        """(causes, symptoms): a cause mismatches while no operand of it mismatched before it and
        nothing inside it mismatched."""
        causes, symptoms = [], []
        for m in self.mismatches:
            ops = [o for o in self._operands(m) if o is not None and o.status == MISMATCH
                   and o.mismatch_seq is not None and o.mismatch_seq <= m.mismatch_seq]
            inner = self._inner_mismatch(m)
            if ops or inner:
                symptoms.append((m, [o.name for o in ops] + ([inner] if inner else [])))
            else:
                causes.append(m)
        return causes, symptoms

    def entry(self, n: Node) -> dict:
        from ..pipeline.dumps import source_of
        comp = self.module.computation_map[n.computation]
        inst = comp.by_name[n.name]
        e = {"computation": n.computation, "instruction": n.name, "opcode": n.opcode, "status": n.status,
             "location": f"{inst.loc.file}:{inst.loc.line}", "shape": inst.shape.to_str(False),
             "executions": n.executions, "compared": n.compared}
        e.update({k: v for k, v in source_of(self.module, inst).items() if k in ("op_name", "source")})
        if n.note:
            e["note"] = n.note
        if n.inside:
            e["inside"] = n.inside
        if n.device is not None:
            e["device"] = n.device
        r = n.result or {}
        if n.status in (MATCHED, MISMATCH):
            e["max_abs_diff"], e["max_rel_diff"] = n.max_abs_diff, n.max_rel_diff
        if n.status == MISMATCH:
            e.update(where=r.get("where"), hlo_value=r.get("b_value"), xla_value=r.get("a_value"),
                     mismatched=r.get("mismatched"), size=r.get("size"), execution=r.get("execution"))
            if r.get("leaf") is not None:
                e["leaf"] = r["leaf"]
        return e

    def to_json(self) -> dict:
        causes, symptoms = self.classify()
        doc = {"tool": "isolate", "module": self.module.name, "a": self.path, "b": self.path,
               "module_a": self.module.name, "module_b": self.module.name,
               "verdict": "mismatch" if causes or symptoms else "match", "rtol": self.rtol, "atol": self.atol,
               "counts": self.counts(), "filtered_out": self.filtered,
               "causes": [self.entry(n) for n in causes],
               "symptoms": [dict(self.entry(n), after=list(why)) for n, why in symptoms],
               "instructions": [self.entry(n) for n in self.ordered],
               "stats": self.stats}
        if self.shard is not None:
            doc["shard"] = f"{self.shard[0]}/{self.shard[1]}"
        if self.outputs is not None:
            doc["outputs"] = self.outputs
        if self.localized is not None:
            doc["localized"] = self.localized
        # the form of `hlo diff --format json`, for `hlo graph --overlay`
        status = {MATCHED: "agree", MISMATCH: "differ"}
        doc["pairs"] = [{"a": n.name, "b": n.name, "computation_a": n.computation, "computation_b": n.computation,
                         "status": status.get(n.status, "skipped"), "how": "isolated",
                         "max_abs_diff": n.max_abs_diff, "max_rel_diff": n.max_rel_diff,
                         "where": (n.result or {}).get("where") if n.status == MISMATCH else None}
                        for n in self.ordered]
        doc["first_differences"] = [{"a": n.name, "b": n.name, "computation_a": n.computation,
                                     "computation_b": n.computation} for n in causes]
        return doc


def parse_shard(text: str | None):
    """--shard I/N -> (I, N) with 0 <= I < N; None for None."""
    if text is None:
        return None
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
    if not m or int(m.group(2)) < 1 or int(m.group(1)) >= int(m.group(2)):
        raise HloInputError(f"--shard {text}: give I/N with 0 <= I < N (e.g. 0/4 for the first of four jobs)")
    return int(m.group(1)), int(m.group(2))


def _split_variadic(inst, names: list) -> list:
    """INST (a collective) on operands NAMES as the instructions of a module whose ROOT is `r`: a
    variadic all-reduce, all-gather or reduce-scatter (a tuple of results) as one per operand and
    their tuple (XLA's HLO-to-StableHLO translation refuses the variadic form)."""
    from ..ir.module import Instruction
    if not (inst.shape.is_tuple and inst.opcode in ("all-reduce", "all-gather", "reduce-scatter")
            and len(inst.shape.tuple_shapes) == len(names) > 1):
        return [slicing.strip(inst, "r", names)]
    out = []
    for k, (name, shape) in enumerate(zip(names, inst.shape.tuple_shapes)):
        one = slicing.strip(inst, f"r.{k}", [name])
        attrs = dict(one.attrs)
        if attrs.get("channel_id") is not None:
            attrs["channel_id"] = int(attrs["channel_id"]) + k * 1000
        out.append(dataclasses.replace(one, shape=slicing.plain_shape(shape), attrs=attrs))
    out.append(Instruction("r", "tuple", slicing.plain_shape(inst.shape), tuple(f"r.{k}" for k in range(len(names)))))
    return out


def _regex(text: str | None, option: str):
    if text is None:
        return None
    try:
        return re.compile(text)
    except re.error as e:
        raise HloInputError(f"{option} {text!r}: not a regular expression ({e})") from None


def _fused_computations(module) -> set:
    out = set()
    for _, inst in module.instructions():
        if inst.opcode == "fusion":
            out.update(inst.called_computations)
    return out


def _digest(leaves) -> bytes:
    h = hashlib.blake2b(digest_size=16)
    for a in leaves:
        a = np.ascontiguousarray(a)
        h.update(str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.reshape(-1).view(np.uint8).data if a.size else b"")
    return h.digest()




class _Isolator:
    def __init__(self, module, worker, rtol, atol, *, executions, name_re, opcode_re, shard, batch_size,
                 batch_bytes, reference_module, grid, multi, fused_only=None, nodes=None, seq0=0, on_phase=None):
        self.on_phase = on_phase or (lambda text: None)
        self.module, self.worker, self.rtol, self.atol = module, worker, rtol, atol
        self.executions, self.name_re, self.opcode_re, self.shard = executions, name_re, opcode_re, shard
        self.batch_size, self.batch_bytes = batch_size, batch_bytes
        self.ref = reference_module
        self.grid, self.multi = grid, multi
        self.fused = _fused_computations(module)
        self.fused_only = fused_only              # pass 2: the fused computations to go inside
        self.nodes = nodes if nodes is not None else {}
        self.candidates: dict = {}                # node -> its index among the isolated ones (for --shard)
        self.filtered: set = set()
        self.seen: dict = {}                      # job key -> the job (or its result)
        self.pending: list = []
        self.pending_keys: set = set()          # the different module texts among them
        self.pending_bytes = 0
        self.seq = seq0
        self.stats = {"jobs": 0, "identical": 0, "batches": 0, "refused_batches_split": 0}

    # ----------------------------------------------------------------- the hook
    def hook(self, ev):
        self.seq += 1
        comp, inst = ev.computation, ev.instruction
        node = (comp.name, inst.name)
        if self.fused_only is not None:
            if comp.name not in self.fused_only:
                return
        elif comp.name in self.fused:
            return
        if (self.name_re is not None and not self.name_re.search(inst.name)) or \
                (self.opcode_re is not None and not self.opcode_re.search(inst.opcode)):
            self.filtered.add(node)
            return
        if node not in self.candidates:
            self.candidates[node] = len(self.candidates)
        if self.shard is not None and self.candidates[node] % self.shard[1] != self.shard[0]:
            return
        n = self.nodes.get(node)
        if n is None:
            n = self.nodes[node] = Node(comp.name, inst.name, inst.opcode, self.seq)
            if self.fused_only is not None:
                n.inside = self.fused_only[comp.name]
        n.executions += 1
        if ev.count > self.executions:
            return
        why = self._not_isolated(inst, n)
        if why is not None:
            if n.status == SKIPPED:
                n.note = why
            return
        devices = getattr(ev, "devices", None)
        if self.multi and self._collective(inst):
            self._collective_job(ev, n, tuple(int(d) for d in devices) if devices is not None else None)
        elif devices is not None:
            stacked = stacked_operands(ev)
            for pos, d in enumerate(devices):
                ops = [row(v, pos) if st else v for v, st in zip(ev.operands, stacked)]
                self._job(ev, n, ops, row(ev.value, pos), int(d))
        else:
            self._job(ev, n, ev.operands, ev.value, None)

    def _collective(self, inst) -> bool:
        return has_trait(inst.opcode, COLLECTIVE)

    def _not_isolated(self, inst, n) -> str | None:
        if inst.opcode in _PLUMBING:
            return _PLUMBING[inst.opcode]
        if has_trait(inst.opcode, DEVICE_ID):
            return "the device's own number: not a computation"
        if has_trait(inst.opcode, IO):
            return "input/output with the host or another device"
        if slicing.is_token(inst.shape):
            return "its result holds a token"
        if inst.opcode == "constant" and (inst.literal is None or getattr(inst.literal, "elided", False)):
            return "its values were elided in the dump"
        if inst.shape.is_dynamic or any(s.is_dynamic for s in inst.shape.leaves()):
            return "a result of dynamic size"
        if self.ref is not None:
            rc = self.ref.computation_map.get(n.computation)
            ri = rc.by_name.get(n.name) if rc is not None else None
            if ri is None:
                return "not in the reference module"
            if len(ri.operands) != len(inst.operands) or ri.shape.without_layout() != inst.shape.without_layout():
                return "the reference module's instruction has other operands or another shape"
        return None

    def _source(self, n):
        """The instruction XLA runs and the module its computations come from."""
        if self.ref is not None:
            return self.ref.computation_map[n.computation].by_name[n.name], self.ref
        return self.module.computation_map[n.computation].by_name[n.name], self.module

    def _body(self, n, prefix: str, opnames: list, opshapes: list):
        inst, src = self._source(n)
        out = []
        if inst.opcode == "fusion":
            callee = src.computation_map[inst.called_computations[0]]
            root = slicing.inline(src, callee, opnames, out.append, prefix)
        else:
            out.extend(slicing.lower(inst, prefix + "r", opnames, opshapes))
            root = prefix + "r"
        return out, root, slicing.plain_shape(inst.shape)

    def _job(self, ev, n, operands, value, device):
        inst = ev.instruction
        comp = ev.computation
        params, opnames, body_tokens = [], [], []
        for k, (name, v) in enumerate(zip(inst.operands, operands)):
            shape = comp.by_name[name].shape
            if shape.element_type == "token":
                body_tokens.append(slicing.token(f"T{k}"))
                opnames.append(f"T{k}")
                params.append(None)
                continue
            if slicing.is_token(shape):
                n.note = "an operand holds a token inside a tuple (XLA through JAX takes no token parameters)"
                return
            leaves = [np.array(a, copy=True) for a, _ in leaves_with_shapes(v, shape)]
            params.append((shape, leaves))
            opnames.append(f"P{k}")
        body, root, out_shape = self._body(n, "", opnames, [comp.by_name[o].shape for o in inst.operands])
        body = body_tokens + body
        hlo_leaves = [np.asarray(a) for a, _ in leaves_with_shapes(value, inst.shape)]
        h = hashlib.blake2b(digest_size=16)
        for i in body:
            h.update(format_instruction(i, metadata=False).encode())
        for p in params:
            h.update(b"T" if p is None else p[0].to_str(False).encode())
        shape_key = h.digest()                  # the same module text
        for p in params:
            if p is not None:
                h.update(_digest(p[1]))
        key = h.digest()                        # ... on the same values
        self.stats["jobs"] += 1
        job = _Job((n.computation, n.name), self.seq, params, body, root, out_shape, hlo_leaves, device=device, key=key,
                   shape_key=shape_key)
        earlier = self.seen.get(key)
        if earlier is not None:
            self.stats["identical"] += 1
            if isinstance(earlier, _Job):
                earlier.duplicates.append((job.node, hlo_leaves, device, self.seq, ev.count))
            else:
                self._record(n, earlier, hlo_leaves, device, self.seq, ev.count)
            return
        job.count = ev.count
        self.seen[key] = job
        job.bytes = sum(a.nbytes for p in params if p is not None for a in p[1])
        self.pending.append(job)
        self.pending_keys.add(shape_key)
        self.pending_bytes += job.bytes
        if len(self.pending_keys) >= self.batch_size or self.pending_bytes >= self.batch_bytes:
            self.flush()

    def _collective_job(self, ev, n, devices):
        """A collective on every device at once: a per-device program on XLA's host devices."""
        inst, comp = ev.instruction, ev.computation
        if devices is None:                   # a value held once for every device
            devices = tuple(range(self.grid.count))
        stacked = stacked_operands(ev)                # (an operand may still be one per device)
        count = len(devices)
        if self.grid is None or count != self.grid.count:
            n.note = "a collective run on part of the devices"
            return
        params, args = [], []
        for k, (name, v, st) in enumerate(zip(inst.operands, ev.operands, stacked)):
            shape = comp.by_name[name].shape
            if slicing.is_token(shape):
                n.note = "a collective over tokens"
                return
            params.append(slicing.parameter(f"P{k}", k, shape))
            for a, _ in leaves_with_shapes(v, shape):
                a = np.asarray(a)
                args.append(a if st else np.broadcast_to(a, (count,) + a.shape))
        src_inst, src = self._source(n)
        names = [p.name for p in params]
        body = params + _split_variadic(src_inst, names)
        attrs = {"replica_count": self.grid.replicas, "num_partitions": self.grid.partitions}
        mod = slicing.build_module(f"isolate_{n.name}", src, body, "r", attrs)
        text = slicing.text_of(mod)
        if self.grid.partitions > 1:
            from .reference import manual_text
            text = manual_text(text)
        self.stats["jobs"] += 1
        try:
            outs = self.worker.run(text, args, replicas=self.grid.replicas, partitions=self.grid.partitions,
                                   mode="per_device")
        except (XlaRefused, XlaCrash) as e:
            self._refused(n, e)
            return
        hlo = [np.asarray(a) for a, _ in leaves_with_shapes(ev.value, inst.shape)]
        hlo = [a if a.ndim == len(s.dims) + 1 else np.broadcast_to(a, (count,) + a.shape)
               for a, s in zip(hlo, inst.shape.leaves())]
        r = compare_leaves([np.asarray(o) for o in outs], hlo, self.rtol, self.atol)
        if r["status"] == "differ" and r.get("where"):
            r["device"] = devices[r["where"][0]]
        self._record(n, r, None, r.get("device"), self.seq, ev.count, compared=True)

    # ----------------------------------------------------------------- batches
    def flush(self):
        if self.pending:
            self.on_phase(f"isolating on XLA: batch {self.stats['batches'] + 1} ({len(self.pending_keys)} different "
                          f"instructions, {len(self.pending)} runs; {self.stats['jobs']} isolated so far)")
        jobs, self.pending, self.pending_bytes = self.pending, [], 0
        self.pending_keys = set()
        if jobs:
            self._run_batch(jobs)

    def _batch_text(self, groups):
        """One module computing one job of each group (jobs of a group differ only in their operand
        values); its arguments are given per round."""
        entry, roots, nparam = [], [], 0
        for j, group in enumerate(groups):
            job = group[0]
            prefix = f"j{j}."
            names = {}
            for k, p in enumerate(job.params):
                if p is None:
                    continue
                names[f"P{k}"] = prefix + f"p{k}"
                entry.append(slicing.parameter(prefix + f"p{k}", nparam, p[0]))
                nparam += 1
            for i in job.body:
                names.setdefault(i.name, prefix + i.name)
            for i in job.body:
                entry.append(slicing.strip(i, names[i.name], [names.get(o, o) for o in i.operands]))
            roots.append((names[job.root], job.out_shape))
        from ..ir.module import Instruction
        from ..ir.shape import Shape
        entry.append(Instruction("isolated", "tuple", Shape.tuple_of([s for _, s in roots]),
                                 tuple(r for r, _ in roots)))
        mod = slicing.build_module("isolate_batch", self.ref or self.module, entry, "isolated")
        return slicing.text_of(mod)

    def _run_batch(self, jobs):
        groups: dict = {}
        for job in jobs:
            groups.setdefault(job.shape_key, []).append(job)
        self._run_groups(list(groups.values()))

    def _run_groups(self, groups):
        text = self._batch_text(groups)
        self.stats["batches"] += 1
        rounds = []
        for r in range(max(len(g) for g in groups)):
            args = []
            for g in groups:
                if r >= len(g):                  # no job of this group in this round: the last arguments again
                    args.extend([None] * sum(len(p[1]) for p in g[0].params if p is not None))
                else:
                    args.extend(a for p in g[r].params if p is not None for a in p[1])
            rounds.append(args)
        try:
            for r, outs in enumerate(self.worker.run_rounds(text, rounds)):
                pos = 0
                for g in groups:
                    job = g[r] if r < len(g) else None
                    k = sum(1 for _ in g[0].out_shape.leaves()) if g[0].out_shape.is_tuple else 1
                    if job is not None and job.params is not None:
                        self._finish(job, [np.asarray(o) for o in outs[pos:pos + k]], None)
                    pos += k
        except (XlaRefused, XlaCrash) as e:
            left = [[j for j in g if j.params is not None] for g in groups]
            left = [g for g in left if g]
            if not left:
                return
            if len(left) == 1:
                for job in left[0]:
                    self._finish(job, None, e)
                return
            self.stats["refused_batches_split"] += 1
            half = len(left) // 2
            self._run_groups(left[:half])
            self._run_groups(left[half:])

    def _finish(self, job, xla, error):
        n = self.nodes[job.node]
        if error is not None:
            r = {"status": "refused", "note": f"XLA {'crashed' if isinstance(error, XlaCrash) else error.stage}: "
                                               f"{error}"}
        else:
            r = compare_leaves(xla, job.hlo_leaves, self.rtol, self.atol)
        self.seen[job.key] = (r, xla)
        self._record(n, (r, None), None, job.device, job.seq, job.count)      # (R is this job's own comparison)
        for node, leaves, device, seq, count in job.duplicates:
            self._record(self.nodes[node], (r, xla), leaves, device, seq, count)
        job.params = job.hlo_leaves = job.duplicates = None

    def _refused(self, n, e):
        if n.status == SKIPPED:
            n.status = REFUSED
            n.note = f"XLA {'crashed' if isinstance(e, XlaCrash) else e.stage}: {e}"

    def _record(self, n, earlier, hlo_leaves, device, seq, count, compared=False):
        """Fold one comparison into N: EARLIER is (the comparison, XLA's leaves) of an identical job,
        compared again with HLO_LEAVES (a duplicate's own value: the same operands, hlo's result may
        still differ) when both are given; COMPARED: EARLIER is the comparison itself."""
        if compared:
            r = earlier
        else:
            r, xla = earlier
            if r.get("status") != "refused" and hlo_leaves is not None and xla is not None:
                r = compare_leaves(xla, hlo_leaves, self.rtol, self.atol)
        if r.get("status") == "refused":
            if n.status == SKIPPED:
                n.status, n.note = REFUSED, r["note"]
            return
        if r["status"] == "skipped":
            if n.status == SKIPPED:
                n.note = r.get("note")
            return
        n.compared += 1
        n.max_abs_diff = max(n.max_abs_diff, r.get("max_abs_diff") or 0.0)
        n.max_rel_diff = max(n.max_rel_diff, r.get("max_rel_diff") or 0.0)
        if r["status"] == "differ":
            if n.status != MISMATCH:
                n.status, n.mismatch_seq, n.device = MISMATCH, seq, device
                n.result = dict(r, execution=count)
                n.note = None
        elif n.status in (SKIPPED, REFUSED):
            n.status, n.note = MATCHED, None


def isolate(module, args, rtol: float = 1e-3, atol: float = 1e-3, *, options=None, into_fusions: bool = False,
            filter_name: str | None = None, filter_opcode: str | None = None, shard=None, executions: int = 1,
            batch_size: int = 200, batch_bytes: int = 256 << 20, reference_module=None, path: str | None = None,
            on_phase=None, worker: XlaWorker | None = None) -> IsolateReport:
    """Run MODULE on ARGS (one value per entry parameter: global arrays for a module on several
    devices) with hlo, isolate its instructions on XLA CPU and compare (see the module docstring).
    SHARD (I, N): only every N-th instruction from the I-th (in the run's order).  Raises
    HloReferenceError when XLA cannot be started, and the interpreter's errors when the run fails."""
    from ..pipeline.devices import DeviceRun
    from ..interpreter import RunOptions, run_module
    phase = on_phase or (lambda text: None)
    options = options or RunOptions()
    name_re, opcode_re = _regex(filter_name, "--filter-name"), _regex(filter_opcode, "--filter-opcode")
    if isinstance(shard, str):
        shard = parse_shard(shard)
    dv = DeviceRun(module, {})
    grid = dv.grid if dv.multi else None
    own = worker is None
    worker = worker or XlaWorker(devices=grid.count if grid is not None else 1)
    t0 = time.perf_counter()
    hlo_s = 0.0
    results = []

    def run_with(hook):
        nonlocal hlo_s
        t, w = time.perf_counter(), worker.stats["wall_s"]     # (batches run inside the run's hook: not hlo's)
        try:
            if dv.multi:
                results.append(dv.run(dv.distribute(list(args)), options, hook, None))
            else:
                results.append(run_module(module, list(args), options, hook))
        finally:
            hlo_s += (time.perf_counter() - t) - (worker.stats["wall_s"] - w)
    try:
        iso = _Isolator(module, worker, rtol, atol, executions=executions, name_re=name_re, opcode_re=opcode_re,
                        shard=shard, batch_size=batch_size, batch_bytes=batch_bytes,
                        reference_module=reference_module, grid=grid, multi=dv.multi, on_phase=phase)
        phase("running the module, isolating each instruction on XLA")
        run_with(iso.hook)
        iso.flush()
        if into_fusions:
            go = {}
            for n in list(iso.nodes.values()):
                if n.status == MISMATCH and n.opcode == "fusion":
                    inst = module.computation_map[n.computation].by_name[n.name]
                    for c in slicing.callees(module, inst.called_computations):
                        if c.name in iso.fused:
                            go.setdefault(c.name, n.name)
            if go:
                phase("running again, isolating the instructions inside the mismatching fusions")
                inner = _Isolator(module, worker, rtol, atol, executions=executions, name_re=name_re,
                                  opcode_re=opcode_re, shard=None, batch_size=batch_size, batch_bytes=batch_bytes,
                                  reference_module=reference_module, grid=grid, multi=dv.multi, fused_only=go,
                                  nodes=iso.nodes, on_phase=phase)
                run_with(inner.hook)
                inner.flush()
                for k, v in inner.stats.items():
                    iso.stats[k] += v
        stats = dict(iso.stats)
        stats.update({f"xla_{k}": v for k, v in worker.stats.items()})
        stats["hlo_run_s"] = hlo_s
        stats["total_s"] = time.perf_counter() - t0
    finally:
        if own:
            worker.close()
    report = IsolateReport(module, iso.nodes, rtol, atol, path, stats, len(iso.filtered), shard)
    if not dv.multi:
        shape = module.entry_computation.root_instruction.shape
        report.result_leaves = [np.asarray(v) for v, _ in leaves_with_shapes(results[0], shape)]
    return report


def localize_outputs(report: IsolateReport, rows: list) -> dict:
    """Recorded-reference mode: ROWS compare hlo's results with recorded ones (compare.compare's rows,
    keys out0...).  The recording holds outputs only, so the values inside are judged by XLA
    (isolation); each cause is tied to the mismatching outputs its value reaches (the entry
    computation's instructions that depend on it, through the ROOT's tuple)."""
    module = report.module
    entry = module.entry_computation
    root = entry.root_instruction
    out_of: dict = {}                          # entry instruction -> the output keys it reaches
    leaves = []
    if root.shape.is_tuple and root.opcode == "tuple":
        k = 0
        for o in root.operands:
            shape = entry.by_name[o].shape
            n = sum(1 for _ in shape.leaves()) if shape.is_tuple else 1
            leaves.append((o, [f"out{k + i}" for i in range(n)]))
            k += n
    else:
        n = sum(1 for _ in root.shape.leaves()) if root.shape.is_tuple else 1
        leaves.append((root.name, [f"out{i}" for i in range(n)]))
    users: dict = {}
    for i in entry.instructions:
        for o in i.operands:
            users.setdefault(o, set()).add(i.name)
    for start, keys in leaves:
        # every instruction upstream of this output reaches it
        stack, seen = [start], set()
        while stack:
            x = stack.pop()
            if x in seen:
                continue
            seen.add(x)
            out_of.setdefault(x, set()).update(keys)
            stack.extend(entry.by_name[x].operands)
    bad = {r["key"] for r in rows if r.get("status") != "ok"}
    causes, _ = report.classify()
    callers = {}
    for i in entry.instructions:
        for c in slicing.callees(module, i.called_computations):
            callers.setdefault(c.name, i.name)
    out = []
    for c in causes:
        at = c.name if c.computation == entry.name else callers.get(c.computation)
        reach = sorted(out_of.get(at, set()) & bad, key=lambda s: int(s[3:]))
        out.append({"instruction": c.name, "computation": c.computation, "reaches": reach})
    explained = set().union(*(set(o["reaches"]) for o in out)) if out else set()
    return {"mismatching_outputs": sorted(bad, key=lambda s: int(s[3:])), "causes": out,
            "unexplained_outputs": sorted(bad - explained, key=lambda s: int(s[3:])),
            "how": "the recording holds only the results: every instruction is judged by XLA CPU on hlo's own "
                   "operand values (isolation), and each instruction where the two disagree is tied to the "
                   "mismatching results that depend on it"}


def recorded_results(module, path: str, expect: str | None, snap) -> tuple:
    """(the results to compare the module's with, or None; what they are): --expect's file, else the
    result the snapshot (SNAP, the module's file PATH) recorded.  A program on several devices
    compares its instructions only (HloInputError with --expect)."""
    from ..pipeline.devices import DeviceRun
    if DeviceRun(module, {}).multi and (expect is not None or (snap is not None and snap.result is not None)):
        raise HloInputError("--expect: the results of a program on several devices are compared by `hlo run "
                            "--expect`; hlo isolate compares its instructions only")
    if expect is not None:
        from ..pipeline.compare import load_results_of
        return load_results_of(expect, module), expect
    if snap is not None and snap.result is not None:
        from ..pipeline.inputs import snapshot_reference
        return snapshot_reference(snap), f"{path} (the snapshot's result)"
    return None, expect


def compare_results(report, recorded, label: str | None, rtol: float, atol: float) -> bool:
    """Compare the run's results (REPORT.result_leaves) with RECORDED as --expect compares; the
    comparison goes into REPORT.outputs, and where they differ, the isolated differences that reach
    them into REPORT.localized.  Whether they match (True when there is nothing to compare)."""
    if recorded is None or report.result_leaves is None:
        return True
    from ..pipeline.compare import compare
    mm = compare(report.result_leaves, recorded, rtol, atol)
    report.outputs = {"reference": label, "ok": mm["ok"], "rows": mm["rows"]}
    if not mm["ok"]:
        report.localized = localize_outputs(report, mm["rows"])
    return mm["ok"]
