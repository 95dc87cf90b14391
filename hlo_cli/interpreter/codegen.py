"""The one code generator: Python source for a sequence of steps (steps.py), for every code the
interpreter generates.

Three kinds of code are generated, as modes of this one generator:

* **a computation's body** (compiler.Compiled.generate): one function ``run(ec, args)`` whose
  local variables hold the values; runs of f32/f64 arithmetic under one setting of the
  processor's FTZ/DAZ flags (`Source.flags`) with one NaN check of the values leaving the run
  (a NaN: the run again through the kernels, from the first step where two NaNs met when its
  steps are nan_exact: `first_meet`);
* **a fused region** (compiler.Region): the block loop of a run of large elementwise steps, each
  block's values local variables, only their dtype checked;
* **a whole while loop** (loopgen.py decides which loops and analyses them; `loop_function` writes
  them): the flags held for the whole loop, loop-invariant steps hoisted before it, buffers the
  loop owns updated in place, one NaN check per iteration (`LoopWriter`).

What every mode shares is written once here: the namespace and the binding of the objects the
code names (`Source.bind`), indentation and blocks (`Source.block`, `Source.flags`), one step's
code (`Source.step`: the call of its kernel or rule, its bare ufunc under the flags, its result
check, the frees after it; `Source.fallback`: a kernel's own call with the flags clear when a
written-out form's check fails), and compiling the source with its line table, so that an error
names the instruction whose line raised (`raising_line`).  The loop mode's written-out forms of
a step (`LoopWriter.STRATEGIES`: a product as np.dot of matrices, moves and views, reductions,
the f64 cores of exp/tanh/rsqrt; the bare ufunc, which the computation mode uses too) are its
emission strategies; they are the loop mode's only, for a reason stated with them: they rely
on the flags being held across the code and on the one NaN check per iteration with its re-run
through the body's code, which the other modes do not have.
"""
from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from ..errors import HloEvalError
from .fpenv import hardware
from .kernels import (ELEMENT, F32, F64, FOLDED, PURE, REGION, RULE, TINY, TUPLE, WITH_EC,
                      capabilities, remembered)
from .located import EVAL_ERRORS, bad_result, limit_error, reraise_at
from .ops.elementwise import two_nans
from .values import conforms

_counter = itertools.count()

# the names every generated function may use
_BASE = {"ndarray": np.ndarray, "_bad": bad_result, "_conforms": conforms, "_asarray": np.asarray}


class Unsupported(Exception):
    """Code of this mode cannot be generated for these steps (the caller runs them as before)."""


