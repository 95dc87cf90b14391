"""Running two modules on the same inputs and comparing every matched value.

How: A runs first with a hook that keeps the value of every instruction some instruction of B is
matched to (a copy, per execution; see values.ValueStore: in memory up to a budget, then spilled to
a temporary directory); then B runs with a hook that compares each matched value as it is produced
with A's and drops A's as soon as its last comparison is done.  So memory holds A's matched values
(at most), never B's, and a value of A nobody needs is never kept.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import HloInputError
from ..pipeline.inputs import global_parameters
from ..pipeline.io import leaves_with_shapes, nonfinite_mask
from .matching import Matching, extend_matching, match_modules
from .values import ValueStore, compare_leaves, copy_leaves

_STATUS_RANK = {"agree": 0, "skipped": 1, "differ": 2}


def check_parameters(module_a, module_b):
    """A and B take the same arguments: the same number of entry parameters, each of the same
    element type and (global) dimensions (HloInputError otherwise, naming the first that differs)."""
    pa = global_parameters(module_a)
    pb = global_parameters(module_b)
    if len(pa) != len(pb):
        raise HloInputError(f"the modules take different numbers of parameters: A ({module_a.name}) takes "
                            f"{len(pa)}, B ({module_b.name}) takes {len(pb)}; hlo diff runs both on the same "
                            f"inputs, bound by parameter position")
    for p, q in zip(pa, pb):
        if p.shape.without_layout() != q.shape.without_layout():
            raise HloInputError(f"parameter {p.parameter_number} differs: A's '{p.name}' is "
                                f"{p.shape.to_str(False)}, B's '{q.name}' is {q.shape.to_str(False)}; hlo diff "
                                f"runs both on the same inputs, bound by parameter position")


@dataclass
class PairState:
    """One matched instruction of B and what its comparisons with A found, over its executions."""
    b: tuple
    a: tuple
    how: str
    seq: int                          # B's execution order of its first execution
    executions: int = 0
    compared: int = 0                 # executions compared (fewer with max_executions)
    status: str = "agree"
    result: dict | None = None        # the comparison shown: the first differing execution, else the largest
    first_execution: int | None = None   # the first execution that differs
    diff_seq: int | None = None
    max_abs_diff: float | None = 0.0
    max_rel_diff: float | None = 0.0


@dataclass
class DiffReport:
    """What `diff_modules` found.  `to_json()` gives the documented dictionary."""
    matching: Matching
    rtol: float
    atol: float
    states: dict                      # B node -> PairState (the pairs B executed)
    results: list                     # one row per result leaf
    results_agree: bool
    only_in_a: list                   # A nodes executed and matched by nothing of B
    only_in_b: list
    path_a: str | None = None
    path_b: str | None = None
    store: dict = field(default_factory=dict)
    stopped: dict = field(default_factory=dict)   # "a"/"b" -> where that module's run stopped (an
                                                   # instruction hlo cannot run): see _stop_point

    @property
    def verdict(self) -> str:
        """"agree", "differ", or "incomplete": a module stopped at an instruction hlo cannot run and no
        value compared up to there differed (the results were not compared)."""
        if self.stopped:
            if any(s.status == "differ" for s in self.states.values()):
                return "differ"
            return "incomplete"
        return "agree" if self.results_agree else "differ"

    @property
    def pairs(self) -> list:
        return sorted(self.states.values(), key=lambda s: s.seq)

    def operand_states(self, st: PairState) -> list:
        """(B node, PairState or None) of the values ST's instruction reads."""
        B = self.matching.b
        node = st.b
        if st.how == "alias":
            nodes = [B.canonical(node)]
        elif node in self.matching.loop_sources:
            nodes = self.matching.loop_sources[node]
        else:
            inst = B.inst[node]
            nodes = [B.canonical((node[0], o)) for o in inst.operands]
            if inst.opcode in ("while", "conditional"):       # and what its computations end with
                nodes += [B.canonical((c, B.comps[c].root)) for c in inst.called_computations if c in B.comps]
        out, seen = [], set()
        for n in nodes:
            if n in seen or n == node:
                continue
            seen.add(n)
            out.append((n, self.states.get(n)))
        return out

    @property
    def differing(self) -> list:
        return sorted((s for s in self.states.values() if s.status == "differ"), key=lambda s: (s.diff_seq, s.seq))

    @property
    def first_differences(self) -> list:
        """The differing instructions none of whose operands differed before (in B's execution
        order: an operand in a loop may differ only in a later iteration), in that order."""
        out = []
        for s in self.differing:
            if not any(o is not None and o.diff_seq is not None and o.diff_seq < s.diff_seq
                       for _, o in self.operand_states(s)):
                out.append(s)
        return out

    def chain(self, st: PairState, depth: int = 3, limit: int = 12) -> list:
        """The operands of ST (and theirs, DEPTH levels, depth first) with their comparisons: where
        the values still agreed."""
        out, seen = [], {st.b}

        def walk(s, d):
            for n, o in self.operand_states(s):
                if n in seen or len(out) >= limit:
                    continue
                seen.add(n)
                if o is None:
                    inst = self.matching.b.inst.get(n)
                    out.append({"depth": d, "b": n[1], "computation_b": n[0], "a": None,
                                "status": "unmatched" if inst is not None else "unknown",
                                "opcode_b": inst.opcode if inst is not None else None})
                    continue
                e = self.entry(o, brief=True)
                e["depth"] = d
                if o.diff_seq is not None and st.diff_seq is not None and o.diff_seq > st.diff_seq:
                    e["status"] = "agree (differs in a later execution)"
                out.append(e)
                if d < depth:
                    walk(o, d + 1)
        walk(st, 1)
        return out

    def entry(self, st: PairState, brief: bool = False) -> dict:
        """The JSON form of one pair."""
        from ..pipeline.dumps import source_of
        A, B = self.matching.a, self.matching.b
        ia, ib = A.inst[st.a], B.inst[st.b]
        r = st.result or {}
        e = {"a": st.a[1], "b": st.b[1], "computation_a": st.a[0], "computation_b": st.b[0],
             "status": st.status, "how": st.how,
             "max_abs_diff": None if st.status == "skipped" and r.get("max_abs_diff") is None else st.max_abs_diff,
             "max_rel_diff": None if st.status == "skipped" and r.get("max_rel_diff") is None else st.max_rel_diff,
             "where": r.get("where") if st.status == "differ" else None,
             "opcode_a": ia.opcode, "opcode_b": ib.opcode,
             "shape_a": ia.shape.to_str(False), "shape_b": ib.shape.to_str(False)}
        if brief:
            return e
        e["location_a"] = f"{ia.loc.file}:{ia.loc.line}"
        e["location_b"] = f"{ib.loc.file}:{ib.loc.line}"
        for side, ix, node, inst in (("a", A, st.a, ia), ("b", B, st.b, ib)):
            md = source_of(ix.module, inst)
            if md.get("op_name"):
                e[f"op_name_{side}"] = md["op_name"]
            if md.get("source"):
                e[f"source_{side}"] = md["source"]
            site = ix.single_caller(node[0]) if node[0] != ix.entry else None
            if site is not None and site[1].opcode in ("fusion", "call"):
                e[f"in_{side}"] = site[1].name
        e["executions"] = st.executions
        if st.compared < st.executions and st.how != "value":
            e["compared_executions"] = st.compared
        if st.first_execution is not None and st.executions > 1:
            e["first_differing_execution"] = st.first_execution
        for k in ("mismatched", "size", "a_value", "b_value", "leaf", "note"):
            if r.get(k) is not None:
                e[k] = r[k]
        return e

    def summary(self) -> dict:
        n = {"agree": 0, "differ": 0, "skipped": 0}
        by_rule: dict[str, int] = {}
        for s in self.states.values():
            n[s.status] += 1
            by_rule[s.how] = by_rule.get(s.how, 0) + 1
        return {"matched": len(self.states), "agreeing": n["agree"], "differing": n["differ"],
                "skipped": n["skipped"], "only_in_a": len(self.only_in_a), "only_in_b": len(self.only_in_b),
                "matched_by": by_rule, "first_differences": len(self.first_differences)}

    def to_json(self, max_pairs: int | None = None) -> dict:
        pairs = self.pairs
        first = self.first_differences
        doc = {"verdict": self.verdict, "results_agree": self.results_agree, "a": self.path_a, "b": self.path_b,
               "stopped": {side: dict(v) for side, v in self.stopped.items()},
               "module_a": self.matching.a.module.name, "module_b": self.matching.b.module.name,
               "rtol": self.rtol, "atol": self.atol, "summary": self.summary(), "results": self.results,
               "first_differences": [dict(self.entry(s), chain=self.chain(s)) for s in first[:100]],
               "pairs": [self.entry(s) for s in (pairs if max_pairs is None else pairs[:max_pairs])],
               "only_in_a": [n[1] for n in self.only_in_a], "only_in_b": [n[1] for n in self.only_in_b]}
        if self.store:
            doc["memory"] = self.store
        return doc


