"""While loops of small arrays as one generated Python function: the whole loop, not one call per
iteration (compiler.run_while hands a loop over once it has run LOOPGEN_AFTER iterations, at once
when it was generated before; short loops such as threefry's five rounds stay as they are).

A scan or a recurrent cell runs thousands of iterations of a body of a few dozen instructions on
arrays of a few dozen elements.  There every NumPy call has a fixed cost whatever it does,
and the per-step machinery of generated code (a call per step, a result check per step, a setting of
the processor's flags and a NaN check per run of float steps) costs as much again.  Here the
condition and the body (with its inlined callees: the steps of compiler.Compiled) become the
inside of one ``while`` of one function, with the loop state's elements as local variables:

* **the processor's FTZ/DAZ flags stay set** for the whole loop (cleared around the few steps that
  need them clear), so the float arithmetic of the body is bare NumPy calls, as XLA CPU runs it
  (f32 exp, tanh, rsqrt computed in f64 and NumPy's negative give the same bits with the flags set
  wherever the fast path keeps its result: ``flags_neutral`` probes it once);
* **loop-invariant work is done once**: a step whose operands do not change across iterations
  (state elements the body passes through unchanged, constants, and steps of those: the bias
  broadcasts of a cell, the f64 copies its small f32 products read of its weights) runs before the
  first iteration (and only if there is one); a step that would write into such a value's buffer
  (compiler._in_place) makes a new array instead;
* **a buffer the loop owns is updated in place**: a dynamic-update-slice of a state element into
  the same element (a scan's stacked outputs), when nothing else in the body reads that element, is
  written into the loop's own copy of the buffer (made once at the start) instead of copying the
  whole buffer every iteration; a dynamic slice whose readers all make new arrays is a view;
* **fewer NumPy calls**: broadcasts feeding float arithmetic are left to NumPy's broadcasting, the
  f64 copy of an operand read by several small products is made once, a small f32 product of
  C-contiguous operands is np.dot of the matrices (the gemm call matmul makes for its batch of one);
* **one check per iteration instead of one per step**: the result of each step is what the step's
  fast path (the rules' prepare stages, registry.prepare) computes whenever that fast path would not hand the step to its
  evaluation rule.  Where a fast path checks its result (exp, tanh, small products, max-reduces:
  zeros, subnormals, NaN), the same check runs here and, when it fails, that step is computed by the
  fast path itself with the flags clear.  NaN, whose sign only the rules decide, propagates through
  the body's arithmetic: the values leaving the iteration (and those read by steps that would not
  propagate a NaN) are checked, all at once and only those whose NaNs would not show in another
  checked value, and an iteration that made a NaN is run again from its start by the body's
  generated code (compiler.Compiled.fn), which gives the rules' NaN signs; after GIVE_UP such
  iterations (in more than a quarter of them) the rest of the loop runs as before.  The iteration's
  results are committed (state updated, in-place writes done) only after that check.  As an
  iteration may run twice, a body with a step that is not a pure function of its operands (rng, io,
  collectives, custom calls) is not generated.

Same bits as the body's generated code and the rules: tests/interpreter/test_loopgen.py.  Errors
are reported by the body's own code: an iteration that raises is run again there.
``HLO_LOOPGEN=0`` turns this off.
"""
from __future__ import annotations

import itertools
import math
import os

import numpy as np

from ..errors import HloEvalError
from .fpenv import hardware
from .kernels import ELEMENT, F32, F64, FOLDED, PURE, REGION, SAME, TINY, TUPLE, WITH_EC, capabilities
from .located import EVAL_ERRORS, bad_result, limit_error, reraise_at
from .steps import bare_ufunc_text, call_text, check_text
from .values import conforms

# bodies whose computed values are all at most this many elements (state buffers written in place
# and arrays only sliced may be larger)
SMALL = 1 << 14
# an iteration run again this many times, and in more than a quarter of the iterations: the rest
# of the loop runs as before
GIVE_UP = 8

# a loop is handed over once it has run this many iterations (short loops, such as the five rounds
# of a threefry random draw, are not worth generating code for)
LOOPGEN_AFTER = 16

_counter = itertools.count()


class _Redo(Exception):
    """A check failed: the iteration runs again through the body's generated code."""


# data movement: the fast paths of these opcodes copy or view their operands' elements without
# arithmetic, so the processor's flags do not matter to them
_MOVES = frozenset("""reshape broadcast transpose bitcast copy slice concatenate dynamic-slice
dynamic-update-slice select get-tuple-element tuple""".split())
# opcodes whose result has a NaN wherever it depends on an operand's NaN, or drops that element
# (a NaN's sign then does not matter): their operands need no NaN check
_PROPAGATE = frozenset("""add subtract multiply divide negate exponential tanh rsqrt dot reduce
reshape broadcast transpose bitcast copy slice concatenate dynamic-slice dynamic-update-slice""".split())
# opcodes of steps that may run before the loop when their operands do not change
_HOISTABLE = frozenset("""add subtract multiply divide negate exponential tanh rsqrt dot reduce
reshape broadcast transpose bitcast copy slice concatenate convert compare select and or xor not
maximum minimum""".split())
_FLOATS = frozenset((F32, F64))

_probes: dict = {}


def enabled() -> bool:
    return os.environ.get("HLO_LOOPGEN", "1") != "0" and hardware() is not None