class Source:
    """Python source being written: its lines (a function whose first line is `head`), the
    namespace of the objects it names, and its line table (line number -> what the line computes,
    for `raising_line`).  `flags`: the processor's flag setters are in the namespace (``_fset``,
    ``_on``, ``_off``) when it has them."""
    __slots__ = ("lines", "ns", "at", "depth", "ind")

    def __init__(self, head: str, ns: dict | None = None, flags: bool = False):
        self.lines = [head]
        self.ns = dict(_BASE)
        if ns:
            self.ns.update(ns)
        if flags:
            hw = hardware()
            if hw is not None:
                self.ns["_fset"], self.ns["_on"], self.ns["_off"] = hw
        self.at: dict[int, object] = {}
        self.depth = 1
        self.ind = "    "                      # (the current indentation: "    " * depth)

    # -- layout --------------------------------------------------------------------------
    def line(self, text: str, at=None):
        """A line at the current indentation; `at` (not None): what an error raised there names."""
        lines = self.lines
        if at is not None:
            self.at[len(lines) + 1] = at
        lines.append(self.ind + text)

    def block(self, head: str) -> _Indented:
        """``with src.block(head):`` -- `head` (``try:``, ``if ...:``) and the lines written inside
        the ``with``, indented."""
        self.line(head)
        return _Indented(self, None)

    def flags(self, held: bool = True) -> _Indented:
        """``with src.flags():`` -- the lines written inside the ``with`` run with the processor's
        FTZ/DAZ flags set (`held`) or clear, restored to the other setting after them whatever
        happens."""
        on, off = ("_on", "_off") if held else ("_off", "_on")
        self.line(f"_fset({on})")
        self.line("try:")
        return _Indented(self, f"_fset({off})")

    def fragment(self) -> Source:
        """Lines to be written into this source later (`insert`), possibly more than once,
        naming their objects in this source's namespace."""
        frag = Source.__new__(Source)
        frag.lines, frag.ns, frag.at, frag.depth, frag.ind = [], self.ns, {}, 0, ""
        return frag

    def insert(self, frag: Source):
        """The lines of `frag` here, at the current indentation."""
        for ln in frag.lines:
            self.line(ln)

    def bind(self, name: str, obj) -> str:
        """`obj` in the namespace as `name`; returns the name."""
        self.ns[name] = obj
        return name

    # -- one step ------------------------------------------------------------------------
    def value(self, st, args: list, tag: str, raw: bool = False) -> str:
        """The expression computing step `st` from its operands' expressions `args`; the objects
        it names go into the namespace under names ending in `tag`.  `raw`: a PURE step of f32/f64
        arithmetic as its bare ufunc (``hw_ufunc``: no flushing, no NaN-sign fix-up; the code
        around it sets the processor's flags and checks for NaN), when it has one."""
        kind, pay, inst = st[0], st[1], st[4]
        joined = ", ".join(args)
        if kind == PURE:
            if raw:
                bare = self.bare_ufunc(pay, inst, joined, tag)
                if bare is not None:
                    return bare
            self.ns[f"F{tag}"] = pay
            return f"F{tag}({joined})"
        if kind == WITH_EC:
            self.ns[f"F{tag}"] = pay
            return f"F{tag}(ec, {joined})"
        if kind == RULE:
            self.ns[f"R{tag}"], self.ns[f"I{tag}"] = pay, inst
            return f"R{tag}(I{tag}, [{joined}], ec)"
        if kind == FOLDED:
            self.ns[f"K{tag}"] = pay
            return f"K{tag}"
        if kind == ELEMENT:
            return f"{args[0]}[{pay}]"
        if kind == TUPLE:
            return f"({joined},)" if args else "()"
        if kind == REGION:
            return f"{self.bind(f'G{tag}', pay.run)}({joined})"
        return args[0]                          # SAME

    def bare_ufunc(self, pay, inst, joined: str, tag: str) -> str | None:
        """A PURE kernel's bare ufunc called on `joined` (an array even for a scalar result), or
        None when it has none."""
        u = capabilities(pay).hw_ufunc
        if u is None:
            return None
        text = f"{self.bind(f'U{tag}', u)}({joined})"
        return f"_asarray({text})" if inst.shape.rank == 0 else text

    def check(self, var: str, expect, inst, tag: str, at=None):
        """The line checking value `var` against `expect` and raising the instruction's error
        (``_bad``) when it does not match: a Step's expect ((dtype, dims) of an array, or a Shape:
        conforms), or a dtype alone (a region's block)."""
        self.ns[f"I{tag}"] = inst
        if expect.__class__ is tuple:
            self.ns[f"D{tag}"], self.ns[f"S{tag}"] = expect
            cond = f"{var}.__class__ is not ndarray or {var}.dtype != D{tag} or {var}.shape != S{tag}"
        elif isinstance(expect, np.dtype):
            self.ns[f"D{tag}"] = expect
            cond = f"{var}.dtype != D{tag}"
        else:
            self.ns[f"H{tag}"] = expect
            cond = f"_conforms({var}, H{tag}) is not None"
        self.line(f"if {cond}: _bad(I{tag}, {var})", at)

    def step(self, st, out: str, args: list, tag: str, *, raw=False, check=True, frees=(), at=None,
             compute=True, flags_off=False):
        """The lines of one step: ``out = <its value>`` (`compute`; `flags_off`: computed with the
        processor's flags clear, the code around having set them), its result check (`check`, when
        the step has one), the deletion of `frees` (names)."""
        if compute:
            text = f"{out} = {self.value(st, args, tag, raw)}"
            if flags_off:
                with self.flags(held=False):
                    self.line(text, at)
            else:
                self.line(text, at)
        if check and st[5] is not None:
            self.check(out, st[5], st[4], tag, at)
        if frees:
            self.line("del " + ", ".join(frees))

    def fallback(self, bad: str, st, out: str, args: list, tag: str):
        """``if bad: out = <the step's own kernel>`` with the flags clear: a written-out form of
        the step whose check failed gives way to the kernel (which then decides, as it always does,
        whether to hand the step to its rule)."""
        with self.block(f"if {bad}:"):
            self.step(st, out, args, tag, check=False, flags_off=True)

    # -- compiling -----------------------------------------------------------------------
    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def function(self, name: str, filename: str, shared: bool = False):
        """The function `name` the source defines, its code named `filename`.  `shared`: the code
        object is compiled once per text (structurally identical computations -- XLA's clones: a
        threefry loop body per random draw, fusions equal but for their names -- generate the same
        text, and Python's compile is most of the cost of generating code), then given a code
        object of its own with `filename`, so that a frame of this code is told from a twin's."""
        if shared:
            exec(_shared_code(self.text), self.ns)
            fn = self.ns[name]
            fn.__code__ = fn.__code__.replace(co_filename=filename)
        else:
            exec(compile(self.text, filename, "exec"), self.ns)
            fn = self.ns[name]
        return fn


@functools.lru_cache(maxsize=256)
def _shared_code(text: str):
    return compile(text, "<hlo computation>", "exec")


class _Indented:
    """The context of `Source.block` / `Source.flags`: one level deeper inside, then (`final`, not
    None) a ``finally:`` running `final`.  (A class: generated code is written block by block while
    a module is prepared, and a generator-based context manager costs several times more.)"""
    __slots__ = ("src", "final")

    def __init__(self, src: Source, final):
        self.src, self.final = src, final

    def __enter__(self):
        src = self.src
        src.depth += 1
        src.ind = "    " * src.depth

    def __exit__(self, *exc):
        src = self.src
        src.depth -= 1
        src.ind = "    " * src.depth
        if self.final is not None:
            src.line("finally:")
            src.lines.append(src.ind + "    " + self.final)
        return False


def raising_line(tb, code, lines: dict):
    """lines[line] for the innermost frame of generated `code` in traceback `tb`, or None."""
    found = None
    while tb is not None:
        if tb.tb_frame.f_code is code and tb.tb_lineno in lines:
            found = lines[tb.tb_lineno]
        tb = tb.tb_next
    return found


def filename(kind: str, name: str) -> str:
    """The name of the code generated for `name` (``<hlo KIND NAME #N>``, unique)."""
    return f"<hlo {kind} {name} #{next(_counter)}>"