def diff_modules(module_a, module_b, args, rtol: float = 1e-3, atol: float = 1e-3, *, options=None,
                 path_a: str | None = None, path_b: str | None = None, keep_bytes: int | None = None,
                 progress=None, anchor_values: bool = True, max_executions: int | None = None,
                 on_phase=None, output_sharding: str | None = None) -> DiffReport:
    """Run MODULE_A and MODULE_B on ARGS (one value per entry parameter, by position: global arrays
    for modules on several devices), compare every instruction of B matched to one of A (see
    hlo_cli.diff.matching) and the results, A being the reference: |b - a| <= atol + rtol * |a|.
    OPTIONS: interpreter RunOptions (seed, max_iterations, elided_constants).  A's values wait for
    their comparison in memory up to KEEP_BYTES (default 1 GiB), beyond that in a temporary
    directory.

    MAX_EXECUTIONS: compare only the first N executions of each instruction (loop bodies; A's values
    of later ones are not kept), None: all.

    ANCHOR_VALUES (single-device modules): instructions the static matching left out whose values
    are the same bits in both runs (XLA's rewrites that keep values: max(x, -inf) -> x, a transpose
    made a copy and a bitcast...) are matched by value, and matching goes on from them (structure
    over the newly matched operands); instructions matched that way are compared in a second run of
    both modules when their values were not found equal already.

    ON_PHASE(text), when given, is told what is being done (matching, running A, ...): for a progress
    display.  Raises HloInputError when the modules take different parameters, and the interpreter's
    errors when a run fails."""
    phase = on_phase or (lambda text: None)
    from ..pipeline.devices import DeviceRun
    from ..interpreter import RunOptions
    check_parameters(module_a, module_b)
    dva, dvb = DeviceRun(module_a, {}), DeviceRun(module_b, {})
    if dva.multi and dvb.multi and dva.grid.count != dvb.grid.count:
        raise HloInputError(f"A runs on {dva.grid.count} devices, B on {dvb.grid.count}; hlo diff compares "
                            f"modules on the same devices")
    options = options or RunOptions()
    phase("matching the instructions of A and B")
    M = match_modules(module_a, module_b)
    A, B = M.a, M.b
    states: dict = {}
    fp = None
    if anchor_values and not (dva.multi or dvb.multi):
        matched = set(M.canon.values())
        fp = _Fingerprints(
            {n for n in A.live if not A.is_alias(n) and n not in matched and _fingerprintable(A.inst[n])},
            {n for n in B.live if not B.is_alias(n) and n not in M.pairs and _fingerprintable(B.inst[n])})
    run1 = _Pass(M.pairs, dva, dvb, module_a, module_b, args, options, progress, rtol, atol, keep_bytes, states, fp,
                 max_executions, phase)
    result_a, result_b = run1.run()
    executed_a, executed_b, mem = run1.executed_a, run1.executed_b, run1.mem
    if run1.stopped:
        fp = None                     # a second run would stop at the same instruction
    if fp is not None:
        anchors = fp.anchors(A, B)
        new = extend_matching(M, anchors)
        again = {}
        for b in new:
            m = M.pairs[b]
            if b not in run1.executed_b:
                continue
            if m.how == "value" or fp.same(m.a, b):
                st = states[b] = PairState(b, m.a, m.how, fp.first_seq_b.get(b, 0))
                st.executions = fp.count_b.get(b, 1)
            else:
                again[b] = m
        if again:
            phase("matching by value")
            run2 = _Pass(again, dva, dvb, module_a, module_b, args, options, progress, rtol, atol, keep_bytes,
                         states, None, max_executions, lambda t: phase(t + " (second run, for what matching by value "
                                                                       "added)"))
            run2.run()
            mem = {k: max(mem[k], run2.mem[k]) for k in mem}
        mem["second_run"] = bool(again)
    if run1.stopped:
        results = _not_compared(module_a, module_b, run1.stopped)
    elif dva.multi or dvb.multi:
        results = _compare_device_results(dva, dvb, result_a, result_b, rtol, atol, output_sharding)
    else:
        results = _compare_results(module_a, module_b, result_a, result_b, rtol, atol)
    matched_a = {m.a for m in M.pairs.values()} | set(M.canon.values())
    only_a = [n for n in A.execution_order() if n in executed_a and not A.is_alias(n)
              and A.inst[n].opcode != "tuple" and n not in matched_a]
    only_b = [n for n in B.execution_order() if n in executed_b and not B.is_alias(n)
              and B.inst[n].opcode != "tuple" and n not in M.pairs]
    return DiffReport(M, rtol, atol, states, results, all(r["status"] == "agree" for r in results), only_a, only_b,
                      path_a, path_b, mem, dict(run1.stopped))