def flags_neutral(name: str) -> bool:
    """True when NumPy's `name` (negative; or the f64 cores of f32 exp, tanh, rsqrt) gives the same
    bits with the processor's FTZ/DAZ flags set as without, on f32 operands whose result is not a
    zero or a subnormal (checked once on a spread of values: the f64 results of f32 operands never
    come near f64's subnormals)."""
    r = _probes.get(name)
    if r is None:
        r = _probes[name] = _probe(name)
    return r


def _probe(name) -> bool:
    hw = hardware()
    if hw is None:
        return False
    fset, on, off = hw
    rng = np.random.default_rng(0)
    bits = rng.integers(0, 1 << 32, 1 << 15, dtype=np.uint64).astype(np.uint32).view(np.float32)
    vals = np.concatenate([bits, np.linspace(-110, 100, 1 << 15, dtype=np.float32),
                           rng.standard_normal(1 << 12).astype(np.float32) * np.float32(1e-3),
                           np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, 1.1754944e-38, np.inf, -np.inf, np.nan],
                                    np.float32)])
    with np.errstate(all="ignore"):
        if name == "negative":
            sub = np.array([1e-40, -3e-42, 0.0, -0.0, 1.5, np.nan], np.float32)
            cases = [sub, np.tile(sub, 11), sub.astype(F64) * 1e-270]
            fset(on)
            try:
                got = [np.negative(c) for c in cases]
            finally:
                fset(off)
            return all(g.tobytes() == np.negative(c).tobytes() for g, c in zip(got, cases))
        fn = {"exp": np.exp, "tanh": np.tanh, "rsqrt": lambda v: 1 / np.sqrt(v)}[name]
        x = vals.astype(F64)
        want = fn(x).astype(F32)
        fset(on)
        try:
            got = fn(x).astype(F32)
        finally:
            fset(off)
    keep = np.abs(want) >= TINY[F32]
    return got[keep].tobytes() == want[keep].tobytes()


class FastLoop:
    """A while loop of `cond` and `body` (compiler.Compiled, both with generated code) as one
    generated function; `run` is called by compiler.run_while."""

    def __init__(self, fn, code, n_state, owned, cond, body):
        self.fn, self.code, self.n_state, self.owned = fn, code, n_state, owned
        self.cond, self.body = cond, body

    def run(self, ec, state, n, limit, name):
        """(state, iterations done, conditions run, bodies run, finished): unfinished when the loop
        gave up (too many iterations run again, or a state of another form); the caller goes on."""
        shape = self.body.comp.parameters[0].shape
        if conforms(state, shape) is not None:
            return state, n, 0, 0, False
        return self.fn(ec, state, n, limit, name)


def known_loop(cond, body) -> bool:
    """True when fast_loop was asked about this loop before (it is then taken at once)."""
    return body.loops is not None and id(cond) in body.loops


def fast_loop(cond, body, module=None):
    """The FastLoop of a while loop of `cond` and `body` (generated code both) of `module`, or None
    when its body is not one of small arrays, or has a step that is not a pure function of its
    operands (rng, io, collectives, custom calls: an iteration may run twice).  Cached on the body."""
    loops = body.loops
    if loops is None:
        loops = body.loops = {}
    key = id(cond)
    got = loops.get(key)
    if got is None:
        got = None
        try:
            if enabled():
                got = _Builder(cond, body, module).build()
        except _Unsupported:
            got = None
        except Exception:                   # noqa: BLE001 -- a body this generator gets wrong
            if os.environ.get("HLO_LOOPGEN") == "strict":       # (tests)
                raise
            got = None                      # runs as before
        loops[key] = (cond, got if got is not None else False)
        return got
    return got[1] or None


class _Unsupported(Exception):
    pass


def _dtype(shape):
    from .values import np_dtype
    if shape.is_tuple or shape.is_dynamic:
        return None
    try:
        return np_dtype(shape)
    except Exception:                       # noqa: BLE001 -- tokens, opaque
        return None