# ============================================================================ a computation's body
def computation_function(name: str, params, steps, root, runs: dict):
    """(``run(ec, args) -> root value``, its line table: line -> the slot of the step it computes)
    for a computation's `steps` (compiler.Compiled: its values are local variables ``v<slot>``,
    each deleted after its last use); `params`: (parameter number, slot) pairs.  `runs` ({first
    step: (end, slots to check, meets)}, compiler._float_runs): runs of f32/f64 arithmetic steps
    (and views between them) written as their bare ufuncs under one setting of the processor's
    FTZ/DAZ flags; a NaN in a value leaving the run (NaN propagates through the run's arithmetic,
    so any NaN made inside shows there) runs it again step by step, where the rules give NaN
    signs: all of it, or (`meets` not None: nan_exact steps) from the first step where two NaNs
    met (``_rerun_from_meet``), nothing when none did."""
    src = Source("def run(ec, args):", {"_nanfree": nanfree, "_first_meet": first_meet}, flags=True)
    for pnum, slot in params:
        src.line(f"v{slot} = args[{pnum}]")
    n = 0
    while n < len(steps):
        run = runs.get(n)
        if run is None:
            _computation_step(src, steps[n])
            n += 1
            continue
        last, outs, meets = run
        run = steps[n:last]
        with src.flags():
            for st in run:
                _computation_step(src, st, raw=True, check=False, free=False)
        if meets is None:
            with src.block(f"if not _nanfree({', '.join(f'v{k}' for k in outs)}):"):
                for st in run:
                    _computation_step(src, st, check=False, free=False)
        elif meets:
            _rerun_from_meet(src, run, outs, meets)
        for st in run:
            _computation_step(src, st, compute=False)
        n = last
    src.line(f"return v{root}")
    return src.function("run", filename("computation", name), shared=True), src.at


def _rerun_from_meet(src, run, outs, meets):
    """A NaN in a value leaving a run of nan_exact steps (`outs`, compiler._nan_meets): the run
    again step by step from the first step of `meets` where two NaNs met, if any."""
    tag = str(run[0][3])
    at = src.bind(f"P{tag}", tuple(q for q, _a, _b in meets) + (len(run),))
    with src.block(f"if not _nanfree({', '.join(f'v{k}' for k in outs)}):"):
        src.line(f"_r = {at}[_first_meet({', '.join(f'v{a}, v{b}' for _q, a, b in meets)})]")
        for q in range(meets[0][0], len(run)):
            with src.block(f"if _r <= {q}:"):
                _computation_step(src, run[q], check=False, free=False)


def _computation_step(src, step, raw=False, check=True, free=True, compute=True):
    """One step of a computation's code (errors name the step's first slot)."""
    k = step[3]
    if step[0] == REGION:
        out = "".join(f"v{j}, " for j in k)[:-1]
        k = k[0]
    else:
        out = f"v{k}"
    src.step(step, out, [f"v{j}" for j in step[2]] if compute else (), str(k), raw=raw, check=check,
             frees=[f"v{j}" for j in step[6]] if free and step[6] else (), at=k, compute=compute)


_nan_min = np.minimum.reduce


def nanfree(*values) -> bool:
    """True when no array of `values` holds a NaN."""
    for v in values:
        m = _nan_min(v, axis=None)
        if m != m:
            return False
    return True


def first_meet(*operands) -> int:
    """The index of the first pair of `operands` (a0, b0, a1, b1, ...) with NaN on both sides at
    one position (ops/elementwise.two_nans), or the number of pairs when none has."""
    for n in range(0, len(operands), 2):
        if two_nans(operands[n], operands[n + 1]) is not None:
            return n // 2
    return len(operands) // 2


# ============================================================================ a fused region
def region_function(members, inputs, outputs, dtypes):
    """(``body(part, *inputs, *outputs)``, its line table: line -> the member it computes) for a
    fused region (compiler.Region): each block ``ix`` of `part` goes through every member step
    (kind PURE, elementwise) before the next block starts; each block's values are local
    variables deleted after their last use so that the live blocks stay in cache; a block's dims
    are its own, so only the dtype of each value is checked (`dtypes`: slot -> dtype)."""
    last = {}
    for n, m in enumerate(members):
        for j in m.operands:
            last[j] = n
    ins = {j: f"E{n}" for n, j in enumerate(inputs)}
    outs = {j: f"O{n}" for n, j in enumerate(outputs)}
    src = Source(f"def body({', '.join(['part'] + list(ins.values()) + list(outs.values()))}):")
    loaded: set[int] = set()
    with src.block("for ix in part:"):
        for n, m in enumerate(members):
            ops, k = m.operands, m.slot
            for j in ops:
                if j in ins and j not in loaded:
                    loaded.add(j)
                    src.line(f"v{j} = {ins[j]}[ix]")
            src.step(m, f"v{k}", [f"v{j}" for j in ops], str(k), check=False, at=n)
            src.check(f"v{k}", dtypes[k], m.inst, str(k), at=n)
            if k in outs:
                src.line(f"{outs[k]}[ix] = v{k}", at=n)
            dead = sorted({j for j in ops if last[j] == n})
            if k not in last:
                dead.append(k)
            if dead:
                src.line("del " + ", ".join(f"v{j}" for j in dead))
    return src.function("body", filename("region", members[-1].inst.name)), src.at