def _stop_point(e, executed: int) -> dict:
    """Where a run stopped at an instruction hlo cannot run (HloUnsupportedError E): the instruction,
    its location, why, and how many instructions had run before it."""
    d = e.diagnostics[0] if e.diagnostics else None
    why = str(e).split("\n")[0]
    if d is not None and d.instruction and why.startswith(f"{d.instruction}: "):
        why = why[len(d.instruction) + 2:]
    why = why.split("; hlo runs: ", 1)[0]            # the list of what hlo runs is for `hlo run`
    return {"instruction": d.instruction if d is not None else None,
            "location": d.location if d is not None and d.line else None,
            "reason": why, "hint": getattr(e, "hint", None), "instructions_run": executed}


def _not_compared(module_a, module_b, stopped: dict) -> list:
    """Result rows of modules whose runs stopped: not compared."""
    who = " and ".join(f"{side.upper()} stopped at %{v['instruction']}" for side, v in sorted(stopped.items()))
    n = max(len(list(m.entry_computation.root_instruction.shape.leaves())) for m in (module_a, module_b))
    return [{"key": f"out{k}", "status": "skipped", "note": f"not compared: {who}", "max_abs_diff": None,
             "max_rel_diff": None, "where": None} for k in range(n)]


def _fingerprintable(inst) -> bool:
    return inst.opcode not in ("tuple", "parameter", "constant") and not inst.shape.is_tuple