class _Builder:
    def __init__(self, cond, body, module):
        if module is None:
            raise _Unsupported
        from .hoist import Hoister
        self.pure = Hoister(module).pure_inst
        self.cond, self.body = cond, body
        self.ns: dict = {"_asarray": np.asarray, "_Redo": _Redo, "ndarray": ndarray,
                         "_F64": F64, "_F32": F32, "_own": _own, "_bad": bad_result,
                         "_conforms": conforms, "_abs": np.abs, "_mm": np.matmul,
                         "_min": np.minimum.reduce, "_nonzero": np.count_nonzero, "_vdot": np.vdot,
                         "_isnan": math.isnan, "_dot": np.dot,
                         "_addred": np.add.reduce, "_contig": np.ascontiguousarray,
                         "_cat": np.concatenate}
        fset, on, off = hardware()
        self.ns["_fset"], self.ns["_on"], self.ns["_off"] = fset, on, off
        pshape = body.comp.parameters[0].shape if len(body.params) == 1 else None
        if pshape is None or not pshape.is_tuple or len(cond.params) != 1:
            raise _Unsupported
        self.n_state = len(pshape.tuple_shapes)
        self.bcast: dict[str, str] = {}             # a broadcast's name -> what NumPy may broadcast instead
        self.taint: set[str] = set()                # names that may hold a NaN of the processor's sign
        self.sources: dict[str, frozenset] = {}     # tainted name -> the bare arithmetic it comes from
        self.covers: dict[str, frozenset] = {}      # name -> the values whose NaNs show in it (_cover)
        self.c_order: set[str] = set()              # names of C-contiguous arrays
        self.cx: dict[str, str] = {}                # hoisted f64 copy -> its C-contiguity, tested once
        self.f64: dict[tuple, str] = {}             # (operand, perm, dims) -> its f64 copy in this section
        self.state_shapes = pshape.tuple_shapes

    # ------------------------------------------------------------------ analysis of one computation
    def _resolve(self, c, prefix):
        """Aliases of `c`'s slots (SAME steps, elements of tuples built in the computation, elements
        of the state), as names; the steps that compute."""
        (_, pslot), = c.params
        names: dict[int, str] = {}
        members: dict[int, list] = {pslot: [f"s{j}" for j in range(self.n_state)]}
        shapes: dict[str, object] = {f"s{j}": s for j, s in enumerate(self.state_shapes)}
        work = []
        for st in c.steps:
            kind, pay, ops, k, inst = st.kind, st.payload, st.operands, st.slot, st.inst
            if kind == REGION:
                raise _Unsupported
            if kind == SAME:
                j = ops[0]
                if j in members:
                    members[k] = members[j]
                else:
                    names[k] = names[j]
                continue
            if kind == ELEMENT and ops[0] in members:
                m = members[ops[0]][pay]
                if isinstance(m, list):
                    members[k] = m
                else:
                    names[k] = m
                continue
            if kind == TUPLE:
                members[k] = [members[j] if j in members else names[j] for j in ops]
                continue
            if kind != FOLDED and not self.pure(inst):
                raise _Unsupported                  # (an iteration run again would repeat it)
            name = f"{prefix}{k}"
            names[k] = name
            shapes[name] = inst.shape
            work.append((st, name))
        return names, members, shapes, work

    def build(self):
        """The FastLoop: the analysis of the body, then the generated function's parts in order
        (first test of the condition, loop-invariant steps, the iteration, the commit)."""
        work, out = self._analyse()
        inv = self._invariants(work)
        by_name = {name: st for st, name in work}
        self.inplace = self._in_place_writes(out, by_name, inv)
        state = [f"s{j}" for j in range(self.n_state)]
        tup = "(" + "".join(f"{s}, " for s in state) + ")"
        lines = ["def loop(ec, state, n, limit, name):", f"    {', '.join(state)}, = state"]
        cond = self._cond()
        owned = sorted({j for j, _ in self.inplace.values()})
        # first test of the condition (flags clear: nothing runs yet)
        lines.append("    _fset(_on)")
        lines.append("    try:")
        ind = "        "
        self._cond_into(lines, ind, *cond, tup)
        lines.append(f"{ind}if not g:")
        lines.append(f"{ind}    return {tup}, n, 1, 0, True")
        for j in owned:
            lines.append(f"{ind}s{j} = _own(s{j})")
        loop_work, hoisted_f64 = self._prologue(lines, ind, work, inv, tup)
        lines.append(f"{ind}ran = 1")
        lines.append(f"{ind}redo = 0")
        lines.append(f"{ind}while True:")
        self._iteration(lines, ind + "    ", loop_work, out, by_name, hoisted_f64, inv, cond, owned, state)
        lines.append("    finally:")
        lines.append("        _fset(_off)")
        return self._finish(lines, owned)

    def _analyse(self):
        """The body's steps that compute (with their names) and the names of its root's elements;
        what _emit needs to know of the names: shapes, readers, uses, the loop's outputs."""
        names, members, shapes, work = self._resolve(self.body, "b")
        if self.body.root not in members:
            raise _Unsupported
        out = members[self.body.root]
        if any(isinstance(m, list) for m in out) or len(out) != self.n_state:
            raise _Unsupported
        self.names, self.shapes = names, shapes
        self.passthrough = {f"s{j}" for j in range(self.n_state) if out[j] == f"s{j}"}
        for name, shape in shapes.items():            # small arrays only
            if name.startswith("b") and not shape.is_tuple and shape.num_elements > SMALL:
                raise _Unsupported
        # uses of each name by the steps and the root
        uses: dict[str, int] = {}
        for st, _name in work:
            for a in self._opnames(st):
                if a is None:
                    raise _Unsupported                  # a tuple operand: not for this generator
                uses[a] = uses.get(a, 0) + 1
        for m in out:
            uses[m] = uses.get(m, 0) + 1
        self.uses = uses
        self.readers: dict[str, list] = {}          # name -> the opcodes and names of its readers
        for st, name in work:
            for a in self._opnames(st):
                self.readers.setdefault(a, []).append((st.inst.opcode if st.kind != ELEMENT else None, name))
        self.outputs = set(out)
        return work, out

    def _opnames(self, st):
        """The names of a body step's operands (None: a tuple)."""
        names = self.names
        return [names[j] if j in names else None for j in st.operands]

    def _invariants(self, work) -> set:
        """The names whose values do not change across iterations: state elements passed through,
        folded constants, and the hoistable steps of those."""
        inv = set(self.passthrough)
        for st, name in work:
            kind, pay = st.kind, st.payload
            if kind == FOLDED:
                inv.add(name)
            elif st.inst.opcode in _HOISTABLE and kind in (PURE, WITH_EC) and \
                    all(a in inv for a in self._opnames(st)) and (kind == PURE or hasattr(pay, "raw_sum")
                                                                  or hasattr(pay, "raw_minmax")):
                inv.add(name)
        return inv

    def _in_place_writes(self, out, by_name, inv) -> dict:
        """{DUS name: (state index, operand names)}: the dynamic-update-slices written in place into
        a buffer the loop owns."""
        inplace: dict[str, tuple] = {}
        uses = self.uses
        for j, m in enumerate(out):
            st = by_name.get(m)
            if st is None or st.kind != PURE or capabilities(st.payload).where is None or m in inv or \
                    st.inst.opcode != "dynamic-update-slice":
                continue
            ops = self._opnames(st)
            if ops[0] != f"s{j}" or uses.get(ops[0]) != 1 or uses.get(m) != 1 or ops[0] in ops[1:]:
                continue
            inplace[m] = (j, ops)
        return inplace

    def _prologue(self, lines, ind, work, inv, tup):
        """The loop-invariant steps, run once before the first iteration (NaN checks of their own:
        see _emit), and the f64 copies of invariant operands of small f32 products; returns the
        steps left for the iteration and those copies."""
        self.taint = set()
        pro = []
        loop_work = []
        for st, name in work:
            if name in inv:
                if st.kind == FOLDED:
                    self.ns[name] = st.payload
                    self._folded(name, st.payload)
                    continue
                pro.append((st, name))
            else:
                loop_work.append((st, name))
        hoisted_f64: dict = {}
        lines.append(f"{ind}try:")
        lines.append(f"{ind}    pass")
        for st, name in pro:
            self._emit(st, name, self._opnames(st), lines, ind + "    ", hoisted_f64, inv, pre=True)
        lines.append(f"{ind}except (_Redo, HloEvalError) + _EVAL_ERRORS:")
        lines.append(f"{ind}    return {tup}, n, 1, 0, False")
        need64 = set()
        for st, name in loop_work:
            spec = capabilities(st.payload).raw_dot if st.kind == PURE else None
            if spec is not None:
                a, b = self._opnames(st)
                lperm, l3, rperm, r3, _res = spec
                if _flat_dot(l3, r3):
                    l3, r3 = l3[1:], r3[1:]
                for x, perm, shp in ((a, lperm, l3), (b, rperm, r3)):
                    if x in inv and a != b:
                        need64.add((x, perm, shp))
        for x, perm, shp in sorted(need64, key=str):
            v = f"X{len(hoisted_f64)}"
            src = x if perm is None else f"{x}.transpose({perm})"
            lines.append(f"{ind}{v} = {src}.reshape({shp}).astype(_F64)")
            lines.append(f"{ind}C{v} = {v}.flags.c_contiguous")
            self.cx[v] = f"C{v}"
            hoisted_f64[(x, perm, shp)] = v
        return loop_work, hoisted_f64

    def _iteration(self, lines, ind2, loop_work, out, by_name, hoisted_f64, inv, cond, owned, state):
        """One iteration inside the ``while``: the limit, the body's steps, the NaN check of the
        values leaving it (a NaN or an error: the iteration again through the body's generated
        code), the commit of the new state, the condition."""
        tup = "(" + "".join(f"{s}, " for s in state) + ")"
        lines.append(f"{ind2}if limit is not None and n >= limit:")
        lines.append(f"{ind2}    raise _limit_error(limit, name)")
        lines.append(f"{ind2}try:")
        ind3 = ind2 + "    "
        self.f64 = {}
        self.taint = {t for t in self.taint}            # invariant values found tainted stay so
        for st, name in loop_work:
            self._emit(st, name, self._opnames(st), lines, ind3, hoisted_f64, inv, pre=False)
        # the values leaving the iteration: NaN-checked (a DUS: its update)
        check = []
        for j, m in enumerate(out):
            if m == f"s{j}":
                continue
            for v in self._parts(m, by_name):
                if v in self.taint and v not in check:
                    check.append(v)
        # a value whose NaNs could only come from values checked anyway is not checked again
        check = self._fewest(check)
        if check:
            lines.append(f"{ind3}if {self._has_nan(check)}: raise _Redo")
        lines.append(f"{ind2}except (_Redo, HloEvalError) + _EVAL_ERRORS:")
        lines.append(f"{ind3}_fset(_off)")
        lines.append(f"{ind3}try:")
        lines.append(f"{ind3}    state = _body(ec, ({tup},))")
        lines.append(f"{ind3}finally:")
        lines.append(f"{ind3}    _fset(_on)")
        lines.append(f"{ind3}{', '.join(state)}, = state")
        for j in owned:
            lines.append(f"{ind3}s{j} = _own(s{j})")
        lines.append(f"{ind3}redo += 1")
        lines.append(f"{ind3}if redo >= {GIVE_UP} and 4 * redo > ran:")
        lines.append(f"{ind3}    ec.loop_iterations += 1")
        lines.append(f"{ind3}    return {tup}, n + 1, ran, ran, False")
        lines.append(f"{ind2}else:")
        for m, (j, ops) in self.inplace.items():
            lines.append(f"{ind3}s{j}[w_{m}] = {ops[1]}")
        news = [(f"s{j}", m) for j, m in enumerate(out) if m != f"s{j}" and m not in self.inplace]
        if news:
            lines.append(f"{ind3}{', '.join(a for a, _ in news)} = {', '.join(b for _, b in news)}")
        lines.append(f"{ind3}pass")
        lines.append(f"{ind2}n += 1")
        lines.append(f"{ind2}ec.loop_iterations += 1")
        self._cond_into(lines, ind2, *cond, tup)
        lines.append(f"{ind2}ran += 1")
        lines.append(f"{ind2}if not g:")
        lines.append(f"{ind2}    return {tup}, n, ran, ran - 1, True")

    def _finish(self, lines, owned):
        """The generated function, compiled, as a FastLoop."""
        body, ns = self.body, self.ns
        ns["HloEvalError"] = HloEvalError
        ns["_EVAL_ERRORS"] = EVAL_ERRORS
        ns["_body"] = _located(body)
        ns["_cond"] = _located(self.cond)
        ns["_limit_error"] = limit_error
        text = "\n".join(lines)
        filename = f"<hlo loop {body.comp.name} #{next(_counter)}>"
        exec(compile(text, filename, "exec"), ns)
        fn = ns["loop"]
        self.text = text
        return FastLoop(fn, fn.__code__, self.n_state, owned, self.cond, body)

    def _fewest(self, check):
        """The values of `check` to look at for NaN: one whose NaNs would show in another checked
        value (_cover), or that makes none of its own and whose sources are all so checked, is left
        out."""
        check = list(check)
        changed = True
        while changed:
            changed = False
            for v in check:
                others = [c for c in check if c != v]
                seen = set()
                for c in others:
                    seen |= self.covers.get(c, {c})
                src = self.sources.get(v, {v})
                if v in seen or (v not in src and src <= seen):
                    check.remove(v)
                    changed = True
                    break
        return check

    def _parts(self, m, by_name):
        """The values a NaN check of `m` looks at: a dynamic-update-slice's update and operand."""
        st = by_name.get(m)
        if st is not None and st.kind == PURE and st.inst.opcode == "dynamic-update-slice" and \
                capabilities(st.payload).where is not None:
            ops = self._opnames(st)
            return self._parts(ops[0], by_name) + [ops[1]]
        return [m]

    def _cond(self):
        """The condition's lines (names prefixed "c"), evaluated with the flags set, and its root."""
        names, members, shapes, work = self._resolve(self.cond, "c")
        root = self.cond.root
        if root in members or root not in names:
            raise _Unsupported
        saved = self.taint
        self.taint = set()
        lines: list[str] = []
        step = {name: st for st, name in work}.get(names[root])
        if step is not None and step.kind == PURE and step.inst.opcode == "compare":
            # an integer comparison deciding the loop: Python's operator on the two scalars
            op = _OPERATORS.get(str(step.inst.attrs.get("direction")))
            a, b = [names.get(j) for j in step.operands]
            da, db = self._int_scalar(a, shapes), self._int_scalar(b, shapes)
            if op is not None and da is not None and da == db:
                work = [(st, name) for st, name in work if name != names[root]]
                for st, name in work:
                    if st.kind == FOLDED:
                        self.ns[name] = st.payload
                    else:
                        self._emit(st, name, [names.get(j) for j in st.operands], lines, "", {}, set(), pre=False)
                self.taint = saved
                return lines, f"{a} {op} {b}"
        for st, name in work:
            ops = [names.get(j) for j in st.operands]
            if any(a is None for a in ops):
                raise _Unsupported
            if st.kind == FOLDED:
                self.ns[name] = st.payload
                continue
            self._emit(st, name, ops, lines, "", {}, set(), pre=False)
        root_name = names[root]
        if root_name in self.taint:
            lines.append(f"if {self._has_nan([root_name])}: raise _Redo")
        self.taint = saved
        return lines, root_name

    def _cond_into(self, lines, ind, cond_lines, root, tup):
        lines.append(f"{ind}try:")
        for ln in cond_lines:
            lines.append(f"{ind}    {ln}")
        lines.append(f"{ind}    g = {root}")
        lines.append(f"{ind}except (_Redo, HloEvalError) + _EVAL_ERRORS:")
        lines.append(f"{ind}    _fset(_off)")
        lines.append(f"{ind}    try:")
        lines.append(f"{ind}        g = _cond(ec, ({tup},))")
        lines.append(f"{ind}    finally:")
        lines.append(f"{ind}        _fset(_on)")

    # ------------------------------------------------------------------ one step
    def _emit(self, st, name, ops, lines, ind, hoisted_f64, inv, pre):
        """The lines of one step of the loop (`name`: its value, `ops`: its operands' names): a
        folded value, a pure fast path written out (`_emit_pure`), a reduction's own loop
        (`_emit_reduce`), else the step as the body's generated code runs it (`_foreign`)."""
        if st.kind == FOLDED:
            self.ns[name] = st.payload
            self._folded(name, st.payload)
            return
        if st.kind == PURE and self._emit_pure(st, name, ops, lines, ind, hoisted_f64, inv):
            return
        if st.kind == WITH_EC and st.inst.opcode == "reduce" and self._emit_reduce(st, name, ops, lines, ind):
            return
        self._foreign(st, name, ops, lines, ind)

    def _emit_pure(self, st, name, ops, lines, ind, hoisted_f64, inv) -> bool:
        """A PURE step's fast path written out with the flags set: float arithmetic as the bare
        ufunc, negate, the f64 cores of exp/tanh/rsqrt, a small product, data movement and integer
        work; False when it has none of these forms."""
        pay, inst = st.payload, st.inst
        ns = self.ns
        opcode = inst.opcode
        args = ", ".join(ops)
        dt = _dtype(inst.shape)
        is_float = dt in _FLOATS
        if capabilities(pay).hw_ufunc is not None:           # f32/f64 arithmetic: the bare ufunc
            bargs = args
            if inst.shape.rank and any(a not in self.bcast for a in ops):
                # a broadcast operand as NumPy broadcasts it (the same elements, no strided view)
                bargs = ", ".join(self.bcast.get(a, a) for a in ops)
            lines.append(f"{ind}{name} = {bare_ufunc_text(pay, inst, bargs, ns, f'_{name}')}")
            self._origin(name)
            if inst.shape.num_elements:
                self._cover(name, ops)
            return True
        if opcode == "negate" and pay is np.negative and is_float and flags_neutral("negative"):
            lines.append(f"{ind}{name} = _neg({args})")
            ns["_neg"] = np.negative
            self._propagate(name, ops)
            self._cover(name, ops)
            return True
        core = capabilities(pay).raw_unary
        if core is not None and opcode in ("exponential", "tanh", "rsqrt") and \
                flags_neutral({"exponential": "exp"}.get(opcode, opcode)):
            ns[f"C_{name}"], ns[f"F_{name}"], ns[f"T_{name}"] = core, pay, TINY[F32]
            r = f"C_{name}({ops[0]}.astype(_F64)).astype(_F32)"
            if inst.shape.rank == 0:
                r = f"_asarray({r})"
            lines.append(f"{ind}{name} = {r}")
            low = f"_min({name}, None)" if opcode != "tanh" else f"_min(_abs({name}), None)"
            self._local_fallback(lines, ind, f"not {low} >= T_{name}", name, f"F_{name}({args})")
            self._propagate(name, ops)
            self._cover(name, ops)
            return True
        spec = capabilities(pay).raw_dot
        if spec is not None:
            self._emit_dot(spec, pay, name, ops, lines, ind, hoisted_f64)
            return True
        return self._emit_move(st, name, ops, lines, ind, inv)

    def _emit_dot(self, spec, pay, name, ops, lines, ind, hoisted_f64):
        """A small f32 product: in f64 (hoisted copies of invariant operands), np.dot or matmul, with
        the fast path's own check of its result (zeros: the fast path with the flags clear)."""
        ns = self.ns
        args = ", ".join(ops)
        lperm, l3, rperm, r3, res = spec
        ns[f"F_{name}"] = pay
        flat = _flat_dot(l3, r3)
        shapes = (l3[1:], r3[1:]) if flat else (l3, r3)
        xs = []
        for n, (x, perm, shp) in enumerate(((ops[0], lperm, shapes[0]), (ops[1], rperm, shapes[1]))):
            key = (x, perm, shp)
            h = hoisted_f64.get(key)
            if h is None and not (n == 1 and ops[0] == ops[1]):     # (never one buffer twice)
                h = self.f64.get(key)
            if h is None:
                h = f"Y{len(self.f64)}_{name}"
                src = x if perm is None else f"{x}.transpose({perm})"
                if perm is not None or self._dims(x) != tuple(shp):
                    src = f"{src}.reshape({shp})"
                lines.append(f"{ind}{h} = {src}.astype(_F64)")
                if not (ops[0] == ops[1]):
                    self.f64[key] = h
                if perm is None and x in self.c_order:
                    self.c_order.add(h)
            xs.append(h)
        if flat:
            # np.dot's gemm is matmul's for C-contiguous operands (astype keeps a layout)
            unknown = [self.cx.get(h, f"{h}.flags.c_contiguous") for h in xs if h not in self.c_order]
            if unknown:
                lines.append(f"{ind}if {' and '.join(unknown)}:")
                lines.append(f"{ind}    {name} = _dot({xs[0]}, {xs[1]}).astype(_F32)")
                lines.append(f"{ind}else:")
                lines.append(f"{ind}    {name} = _mm({xs[0]}.reshape({l3}), {xs[1]}.reshape({r3}))"
                             f".astype(_F32).reshape({(l3[1], r3[2])})")
            else:
                lines.append(f"{ind}{name} = _dot({xs[0]}, {xs[1]}).astype(_F32)")
        else:
            lines.append(f"{ind}{name} = _mm({xs[0]}, {xs[1]}).astype(_F32)")
        self.c_order.add(name)
        size = l3[0] * l3[1] * r3[2]
        got = (l3[1], r3[2]) if flat else (l3[0], l3[1], r3[2])
        lines.append(f"{ind}if _nonzero({name}) == {size}:")
        lines.append(f"{ind}    {name} = {name}.reshape({res})" if tuple(res) != got else f"{ind}    pass")
        lines.append(f"{ind}else:")
        self._flags_off_call(lines, ind + "    ", name, f"F_{name}({args})")
        self._origin(name)
        if size:
            self._cover(name, ops)

    def _emit_move(self, st, name, ops, lines, ind, inv) -> bool:
        """Data movement and integer steps (the flags do not matter to them); a dynamic slice as a
        view, a dynamic-update-slice into the loop's own buffer.  False for any other step."""
        pay, inst, ns = st.payload, st.inst, self.ns
        opcode, args, dt = inst.opcode, ", ".join(ops), _dtype(inst.shape)
        where = capabilities(pay).where
        if where is not None and name in self.inplace:
            lines.append(f"{ind}w_{name} = {self._where(lines, ind, name, where, ops[2:])}")
            return True
        if where is not None and opcode == "dynamic-slice" and self._viewable(name):
            # a view: what reads it makes new arrays
            lines.append(f"{ind}{name} = {ops[0]}[{self._where(lines, ind, name, where, ops[1:])}]")
            self._propagate(name, ops)
            return True
        plain = getattr(pay, "plain", None)
        if plain is not None and any(a in inv and a not in self.passthrough for a in ops):
            pay = plain                         # (an in-place writer: not into a value kept)
        if opcode in _MOVES or capabilities(pay).flag_free or \
                (dt not in _FLOATS and not any(self._is_float(a) for a in ops) and dt is not None
                 and dt.kind in "iub"):
            ns[f"F_{name}"] = pay
            if opcode == "reshape":              # (the fast path's own call, written out)
                lines.append(f"{ind}{name} = {ops[0]}.reshape({tuple(inst.shape.dims)})")
            elif opcode == "concatenate":
                lines.append(f"{ind}{name} = _cat(({args},), {int(inst.attrs['dimensions'][0])})")
                self.c_order.add(name)
            else:
                lines.append(f"{ind}{name} = F_{name}({args})")
            # (a fast path of these makes its result's dtype and dims from its operands')
            if opcode in _PROPAGATE or opcode in ("select",):
                self._propagate(name, ops)
            else:
                self._check_operands(lines, ind, ops, name)
            if inst.shape.num_elements:
                if opcode in ("reshape", "broadcast", "transpose", "bitcast", "copy", "concatenate"):
                    self._cover(name, ops)
                elif opcode == "dynamic-update-slice":
                    self._cover(name, ops[1:2])
            if opcode == "broadcast" and _trailing(inst, self.shapes.get(ops[0])):
                self.bcast[name] = ops[0]
            return True
        return False

    def _emit_reduce(self, st, name, ops, lines, ind) -> bool:
        """A sum (its f64 or pairwise form) or a max/min reduction written out with the flags set;
        False when it has neither form."""
        pay = st.payload
        ns = self.ns
        args = ", ".join(ops)
        dt = _dtype(st.inst.shape)
        raw = capabilities(pay).raw_sum
        if raw is not None:
            flagged, start_of = raw
            ns[f"R_{name}"], ns[f"S_{name}"], ns[f"F_{name}"] = flagged, start_of, pay
            # the init's test with the flags clear, as the fast path does it: a constant init
            # is tested here, once
            init = ops[1]
            if init in ns and isinstance(ns[init], np.ndarray):
                start = start_of(ns[init])
                if start is None:
                    self._foreign(st, name, ops, lines, ind)
                    return True
                ns[f"Z_{name}"] = start
                fold = capabilities(pay).raw_fold
                if fold is not None:            # (what `flagged` does for a single stage)
                    perm, rows, outs = fold
                    src = ops[0] if perm is None else f"{ops[0]}.transpose({perm})"
                    lines.append(f"{ind}{name} = _addred(_contig({src}).reshape({rows}), 0, None, None, "
                                 f"False, Z_{name}).reshape({outs})")
                else:
                    lines.append(f"{ind}{name} = R_{name}({args}, Z_{name})")
                self._origin(name)
                self._cover(name, ops)
                return True
        mm = capabilities(pay).raw_minmax
        if mm is not None:
            uf, axes, scalar = mm
            ns[f"M_{name}"], ns[f"F_{name}"], ns[f"T_{name}"] = uf.reduce, pay, TINY[dt]
            r = f"M_{name}({ops[0]}, axis={axes}, initial={ops[1]}[()])"
            lines.append(f"{ind}{name} = " + (f"_asarray({r})" if scalar else r))
            self._local_fallback(lines, ind, f"not _min(_abs({name}), None) >= T_{name}", name,
                                 f"F_{name}(ec, {args})")
            self._propagate(name, ops)
            self._cover(name, ops)
            return True
        return False

    def _foreign(self, st, name, ops, lines, ind):
        """A step run as the body's generated code runs it, with the flags clear; its float operands
        made here are NaN-checked first."""
        self._check_operands(lines, ind, ops, name)
        args = ", ".join(ops)
        call = call_text(st.kind, st.payload, st.inst, args, self.ns, f"_{name}")
        if call is None and st.kind == ELEMENT:
            lines.append(f"{ind}{name} = {ops[0]}[{st.payload}]")
            return
        if call is None:
            raise _Unsupported
        self._flags_off_call(lines, ind, name, call)
        if st.expect is not None:
            lines.append(ind + check_text(name, st.expect, st.inst, self.ns, f"_{name}"))

    def _flags_off_call(self, lines, ind, name, call):
        lines.append(f"{ind}_fset(_off)")
        lines.append(f"{ind}try:")
        lines.append(f"{ind}    {name} = {call}")
        lines.append(f"{ind}finally:")
        lines.append(f"{ind}    _fset(_on)")

    def _local_fallback(self, lines, ind, bad, name, call):
        lines.append(f"{ind}if {bad}:")
        self._flags_off_call(lines, ind + "    ", name, call)

    def _where(self, lines, ind, name, where, idx):
        """An expression for the index `where(*idx)` of a dynamic (update) slice: its start indices
        clamped as the fast path clamps them, written out."""
        spec = getattr(where, "spec", None)
        if spec is None:
            self.ns[f"W_{name}"] = where
            return f"W_{name}({', '.join(idx)})"
        base, dyn = spec
        key = [None if b is None else f"SL_{name}_{d}" for d, b in enumerate(base)]
        for d, b in enumerate(base):
            if b is not None:
                self.ns[f"SL_{name}_{d}"] = b
        for pos, d, hi, size in dyn:
            q = f"q{d}_{name}"
            lines.append(f"{ind}{q} = int({idx[pos]})")
            lines.append(f"{ind}{q} = 0 if {q} < 0 else ({hi} if {q} > {hi} else {q})")
            key[d] = f"slice({q}, {q} + {size})"
        return "(" + "".join(f"{k}, " for k in key) + ")"

    def _viewable(self, name, depth=0) -> bool:
        """True when every reader of `name` (through reshapes, bitcasts, transposes, broadcasts)
        makes a new array of it, so a view in place of a copy is never kept or written."""
        if name in self.outputs or depth > 8:
            return False
        for opcode, user in getattr(self, "readers", {}).get(name, ()):
            if opcode in _COPYING:
                continue
            if opcode in ("reshape", "bitcast", "transpose", "broadcast"):
                if self._viewable(user, depth + 1):
                    continue
            return False
        return True

    def _dims(self, name):
        """The dims of a value of the body, or None."""
        s = self.shapes.get(name)
        if s is None and name.startswith("s") and name[1:].isdigit():
            s = self.state_shapes[int(name[1:])]
        if s is None or s.is_tuple or s.is_dynamic:
            return None
        return tuple(s.dims)

    def _int_scalar(self, name, shapes):
        """The dtype of `name` (the condition's value, a state element or a folded constant) if it
        is an integer scalar, else None."""
        if name is None:
            return None
        if name in shapes:
            s = shapes[name]
        elif name.startswith("s") and name[1:].isdigit():
            s = self.state_shapes[int(name[1:])]
        else:
            v = self.ns.get(name)
            return v.dtype if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iu" else None
        if s.is_tuple or s.rank != 0:
            return None
        dt = _dtype(s)
        return dt if dt is not None and dt.kind in "iu" else None

    def _folded(self, name, value):
        """A folded broadcast (zero strides): its compact form, for NumPy to broadcast."""
        if isinstance(value, np.ndarray) and value.ndim and 0 in value.strides and value.size:
            key = tuple(slice(0, 1) if st == 0 else slice(None) for st in value.strides)
            self.ns[f"KB_{name}"] = np.ascontiguousarray(value[key])
            self.bcast[name] = f"KB_{name}"

    def _is_float(self, name):
        s = self.shapes.get(name)
        if s is None:
            v = self.ns.get(name)
            return isinstance(v, np.ndarray) and v.dtype.kind == "f"
        return s.is_tuple or _dtype(s) is None or _dtype(s).kind not in "iub"

    def _origin(self, name):
        """`name` is computed by bare float arithmetic: it may hold a NaN of the processor's sign."""
        self.taint.add(name)
        self.sources[name] = frozenset((name,))

    def _cover(self, name, kept):
        """Every element of the operands `kept` goes into some element of `name` by steps that keep
        a NaN a NaN: a NaN in them is a NaN in `name` (so a check of `name` checks them too)."""
        c = {name}
        for a in kept:
            c |= self.covers.get(a, frozenset((a,)))
        self.covers[name] = frozenset(c)

    def _propagate(self, name, ops):
        """`name` holds a NaN only where an operand does (it makes none of its own)."""
        src = [self.sources[a] for a in ops if a in self.taint]
        if src:
            self.taint.add(name)
            self.sources[name] = frozenset().union(*src)

    def _check_operands(self, lines, ind, ops, name):
        bad = [a for a in dict.fromkeys(ops) if a in self.taint]
        if bad:
            lines.append(f"{ind}if {self._has_nan(bad)}: raise _Redo")
            self.taint.difference_update(bad)

    def _has_nan(self, names):
        """An expression true when one of the arrays `names` holds a NaN (or, rarely, when they hold
        infinities of both signs: the iteration then runs again, for nothing)."""
        terms = []
        for a in names:
            s = self.shapes.get(a)
            if s is not None and not s.is_tuple and s.rank == 0:
                terms.append(f"float({a})")
            else:
                terms.append(f"_vdot({a}, {a})")
        return f"_isnan({' + '.join(terms)})"