# ============================================================================ the loop mode
# A whole while loop (loopgen.py: which loops, and their analysis, a loopgen.LoopPlan) as one
# function: the condition and the body inside one ``while``, the loop state's elements local
# variables, the flags held for the whole loop.  NaN, whose sign only the rules decide,
# propagates through the body's bare arithmetic; the values leaving an iteration (and those read
# by steps that would not propagate a NaN) are checked, and an iteration that made one is run
# again through the body's own generated code.  The strategies below write a step out only where
# that holds: they are the loop mode's, not the other modes', because a computation's code sets
# the flags around a run of arithmetic only and runs a NaN run again step by step, which these
# forms (f64 cores, products, reductions computed with the flags set) do not fit.

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
_FLOATS = frozenset((F32, F64))
_OPERATORS = {"LT": "<", "LE": "<=", "GT": ">", "GE": ">=", "EQ": "==", "NE": "!="}



def _own(v):
    """A writable copy of `v` that only the loop holds."""
    return np.array(v)


_LOOP_NS = {"_Redo": _Redo, "_own": _own, "_F64": F64, "_F32": F32, "_abs": np.abs, "_mm": np.matmul,
            "_min": np.minimum.reduce, "_nonzero": np.count_nonzero, "_vdot": np.vdot,
            "_isnan": math.isnan, "_dot": np.dot, "_addred": np.add.reduce,
            "_contig": np.ascontiguousarray, "_cat": np.concatenate,
            "HloEvalError": HloEvalError, "_EVAL_ERRORS": EVAL_ERRORS, "_limit_error": limit_error}

_probes: dict = {}


def flags_neutral(name: str) -> bool:
    """True when NumPy's `name` (negative; or the f64 cores of f32 exp, tanh, rsqrt) gives the same
    bits with the processor's FTZ/DAZ flags set as without, on f32 operands whose result is not a
    zero or a subnormal (checked once on a spread of values: the f64 results of f32 operands never
    come near f64's subnormals)."""
    r = _probes.get(name)
    if r is None:
        r = _probes[name] = remembered(f"codegen.flags_neutral({name})", _probe, name)
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


def _flat_dot(l3, r3) -> bool:
    """True when a product of (1, m, k) and (1, k, n) f64 arrays may run as np.dot of the (m, k) and
    (k, n) matrices: both make the same BLAS call (gemm) for m, k, n >= 2 and C-contiguous
    operands of separate buffers (np.matmul of a batch of one runs its one matrix product as the
    two-dimensional one does); checked once on a spread of shapes."""
    if l3[0] != 1 or min(l3[1], l3[2], r3[2]) < 2:
        return False
    r = _probes.get("dot")
    if r is None:
        r = _probes["dot"] = remembered("codegen._probe_dot", _probe_dot)
    return r


def _probe_dot() -> bool:
    rng = np.random.default_rng(1)
    for m, k, n in ((2, 2, 2), (4, 24, 16), (3, 7, 5), (16, 64, 16), (33, 17, 65), (128, 96, 40)):
        a = rng.standard_normal((m, k)) * np.exp(rng.uniform(-30, 30, (m, k)))
        b = rng.standard_normal((k, n)) * np.exp(rng.uniform(-30, 30, (k, n)))
        if np.dot(a, b).tobytes() != np.matmul(a[None], b[None])[0].tobytes():
            return False
    return True


def dtype_of(shape):
    """The NumPy dtype of an array shape, or None (a tuple, a dynamic shape, a token)."""
    from .values import np_dtype
    if shape.is_tuple or shape.is_dynamic:
        return None
    try:
        return np_dtype(shape)
    except Exception:                       # noqa: BLE001 -- tokens, opaque
        return None


def _located(c):
    """c's generated code, its errors located at the instruction that raised (as run_while does)."""
    fn = c.fn

    def run(ec, args):
        try:
            return fn(ec, args)
        except (HloEvalError, *EVAL_ERRORS) as e:
            reraise_at(e, c.step_at(e.__traceback__))
    return run


def _trailing(inst, src) -> bool:
    """True when broadcast `inst` puts its operand (of shape `src`) on its last dimensions in order:
    NumPy broadcasts the operand itself the same way."""
    if src is None or src.is_tuple or inst.shape.is_tuple or src.is_dynamic or inst.shape.is_dynamic:
        return False
    dims = tuple(inst.attrs.get("dimensions") or ())
    r, k = inst.shape.rank, src.rank
    return dims == tuple(range(r - k, r)) and all(
        s == d or s == 1 for s, d in zip(src.dims, inst.shape.dims[r - k:]))


def loop_function(plan):
    """(the generated function ``loop(ec, state, n, limit, name)``, its source text) of the while
    loop `plan` (a loopgen.LoopPlan) describes; raises Unsupported."""
    return LoopWriter(plan).write()