class _Fingerprints:
    """Digests of the values of the nodes the static matching left out (first execution), to match
    them by value."""

    def __init__(self, want_a: set, want_b: set):
        self.want_a, self.want_b = want_a, want_b
        self.a: dict = {}
        self.b: dict = {}
        self.count_a: dict = {}
        self.count_b: dict = {}
        self.first_seq_b: dict = {}

    @staticmethod
    def digest(value):
        import hashlib
        a = np.asarray(value)
        if a.size <= 1 or a.dtype.kind == "O":
            return None
        flat = np.ascontiguousarray(a).reshape(-1)
        try:
            if bool((flat == flat[0]).all()):
                return None                 # a constant array matches too much
        except (TypeError, ValueError):
            pass
        h = hashlib.blake2b(flat.view(np.uint8), digest_size=16).digest()
        return (str(a.dtype), tuple(d for d in a.shape if d != 1), h)

    def see_a(self, node, ev):
        if node in self.want_a:
            self.count_a[node] = self.count_a.get(node, 0) + 1
            if ev.count == 1:
                self.a[node] = self.digest(ev.value)

    def see_b(self, node, ev, seq):
        if node in self.want_b:
            self.count_b[node] = self.count_b.get(node, 0) + 1
            if ev.count == 1:
                self.b[node] = self.digest(ev.value)
                self.first_seq_b[node] = seq

    def same(self, a, b) -> bool:
        """A's and B's values were the same bits (each ran once)."""
        da, db = self.a.get(a), self.b.get(b)
        return da is not None and da == db and self.count_a.get(a) == 1 and self.count_b.get(b) == 1

    def anchors(self, A, B) -> dict:
        by: dict = {}
        for n, d in self.a.items():
            if d is not None:
                by.setdefault(d, []).append(n)
        out = {}
        for n, d in self.b.items():
            cands = [a for a in by.get(d, ()) if A.scope_of(a) == B.scope_of(n)
                     and self.count_a.get(a) == self.count_b.get(n)]
            if len(cands) == 1:
                out[n] = cands[0]
        return out


