"""While loops of small arrays compiled to native code with numba: the condition and the body
(their fusions and calls inlined) become one ``@njit`` function over the loop state, which runs
the iterations without coming back to Python.  compiler.run_while asks `fast_loop` before
loopgen.fast_loop; None (numba not installed, ``HLO_NATIVE=0``, an opcode or case this generator
does not take, a loop not expected to run long enough to pay for its compilation) leaves the loop
to loopgen, exactly as before.

What the generated code computes is what the rules compute, element by element:

* every value is a flat C-ordered array of its static shape (scalars: one element); reshapes and
  bitcasts that keep the order are the same array, the other data movement (broadcast, transpose,
  slice, dynamic-slice with the rule's clamping, dynamic-update-slice, concatenate, select, iota and
  constants) moves elements by index;
* the function runs with the processor's FTZ/DAZ flags set (fpenv.hardware), so f32/f64
  arithmetic, compares and converts read subnormal operands as zeros of their sign and flush
  subnormal results exactly where the rules flush (the rules' own fast paths use the same flags);
  where a rule keeps subnormals (negate, abs, select, data movement) the code only moves bits;
  maximum/minimum read their operands flushed and break -0/+0 ties as the rules do; numba's code
  contracts no multiply-add without fastmath (tests/interpreter/test_native.py reads the machine
  code), so the add/subtracts XLA CPU contracts (contraction.contractions, the compiled steps' rule)
  call LLVM's fma intrinsic, the processor's FMA under the same flags;
* f32 exp and tanh are the rules' f64 functions rounded once to f32; the f64 result comes from the
  C library, which may differ from NumPy's by an ulp or two of f64, so a result within `MARGIN`
  f64 ulps of a point where the rounding to f32 changes (or in the f32 subnormal range) is a
  *hazard*;
* a dot (f32, small) is the rule's f64 sum of products, term after term from +0, then + 0.0 (the
  -0 rule), rounded to f32 and flushed: the order BLAS uses for these shapes, checked for each
  dot's shape when the loop is built (`_dot_order_matches`: the rule's own dot_values on random
  operands of widely spread magnitudes), else no native loop;
* a reduce folds from the init value in row-major order of the reduced dimensions with the
  reducer's combine (add, maximum, minimum) as computations.combine computes it, except a float
  add-reduce to one value, which the rules compute with NumPy's reduction: the init plus NumPy's
  pairwise sum (`_pairwise_code`); XLA's windows for dimensions over 32 and its library
  reductions from 4096 elements are not taken;
* a NaN made by any float step is a hazard too (NaN signs are the rules' to decide).

An iteration with a hazard is not committed: the function returns, the iteration runs through the
body's generated code (compiler.Compiled.fn, the rules' bits), and the native loop goes on from its
result; after GIVE_UP such iterations in more than a quarter of the iterations the rest of the
loop is left to the caller.  Iterations are committed only at their end (a dynamic-update-slice of
state element j that becomes element j is written into the loop's own copy there; a reader of it
inside the iteration gets a copy).

Compilation: the generated source is written under the hlo cache directory (keyed by its hash)
and imported from there, so numba's on-disk cache (``cache=True``) makes a later process pay
only for loading it.  `fast_loop` takes a loop only when its iteration count is known from its
condition (an induction variable compared with a constant) and the iterations left (summed over
the times the loop was asked about in the process) pay for numba's import and the compilation
(`_worth_it`); ``HLO_NATIVE=1`` takes every loop it can (tests, benchmarks), ``HLO_NATIVE=0``
none.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import numpy as np

from ..ir.opcodes import has_side_effect
from ..sources.cache import cache_dir
from . import contraction, per_module
from .computations import TREE_WINDOW, reducer
from .fpenv import hardware
from .ops.linalg import dot_values
from .ops.numerics import mode_of
from .registry import rule_for
from .schedule import Plan
from .values import conforms, np_dtype

# an iteration run again (a hazard) this many times, and in more than a quarter of the iterations:
# the rest of the loop goes back to the caller
GIVE_UP = 8
# f64 ulps around a point where rounding to f32 changes within which exp and tanh are hazards
MARGIN = 1 << 10
# computed values of at most this many elements (state buffers written in place and arrays only
# read may be larger)
SMALL = 1 << 14
# cost model of `_worth_it` (seconds): what one instruction of the body costs per iteration today
# (loopgen's generated code: about one NumPy call), numba's import, a load from numba's cache, and
# a compilation (fixed part and per instruction); measured on the scan (benchmarks/bench_run.py)
STEP_COST = 0.8e-6
IMPORT_COST = 0.5
LOAD_COST = 0.5
COMPILE_COST = 2.0
COMPILE_STEP_COST = 0.1

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_FLOATS = (_F32, _F64)
_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64,
                                        np.uint8, np.uint16, np.uint32, np.uint64))
_BOOL = np.dtype(np.bool_)
_ARITH = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/"}
_CMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
_LOGIC = {"and": "&", "or": "|", "xor": "^"}
# opcodes the generator takes (anything else: no native loop)
TAKEN = frozenset("""parameter constant iota get-tuple-element tuple fusion call copy reshape bitcast
broadcast transpose slice dynamic-slice dynamic-update-slice concatenate select compare convert
add subtract multiply divide maximum minimum negate abs exponential tanh and or xor not dot
reduce""".split())


class Unsupported(Exception):
    """The loop has something this generator does not take: no native loop."""


def enabled() -> bool:
    """HLO_NATIVE is not 0 and numba is installed (it is imported only when a loop is built)."""
    if os.environ.get("HLO_NATIVE", "") == "0":
        return False
    return "numba" in sys.modules or importlib.util.find_spec("numba") is not None


def fast_loop(cond, body, module, state, ec):
    """A NativeLoop for the while loop of `cond` and `body` (compiler.Compiled) of `module` at
    `state`, or None: see the module docstring.  What was built is kept per module."""
    if module is None or not enabled() or mode_of(ec)[0] != "cpu" or hardware() is None:
        return None
    loops = per_module.cached(module, "native-loops", dict)
    key = (id(cond), id(body))
    got = loops.get(key)
    if got is None:
        earlier = _unpaid(cond, body, module, state, key)
        if earlier is None:
            return None
        try:
            got = _Plan(cond, body, module, ec)
            if got.asked == 0:
                got.asked = earlier
        except Unsupported:
            got = False
        except Exception:                       # noqa: BLE001 -- a loop this generator gets wrong
            if os.environ.get("HLO_NATIVE") == "strict":      # (tests)
                raise
            got = False
        loops[key] = (cond, body, got)         # (the Compiled objects kept alive with their ids)
    else:
        got = got[2]
    if not got or conforms(state, body.comp.parameters[0].shape) is not None:
        return None
    if not _worth_it(got, state):
        return None
    try:
        return got.loop()
    except Exception:                           # noqa: BLE001 -- numba refused the generated code
        if os.environ.get("HLO_NATIVE") == "strict":
            raise
        loops[key] = (cond, body, False)
        return None


def _unpaid(cond, body, module, state, key):
    """None when the loop surely does not pay yet, before its plan is generated (a few ms): the
    iterations it has left are at most |bound - i| (its condition compares a state element with a
    constant: the plan's induction, with a step of at least 1), its steps at most the instructions
    of its computations and of those they call, and `_worth_it`'s cost is at least numba's import
    and a load from numba's cache; these bounds, summed over the times the loop was asked about,
    do not reach it.  Else the bounds of the earlier times (the plan's `asked` to start from)."""
    if os.environ.get("HLO_NATIVE", "") in ("1", "strict"):
        return 0
    left = _iterations_bound(cond.comp, state)
    if left is None:
        return 0
    seen = per_module.cached(module, "native-bounds", dict).setdefault(key, [0])
    earlier = seen[0]
    seen[0] += left
    comps = module.computation_map
    steps = _instructions_bound(cond.comp, comps, {}) + _instructions_bound(body.comp, comps, {})
    cost = (0.0 if "numba" in sys.modules else IMPORT_COST) + LOAD_COST
    return None if seen[0] * steps * STEP_COST <= cost else earlier


def _iterations_bound(comp, state):
    """|bound - i| when `comp`'s root compares element j of its tuple parameter (value i in
    `state`) with an integer constant (either side), else None."""
    by_name = comp.by_name
    root = by_name.get(comp.root)
    if root is None or root.opcode != "compare" or len(root.operands) != 2:
        return None
    a, b = (by_name.get(o) for o in root.operands)
    if a is None or b is None:
        return None
    if a.opcode == "constant":
        a, b = b, a
    if a.opcode != "get-tuple-element" or b.opcode != "constant" or b.literal is None or b.literal.elided:
        return None
    p = by_name.get(a.operands[0])
    if p is None or p.opcode != "parameter":
        return None
    try:
        j = int(a.attrs["index"])
        i = np.asarray(state[j])
        c = np.asarray(b.literal.value)
        if i.size != 1 or c.size != 1 or i.dtype.kind not in "iu" or c.dtype.kind not in "iu":
            return None
        return abs(int(c.reshape(())) - int(i.reshape(()))) + 1
    except Exception:                           # noqa: BLE001 -- any other form: no bound
        return None


def _instructions_bound(comp, comps, memo) -> int:
    """The instructions of `comp` and, per call site, of the computations they call."""
    got = memo.get(comp.name)
    if got is None:
        got = 0
        for inst in comp.instructions:
            got += 1
            for name in inst.called_computations:
                callee = comps.get(name)
                if callee is not None:
                    got += _instructions_bound(callee, comps, memo)
        memo[comp.name] = got
    return got


def _worth_it(plan, state) -> bool:
    """True when the iterations left (known from the condition), with those this loop was asked
    about before in this process (a loop run again and again), pay for numba's import and the
    compilation (or the load from numba's cache) at STEP_COST per instruction per iteration."""
    if os.environ.get("HLO_NATIVE", "") in ("1", "strict"):
        return True
    left = plan.iterations_left(state)
    if left is None:
        return False
    plan.asked += left
    left = plan.asked
    cost = 0.0 if "numba" in sys.modules else IMPORT_COST
    if plan.fn is None:
        cost += LOAD_COST if plan.cached() else COMPILE_COST + COMPILE_STEP_COST * plan.steps
    return left * plan.steps * STEP_COST > cost


# ============================================================================== values and code

class Val:
    """A value of the generated code: the flat array `var` of `dtype` and `dims`; `sym` what is
    known of it statically (('state', j): state element j unchanged; ('const', v): a scalar
    constant; ('inc', j, step): state element j plus a constant; ('cmp', j, direction, bound,
    flipped): a compare of state element j with a constant; ('dus', j, update, starts, sizes): a
    dynamic-update-slice of state element j not made yet, for the commit)."""
    __slots__ = ("var", "dtype", "dims", "sym")

    def __init__(self, var, dtype, dims, sym=None):
        self.var, self.dtype, self.dims, self.sym = var, dtype, tuple(dims), sym

    @property
    def size(self) -> int:
        return int(np.prod(self.dims, dtype=np.int64))


def _strides(dims):
    out, acc = [], 1
    for d in reversed(dims):
        out.append(acc)
        acc *= d
    return tuple(reversed(out))


def _index(names, strides) -> str:
    terms = [f"{n} * {s}" if s != 1 else n for n, s in zip(names, strides) if s != 0]
    return " + ".join(terms) if terms else "0"


class _Code:
    """Lines of the generated function with their indentation, and fresh names."""

    def __init__(self):
        self.lines: list[str] = []
        self.pre: list[str] = []               # buffers, allocated once before the loop
        self.count = 0

    def fresh(self, prefix="t") -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def add(self, ind, text):
        self.lines.append("    " * ind + text)

    def loops(self, ind, dims, prefix="i"):
        """Nested loops over `dims`; returns (index names, inner indentation)."""
        names = []
        for d in dims:
            v = self.fresh(prefix)
            self.add(ind, f"for {v} in range({d}):")
            names.append(v)
            ind += 1
        return names, ind


def _dtype_of(shape):
    if shape.is_tuple or shape.is_dynamic:
        raise Unsupported
    try:
        dt = np_dtype(shape)
    except Exception:                           # noqa: BLE001 -- tokens, opaque
        raise Unsupported from None
    if dt not in _FLOATS and dt not in _INTS and dt != _BOOL:
        raise Unsupported
    return dt


# ============================================================================== the plan

class _Plan:
    """The generated source of one loop, and (after `loop`) its compiled function."""

    def __init__(self, cond, body, module, ec):
        self.cond, self.body, self.module, self.ec = cond, body, module, ec
        comps = module.computation_map
        self.comps = comps
        if len(body.comp.parameters) != 1 or len(cond.comp.parameters) != 1:
            raise Unsupported
        pshape = body.comp.parameters[0].shape
        if not pshape.is_tuple or any(s.is_tuple for s in pshape.tuple_shapes):
            raise Unsupported
        self.state_shapes = pshape.tuple_shapes
        self.consts: list[np.ndarray] = []
        self.code = _Code()
        self.steps = 0
        self.induction = None                   # (j, direction, bound, flipped) from the condition
        self.fn = None
        self.asked = 0                          # iterations left, summed over the times asked
        self.uses_fma = False                   # a contracted multiply-add (_FMA_HELPER)
        self._generate()

    # -------------------------------------------------------------- the whole function
    def _generate(self):
        code = self.code
        n = len(self.state_shapes)
        state = []
        for j, s in enumerate(self.state_shapes):
            state.append(Val(f"s{j}", _dtype_of(s), s.dims, ("state", j)))
        code.pre += ["gv = np.empty(1, np.float64)", "gi = gv.view(np.int64)", "gf = np.empty(1, np.float32)",
                     "gfi = gf.view(np.int32)", "o32 = ones32[0]", "o64 = ones64[0]"]
        code.add(1, "it = 0")
        code.add(1, "while True:")
        code.add(2, "h = False")
        g = self._computation(self.cond.comp, [state], 2)
        if isinstance(g, list) or g.dtype != _BOOL or g.size != 1:
            raise Unsupported
        if g.sym is not None and g.sym[0] == "cmp":
            self.induction = g.sym[1:]
        code.add(2, "if h:")
        code.add(3, "return 2, it")
        code.add(2, f"if not {g.var}[0]:")
        code.add(3, "return 0, it")
        code.add(2, "if it >= budget:")
        code.add(3, "return 1, it")
        self.dus_at_commit: dict[int, tuple] = {}
        out = self._computation(self.body.comp, [state], 2, body=True)
        if not isinstance(out, list) or len(out) != n or any(isinstance(v, list) for v in out):
            raise Unsupported
        code.add(2, "if h:")
        code.add(3, "return 2, it")
        self._commit(out, state)
        code.add(2, "it += 1")
        self.step = None
        if self.induction is not None:
            v = out[self.induction[0]]
            if v.sym is not None and v.sym[0] == "inc" and v.sym[1] == self.induction[0]:
                self.step = v.sym[2]
        consts = ", ".join(f"k{i}" for i in range(len(self.consts)))
        args = ", ".join([f"s{j}" for j in range(n)] + ([consts] if consts else []))
        head = ["import math", "import numpy as np", "from numba import njit", "",
                _HELPERS + (_FMA_HELPER if self.uses_fma else ""), "", "@njit(cache=True, error_model='numpy')",
                f"def loop(budget, ones32, ones64, {args}):"]
        self.source = "\n".join(head + ["    " + p for p in code.pre] + code.lines) + "\n"
        self.written = [j for j, v in enumerate(out) if not (v.sym == ("state", j))]

    def _commit(self, out, state):
        """The new state: dynamic-update-slices written into the loop's own buffers, then the
        other new values copied (a new value that is a state buffer was copied in the body)."""
        code = self.code
        for j, (upd, starts, sizes) in self.dus_at_commit.items():
            names, ind = code.loops(2, sizes)
            dst = _index([f"({s} + {i})" for s, i in zip(starts, names)], _strides(state[j].dims))
            code.add(ind, f"s{j}[{dst}] = {upd.var}[{_index(names, _strides(sizes))}]")
        for j, v in enumerate(out):
            if v.sym == ("state", j) or j in self.dus_at_commit:
                continue
            if v.dtype != state[j].dtype or v.size != state[j].size:
                raise Unsupported
            code.add(2, f"s{j}[:] = {v.var}")

    # -------------------------------------------------------------- computations, inlined
    def _computation(self, comp, args, ind, body=False):
        """Emit `comp` applied to `args` (Vals or lists of Vals); returns its root's value."""
        by_name = comp.by_name
        for inst in comp.instructions:
            if inst.opcode not in TAKEN or has_side_effect(inst):
                raise Unsupported
        vals: dict[str, object] = {}
        self._by_name = by_name
        fmas = self._contractions(comp)
        for inst in _post_order(comp, by_name):
            ops = [vals[o] for o in inst.operands]
            if inst.opcode == "parameter":
                vals[inst.name] = args[inst.parameter_number]
                continue
            fma = fmas.get(inst.name)
            if fma is not None:
                vals[inst.name] = self._fma(inst, [vals[n] for n in fma[:3]], fma[3], fma[4], ind)
                continue
            vals[inst.name] = self._instruction(inst, ops, ind)
        self._by_name = None
        root = vals[comp.root]
        if body and isinstance(root, list):
            root = self._own_outputs(root)
        return root

    def _contractions(self, comp):
        """{name of each add/subtract of `comp` XLA CPU contracts: (a, b, addend names, negate the
        product, negate the addend)} (contraction.py's rule, as the compiled steps apply it)."""
        if not contraction.enabled():
            return {}
        plan = Plan(comp)
        found = contraction.contractions(plan, comp.name in contraction.fused_computations(self.module))
        names = [inst.name for inst in plan.insts]
        return {names[k]: (names[a], names[b], names[c], p, q) for k, (a, b, c, p, q) in found.items()}

    def _fma(self, inst, ops, negate_product, negate_addend, ind):
        """A contracted add/subtract: (-)a * b (-) c rounded once by the processor's FMA (under the
        loop's FTZ/DAZ, as XLA computes it); a NaN is a hazard (its sign is the rule's)."""
        dt, dims = _dtype_of(inst.shape), tuple(inst.shape.dims)
        if dt not in _FLOATS or any(o.dtype != dt or o.dims != dims for o in ops):
            raise Unsupported
        self.steps += 1
        self.uses_fma = True
        out = self._buffer(dt, dims)
        code = self.code
        (i,), ind2 = code.loops(ind, (out.size,))
        for k, o in enumerate(ops):
            code.add(ind2, f"a{k} = {_read(o, i, False)}")
        code.add(ind2, f"r = _fma({'-a0' if negate_product else 'a0'}, a1, {'-a2' if negate_addend else 'a2'})")
        _nan_hazard(self, ind2, "r")
        code.add(ind2, f"{out.var}[{i}] = r")
        return out

    def _own_outputs(self, root):
        """New state values that are state buffers of other positions are copied in the body (the
        commit would overwrite them); a dynamic-update-slice of state element j into position j
        read by nothing else is written at the commit instead."""
        out = []
        for j, v in enumerate(root):
            if isinstance(v, list):
                raise Unsupported
            if v.sym is not None and v.sym[0] == "dus" and v.sym[1] == j:
                self.dus_at_commit[j] = v.sym[2:5]
                out.append(v)
                continue
            if v.sym is not None and v.sym[0] == "dus":
                v = self._materialize_dus(v)
            if v.var.startswith("s") and v.sym != ("state", j):
                c = self._buffer(v.dtype, v.dims)
                self.code.add(2, f"{c.var}[:] = {v.var}")
                c.sym = v.sym if v.sym and v.sym[0] != "state" else None
                v = c
            out.append(v)
        return out

    def _instruction(self, inst, ops, ind):
        op = inst.opcode
        if op in ("fusion", "call"):
            callee = inst.attrs.get("calls" if op == "fusion" else "to_apply")
            sub = self.comps.get(getattr(callee, "name", None))
            if sub is None:
                raise Unsupported
            saved = self._by_name
            r = self._computation(sub, ops, ind)
            self._by_name = saved
            return r
        if op == "tuple":
            return list(ops)
        if op == "get-tuple-element":
            if not isinstance(ops[0], list):
                raise Unsupported
            return ops[0][int(inst.attrs["index"])]
        if any(isinstance(o, list) for o in ops):
            raise Unsupported
        ops = [self._materialize_dus(o) if o.sym is not None and o.sym[0] == "dus" else o for o in ops]
        if op == "dynamic-update-slice":
            return self._dus(inst, ops, ind)
        if op in ("constant", "iota"):
            return self._constant(inst)
        dt = _dtype_of(inst.shape)
        dims = tuple(inst.shape.dims)
        if op in ("copy", "reshape", "bitcast"):
            return self._view(inst, ops[0], dt, dims)
        self.steps += 1
        emit = _EMITTERS.get(op, _elementwise)
        return emit(self, inst, ops, dt, dims, ind)

    # -------------------------------------------------------------- helpers of the emitters
    def _buffer(self, dt, dims):
        v = Val(self.code.fresh("b"), dt, dims)
        if v.size > SMALL:
            raise Unsupported
        self.code.pre.append(f"{v.var} = np.empty({max(v.size, 1)}, np.{dt.name})")
        return v

    def _constant(self, inst):
        value = np.asarray(rule_for(inst.opcode)(inst, [], self.ec))
        dt = _dtype_of(inst.shape)
        if value.dtype != dt:
            raise Unsupported
        k = f"k{len(self.consts)}"
        self.consts.append(np.array(value).reshape(-1) if value.size else np.zeros(1, dt))   # (writable: one signature)
        sym = ("const", value.reshape(()).item()) if value.size == 1 and dt != _BOOL else None
        return Val(k, dt, inst.shape.dims, sym)

    def _view(self, inst, x, dt, dims):
        """copy / reshape / bitcast that keep the elements' order: the same flat array."""
        if x.dtype != dt or x.size != int(np.prod(dims, dtype=np.int64)):
            raise Unsupported
        if inst.opcode == "bitcast" and not (_row_major_order(inst.shape) and
                                             _row_major_order(self._operand_shape(inst, 0))):
            raise Unsupported
        return Val(x.var, dt, dims, x.sym)

    def _operand_shape(self, inst, k):
        src = self._by_name.get(inst.operands[k])
        if src is None:
            raise Unsupported
        return src.shape

    def _materialize_dus(self, v):
        """A dynamic-update-slice kept for the commit but read by something else: made here."""
        (_, _, upd, starts, sizes), x = v.sym, v.var
        out = self._buffer(v.dtype, v.dims)
        code = self.code
        code.add(2, f"{out.var}[:] = {x}")
        names, ind = code.loops(2, sizes)
        dst = _index([f"({s} + {i})" for s, i in zip(starts, names)], _strides(v.dims))
        code.add(ind, f"{out.var}[{dst}] = {upd.var}[{_index(names, _strides(sizes))}]")
        return out

    def _clamped_starts(self, idx, dims, sizes, ind):
        starts = []
        for v, d, s in zip(idx, dims, sizes):
            if v.dtype not in _INTS or v.size != 1 or v.dtype == np.uint64:
                raise Unsupported               # (the rule reads a uint64 start as a Python int)
            q = self.code.fresh("q")
            self.code.add(ind, f"{q} = min(max(np.int64({v.var}[0]), 0), {max(d - s, 0)})")
            starts.append(q)
        return starts

    def _dus(self, inst, ops, ind):
        x, upd = ops[0], ops[1]
        dt = _dtype_of(inst.shape)
        if x.dtype != dt or upd.dtype != dt or len(ops) != 2 + len(x.dims):
            raise Unsupported
        self.steps += 1
        starts = self._clamped_starts(ops[2:], x.dims, upd.dims, ind)
        if x.sym is not None and x.sym[0] == "state":
            # kept for the commit (into the loop's own buffer) unless something else reads it
            return Val(x.var, dt, x.dims, ("dus", x.sym[1], upd, starts, upd.dims))
        if x.size > SMALL:
            raise Unsupported
        out = self._buffer(dt, x.dims)
        self.code.add(ind, f"{out.var}[:] = {x.var}")
        names, ind2 = self.code.loops(ind, upd.dims)
        dst = _index([f"({s} + {i})" for s, i in zip(starts, names)], _strides(x.dims))
        self.code.add(ind2, f"{out.var}[{dst}] = {upd.var}[{_index(names, _strides(upd.dims))}]")
        return out

    # -------------------------------------------------------------- the loop
    def iterations_left(self, state):
        """The iterations the loop has left at `state`, from its induction variable, or None."""
        if self.induction is None or self.step is None:
            return None
        j, direction, bound, flipped = self.induction
        i = int(np.asarray(state[j]).reshape(()))
        step = self.step
        if flipped:
            direction = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE"}.get(direction, direction)
        if direction in ("LT", "LE") and step > 0:
            end = bound + (1 if direction == "LE" else 0)
            return max(0, -(-(end - i) // step))
        if direction in ("GT", "GE") and step < 0:
            end = bound - (1 if direction == "GE" else 0)
            return max(0, -(-(i - end) // -step))
        return None

    def _source_path(self) -> Path:
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:24]
        base = cache_dir()
        base = (base / "native") if base is not None else Path(tempfile.gettempdir()) / "hlo-native"
        return base / f"loop_{digest}.py"

    def cached(self) -> bool:
        """True when numba's cache holds this loop's compiled code."""
        p = self._source_path()
        return any((p.parent / "__pycache__").glob(f"{p.stem}.loop-*.nbi"))

    def loop(self):
        """The NativeLoop, its function compiled (or loaded from numba's cache) first."""
        if self.fn is None:
            fn = _load(self._source_path(), self.source)
            from numba import typeof
            args = [7, _ONES32, _ONES64] + [np.zeros(max(int(np.prod(s.dims, dtype=np.int64)), 1), _dtype_of(s))
                                           for s in self.state_shapes] + self.consts
            fn.compile(tuple(typeof(a) for a in args))
            self.fn = fn
        return NativeLoop(self)


def _load(path: Path, source: str):
    """The `loop` function of the generated source at `path` (written there first when absent),
    compiled by numba (or loaded from its cache next to the file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != source:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(source)
            os.replace(tmp, path)
    except OSError:
        path = Path(tempfile.mkdtemp(prefix="hlo-native-")) / path.name
        path.write_text(source)
    name = f"hlo_native_{path.stem}"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod             # (numba's cache finds the module again by its name)
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
    return mod.loop


def _post_order(comp, by_name):
    """The instructions the root depends on, operands first."""
    seen, order = set(), []
    stack = [(by_name[comp.root], False)]
    while stack:
        inst, done = stack.pop()
        if done:
            order.append(inst)
            continue
        if inst.name in seen:
            continue
        seen.add(inst.name)
        stack.append((inst, True))
        for o in reversed(inst.operands):
            if o not in seen:
                stack.append((by_name[o], False))
    return order


def _row_major_order(shape) -> bool:
    """True when the dimensions of more than one element are laid out in logical order (so the
    flat order of a bitcast's elements is the logical one)."""
    lay = shape.layout
    if lay is None:
        return True
    major = [d for d in reversed(tuple(lay.minor_to_major)) if shape.dims[d] != 1]
    return major == sorted(major)


# ============================================================================== the loop at run time

class NativeLoop:
    """`run` is called by compiler.run_while as loopgen's FastLoop.run is."""

    def __init__(self, plan):
        self.plan = plan

    def run(self, ec, state, n, limit, name):
        """(state, iterations done, conditions run, bodies run, finished): unfinished when the
        loop gave up (too many hazards) or reached `limit` (the caller raises)."""
        plan = self.plan
        fn, written = plan.fn, set(plan.written)
        flat = [_flat(v) for v in state]
        consts = plan.consts
        fset, on, off = hardware()
        ran = redo = 0
        cond_fn, body_fn = plan.cond.fn, plan.body.fn
        while True:
            budget = (1 << 62) if limit is None else max(0, limit - n)
            fset(on)
            try:
                status, k = fn(budget, _ONES32, _ONES64, *flat, *consts)
            finally:
                fset(off)
            n += k
            ran += k
            ec.loop_iterations += k
            if status == 0:
                return _shaped(flat, state, written), n, ran + 1, ran, True
            if status == 1:
                return _shaped(flat, state, written), n, ran, ran, False
            # a hazard: this iteration through the body's generated code (the rules' bits)
            st = _shaped(flat, state, written)
            if not cond_fn(ec, (st,)):
                return st, n, ran + 1, ran, True
            st = body_fn(ec, (st,))
            n += 1
            ran += 1
            redo += 1
            ec.loop_iterations += 1
            if redo >= GIVE_UP and 4 * redo > ran:
                return st, n, ran, ran, False
            for j in written:
                flat[j] = _flat(st[j])
            state = st


_ONES32, _ONES64 = np.ones(1, np.float32), np.ones(1, np.float64)


def _flat(v):
    """A writable C-ordered one-dimensional copy of `v` (every argument of the same kind: one
    signature, the one compiled and cached)."""
    return np.array(np.asarray(v)).reshape(-1)


def _shaped(flat, state, written):
    """The state tuple of the flat arrays (elements never written: the caller's own objects)."""
    return tuple(a.reshape(np.shape(v)) if j in written else v for j, (a, v) in enumerate(zip(flat, state)))


# ============================================================================== emitters
# Each emitter writes the loops computing one instruction into a new buffer and returns its Val.

_EMITTERS: dict = {}


def emitter(*opcodes):
    def reg(fn):
        for o in opcodes:
            _EMITTERS[o] = fn
        return fn
    return reg


def _fl(dt, e: str) -> str:
    """`e` flushed (DAZ/FTZ) as a value the processor's flags flush: times a one the compiler
    cannot fold (o32/o64, read from an argument)."""
    return f"({e}) * o{dt.itemsize * 8}"


def _read(x: Val, i: str, daz: bool) -> str:
    """Element `i` of `x` as the rules read it (DAZ for f32/f64 when `daz`)."""
    e = f"{x.var}[{i}]" if x.size != 1 else f"{x.var}[0]"
    if daz and x.dtype in _FLOATS:
        return _fl(x.dtype, e)
    return e


def _nan_hazard(plan, ind, r):
    plan.code.add(ind, f"if {r} != {r}:")
    plan.code.add(ind + 1, "h = True")


def _elementwise_expr(plan, inst, ops, dt, ind):
    """(lines computing `r` from a0, a1... for one element, whether r is a float to NaN-check)."""
    op = inst.opcode
    src = ops[0].dtype
    fl = src in _FLOATS
    n = len(ops)
    a = [f"a{k}" for k in range(n)]
    if op in _ARITH and fl:
        return [f"r = {a[0]} {_ARITH[op]} {a[1]}"], True          # (DAZ/FTZ: the processor's flags)
    if op in ("add", "subtract", "multiply") and src in _INTS:
        return [f"r = {a[0]} {_ARITH[op]} {a[1]}"], False
    if op in ("maximum", "minimum") and fl:
        z = ("a0 + a1" if op == "maximum" else "-((-a0) + (-a1))")
        cmp_ = ">" if op == "maximum" else "<"
        return ["if a0 != a0 or a1 != a1:", "    h = True",
                f"r = a0 if a0 {cmp_} a1 else (a1 if a1 {cmp_} a0 else ({z} if a0 == 0 else a0))"], False
    if op in ("maximum", "minimum") and src in _INTS:
        return [f"r = {'max' if op == 'maximum' else 'min'}(a0, a1)"], False
    if op == "negate" and (fl or src in _INTS):
        return ["r = -a0"], fl
    if op == "abs" and (fl or src in _INTS):
        return ["r = abs(a0)"], fl
    if op in _LOGIC and (src in _INTS or src == _BOOL):
        return [f"r = a0 {_LOGIC[op]} a1"], False
    if op == "not" and src == _BOOL:
        return ["r = not a0"], False
    if op == "not" and src in _INTS:
        return ["r = ~a0"], False
    if op == "exponential" and src == _F32:
        return ["v = math.exp(np.float64(a0))"] + _NEAR_EDGE + ["r = np.float32(v)"], True
    if op == "tanh" and src == _F32:
        # (a subnormal operand, which the rule keeps and the processor's DAZ would not: a hazard)
        return ["gf[0] = a0", "if (gfi[0] & 0x7F800000) == 0 and (gfi[0] & 0x007FFFFF) != 0:", "    h = True",
                "v = math.tanh(np.float64(a0))", "if v != 0 and abs(v) < _TINY:", "    h = True"] + \
            _NEAR_EDGE + ["r = np.float32(v)"], True
    if op == "compare":
        ctype = inst.attrs.get("type")
        order = inst.attrs.get("order")
        if (order is not None or (ctype is not None and str(ctype) not in ("FLOAT", "SIGNED", "UNSIGNED"))):
            raise Unsupported
        return [f"r = a0 {_CMP[str(inst.attrs['direction'])]} a1"], False
    if op == "convert":
        return _convert_expr(src, dt), dt in _FLOATS and src in _FLOATS
    raise Unsupported


# a hazard when the f64 result v of exp or tanh is within MARGIN f64 ulps of a point where its
# rounding to f32 changes (the low 29 bits of its significand near 0x10000000), or just below the
# smallest normal f32 (where flushing starts)
_NEAR_EDGE = ["gv[0] = v", "av = abs(v)", "if av < _TINY:", "    if av >= _LOW:", "        h = True",
              f"elif abs((gi[0] & 0x1FFFFFFF) - 0x10000000) <= {MARGIN}:", "    h = True"]


def _convert_expr(src, dt):
    if src == dt:
        return ["r = a0"]
    if (src in _INTS or src == _BOOL) and dt in _INTS:
        return ["r = a0"]                         # (stored into dt's array: wrapped)
    if src in _INTS and dt == _BOOL:
        return ["r = a0 != 0"]
    if (src in _INTS or src == _BOOL) and dt in _FLOATS:
        return [f"r = np.{dt.name}(a0)"]
    if src == _F32 and dt == _F64:
        return ["r = np.float64(a0)"]             # (read with DAZ)
    if src == _F64 and dt == _F32:
        return ["r = np.float32(a0)"]
    raise Unsupported


def _elementwise(plan, inst, ops, dt, dims, ind):
    if len(ops) not in (1, 2) or any(o.dims != ops[0].dims for o in ops):
        raise Unsupported
    if any(o.dtype != ops[0].dtype for o in ops):
        raise Unsupported
    body, check = _elementwise_expr(plan, inst, ops, dt, ind)
    out = plan._buffer(dt, dims)
    code = plan.code
    daz = inst.opcode in ("maximum", "minimum")     # (the other ops: the processor's DAZ)
    (i,), ind2 = code.loops(ind, (out.size,))
    for k, o in enumerate(ops):
        code.add(ind2, f"a{k} = {_read(o, i, daz)}")
    for line in body:
        code.add(ind2, line)
    if check:
        _nan_hazard(plan, ind2, "r")
    code.add(ind2, f"{out.var}[{i}] = r")
    out.sym = _induction_sym(inst, ops)
    return out


def _induction_sym(inst, ops):
    """What an integer scalar add/subtract or compare of a state element and a constant is."""
    if len(ops) != 2 or ops[0].size != 1 or ops[0].dtype not in _INTS:
        return None
    s = [o.sym for o in ops]
    if inst.opcode in ("add", "subtract") and s[0] and s[0][0] == "state" and s[1] and s[1][0] == "const":
        return ("inc", s[0][1], s[1][1] if inst.opcode == "add" else -s[1][1])
    if inst.opcode == "add" and s[1] and s[1][0] == "state" and s[0] and s[0][0] == "const":
        return ("inc", s[1][1], s[0][1])
    if inst.opcode == "compare":
        d = str(inst.attrs["direction"])
        if s[0] and s[0][0] == "state" and s[1] and s[1][0] == "const":
            return ("cmp", s[0][1], d, int(s[1][1]), False)
        if s[1] and s[1][0] == "state" and s[0] and s[0][0] == "const":
            return ("cmp", s[1][1], d, int(s[0][1]), True)
    return None


@emitter("select")
def _select(plan, inst, ops, dt, dims, ind):
    p, t, f = ops
    if p.dtype != _BOOL or t.dims != tuple(dims) or f.dims != tuple(dims) or t.dtype != dt or f.dtype != dt:
        raise Unsupported
    if p.size != 1 and p.dims != tuple(dims):
        raise Unsupported
    out = plan._buffer(dt, dims)
    (i,), ind2 = plan.code.loops(ind, (out.size,))
    plan.code.add(ind2, f"{out.var}[{i}] = {_read(t, i, False)} if {_read(p, i, False)} else {_read(f, i, False)}")
    return out


def _gather(plan, x, dt, dims, ind, source):
    """A new buffer of `dims` whose element at each index (names of the loop variables) is x's
    element at `source(names)` (an index expression into x's flat array)."""
    if x.dtype != dt:
        raise Unsupported
    out = plan._buffer(dt, dims)
    names, ind2 = plan.code.loops(ind, dims)
    plan.code.add(ind2, f"{out.var}[{_index(names, _strides(dims))}] = {x.var}[{source(names)}]")
    return out


@emitter("broadcast")
def _broadcast(plan, inst, ops, dt, dims, ind):
    x = ops[0]
    bd = list(inst.attrs.get("dimensions") or ())
    if len(bd) != len(x.dims):
        raise Unsupported
    return _gather(plan, x, dt, dims, ind, lambda names: _index([names[d] for d in bd], _strides(x.dims)))


@emitter("transpose")
def _transpose(plan, inst, ops, dt, dims, ind):
    x = ops[0]
    xs = _strides(x.dims)
    perm = list(inst.attrs["dimensions"])
    return _gather(plan, x, dt, dims, ind, lambda names: _index(names, [xs[p] for p in perm]))


@emitter("slice")
def _slice(plan, inst, ops, dt, dims, ind):
    x = ops[0]
    spec = inst.attrs["slice"].dimensions
    return _gather(plan, x, dt, dims, ind, lambda names: _index(
        [f"({d.start} + {n} * {d.stride})" for d, n in zip(spec, names)], _strides(x.dims)))


@emitter("dynamic-slice")
def _dynamic_slice(plan, inst, ops, dt, dims, ind):
    x = ops[0]
    sizes = tuple(inst.attrs["dynamic_slice_sizes"])
    if len(ops) != 1 + len(x.dims) or sizes != tuple(dims):
        raise Unsupported
    starts = plan._clamped_starts(ops[1:], x.dims, sizes, ind)
    return _gather(plan, x, dt, dims, ind, lambda names: _index(
        [f"({s} + {n})" for s, n in zip(starts, names)], _strides(x.dims)))


@emitter("concatenate")
def _concatenate(plan, inst, ops, dt, dims, ind):
    d = int(inst.attrs["dimensions"][0])
    out = plan._buffer(dt, dims)
    os_ = _strides(dims)
    offset = 0
    for x in ops:
        if x.dtype != dt:
            raise Unsupported
        names, ind2 = plan.code.loops(ind, x.dims)
        dst = [f"({n} + {offset})" if k == d else n for k, n in enumerate(names)]
        plan.code.add(ind2, f"{out.var}[{_index(dst, os_)}] = {x.var}[{_index(names, _strides(x.dims))}]")
        offset += x.dims[d]
    return out


def _dims_attr(inst, name):
    return [int(v) for v in (inst.attrs.get(name) or ())]


@emitter("dot")
def _dot(plan, inst, ops, dt, dims, ind):
    """The rule's small f32 dot: f64 products of the DAZ-read operands summed term after term from
    +0 (when that is the rule's order for this shape), + 0.0, rounded to f32, FTZ."""
    lhs, rhs = ops
    lb, lc = _dims_attr(inst, "lhs_batch_dims"), _dims_attr(inst, "lhs_contracting_dims")
    rb, rc = _dims_attr(inst, "rhs_batch_dims"), _dims_attr(inst, "rhs_contracting_dims")
    if lhs.dtype != _F32 or rhs.dtype != _F32 or dt != _F32:
        raise Unsupported
    if not _dot_order_matches(lhs.dims, rhs.dims, lb, lc, rb, rc):
        raise Unsupported
    lf = [d for d in range(len(lhs.dims)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rhs.dims)) if d not in rb and d not in rc]
    out = plan._buffer(dt, dims)
    code = plan.code
    ls, rs = _strides(lhs.dims), _strides(rhs.dims)
    names, ind2 = code.loops(ind, dims)
    nb, nl = len(lb), len(lf)
    lpos = {d: names[k] for k, d in enumerate(lb)} | {d: names[nb + k] for k, d in enumerate(lf)}
    rpos = {d: names[k] for k, d in enumerate(rb)} | {d: names[nb + nl + k] for k, d in enumerate(rf)}
    ksizes = [lhs.dims[d] for d in lc]
    k = int(np.prod(ksizes, dtype=np.int64))
    dst = _index(names, _strides(dims))
    if k == 0:
        code.add(ind2, f"{out.var}[{dst}] = _Z32")
        return out
    code.add(ind2, "acc = _Z64")
    kn, ind3 = code.loops(ind2, ksizes, "c")
    for t, (dl, dr) in enumerate(zip(lc, rc)):
        lpos[dl], rpos[dr] = kn[t], kn[t]
    li = _index([lpos[d] for d in range(len(lhs.dims))], ls)
    ri = _index([rpos[d] for d in range(len(rhs.dims))], rs)
    prod = f"np.float64({lhs.var}[{li}]) * np.float64({rhs.var}[{ri}])"          # (DAZ: the flags)
    code.add(ind3, f"acc = {prod}" if k == 1 else f"acc += {prod}")
    code.add(ind2, "r = np.float32(acc)" if k == 1 else "r = np.float32(acc + _Z64)")
    _nan_hazard(plan, ind2, "r")
    code.add(ind2, f"{out.var}[{dst}] = r")
    return out


def _dot_order_matches(ldims, rdims, lb, lc, rb, rc) -> bool:
    """True when the rule's dot (linalg.dot_values) of f32 operands of these shapes sums each
    element's products one after the other from +0 in f64, as the generated code does: compared
    bit for bit on random operands whose magnitudes spread over 2^-20..2^20 (any other order of
    the sums shows)."""
    key = (tuple(ldims), tuple(rdims), tuple(lb), tuple(lc), tuple(rb), tuple(rc))
    got = _DOT_ORDERS.get(key)
    if got is None:
        got = _DOT_ORDERS[key] = _probe_dot_order(*key)
    return got


_DOT_ORDERS: dict = {}


def _probe_dot_order(ldims, rdims, lb, lc, rb, rc) -> bool:
    rng = np.random.default_rng(7)
    lf = [d for d in range(len(ldims)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rdims)) if d not in rb and d not in rc]
    for _ in range(3):
        lhs, rhs = (((rng.random(s) + 0.5) * np.exp2(rng.integers(-20, 20, s)) *
                     rng.choice([-1.0, 1.0], s)).astype(np.float32) for s in (ldims, rdims))
        want = dot_values(lhs, rhs, lb, lc, rb, rc, _F32)
        l3 = np.transpose(lhs, list(lb) + lf + list(lc)).astype(np.float64)
        r3 = np.transpose(rhs, list(rb) + list(rc) + rf).astype(np.float64)
        b = [ldims[d] for d in lb]
        m, n = [ldims[d] for d in lf], [rdims[d] for d in rf]
        kk = int(np.prod([ldims[d] for d in lc], dtype=np.int64))
        l3 = l3.reshape(int(np.prod(b, dtype=np.int64)), int(np.prod(m, dtype=np.int64)), kk)
        r3 = r3.reshape(l3.shape[0], kk, int(np.prod(n, dtype=np.int64)))
        acc = np.zeros((l3.shape[0], l3.shape[1], r3.shape[2]))
        for t in range(kk):
            acc = acc + l3[:, :, t, None] * r3[:, None, t, :]
        mine = (acc if kk == 1 else acc + 0.0).astype(np.float32).reshape(want.shape)
        if mine.tobytes() != np.asarray(want).tobytes():
            return False
    return True


def _pairwise_code(code, ind, x, start, n, bits) -> str:
    """Lines computing NumPy's pairwise sum of x[start:start + n] (its float add-reduce: under 8
    elements one after the other from -0; up to 128 in eight running sums combined as
    ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7)), then the rest one by one; beyond, the two
    halves (the first a multiple of 8) summed apart), each add with DAZ/FTZ; returns its name."""
    res = code.fresh("p")
    if n < 8:
        code.add(ind, f"{res} = -_Z{bits}")
        for i in range(start, start + n):
            code.add(ind, f"{res} = {res} + {x}[{i}]")
        return res
    if n <= 128:
        r = [code.fresh("r") for _ in range(8)]
        for j in range(8):
            code.add(ind, f"{r[j]} = {x}[{start + j}]")
        full = n - n % 8
        if full > 8:
            (i,), ind2 = code.loops(ind, ((full - 8) // 8,))
            for j in range(8):
                code.add(ind2, f"{r[j]} = {r[j]} + {x}[{start + 8 + j} + 8 * {i}]")

        def add(a, b):
            return f"({a} + {b})"
        code.add(ind, f"{res} = {add(add(add(r[0], r[1]), add(r[2], r[3])), add(add(r[4], r[5]), add(r[6], r[7])))}")
        for i in range(start + full, start + n):
            code.add(ind, f"{res} = {res} + {x}[{i}]")
        return res
    n2 = n // 2
    n2 -= n2 % 8
    a = _pairwise_code(code, ind, x, start, n2, bits)
    b = _pairwise_code(code, ind, x, start + n2, n - n2, bits)
    code.add(ind, f"{res} = {a} + {b}")
    return res


@emitter("reduce")
def _reduce(plan, inst, ops, dt, dims, ind):
    """The rule's fold from the init value over the reduced dimensions in row-major order."""
    if len(ops) != 2:
        raise Unsupported
    x, init = ops
    rdims = sorted(int(d) for d in inst.attrs["dimensions"])
    red = reducer(plan.ec, inst.attrs["to_apply"].name, 1)
    if red.generic or red.pair or not red.kinds or red.kinds[0][1]:
        raise Unsupported
    kind = red.kinds[0][0]
    if kind not in ("add", "maximum", "minimum") or x.dtype != dt or init.dtype != dt or init.size != 1:
        raise Unsupported
    if dt == _BOOL or x.size >= 4096 or any(x.dims[d] > TREE_WINDOW for d in rdims):
        raise Unsupported
    src = plan._by_name.get(inst.operands[0])
    if src is not None and src.opcode == "concatenate" and int(src.attrs["dimensions"][0]) in rdims:
        raise Unsupported                       # (XLA splits it: computations.concatenated_parts)
    out = plan._buffer(dt, dims)
    code = plan.code
    keep = [d for d in range(len(x.dims)) if d not in rdims]
    names, ind2 = code.loops(ind, dims)
    dst = _index(names, _strides(dims))
    if any(x.dims[d] == 0 for d in rdims):
        code.add(ind2, f"{out.var}[{dst}] = {init.var}[0]")
        return out
    xs = _strides(x.dims)
    if all(x.dims[d] == 1 for d in rdims):      # a reshape: the init unused
        code.add(ind2, f"{out.var}[{dst}] = {x.var}[{_index(names, [xs[d] for d in keep])}]")
        return out
    fl = dt in _FLOATS
    bits = dt.itemsize * 8
    if fl and kind == "add" and out.size == 1:
        # one output: the rule's NumPy reduction is the init plus NumPy's pairwise sum of the
        # elements (in row-major order: x's own, its other dimensions being 1)
        res = _pairwise_code(code, ind2, x.var, 0, x.size, bits)
        code.add(ind2, f"acc = {init.var}[0] + {res}")
        _nan_hazard(plan, ind2, "acc")
        code.add(ind2, f"{out.var}[{dst}] = acc")
        return out
    code.add(ind2, f"acc = {init.var}[0]")
    rn, ind3 = code.loops(ind2, [x.dims[d] for d in rdims], "c")
    pos = {d: names[k] for k, d in enumerate(keep)} | {d: rn[k] for k, d in enumerate(rdims)}
    code.add(ind3, f"e = {x.var}[{_index([pos[d] for d in range(len(x.dims))], xs)}]")
    if kind == "add":
        code.add(ind3, "acc = acc + e")
    elif not fl:
        code.add(ind3, f"acc = {'max' if kind == 'maximum' else 'min'}(acc, e)")
    else:
        cmp_ = ">" if kind == "maximum" else "<"
        code.add(ind3, f"a0 = {_fl(dt, 'acc')}")
        code.add(ind3, f"a1 = {_fl(dt, 'e')}")
        code.add(ind3, "if a0 != a0 or a1 != a1:")
        code.add(ind3 + 1, "h = True")
        neg = "math.copysign(1.0, a0) < 0"          # (signbit: the rule's tie-break)
        tie = f"a1 if {neg} else a0" if kind == "maximum" else f"a0 if {neg} else a1"
        code.add(ind3, f"acc = a0 if a0 {cmp_} a1 else (a1 if a1 {cmp_} a0 else ({tie}))")
    if fl:
        _nan_hazard(plan, ind2, "acc")
    code.add(ind2, f"{out.var}[{dst}] = acc")
    return out


_HELPERS = f'''
_Z32 = np.float32(0.0)
_Z64 = np.float64(0.0)
_LOW = np.float64({2.0 ** -126 * (1 - 2.0 ** -20)!r})
_TINY = np.float64({2.0 ** -126!r})
'''

# LLVM's fma intrinsic, which the x86 back end lowers to one vfmadd/vfmsub/vfnmadd instruction
# (numba contracts nothing itself without fastmath: only the contracted steps get it)
_FMA_HELPER = """
from llvmlite import ir as _ir
from numba.core import cgutils as _cgutils
from numba.extending import intrinsic as _intrinsic


@_intrinsic
def _fma(typingctx, a, b, c):
    def codegen(context, builder, signature, args):
        t = context.get_value_type(signature.return_type)
        name = "llvm.fma.f32" if t == _ir.FloatType() else "llvm.fma.f64"
        fn = _cgutils.get_or_insert_function(builder.module, _ir.FunctionType(t, [t, t, t]), name)
        return builder.call(fn, args)
    return a(a, b, c), codegen
"""