ndarray = np.ndarray


def _located(c):
    """c's generated code, its errors located at the instruction that raised (as run_while does)."""
    fn = c.fn

    def run(ec, args):
        try:
            return fn(ec, args)
        except (HloEvalError, *EVAL_ERRORS) as e:
            reraise_at(e, c.step_at(e.__traceback__))
    return run


def _own(v):
    """A writable copy of `v` that only the loop holds."""
    return np.array(v)


def _flat_dot(l3, r3) -> bool:
    """True when a product of (1, m, k) and (1, k, n) f64 arrays may run as np.dot of the (m, k) and
    (k, n) matrices: both make the same BLAS call (gemm) for m, k, n >= 2 and C-contiguous
    operands of separate buffers (np.matmul of a batch of one runs its one matrix product as the
    two-dimensional one does); checked once on a spread of shapes."""
    if l3[0] != 1 or min(l3[1], l3[2], r3[2]) < 2:
        return False
    r = _probes.get("dot")
    if r is None:
        r = _probes["dot"] = _probe_dot()
    return r


def _probe_dot() -> bool:
    rng = np.random.default_rng(1)
    for m, k, n in ((2, 2, 2), (4, 24, 16), (3, 7, 5), (16, 64, 16), (33, 17, 65), (128, 96, 40)):
        a = rng.standard_normal((m, k)) * np.exp(rng.uniform(-30, 30, (m, k)))
        b = rng.standard_normal((k, n)) * np.exp(rng.uniform(-30, 30, (k, n)))
        if np.dot(a, b).tobytes() != np.matmul(a[None], b[None])[0].tobytes():
            return False
    return True


# opcodes whose steps (fast path or rule) return new arrays, never their operands or views of them
_COPYING = frozenset("""add subtract multiply divide negate exponential tanh rsqrt sqrt dot reduce
concatenate slice dynamic-slice dynamic-update-slice compare select convert maximum minimum""".split())
_OPERATORS = {"LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "EQ": "==", "NE": "!="}


def _trailing(inst, src) -> bool:
    """True when broadcast `inst` puts its operand (of shape `src`) on its last dimensions in order:
    NumPy broadcasts the operand itself the same way."""
    if src is None or src.is_tuple or inst.shape.is_tuple or src.is_dynamic or inst.shape.is_dynamic:
        return False
    dims = tuple(inst.attrs.get("dimensions") or ())
    r, k = inst.shape.rank, src.rank
    return dims == tuple(range(r - k, r)) and all(
        s == d or s == 1 for s, d in zip(src.dims, inst.shape.dims[r - k:]))