class _Pass:
    """One run of both modules: A keeping the values PAIRS need, B comparing them as it goes
    (into STATES); FP, when given, takes digests for matching by value."""

    def __init__(self, pairs, dva, dvb, module_a, module_b, args, options, progress, rtol, atol, keep_bytes,
                 states, fp, max_executions=None, phase=None):
        self.max_executions = max_executions
        self.phase = phase or (lambda text: None)
        self.pairs, self.dva, self.dvb = pairs, dva, dvb
        self.module_a, self.module_b, self.args = module_a, module_b, args
        self.options, self.progress, self.rtol, self.atol = options, progress, rtol, atol
        self.store = ValueStore(keep_bytes)
        self.states, self.fp = states, fp
        self.uses: dict = {}
        for m in pairs.values():
            self.uses[m.a] = self.uses.get(m.a, 0) + 1
        self.held: dict = {}          # (A node, execution) -> the device sets its values were held for
        self.executed_a: set = set()
        self.executed_b: set = set()
        self.seq = 0
        self.mem = {}
        self.stopped: dict = {}       # "a"/"b" -> _stop_point: the run stopped at an instruction hlo cannot run

    def hook_a(self, ev):
        node = (ev.computation.name, ev.instruction.name)
        self.executed_a.add(node)
        if self.fp is not None:
            self.fp.see_a(node, ev)
        n = self.uses.get(node)
        if n and (self.max_executions is None or ev.count <= self.max_executions):
            devs = getattr(ev, "devices", None)
            tag = None if devs is None else tuple(int(d) for d in devs)
            self.store.put((node, ev.count, tag), copy_leaves(ev.value, ev.instruction.shape), n)
            self.held.setdefault((node, ev.count), set()).add(tag)

    def hook_b(self, ev):
        node = (ev.computation.name, ev.instruction.name)
        self.executed_b.add(node)
        self.seq += 1                          # every event: the same order in every run
        if self.fp is not None:
            self.fp.see_b(node, ev, self.seq)
        m = self.pairs.get(node)
        if m is None:
            return
        st = self.states.get(node)
        if st is None:
            st = self.states[node] = PairState(node, m.a, m.how, self.seq)
        st.executions += 1
        if self.max_executions is not None and ev.count > self.max_executions:
            return
        st.compared += 1
        devs_b = getattr(ev, "devices", None)
        devs_b = None if devs_b is None else tuple(int(d) for d in devs_b)
        leaves_a = self.store.take((m.a, ev.count, devs_b))
        if leaves_a is None and devs_b is not None and ev.instruction.opcode in ("constant", "iota"):
            leaves_a = self.store.peek((m.a, ev.count, None))     # the same on every device
        if leaves_a is None:
            tags = self.held.get((m.a, ev.count))
            if not tags and "a" in self.stopped and m.a not in self.executed_a:
                r = {"status": "skipped", "note": f"A stopped before {m.a[1]} (at %{self.stopped['a']['instruction']}, "
                                                  f"which hlo cannot run)"}
            elif tags:
                r = {"status": "skipped", "note": f"A's value is {_held(next(iter(tags)))}, B's {_held(devs_b)}"}
            else:
                r = {"status": "skipped", "note": f"A did not run {m.a[1]} (execution {ev.count})"}
        else:
            leaves_b = [np.asarray(v) for v, _ in leaves_with_shapes(ev.value, ev.instruction.shape)]
            r = compare_leaves(leaves_a, leaves_b, self.rtol, self.atol)
        _update(st, r, ev.count, self.seq)

    def _run(self, dv, module, hook):
        from ..interpreter import run_module
        if dv.multi:
            return dv.run(dv.distribute(list(self.args)), self.options, hook, self.progress)
        return run_module(module, list(self.args), self.options, hook, self.progress)

    def run(self):
        """(A's result, B's result); a run that stops at an instruction hlo cannot run gives None and
        says where in self.stopped: every value before it has been kept or compared."""
        from ..errors import HloUnsupportedError
        ra = rb = None
        try:
            self.phase("running A, keeping the values B's instructions are compared with")
            try:
                ra = self._run(self.dva, self.module_a, self.hook_a)
            except HloUnsupportedError as e:
                self.stopped["a"] = _stop_point(e, len(self.executed_a))
            self.phase("running B, comparing its values with A's")
            try:
                rb = self._run(self.dvb, self.module_b, self.hook_b)
            except HloUnsupportedError as e:
                self.stopped["b"] = _stop_point(e, len(self.executed_b))
        finally:
            self.mem = {"kept_peak_bytes": self.store.peak_bytes, "spilled_bytes": self.store.spilled_bytes}
            self.store.close()
        return ra, rb