class LoopWriter:
    """The loop mode of the generator: the source of one whole while loop, from its plan.  Besides
    a Source it keeps what the strategies learn of the names as it writes them: which may hold a
    NaN of the processor's sign (`taint`, `sources`), whose NaNs show in which (`covers`), which are
    C-contiguous, which broadcasts NumPy may do itself, the f64 copies made."""

    def __init__(self, plan):
        self.plan = plan
        self.src = Source("def loop(ec, state, n, limit, name):", _LOOP_NS, flags=True)
        self.ns = self.src.ns
        self.bcast: dict[str, str] = {}             # a broadcast's name -> what NumPy may broadcast instead
        self.taint: set[str] = set()                # names that may hold a NaN of the processor's sign
        self.sources: dict[str, frozenset] = {}     # tainted name -> the bare arithmetic it comes from
        self.covers: dict[str, frozenset] = {}      # name -> the values whose NaNs show in it (_cover)
        self.c_order: set[str] = set()              # names of C-contiguous arrays
        self.cx: dict[str, str] = {}                # hoisted f64 copy -> its C-contiguity, tested once
        self.f64: dict[tuple, str] = {}             # (operand, perm, dims) -> its f64 copy in this section
        self.hoisted_f64: dict = {}                 # (operand, perm, dims) -> its copy made before the loop

    def write(self):
        """The generated function's parts in order (first test of the condition, loop-invariant
        steps, the iteration, the commit), compiled."""
        p, src = self.plan, self.src
        state = [f"s{j}" for j in range(p.n_state)]
        tup = "(" + "".join(f"{s}, " for s in state) + ")"
        src.line(f"{', '.join(state)}, = state")
        cond = self._cond()
        with src.flags():
            # first test of the condition (flags clear: nothing runs yet)
            self._cond_into(*cond, tup)
            with src.block("if not g:"):
                src.line(f"return {tup}, n, 1, 0, True")
            for j in p.owned:
                src.line(f"s{j} = _own(s{j})")
            loop_work = self._prologue(tup)
            src.line("ran = 1")
            src.line("redo = 0")
            with src.block("while True:"):
                self._iteration(loop_work, cond, state)
        src.bind("_body", _located(p.body))
        src.bind("_cond", _located(p.cond))
        fn = src.function("loop", filename("loop", p.body.comp.name))
        return fn, src.text

    def _prologue(self, tup):
        """The loop-invariant steps, run once before the first iteration (NaN checks of their own:
        see _emit), and the f64 copies of invariant operands of small f32 products; returns the
        steps left for the iteration."""
        p, src = self.plan, self.src
        self.taint = set()
        pro = []
        loop_work = []
        for st, name in p.work:
            if name in p.inv:
                if st.kind == FOLDED:
                    self.ns[name] = st.payload
                    self._folded(name, st.payload)
                    continue
                pro.append((st, name))
            else:
                loop_work.append((st, name))
        with src.block("try:"):
            src.line("pass")
            for st, name in pro:
                self._emit(st, name, p.opnames(st))
        with src.block("except (_Redo, HloEvalError) + _EVAL_ERRORS:"):
            src.line(f"return {tup}, n, 1, 0, False")
        need64 = set()
        for st, name in loop_work:
            spec = capabilities(st.payload).raw_dot if st.kind == PURE else None
            if spec is not None:
                a, b = p.opnames(st)
                lperm, l3, rperm, r3, _res = spec
                if _flat_dot(l3, r3):
                    l3, r3 = l3[1:], r3[1:]
                for x, perm, shp in ((a, lperm, l3), (b, rperm, r3)):
                    if x in p.inv and a != b:
                        need64.add((x, perm, shp))
        for x, perm, shp in sorted(need64, key=str):
            v = f"X{len(self.hoisted_f64)}"
            source = x if perm is None else f"{x}.transpose({perm})"
            src.line(f"{v} = {source}.reshape({shp}).astype(_F64)")
            src.line(f"C{v} = {v}.flags.c_contiguous")
            self.cx[v] = f"C{v}"
            self.hoisted_f64[(x, perm, shp)] = v
        return loop_work

    def _iteration(self, loop_work, cond, state):
        """One iteration inside the ``while``: the limit, the body's steps, the NaN check of the
        values leaving it (a NaN or an error: the iteration again through the body's generated
        code), the commit of the new state, the condition."""
        p, src = self.plan, self.src
        tup = "(" + "".join(f"{s}, " for s in state) + ")"
        with src.block("if limit is not None and n >= limit:"):
            src.line("raise _limit_error(limit, name)")
        with src.block("try:"):
            self.f64 = {}
            self.taint = {t for t in self.taint}            # invariant values found tainted stay so
            for st, name in loop_work:
                self._emit(st, name, p.opnames(st))
            # the values leaving the iteration: NaN-checked (a DUS: its update)
            check = []
            for j, m in enumerate(p.out):
                if m == f"s{j}":
                    continue
                for v in p.parts(m):
                    if v in self.taint and v not in check:
                        check.append(v)
            # a value whose NaNs could only come from values checked anyway is not checked again
            check = self._fewest(check)
            if check:
                src.line(f"if {self._has_nan(check)}: raise _Redo")
        with src.block("except (_Redo, HloEvalError) + _EVAL_ERRORS:"):
            with src.flags(held=False):
                src.line(f"state = _body(ec, ({tup},))")
            src.line(f"{', '.join(state)}, = state")
            for j in p.owned:
                src.line(f"s{j} = _own(s{j})")
            src.line("redo += 1")
            with src.block(f"if redo >= {p.give_up} and 4 * redo > ran:"):
                src.line("ec.loop_iterations += 1")
                src.line(f"return {tup}, n + 1, ran, ran, False")
        with src.block("else:"):
            for m, (j, ops) in p.inplace.items():
                src.line(f"s{j}[w_{m}] = {ops[1]}")
            news = [(f"s{j}", m) for j, m in enumerate(p.out) if m != f"s{j}" and m not in p.inplace]
            if news:
                src.line(f"{', '.join(a for a, _ in news)} = {', '.join(b for _, b in news)}")
            src.line("pass")
        src.line("n += 1")
        src.line("ec.loop_iterations += 1")
        self._cond_into(*cond, tup)
        src.line("ran += 1")
        with src.block("if not g:"):
            src.line(f"return {tup}, n, ran, ran - 1, True")

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

    def _cond(self):
        """The condition's lines (names prefixed "c", a fragment of the source), evaluated with
        the flags set, and its root."""
        p = self.plan
        names, members, shapes, work = p.cond_parts
        root = p.cond.root
        if root in members or root not in names:
            raise Unsupported
        saved, outer = self.taint, self.src
        self.taint = set()
        frag = self.src = outer.fragment()
        try:
            step = {name: st for st, name in work}.get(names[root])
            if step is not None and step.kind == PURE and step.inst.opcode == "compare":
                # an integer comparison deciding the loop: Python's operator on the two scalars
                op = _OPERATORS.get(str(step.inst.attrs.get("direction")))
                a, b = [names.get(j) for j in step.operands]
                da, db = self._int_scalar(a, shapes), self._int_scalar(b, shapes)
                if op is not None and da is not None and da == db:
                    for st, name in work:
                        if name == names[root]:
                            continue
                        if st.kind == FOLDED:
                            self.ns[name] = st.payload
                        else:
                            self._emit(st, name, [names.get(j) for j in st.operands])
                    return frag, f"{a} {op} {b}"
            for st, name in work:
                ops = [names.get(j) for j in st.operands]
                if any(a is None for a in ops):
                    raise Unsupported
                if st.kind == FOLDED:
                    self.ns[name] = st.payload
                    continue
                self._emit(st, name, ops)
            root_name = names[root]
            if root_name in self.taint:
                frag.line(f"if {self._has_nan([root_name])}: raise _Redo")
            return frag, root_name
        finally:
            self.taint, self.src = saved, outer

    def _cond_into(self, frag, root, tup):
        src = self.src
        with src.block("try:"):
            src.insert(frag)
            src.line(f"g = {root}")
        with src.block("except (_Redo, HloEvalError) + _EVAL_ERRORS:"):
            with src.flags(held=False):
                src.line(f"g = _cond(ec, ({tup},))")

    # ------------------------------------------------------------------ one step
    def _emit(self, st, name, ops):
        """The lines of one step of the loop (`name`: its value, `ops`: its operands' names): a
        folded value is a name of the namespace; else the first of the loop mode's strategies
        (`STRATEGIES`) that takes the step writes it; else it runs as the body's generated code
        runs it (`_foreign`)."""
        if st.kind == FOLDED:
            self.ns[name] = st.payload
            self._folded(name, st.payload)
            return
        for kind, strategy in self.STRATEGIES:
            if st.kind == kind and strategy(self, st, name, ops):
                return
        self._foreign(st, name, ops)

    # -- the loop mode's strategies: a step's fast path written out with the flags set.  Each
    # takes a step (True) or declines (False).  They are this mode's only: they compute with the
    # flags held across the code, leaving NaN signs and the rare zero or subnormal to the one NaN
    # check per iteration and its re-run through the body's own code, or to a fallback to the
    # kernel (`Source.fallback`); a computation's code holds the flags over a run of bare ufuncs
    # only (`Source.value`'s `raw`, shared by both modes) and has no re-run of an iteration.
    def _bare(self, st, name, ops) -> bool:
        """f32/f64 arithmetic: the bare ufunc (as in a computation's float runs), a broadcast
        operand left to NumPy's broadcasting; its result tainted unless the kernel is nan_pairs
        (subtract, divide: NaN bits the rule's wherever they come from)."""
        inst = st.inst
        if capabilities(st.payload).hw_ufunc is None:
            return False
        bargs = ops
        if inst.shape.rank and any(a not in self.bcast for a in ops):
            # a broadcast operand as NumPy broadcasts it (the same elements, no strided view)
            bargs = [self.bcast.get(a, a) for a in ops]
        self.src.step(st, name, bargs, f"_{name}", raw=True, check=False)
        if capabilities(st.payload).nan_pairs:      # NumPy's NaN bits are the rule's (probed)
            self._propagate(name, ops)
        else:
            self._origin(name)
        if inst.shape.num_elements:
            self._cover(name, ops)
        return True

    def _negate(self, st, name, ops) -> bool:
        """A float negate as NumPy's, where the flags do not change its bits (flags_neutral)."""
        if not (st.inst.opcode == "negate" and st.payload is np.negative and
                dtype_of(st.inst.shape) in _FLOATS and flags_neutral("negative")):
            return False
        self.src.line(f"{name} = {self.src.bind('_neg', np.negative)}({', '.join(ops)})")
        self._propagate(name, ops)
        self._cover(name, ops)
        return True

    def _f64_core(self, st, name, ops) -> bool:
        """f32 exp, tanh, rsqrt as their f64 cores, the fast path's own check of the result (a zero
        or subnormal: the kernel with the flags clear)."""
        core, inst, src = capabilities(st.payload).raw_unary, st.inst, self.src
        opcode = inst.opcode
        if core is None or opcode not in ("exponential", "tanh", "rsqrt") or \
                not flags_neutral({"exponential": "exp"}.get(opcode, opcode)):
            return False
        self.ns[f"C_{name}"], self.ns[f"T_{name}"] = core, TINY[F32]
        r = f"C_{name}({ops[0]}.astype(_F64)).astype(_F32)"
        if inst.shape.rank == 0:
            r = f"_asarray({r})"
        src.line(f"{name} = {r}")
        low = f"_min({name}, None)" if opcode != "tanh" else f"_min(_abs({name}), None)"
        src.fallback(f"not {low} >= T_{name}", st, name, ops, f"_{name}")
        self._propagate(name, ops)
        self._cover(name, ops)
        return True

    def _dot(self, st, name, ops) -> bool:
        """A small f32 product (`_emit_dot`)."""
        spec = capabilities(st.payload).raw_dot
        if spec is None:
            return False
        self._emit_dot(spec, st, name, ops)
        return True

    def _emit_dot(self, spec, st, name, ops):
        """A small f32 product: in f64 (hoisted copies of invariant operands), np.dot or matmul, with
        the fast path's own check of its result (zeros: the fast path with the flags clear)."""
        src = self.src
        lperm, l3, rperm, r3, res = spec
        flat = _flat_dot(l3, r3)
        shapes = (l3[1:], r3[1:]) if flat else (l3, r3)
        xs = []
        for n, (x, perm, shp) in enumerate(((ops[0], lperm, shapes[0]), (ops[1], rperm, shapes[1]))):
            key = (x, perm, shp)
            h = self.hoisted_f64.get(key)
            if h is None and not (n == 1 and ops[0] == ops[1]):     # (never one buffer twice)
                h = self.f64.get(key)
            if h is None:
                h = f"Y{len(self.f64)}_{name}"
                source = x if perm is None else f"{x}.transpose({perm})"
                if perm is not None or self.plan.dims(x) != tuple(shp):
                    source = f"{source}.reshape({shp})"
                src.line(f"{h} = {source}.astype(_F64)")
                if not (ops[0] == ops[1]):
                    self.f64[key] = h
                if perm is None and x in self.c_order:
                    self.c_order.add(h)
            xs.append(h)
        if flat:
            # np.dot's gemm is matmul's for C-contiguous operands (astype keeps a layout)
            unknown = [self.cx.get(h, f"{h}.flags.c_contiguous") for h in xs if h not in self.c_order]
            if unknown:
                with src.block(f"if {' and '.join(unknown)}:"):
                    src.line(f"{name} = _dot({xs[0]}, {xs[1]}).astype(_F32)")
                with src.block("else:"):
                    src.line(f"{name} = _mm({xs[0]}.reshape({l3}), {xs[1]}.reshape({r3}))"
                             f".astype(_F32).reshape({(l3[1], r3[2])})")
            else:
                src.line(f"{name} = _dot({xs[0]}, {xs[1]}).astype(_F32)")
        else:
            src.line(f"{name} = _mm({xs[0]}, {xs[1]}).astype(_F32)")
        self.c_order.add(name)
        size = l3[0] * l3[1] * r3[2]
        got = (l3[1], r3[2]) if flat else (l3[0], l3[1], r3[2])
        with src.block(f"if _nonzero({name}) == {size}:"):
            src.line(f"{name} = {name}.reshape({res})" if tuple(res) != got else "pass")
        with src.block("else:"):
            src.step(st, name, ops, f"_{name}", check=False, flags_off=True)
        self._origin(name)
        if size:
            self._cover(name, ops)

    def _move(self, st, name, ops) -> bool:
        """Data movement and integer steps (the flags do not matter to them); a dynamic slice as a
        view, a dynamic-update-slice into the loop's own buffer.  False for any other step."""
        p, src = self.plan, self.src
        pay, inst = st.payload, st.inst
        opcode, args, dt = inst.opcode, ", ".join(ops), dtype_of(inst.shape)
        where = capabilities(pay).where
        if where is not None and name in p.inplace:
            src.line(f"w_{name} = {self._where(name, where, ops[2:])}")
            return True
        if where is not None and opcode == "dynamic-slice" and p.viewable(name):
            # a view: what reads it makes new arrays
            src.line(f"{name} = {ops[0]}[{self._where(name, where, ops[1:])}]")
            self._propagate(name, ops)
            return True
        plain = getattr(pay, "plain", None)
        if plain is not None and any(a in p.inv and a not in p.passthrough for a in ops):
            pay = plain                         # (an in-place writer: not into a value kept)
        if opcode in _MOVES or capabilities(pay).flag_free or \
                (dt not in _FLOATS and not any(self._is_float(a) for a in ops) and dt is not None
                 and dt.kind in "iub"):
            if opcode == "reshape":              # (the fast path's own call, written out)
                src.line(f"{name} = {ops[0]}.reshape({tuple(inst.shape.dims)})")
            elif opcode == "concatenate":
                src.line(f"{name} = _cat(({args},), {int(inst.attrs['dimensions'][0])})")
                self.c_order.add(name)
            else:                               # the kernel's call, unchecked (see below)
                src.step(st if pay is st.payload else st._replace(payload=pay), name, ops, f"_{name}",
                         check=False)
            # (a fast path of these makes its result's dtype and dims from its operands')
            if opcode in _PROPAGATE or opcode in ("select",):
                self._propagate(name, ops)
            else:
                self._check_operands(ops)
            if inst.shape.num_elements:
                if opcode in ("reshape", "broadcast", "transpose", "bitcast", "copy", "concatenate"):
                    self._cover(name, ops)
                elif opcode == "dynamic-update-slice":
                    self._cover(name, ops[1:2])
            if opcode == "broadcast" and _trailing(inst, p.shapes.get(ops[0])):
                self.bcast[name] = ops[0]
            return True
        return False

    def _reduce(self, st, name, ops) -> bool:
        """A sum (its f64 or pairwise form) or a max/min reduction written out with the flags set;
        False when it has neither form."""
        if st.inst.opcode != "reduce":
            return False
        pay, src, ns = st.payload, self.src, self.ns
        args = ", ".join(ops)
        dt = dtype_of(st.inst.shape)
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
                    self._foreign(st, name, ops)
                    return True
                ns[f"Z_{name}"] = start
                fold = capabilities(pay).raw_fold
                if fold is not None:            # (what `flagged` does for a single stage)
                    perm, rows, outs = fold
                    source = ops[0] if perm is None else f"{ops[0]}.transpose({perm})"
                    src.line(f"{name} = _addred(_contig({source}).reshape({rows}), 0, None, None, "
                             f"False, Z_{name}).reshape({outs})")
                else:
                    src.line(f"{name} = R_{name}({args}, Z_{name})")
                self._origin(name)
                self._cover(name, ops)
                return True
        mm = capabilities(pay).raw_minmax
        if mm is not None:
            uf, axes, scalar = mm
            ns[f"M_{name}"], ns[f"T_{name}"] = uf.reduce, TINY[dt]
            r = f"M_{name}({ops[0]}, axis={axes}, initial={ops[1]}[()])"
            src.line(f"{name} = " + (f"_asarray({r})" if scalar else r))
            src.fallback(f"not _min(_abs({name}), None) >= T_{name}", st, name, ops, f"_{name}")
            self._propagate(name, ops)
            self._cover(name, ops)
            return True
        return False

    # tried in this order (kind: the step kind a strategy takes)
    STRATEGIES = ((PURE, _bare), (PURE, _negate), (PURE, _f64_core), (PURE, _dot), (PURE, _move),
                  (WITH_EC, _reduce))

    def _foreign(self, st, name, ops):
        """A step run as the body's generated code runs it, with the flags clear; its float operands
        made here are NaN-checked first."""
        self._check_operands(ops)
        if st.kind == ELEMENT:
            self.src.step(st, name, ops, f"_{name}", check=False)
            return
        if st.kind not in (PURE, WITH_EC, RULE):
            raise Unsupported
        self.src.step(st, name, ops, f"_{name}", flags_off=True)

    def _where(self, name, where, idx):
        """An expression for the index `where(*idx)` of a dynamic (update) slice: its start indices
        clamped as the fast path clamps them, written out."""
        spec = getattr(where, "spec", None)
        if spec is None:
            return f"{self.src.bind(f'W_{name}', where)}({', '.join(idx)})"
        base, dyn = spec
        key = [None if b is None else f"SL_{name}_{d}" for d, b in enumerate(base)]
        for d, b in enumerate(base):
            if b is not None:
                self.ns[f"SL_{name}_{d}"] = b
        for pos, d, hi, size in dyn:
            q = f"q{d}_{name}"
            self.src.line(f"{q} = int({idx[pos]})")
            self.src.line(f"{q} = 0 if {q} < 0 else ({hi} if {q} > {hi} else {q})")
            key[d] = f"slice({q}, {q} + {size})"
        return "(" + "".join(f"{k}, " for k in key) + ")"

    def _int_scalar(self, name, shapes):
        """The dtype of `name` (the condition's value, a state element or a folded constant) if it
        is an integer scalar, else None."""
        if name is None:
            return None
        if name in shapes:
            s = shapes[name]
        elif name.startswith("s") and name[1:].isdigit():
            s = self.plan.state_shapes[int(name[1:])]
        else:
            v = self.ns.get(name)
            return v.dtype if isinstance(v, np.ndarray) and v.ndim == 0 and v.dtype.kind in "iu" else None
        if s.is_tuple or s.rank != 0:
            return None
        dt = dtype_of(s)
        return dt if dt is not None and dt.kind in "iu" else None

    def _folded(self, name, value):
        """A folded broadcast (zero strides): its compact form, for NumPy to broadcast."""
        if isinstance(value, np.ndarray) and value.ndim and 0 in value.strides and value.size:
            key = tuple(slice(0, 1) if st == 0 else slice(None) for st in value.strides)
            self.ns[f"KB_{name}"] = np.ascontiguousarray(value[key])
            self.bcast[name] = f"KB_{name}"

    def _is_float(self, name):
        s = self.plan.shapes.get(name)
        if s is None:
            v = self.ns.get(name)
            return isinstance(v, np.ndarray) and v.dtype.kind == "f"
        return s.is_tuple or dtype_of(s) is None or dtype_of(s).kind not in "iub"

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

    def _check_operands(self, ops):
        bad = [a for a in dict.fromkeys(ops) if a in self.taint]
        if bad:
            self.src.line(f"if {self._has_nan(bad)}: raise _Redo")
            self.taint.difference_update(bad)

    def _has_nan(self, names):
        """An expression true when one of the arrays `names` holds a NaN (or, rarely, when they hold
        infinities of both signs: the iteration then runs again, for nothing)."""
        terms = []
        for a in names:
            s = self.plan.shapes.get(a)
            if s is not None and not s.is_tuple and s.rank == 0:
                terms.append(f"float({a})")
            else:
                terms.append(f"_vdot({a}, {a})")
        return f"_isnan({' + '.join(terms)})"