def _held(devs) -> str:
    if devs is None:
        return "one for all devices"
    return f"device {devs[0]}'s" if len(devs) == 1 else f"one per device ({len(devs)})"


def _update(st: PairState, r: dict, count: int, seq: int):
    if r["status"] == "skipped":
        if st.status == "agree" and st.executions == 1:
            st.status, st.result = "skipped", r
            st.max_abs_diff = st.max_rel_diff = None
        return
    if st.status == "skipped":
        st.status, st.max_abs_diff, st.max_rel_diff = "agree", 0.0, 0.0
    st.max_abs_diff = max(st.max_abs_diff or 0.0, r["max_abs_diff"])
    st.max_rel_diff = max(st.max_rel_diff or 0.0, r["max_rel_diff"])
    if r["status"] == "differ":
        if st.status != "differ":
            st.status, st.result, st.first_execution, st.diff_seq = "differ", r, count, seq
    elif st.status != "differ" and (st.result is None or r["max_abs_diff"] >= st.result.get("max_abs_diff", 0.0)):
        st.result = r


def _note_shared_nonfinite(row: dict, a, b):
    """A result both modules fill with the same NaN/Inf agrees, and a person hunting a NaN must see
    it: row["nonfinite"] counts the elements that are NaN (or the same infinity) in both."""
    ma, mb = nonfinite_mask(a), nonfinite_mask(b)
    if ma is None or mb is None or a.shape != b.shape or not ma.any():
        return
    n = int((ma & mb).sum())
    if n:
        row["nonfinite"] = n


def _one_sided(k: int, count_a: int) -> dict:
    """The row of result K that only one of the modules has (A has COUNT_A results)."""
    return {"key": f"out{k}", "status": "differ", "note": f"only {'A' if k < count_a else 'B'} has it",
            "max_abs_diff": None, "max_rel_diff": None, "where": None}


def _compare_results(module_a, module_b, ra, rb, rtol, atol) -> list:
    sa = module_a.entry_computation.root_instruction.shape
    sb = module_b.entry_computation.root_instruction.shape
    la = [np.asarray(v) for v, _ in leaves_with_shapes(ra, sa)]
    lb = [np.asarray(v) for v, _ in leaves_with_shapes(rb, sb)]
    rows = []
    for k in range(max(len(la), len(lb))):
        if k >= len(la) or k >= len(lb):
            rows.append(_one_sided(k, len(la)))
            continue
        r = compare_leaves([la[k]], [lb[k]], rtol, atol)
        if r["status"] == "skipped":
            r["status"] = "differ"          # a result that cannot be compared does not agree
        row = {"key": f"out{k}", "status": r["status"], "max_abs_diff": r.get("max_abs_diff"),
               "max_rel_diff": r.get("max_rel_diff"), "where": r.get("where")}
        for x in ("mismatched", "size", "a_value", "b_value", "note"):
            if r.get(x) is not None:
                row[x] = r[x]
        _note_shared_nonfinite(row, la[k], lb[k])
        rows.append(row)
    return rows


def _device_leaves(dv, result) -> list:
    """(devices or None, array) per result leaf: stacked over devices (leading axis), or global."""
    if not dv.multi:
        shape = dv.module.entry_computation.root_instruction.shape
        return [(None, np.asarray(v)) for v, _ in leaves_with_shapes(result, shape)]
    return [(None, leaf.global_value) if leaf.stacked is None else (tuple(leaf.devices), leaf.stacked)
            for leaf in dv.leaves(result)]


def _to_global(dv, result, k: int, other=None, output_sharding: str | None = None):
    """Result leaf K of a multi-device run reassembled by the ROOT's sharding, or the OTHER module's
    when this one's has none (after partitioning the ROOT's sharding is often gone; the module before
    partitioning still says it).  HloError if it cannot."""
    from ..pipeline.devices import output_arrays, root_sharding
    leaves = dv.leaves(result)
    root_shape = dv.module.entry_computation.root_instruction.shape
    if output_sharding is not None:
        from ..pipeline.devices import parse_sharding
        sh = parse_sharding(output_sharding, dv.module)
    else:
        sh = root_sharding(dv.module)
        if sh is None and other is not None:
            sh = root_sharding(other.module)
    if sh is None:
        raise HloInputError(f"{dv.module.name}'s results are one per device, and neither module's ROOT has a "
                            f"sharding saying how they make the global arrays: give it with --output-sharding "
                            f"(e.g. {{devices=[4,2]<=[8]}}; XLA's choice is on the ROOT of the dump's stages "
                            f"after sharding propagation)")
    return np.asarray(output_arrays(leaves, root_shape, sh, True, dv.grid.partitions, what="hlo diff")[k])


def _compare_device_results(dva, dvb, ra, rb, rtol, atol, output_sharding: str | None = None) -> list:
    """The results of runs on devices: per device when both hold one value per device (the largest
    difference's index starts with the device's position), else as global arrays (a module before
    partitioning against one after it: the latter's results reassembled by its ROOT's sharding)."""
    from ..errors import HloError
    la, lb = _device_leaves(dva, ra), _device_leaves(dvb, rb)
    rows = []
    for k in range(max(len(la), len(lb))):
        if k >= len(la) or k >= len(lb):
            rows.append(_one_sided(k, len(la)))
            continue
        (da, va), (db, vb) = la[k], lb[k]
        note = None
        try:
            if da is not None and db is not None and da == db:
                note = f"per device: the first index is the position in devices {list(da)}"
            elif da is not None or db is not None:
                va = _to_global(dva, ra, k, dvb, output_sharding) if da is not None else va
                vb = _to_global(dvb, rb, k, dva, output_sharding) if db is not None else vb
                note = "global values (per-device results reassembled by the ROOT's sharding)"
        except HloError as e:
            rows.append({"key": f"out{k}", "status": "skipped", "note": f"cannot compare: {e}",
                         "max_abs_diff": None, "max_rel_diff": None, "where": None})
            continue
        r = compare_leaves([np.asarray(va)], [np.asarray(vb)], rtol, atol)
        if r["status"] == "skipped":
            r["status"] = "differ"
        row = {"key": f"out{k}", "status": r["status"], "max_abs_diff": r.get("max_abs_diff"),
               "max_rel_diff": r.get("max_rel_diff"), "where": r.get("where")}
        _note_shared_nonfinite(row, np.asarray(va), np.asarray(vb))
        for x in ("mismatched", "size", "a_value", "b_value"):
            if r.get(x) is not None:
                row[x] = r[x]
        notes = [n for n in (note, r.get("note")) if n]
        if notes:
            row["note"] = "; ".join(notes)
        rows.append(row)
    return rows
