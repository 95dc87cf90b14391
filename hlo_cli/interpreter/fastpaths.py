"""Specialised evaluation of the common instructions, chosen once per instruction at compile time
(hlo_cli/interpreter/compiler.py) from its static shapes and element types.

Each callable computes exactly what the instruction's evaluation rule computes (the rules stay the
reference: everything not handled here runs through them):

* f32/f64 add, subtract, multiply, divide: the NumPy ufunc with XLA CPU's DAZ on operands that may
  hold subnormals and FTZ on the result, and the NaN signs the rule gives (the full rule runs when
  a result holds a NaN or a value below the smallest normal, which the common case checks with one
  pass: the minimum of |result|);
* integer and pred arithmetic and bit operations of the native widths (NumPy wraps like XLA);
* shifts: NumPy's shifts already give XLA's results for amounts >= the width or negative (0, or the
  sign for arithmetic right shifts), so they run directly, the logical/arithmetic pattern read
  through a same-width view;
* compare (FLOAT of clean operands, integers, pred), select with an array predicate;
* broadcast, reshape, transpose, copy, get-tuple-element, tuple, call, fusion, slice,
  concatenate, dynamic-slice, dynamic-update-slice, bitcast (same element type), integer
  converts: their decoding done once;
* f32/f64 reduce (add, max, min), add reduce-windows that tile their operand, exp, tanh, sqrt,
  rsqrt, maximum, minimum, small f32 dots: the rule's arithmetic in the rule's order with the
  decoding done once; the results the rule must decide (a NaN's sign, zeros, subnormals) go to
  the rule;
* while: the loop run by compiler.run_while.

"Clean" values -- f32/f64 arrays known to hold no subnormals (results of FTZ arithmetic, constants
checked at compile time, and the shape ops of clean values) -- skip the DAZ pass.

Constants and the pure ops applied only to constants are folded at compile time (``fold_constant``).
"""
from __future__ import annotations

import numpy as np

from .ops.convert import C64, C128, F32, F64, TINY as _TINY, flush, subnormals
from .fpenv import hardware
from .parallel import matmul
from .registry import rule_for
from .values import conforms, np_dtype

_FLUSHED = {F32, F64, C64, C128}
ndarray = np.ndarray

# opcodes folded when every operand is a compile-time constant (pure, no EvalContext needed)
_FOLDABLE = frozenset("""constant broadcast reshape transpose convert iota slice concatenate reverse pad
bitcast copy bitcast-convert add subtract multiply divide negate abs maximum minimum compare select and or
xor not shift-left shift-right-logical shift-right-arithmetic exponential log sqrt rsqrt tanh
logistic floor ceil sign clamp round-nearest-even round-nearest-afz""".split())
_FOLD_MAX_ELEMENTS = 1 << 16      # larger folded values only when they are broadcast views


# how a step runs (compiler.py): a folded value; fn(*operands); fn(ec, *operands); the evaluation
# rule; element `fn` of the operand tuple; a tuple of the operands; the operand itself; a fused run
# of elementwise steps
FOLDED, PURE, WITH_EC, RULE, ELEMENT, TUPLE, SAME, REGION = range(8)


class Fast:
    """A specialised step of kind PURE, WITH_EC, ELEMENT (fn = the index), TUPLE or SAME; `clean`:
    the result holds no subnormals; `ufunc`: for a binary op that is exactly one NumPy ufunc call
    on operands of the result's dtype and dims, that ufunc (the compiler may then write the result
    into an operand's buffer when that operand dies here)."""
    __slots__ = ("fn", "kind", "clean", "ufunc", "elementwise", "callee")

    def __init__(self, fn=None, kind=PURE, clean=False, ufunc=None, elementwise=False):
        self.fn, self.kind, self.clean, self.ufunc = fn, kind, clean, ufunc
        self.callee = None                      # a call's compiled computation
        # every operand has the result's dims and element i of the result depends on element i of
        # the operands only, so the step can run on matching slices (compiler.py's fused regions)
        self.elementwise = elementwise


class Static:
    """What compile time knows about the steps compiled so far: folded values, and which values
    are clean (True, or for a tuple a tuple of such flags)."""

    def __init__(self, comp, param_clean=None, callee=None, module=None):
        self.comp = comp
        self.module = module                    # the module (reducers are recognized in it), or None
        self.param_clean = param_clean          # per parameter number, or None: nothing known
        self.callee = callee                    # callee(name, param_clean) -> Compiled | None
        self.const: dict[int, object] = {}
        self.clean: dict[int, object] = {}
        self.insts: dict[int, object] = {}

    def node(self, j):
        return self.insts[j]

    def is_clean(self, j) -> bool:
        return self.clean.get(j) is True

    def record(self, k, inst, value, fast: Fast | None = None, rule=None):
        self.insts[k] = inst
        if value is not None:
            self.const[k] = value
            self.clean[k] = not _may_hold_subnormals(value)
        elif fast is not None:
            self.clean[k] = fast.clean
        elif inst.opcode == "parameter":
            known = self.param_clean
            n = inst.parameter_number
            self.clean[k] = known[n] if known is not None and n < len(known) else not _flushing(inst.shape)
        else:
            self.clean[k] = not _flushing(inst.shape) or _rule_result_clean(inst, rule, self)


def _rule_result_clean(inst, rule, st) -> bool:
    """Array results an evaluation rule writes with XLA's FTZ (the elementwise factory's rules
    say so with `ftz_result`), and integer -> float converts."""
    if inst.shape.is_tuple:
        return False
    if getattr(rule, "ftz_result", False):
        return True
    if inst.opcode == "convert" and inst.operands:
        src = st.comp.by_name[inst.operands[0]].shape
        return not src.is_tuple and (src.element_type == "pred" or src.element_type[0] in "su")
    return False


def _flushing(shape) -> bool:
    if shape.is_tuple:
        return True
    try:
        return np_dtype(shape) in _FLUSHED or shape.element_type == "bf16"
    except Exception:                      # tokens, opaque
        return False


def _may_hold_subnormals(value) -> bool:
    if not isinstance(value, np.ndarray):
        return True
    dt = value.dtype
    if dt not in _FLUSHED:
        return dt.kind == "V"              # bf16 and friends: do not vouch
    if dt.kind == "c":
        return _may_hold_subnormals(value.real) or _may_hold_subnormals(value.imag)
    return subnormals(value) is not None


# ============================================================================ constant folding

def fold_constant(inst, operand_values):
    """The value of `inst` if it is pure and all its operands are compile-time constants, else None."""
    op = inst.opcode
    if op not in _FOLDABLE or any(v is None for v in operand_values):
        return None
    if op == "constant" and (inst.literal is None or inst.literal.elided):
        return None
    if inst.shape.is_tuple or inst.shape.is_dynamic:
        return None
    rule = rule_for(op)
    if rule is None:
        return None
    try:
        with np.errstate(all="ignore"):
            value = rule(inst, list(operand_values), None)
    except Exception:                       # left to run time, where errors are reported
        return None
    if not isinstance(value, np.ndarray) or conforms(value, inst.shape) is not None:
        return None
    if value.size > _FOLD_MAX_ELEMENTS and 0 not in value.strides:
        return None
    if value.flags.writeable:
        value = value.view()
        value.flags.writeable = False
    return value


# ============================================================================ helpers

def _shape_dtype(inst):
    s = inst.shape
    if s.is_tuple or s.is_dynamic:
        return None
    try:
        return np_dtype(s)
    except Exception:
        return None


def _operand_dtypes(ops, st):
    return [_shape_dtype(st.node(j)) for j in ops]


def _scalar_safe(fn, rank0):
    if not rank0:
        return fn
    return lambda *a: np.asarray(fn(*a))


# ============================================================================ float arithmetic

_minimum = np.minimum.reduce


def _float_arith(opcode, ufunc):
    def prep(inst, ops, st):
        dt = _shape_dtype(inst)
        if dt not in _TINY or len(ops) != 2 or any(d != dt for d in _operand_dtypes(ops, st)):
            return None
        tiny = _TINY[dt]
        rule = rule_for(opcode)
        daz_a, daz_b = not st.is_clean(ops[0]), not st.is_clean(ops[1])

        def slow(a, b):                                  # NaN or a small result: the rule decides
            return rule(inst, [a, b], None)

        hw = hardware()
        if hw is not None:
            fset, on, off = hw

            def fn(a, b):                                # the processor flushes, as in XLA
                fset(on)                                 # (fpenv.flushing inlined: a hot path)
                try:
                    r = ufunc(a, b)
                finally:
                    fset(off)
                if r.__class__ is not ndarray:
                    r = np.asarray(r)
                if r.size:
                    low = _minimum(r, axis=None)         # NaN if a NaN is present
                    if low != low:
                        return slow(a, b)                # a NaN's sign is the rule's business
                return r
            fn.hw_ufunc = ufunc                          # (compiler.py: runs of such steps)
            return Fast(fn, clean=True, elementwise=True)

        def fn(a, b):
            r = ufunc(flush(a) if daz_a else a, flush(b) if daz_b else b)
            if r.__class__ is not ndarray:
                r = np.asarray(r)
            if r.size:
                m = np.abs(r)
                low = m.min()                            # NaN if a NaN is present
                if not low >= tiny and not (low == 0 and not ((m < tiny) & (m > 0)).any()):
                    return slow(a, b)
            return r
        return Fast(fn, clean=True, elementwise=True)
    return prep


# ============================================================================ integers and pred

_INT_UFUNCS = {"add": np.add, "subtract": np.subtract, "multiply": np.multiply, "and": np.bitwise_and,
               "or": np.bitwise_or, "xor": np.bitwise_xor}
_PRED_UFUNCS = {"add": np.logical_or, "multiply": np.logical_and, "and": np.logical_and,
                "or": np.logical_or, "xor": np.logical_xor}
_UNSIGNED = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
_SIGNED = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}


def _int_binary(opcode):
    def prep(inst, ops, st):
        dt = _shape_dtype(inst)
        if dt is None or len(ops) != 2 or any(d != dt for d in _operand_dtypes(ops, st)):
            return None
        rank0 = inst.shape.rank == 0
        if dt.kind in "iu":
            uf = _INT_UFUNCS.get(opcode)
        elif dt.kind == "b":
            uf = _PRED_UFUNCS.get(opcode)
        else:
            return None
        if uf is None:
            return None
        return Fast(_scalar_safe(uf, rank0), clean=True, ufunc=None if rank0 else uf, elementwise=True)
    return prep


def _arith(opcode, ufunc):
    fprep, iprep = _float_arith(opcode, ufunc), _int_binary(opcode)

    def prep(inst, ops, st):
        dt = _shape_dtype(inst)
        if dt in _TINY:
            return fprep(inst, ops, st)
        return iprep(inst, ops, st)
    return prep


def _shift(kind):
    def prep(inst, ops, st):
        dt = _shape_dtype(inst)
        if dt is None or dt.kind not in "iu" or any(d != dt for d in _operand_dtypes(ops, st)):
            return None
        rank0 = inst.shape.rank == 0
        if kind == "left":
            fn = np.left_shift
        else:
            want = _UNSIGNED if kind == "logical" else _SIGNED
            view = want[dt.itemsize]
            if view == dt:
                fn = np.right_shift
            else:
                def fn(a, b, view=view, dt=dt):
                    return np.right_shift(a.view(view), b.view(view)).view(dt)
        plain = fn in (np.left_shift, np.right_shift) and not rank0
        return Fast(_scalar_safe(fn, rank0), clean=True, ufunc=fn if plain else None, elementwise=True)
    return prep


def _not(inst, ops, st):
    dt = _shape_dtype(inst)
    if dt is None or _operand_dtypes(ops, st)[0] != dt:
        return None
    if dt.kind == "b":
        fn = np.logical_not
    elif dt.kind in "iu":
        fn = np.invert
    else:
        return None
    return Fast(_scalar_safe(fn, inst.shape.rank == 0), clean=True, elementwise=True)


def _negate(inst, ops, st):
    dt = _shape_dtype(inst)
    if dt is None or _operand_dtypes(ops, st)[0] != dt or not (dt.kind in "iu" or dt in _TINY):
        return None
    return Fast(_scalar_safe(np.negative, inst.shape.rank == 0), clean=st.is_clean(ops[0]), elementwise=True)


# ============================================================================ compare, select

_COMPARE = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
            "GT": np.greater, "GE": np.greater_equal}


def _compare(inst, ops, st):
    dts = _operand_dtypes(ops, st)
    dt = dts[0]
    if dt is None or dts[1] != dt:
        return None
    direction = str(inst.attrs.get("direction"))
    uf = _COMPARE.get(direction)
    ctype = inst.attrs.get("type")
    ctype = None if ctype is None else str(ctype)
    if uf is None or ctype == "TOTALORDER":
        return None
    rank0 = inst.shape.rank == 0
    if dt in _TINY:
        if ctype not in (None, "FLOAT"):
            return None
        daz_a, daz_b = not st.is_clean(ops[0]), not st.is_clean(ops[1])
        if daz_a or daz_b:
            def fn(a, b):
                return uf(flush(a) if daz_a else a, flush(b) if daz_b else b)
        else:
            fn = uf
    elif dt.kind in "iub":
        fn = uf                                         # the rule compares integers by their dtype
    else:
        return None
    return Fast(_scalar_safe(fn, rank0), clean=True, elementwise=True)


def _select(inst, ops, st):
    dts = _operand_dtypes(ops, st)
    p = st.node(ops[0])
    if p.shape.is_tuple or p.shape.rank == 0 or dts[0] != np.dtype(bool):
        return None
    dt = _shape_dtype(inst)
    if dt is None or dts[1] != dt or dts[2] != dt:
        return None
    if dt.kind == "V" or (dt.itemsize == 1 and dt.kind == "f"):
        return None          # bf16 / f8 NaNs come out as XLA's f32 round trip makes them: the rule
    clean = st.is_clean(ops[1]) and st.is_clean(ops[2])
    if dt.kind in "iubfc":
        return Fast(np.where, clean=clean, elementwise=True)
    return Fast(lambda c, t, f: np.where(c, t, f).astype(dt, copy=False), clean=clean, elementwise=True)


# ============================================================================ shape ops and plumbing

def _broadcast(inst, ops, st):
    src = st.node(ops[0]).shape
    if inst.shape.is_dynamic or src.is_dynamic or src.is_tuple:
        return None
    dims = tuple(inst.attrs.get("dimensions") or ())
    order = sorted(range(len(dims)), key=lambda k: dims[k])
    perm = None if order == list(range(len(dims))) else tuple(order)
    sdims = [dims[k] for k in order]
    out = tuple(inst.shape.dims)
    view = [1] * len(out)
    for k, d in enumerate(sdims):
        view[d] = src.dims[order[k]]
    view = tuple(view)
    dt = _shape_dtype(inst)
    if dt is None:
        return None
    if perm is None and tuple(src.dims) == out and _shape_dtype(st.node(ops[0])) == dt:
        return Fast(kind=SAME, clean=st.clean.get(ops[0], False))      # (XLA's no-op broadcasts)
    expand = [d for d in range(len(out)) if view[d] == 1 and out[d] != 1]

    def fn(x):
        if perm is not None:
            x = x.transpose(perm)
        x = x.reshape(view)
        if not x.flags.c_contiguous or x.dtype != dt:
            return np.broadcast_to(x, out)
        strides = list(x.strides)
        for d in expand:
            strides[d] = 0
        # a view of x with zero strides along the new dimensions (what np.broadcast_to makes,
        # without its argument handling), read-only like broadcast_to's
        r = np.ndarray(out, dt, x, 0, strides)
        r.flags.writeable = False
        return r
    fn.flag_free = True
    return Fast(fn, clean=st.is_clean(ops[0]))


def _reshape(inst, ops, st):
    if inst.shape.is_dynamic or st.node(ops[0]).shape.is_dynamic:
        return None
    dims = tuple(inst.shape.dims)
    if tuple(st.node(ops[0]).shape.dims) == dims and _shape_dtype(st.node(ops[0])) == _shape_dtype(inst):
        return Fast(kind=SAME, clean=st.clean.get(ops[0], False))
    return Fast(_flag_free(lambda x: x.reshape(dims)), clean=st.is_clean(ops[0]))


def _transpose(inst, ops, st):
    perm = tuple(inst.attrs["dimensions"])
    return Fast(_flag_free(lambda x: x.transpose(perm)), clean=st.is_clean(ops[0]))


def _flag_free(fn):
    """Mark `fn` as doing no float arithmetic (a view): it may run with the processor's FTZ/DAZ
    flags set, inside a run of float steps (compiler.py)."""
    fn.flag_free = True
    return fn


def _identity(inst, ops, st):
    return Fast(kind=SAME, clean=st.clean.get(ops[0], False))


def _gte(inst, ops, st):
    index = int(inst.attrs["index"])
    src = st.clean.get(ops[0])
    clean = src[index] if isinstance(src, tuple) and index < len(src) else not _flushing(inst.shape)
    return Fast(index, ELEMENT, clean=clean)


def _tuple(inst, ops, st):
    return Fast(kind=TUPLE, clean=tuple(st.clean.get(j, False) for j in ops))


def _call(inst, ops, st):
    """The callee compiled for what is known of its arguments (so its parameters skip the DAZ
    pass when the caller's values are clean); its root's cleanliness comes back."""
    name = inst.attrs["to_apply" if inst.opcode == "call" else "calls"].name
    callee = st.callee(name, tuple(st.clean.get(j, False) for j in ops)) if st.callee else None
    if callee is None:                          # recursion: the plain call
        def fn(ec, *args):
            return ec.call(name, args)
        return Fast(fn, WITH_EC, clean=not _flushing(inst.shape))
    from .compiler import run_compiled

    def fn(ec, *args):
        return run_compiled(ec, callee, args)
    fn.callee = callee                          # (compiler._inline)
    fast = Fast(fn, WITH_EC, clean=callee.root_clean)
    fast.callee = callee
    return fast


def _while(inst, ops, st):
    """A while loop whose condition and body are compiled: compiler.run_while.  With --profile
    or a progress callback, the rule (per-call runs)."""
    if st.callee is None or len(ops) != 1:
        return None
    cname, bname = inst.attrs["condition"].name, inst.attrs["body"].name
    cond, body = st.callee(cname, None), st.callee(bname, None)
    if cond is None or body is None:
        return None
    from .compiler import run_while
    rule = rule_for("while")

    def fn(ec, state):
        if ec.profile is not None or ec.progress is not None:
            return rule(inst, [state], ec)
        return run_while(ec, cond, body, state, ec.options.max_iterations, cname)
    return Fast(fn, WITH_EC, clean=not _flushing(inst.shape))


def _dot(inst, ops, st):
    """f32 and f64 dots: the rule's arithmetic (f32 accumulated in f64, XLA's -0 rule, FTZ) with
    the dimension bookkeeping done once."""
    from .ops.linalg import f32_blas
    dt = _shape_dtype(inst)
    if dt not in _TINY or any(d != dt for d in _operand_dtypes(ops, st)):
        return None
    ls, rs = st.node(ops[0]).shape.dims, st.node(ops[1]).shape.dims
    lb, lc = (tuple(inst.attrs.get(n) or ()) for n in ("lhs_batch_dims", "lhs_contracting_dims"))
    rb, rc = (tuple(inst.attrs.get(n) or ()) for n in ("rhs_batch_dims", "rhs_contracting_dims"))
    lf = [d for d in range(len(ls)) if d not in lb and d not in lc]
    rf = [d for d in range(len(rs)) if d not in rb and d not in rc]
    lperm, rperm = tuple(list(lb) + lf + list(lc)), tuple(list(rb) + list(rc) + rf)

    def prod(dims):
        n = 1
        for d in dims:
            n *= d
        return n
    b, m, k = prod(ls[d] for d in lb), prod(ls[d] for d in lf), prod(ls[d] for d in lc)
    n = prod(rs[d] for d in rf)
    if k < 2:                                    # one-term and empty sums: the rule
        return None
    l3, r3, res = (b, m, k), (b, k, n), tuple(inst.shape.dims)
    daz_a, daz_b = not st.is_clean(ops[0]), not st.is_clean(ops[1])
    wide = dt == F32 and not f32_blas(b, m, k, n)
    zero = dt.type(0)

    def fn(x, y):
        x = x.transpose(lperm).reshape(l3)
        y = y.transpose(rperm).reshape(r3)
        if daz_a:
            x = flush(x)
        if daz_b:
            y = flush(y)
        if wide:
            out = matmul(x.astype(F64), y.astype(F64))
            out += zero                          # a sum of two or more terms never ends at -0
            out = flush(out.astype(F32))
        else:
            out = matmul(x, y)
            out += zero
            out = flush(out)
        return out.reshape(res)

    def fn_hw(x, y):                             # large f32: the processor flushes, as in XLA
        out = matmul(x.transpose(lperm).reshape(l3), y.transpose(rperm).reshape(r3), True)
        out += zero
        return out.reshape(res)
    if dt == F32 and not wide and hardware() is not None:
        return Fast(fn_hw, clean=True)
    if wide and hardware_casts():
        # small f32: the conversions to f64 read subnormals as zeros with the processor's DAZ
        # flag set (hardware_casts checked it does what flush does); the result is rounded to
        # f32 and flushed as the rule does (x86's own FTZ on that conversion detects tininess
        # before rounding to the subnormal grid, which flushes a few more values)
        fset, on, off = hardware()
        lkeep, rkeep = lperm == tuple(range(len(ls))), rperm == tuple(range(len(rs)))

        from .parallel import SPLIT_MIN_MACS
        mm = np.matmul if b * m * k * n < SPLIT_MIN_MACS else matmul    # (what matmul calls then)

        def fn_cast(x, y):
            x = x.reshape(l3) if lkeep else x.transpose(lperm).reshape(l3)
            y = y.reshape(r3) if rkeep else y.transpose(rperm).reshape(r3)
            fset(on)
            try:
                x, y = x.astype(F64), y.astype(F64)
            finally:
                fset(off)
            out = mm(x, y)
            out += zero
            return flush(out.astype(F32)).reshape(res)
        if mm is np.matmul:                      # (loopgen.py: the same product, its casts hoisted)
            fn_cast.raw_dot = (lperm if not lkeep else None, l3, rperm if not rkeep else None, r3, res)
        return Fast(fn_cast, clean=True)
    return Fast(fn, clean=True)


_casts: list = []


def hardware_casts() -> bool:
    """True when, with the processor's FTZ/DAZ flags set, NumPy's f32 -> f64 conversion reads
    subnormals as zeros of their sign (checked once, on short and long arrays, against the
    software flush)."""
    if not _casts:
        _casts.append(_probe_casts())
    return _casts[0]


def _probe_casts() -> bool:
    hw = hardware()
    if hw is None:
        return False
    f32 = np.array([0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754942e-38, -1.1754942e-38, 2.0 ** -126,
                    -(2.0 ** -126), 1.0, -2.5, 3.4028235e38, np.inf, -np.inf, np.nan, 5e-39, 7e-42], np.float32)
    fset, on, off = hw
    tiled = np.tile(f32, (3, 7))
    # the vectorized loops and their remainders, strided and transposed operands
    for a in (f32, np.tile(f32, 7), f32[::-2], tiled.T, tiled[:, ::3]):
        with np.errstate(all="ignore"):
            want = flush(a).astype(F64)
            fset(on)
            try:
                got = a.astype(F64)
            finally:
                fset(off)
        if got.tobytes() != want.tobytes():
            return False
    return True


# ============================================================================ reduce

def _reduce(inst, ops, st):
    """f32/f64 add-, max- and min-reduces of one array with a scalar init (the rule's
    decoding done once): sums follow the rule's order exactly (XLA's windows of 32, then one
    NumPy left fold per stage with the processor's FTZ/DAZ, the init once at the end for the
    library-sized ones); max/min take NumPy's extreme and leave NaN, zero and subnormal results
    to the rule."""
    if len(ops) != 2 or st.module is None:
        return None
    hw = hardware()
    src = st.node(ops[0])
    s, shape = src.shape, inst.shape
    if s.is_tuple or s.is_dynamic or shape.is_tuple or shape.is_dynamic or src.opcode == "concatenate":
        return None
    dt = _shape_dtype(inst)
    rdims = inst.attrs["dimensions"]
    if rdims and all(0 <= d < s.rank and s.dims[d] == 1 for d in rdims) and dt is not None:
        # one element per output: XLA's simplifier makes the reduce a reshape (the init unused)
        out_dims = tuple(shape.dims)
        return Fast(lambda x, i: x.reshape(out_dims).astype(dt), clean=st.is_clean(ops[0]))
    if dt not in _TINY or _shape_dtype(src) != dt:
        return None
    init = st.const.get(ops[1])
    ishape = st.node(ops[1]).shape
    if ishape.is_tuple or ishape.rank != 0 or _shape_dtype(st.node(ops[1])) != dt:
        return None
    from types import SimpleNamespace

    from . import computations as C
    red = C.reducer(SimpleNamespace(module=st.module), inst.attrs["to_apply"].name, 1)
    if red.pair or not red.kinds or red.kinds[0] is None:
        return None
    kind = red.kinds[0][0]
    dims = sorted(int(d) for d in inst.attrs["dimensions"])
    xdims = tuple(s.dims)
    keep = [d for d in range(len(xdims)) if d not in dims]
    out_shape = tuple(shape.dims)
    if not dims or any(xdims[d] == 0 for d in dims) or all(xdims[d] == 1 for d in dims) \
            or 0 in out_shape or tuple(xdims[d] for d in keep) != out_shape:
        return None
    rule = rule_for("reduce")
    if kind in ("maximum", "minimum"):
        uf = np.maximum if kind == "maximum" else np.minimum
        axes = tuple(dims)
        tiny = _TINY[dt]
        scalar = out_shape == ()

        def fn(ec, x, i):
            r = uf.reduce(x, axis=axes, initial=i[()])
            if scalar:
                r = np.asarray(r)
            if not _minimum(np.abs(r), axis=None) >= tiny:       # NaN, zero, subnormal: the rule
                return rule(inst, [x, i], ec)
            return r
        fn.raw_minmax = (uf, axes, scalar)      # (loopgen.py)
        return Fast(fn, WITH_EC)                # (the rule keeps a lone subnormal winner's bits)
    if kind != "add" or hw is None:
        return None
    n = 1
    for d in xdims:
        n *= d
    library = n >= C.LIBRARY_REDUCE_MIN and len(xdims) <= C.LIBRARY_REDUCE_MAX_RANK
    tiny = _TINY[dt]
    zero = dt.type(0)
    if init is not None and not library:
        known = dt.type(C.flush(init)[()])
        if known == 0 and np.signbit(known):
            return None
    fset, on, off = hw
    add_reduce, add = np.add.reduce, np.add
    # the window stages (computations._native_sum), then the final fold: all static
    stages = []
    cur = xdims
    while any(cur[d] > C.TREE_WINDOW for d in dims):
        pads, split, pos_axes, out_axes, stage_shape = C.tree_stage(cur, dims)
        padded = None
        if any(lo or hi for lo, hi in pads):
            padded = (tuple(m + lo + hi for m, (lo, hi) in zip(cur, pads)),
                      tuple(slice(lo, lo + m) for m, (lo, _) in zip(cur, pads)))
        p = o = 1
        for a in pos_axes:
            p *= split[a]
        for a in out_axes:
            o *= split[a]
        stages.append((padded, tuple(split), tuple(pos_axes + out_axes), (p, o), tuple(stage_shape)))
        cur = tuple(stage_shape)
    p = o = 1
    for d in dims:
        p *= cur[d]
    for d in keep:
        o *= cur[d]
    final = (tuple(dims + keep), (p, o))

    def start_of(i):
        """The value the fold starts from, or None where the rule decides (a -0 or subnormal init
        starting the fold); with the processor's flags clear."""
        if library:                     # the elements summed from +0, the init added at the end
            return zero
        start = i[()]                   # the init (read with DAZ) starts the fold; -0: the rule
        if not abs(start) >= tiny and (start != 0 or np.signbit(start)):
            return None
        return start

    def flagged(x, i, start):
        """The sum from `start` (start_of), with the processor's FTZ/DAZ flags already set."""
        for padded, split, perm, rows, stage_shape in stages:
            if padded is not None:
                z = np.zeros(padded[0], dt)
                z[padded[1]] = x
                x = z
            r = np.ascontiguousarray(x.reshape(split).transpose(perm)).reshape(rows)
            x = add_reduce(r, axis=0, initial=start).reshape(stage_shape)
        r = np.ascontiguousarray(x.transpose(final[0])).reshape(final[1])
        r = add_reduce(r, axis=0, initial=start).reshape(out_shape)
        if library:
            r = add(i[()], r)
        if r.__class__ is not ndarray:
            r = np.asarray(r)
        return r

    def fn(ec, x, i):
        start = start_of(i)
        if start is None:
            return rule(inst, [x, i], ec)
        fset(on)
        try:
            return flagged(x, i, start)
        finally:
            fset(off)
    fn.raw_sum = (flagged, start_of)    # (loopgen.py)
    if not stages and not library:      # (loopgen.py: one NumPy reduce, `final` in its operand's order)
        fn.raw_fold = (None if final[0] == tuple(range(len(xdims))) else final[0], final[1], out_shape)
    return Fast(fn, WITH_EC, clean=True)


# ============================================================================ float unary ops

def _unary_f64(np_fn, daz):
    """An f32 unary op the rule computes as `np_fn` in f64 rounded to f32 (f64: `np_fn` itself),
    with DAZ of the operand for the types in `daz`; a result holding a NaN, a zero or a subnormal
    goes to the rule (NaN signs, FTZ)."""
    def prep(inst, ops, st):
        dt = _shape_dtype(inst)
        if dt not in _TINY or _operand_dtypes(ops, st)[0] != dt or inst.shape.num_elements == 0:
            return None
        rule = rule_for(inst.opcode)
        if not _factory_rule(rule):
            return None
        tiny = _TINY[dt]
        flush_in = dt in daz and not st.is_clean(ops[0])
        wide = dt == F32
        rank0 = inst.shape.rank == 0

        def fn(x):
            y = flush(x) if flush_in else x
            r = np_fn(y.astype(F64)).astype(F32) if wide else np_fn(y)
            if rank0:
                r = np.asarray(r)
            if not _minimum(np.abs(r), axis=None) >= tiny:
                return rule(inst, [x], None)
            return r
        if wide:                                 # (loopgen.py: the f64 core, run with the flags set)
            fn.raw_unary = np_fn
        return Fast(fn, clean=bool(getattr(rule, "ftz_result", False)), elementwise=True)
    return prep


def _factory_rule(rule) -> bool:
    """True for a rule made by the elementwise factory (ops/elementwise.unary), the one these fast
    paths reproduce; a rule put in its place (a test's, a plugin's) runs as it is."""
    return rule is not None and hasattr(rule, "ftz_result")


def _rsqrt_core(v):
    return 1 / np.sqrt(v)


def _sqrt_prep(inst, ops, st):
    """sqrt: np.sqrt of the flushed operand in the operand's own type (the rule's _sqrt)."""
    dt = _shape_dtype(inst)
    if dt not in _TINY or _operand_dtypes(ops, st)[0] != dt or inst.shape.num_elements == 0:
        return None
    rule = rule_for("sqrt")
    if not _factory_rule(rule):
        return None
    tiny = _TINY[dt]
    flush_in = not st.is_clean(ops[0])
    rank0 = inst.shape.rank == 0

    def fn(x):
        r = np.sqrt(flush(x) if flush_in else x)
        if rank0:
            r = np.asarray(r)
        if not _minimum(np.abs(r), axis=None) >= tiny:
            return rule(inst, [x], None)
        return r
    return Fast(fn, clean=True, elementwise=True)


def _minmax(opcode):
    """f32/f64 maximum/minimum: NumPy's on the flushed operands, XLA's -0 < +0 where both are
    zeros (the rule's _fmax/_fmin); a NaN in the result goes to the rule."""
    def prep(inst, ops, st):
        dt = _shape_dtype(inst)
        if dt not in _TINY or len(ops) != 2 or any(d != dt for d in _operand_dtypes(ops, st)) \
                or inst.shape.num_elements == 0:
            return None
        rule = rule_for(opcode)
        if not _factory_rule(rule):
            return None
        daz_a, daz_b = not st.is_clean(ops[0]), not st.is_clean(ops[1])
        uf = np.maximum if opcode == "maximum" else np.minimum
        big = opcode == "maximum"
        rank0 = inst.shape.rank == 0

        def fn(a, b):
            x = flush(a) if daz_a else a
            y = flush(b) if daz_b else b
            r = uf(x, y)
            if rank0:
                r = np.asarray(r)
            low = _minimum(np.abs(r), axis=None)
            if low > 0:
                return r
            if low != low:
                return rule(inst, [a, b], None)          # NaN: the rule's signs
            both = (x == 0) & (y == 0)
            if both.any():
                r = np.where(both, x + y if big else -((-x) + (-y)), r)
            return r
        return Fast(fn, clean=True, elementwise=True)
    return prep


# ============================================================================ slicing and joining

def _all_clean(ops, st):
    return all(st.is_clean(j) for j in ops)


def _slice(inst, ops, st):
    """operand[start:limit:stride], copied (the rule's np.array of the view)."""
    if inst.shape.is_dynamic or st.node(ops[0]).shape.is_dynamic:
        return None
    key = tuple(slice(d.start, d.limit, d.stride) for d in inst.attrs["slice"].dimensions)
    array = np.array
    return Fast(lambda x: array(x[key]), clean=st.is_clean(ops[0]))


def _concatenate(inst, ops, st):
    if inst.shape.is_dynamic or any(st.node(j).shape.is_dynamic for j in ops):
        return None
    axis = inst.attrs["dimensions"][0]
    cat = np.concatenate
    return Fast(lambda *xs: cat(xs, axis=axis), clean=_all_clean(ops, st))


def _index_reader(ops, st, dims, sizes):
    """For the start-index operands `ops` of a dynamic-(update-)slice: (constant part of the key,
    [(operand position, dimension, largest start)] of the others), or None when an index is not
    a scalar (the legacy index-vector form: the rule)."""
    key, dyn = [], []
    for pos, (j, n, size) in enumerate(zip(ops, dims, sizes)):
        s = st.node(j).shape
        if s.is_tuple or s.rank != 0:
            return None
        hi = max(n - size, 0)
        c = st.const.get(j)
        if c is not None:
            v = min(max(int(c), 0), hi)
            key.append(slice(v, v + size))
        else:
            key.append(None)
            dyn.append((pos, len(key) - 1, hi, size))
    return key, dyn


def _dynamic_slice(inst, ops, st):
    """operand[start:start+size] with every start clamped into [0, dim - size], copied."""
    src = st.node(ops[0]).shape
    if src.is_dynamic or inst.shape.is_dynamic or len(ops) != 1 + src.rank:
        return None
    sizes = tuple(inst.attrs["dynamic_slice_sizes"])
    r = _index_reader(ops[1:], st, src.dims, sizes)
    if r is None:
        return None
    base, dyn = r
    array = np.array

    def where(*idx):
        key = list(base)
        for pos, d, hi, size in dyn:
            v = int(idx[pos])
            v = 0 if v < 0 else (hi if v > hi else v)
            key[d] = slice(v, v + size)
        return tuple(key)
    where.spec = (base, dyn)

    def fn(x, *idx):
        return array(x[where(*idx)])
    fn.where = where                    # (loopgen.py: a view where nothing keeps it)
    return Fast(fn, clean=st.is_clean(ops[0]))


def _dynamic_update_slice(inst, ops, st):
    """A copy of the operand with the update written at the clamped start indices."""
    src, upd = st.node(ops[0]).shape, st.node(ops[1]).shape
    if src.is_dynamic or upd.is_dynamic or inst.shape.is_dynamic or len(ops) != 2 + src.rank:
        return None
    if _shape_dtype(st.node(ops[0])) != _shape_dtype(st.node(ops[1])):
        return None
    r = _index_reader(ops[2:], st, src.dims, tuple(upd.dims))
    if r is None:
        return None
    base, dyn = r
    array = np.array

    def where(*idx):
        key = list(base)
        for pos, d, hi, size in dyn:
            v = int(idx[pos])
            v = 0 if v < 0 else (hi if v > hi else v)
            key[d] = slice(v, v + size)
        return tuple(key)
    where.spec = (base, dyn)

    def fn(x, u, *idx):
        out = array(x)
        out[where(*idx)] = u
        return out
    fn.where = where                    # (loopgen.py: the update written in place)
    return Fast(fn, clean=st.is_clean(ops[0]) and st.is_clean(ops[1]))


def _reduce_window(inst, ops, st):
    """An f32/f64 add reduce-window whose windows tile the operand exactly (stride = size, no
    padding, no dilation: XLA's tree rewrite of long reductions): each output the sequential
    sum, from the init value, of its window in row-major order -- the rule's fold -- as one
    NumPy accumulate over the windows' positions with the processor's FTZ/DAZ (partial sums
    flushed, as XLA does)."""
    hw = hardware()
    if hw is None or len(ops) != 2 or st.module is None:
        return None
    src = st.node(ops[0]).shape
    dt = _shape_dtype(inst)
    if dt not in _TINY or _shape_dtype(st.node(ops[0])) != dt or src.rank == 0 or src.is_dynamic:
        return None
    ishape = st.node(ops[1]).shape
    if ishape.is_tuple or ishape.rank != 0 or _shape_dtype(st.node(ops[1])) != dt:
        return None
    from types import SimpleNamespace

    from . import computations as C
    red = C.reducer(SimpleNamespace(module=st.module), inst.attrs["to_apply"].name, 1)
    if red.pair or not red.kinds or red.kinds[0] is None or red.kinds[0][0] != "add":
        return None
    wd = C.window_dims(inst.attrs.get("window"), src.rank)
    dims = tuple(src.dims)
    if C._scan_form(dims, wd) is not None or wd[-1].size == 1:
        return None         # no window along the minor dimension (pooling): the rule's sweep is faster
    split, outs, size = [], [], 1
    for n, w in zip(dims, wd):
        if w.stride != w.size or w.lo or w.hi or w.wdil != 1 or w.bdil != 1 or w.size < 1 or n % w.size:
            return None
        split += [n // w.size, w.size]
        outs.append(n // w.size)
        size *= w.size
    outs = tuple(outs)
    if outs != tuple(inst.shape.dims) or size < 2 or 0 in outs:
        return None
    rank = src.rank
    perm = tuple(2 * d + 1 for d in range(rank)) + tuple(2 * d for d in range(rank))
    o = 1
    for m in outs:
        o *= m
    fset, on, off = hw
    # the rows of a C-contiguous (positions, outputs) array added in order: NumPy's reduce does
    # that for two or more outputs; for one the positions become its inner loop, which it sums
    # pairwise, so that one takes the accumulate
    # (from -0.0, the exact identity of IEEE addition: NumPy's own start, +0, turns a window of
    # -0s summed from a -0 init into +0)
    add_rows = (lambda a, axis: np.add.reduce(a, axis=axis, initial=-0.0)) if o >= 2 else \
        (lambda a, axis: np.add.accumulate(a, axis=axis)[-1])

    def fn(x, i):
        seq = np.empty((size + 1, o), dt)              # positions first, the init on top
        seq[0] = i
        seq[1:] = x.reshape(split).transpose(perm).reshape(size, o)
        fset(on)
        try:
            r = add_rows(seq, axis=0)
        finally:
            fset(off)
        return r.reshape(outs)
    return Fast(fn, clean=True)


def _bitcast(inst, ops, st):
    """A bitcast that keeps the element type: the operand in memory order (its layout), read in
    the result's memory order (the rule's reinterpretation, by reshapes and transposes)."""
    shape, src = inst.shape, st.node(ops[0]).shape
    if shape.is_tuple or src.is_tuple or shape.is_dynamic or src.is_dynamic or shape.rank == 0:
        return None
    dt = _shape_dtype(inst)
    if dt is None or _shape_dtype(st.node(ops[0])) != dt:
        return None
    given = inst.operand_shapes[0] if inst.operand_shapes else None
    layout = given.layout if given is not None and given.layout is not None else src.layout
    into = None
    if layout is not None and src.rank:
        into = tuple(reversed(layout.minor_to_major))
        if into == tuple(range(src.rank)):
            into = None
    lay = shape.layout
    m2m = tuple(lay.minor_to_major) if lay is not None else tuple(range(shape.rank - 1, -1, -1))
    major_to_minor = tuple(reversed(m2m))
    pdims = tuple(shape.dims[d] for d in major_to_minor)
    back = None if major_to_minor == tuple(range(shape.rank)) else tuple(int(d) for d in np.argsort(major_to_minor))

    def fn(x):
        if into is not None:
            x = x.transpose(into)
        x = x.reshape(pdims)
        return x if back is None else x.transpose(back)
    return Fast(_flag_free(fn), clean=st.is_clean(ops[0]))


_NATIVE_INTS = frozenset(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                                               np.uint32, np.uint64, np.bool_))


def _convert(inst, ops, st):
    """Integer and pred conversions among the native widths: NumPy's cast wraps, sign-extends
    and reads nonzero as true, as XLA's convert does."""
    dt, src = _shape_dtype(inst), _shape_dtype(st.node(ops[0]))
    if dt not in _NATIVE_INTS or src not in _NATIVE_INTS:
        return None
    return Fast(lambda x: x.astype(dt), clean=True, elementwise=True)


_PREPARERS = {
    "dot": _dot,
    "add": _arith("add", np.add), "subtract": _arith("subtract", np.subtract),
    "multiply": _arith("multiply", np.multiply), "divide": _float_arith("divide", np.divide),
    "and": _int_binary("and"), "or": _int_binary("or"), "xor": _int_binary("xor"),
    "shift-left": _shift("left"), "shift-right-logical": _shift("logical"),
    "shift-right-arithmetic": _shift("arithmetic"),
    "not": _not, "negate": _negate, "compare": _compare, "select": _select,
    "broadcast": _broadcast, "reshape": _reshape, "transpose": _transpose,
    "copy": _identity, "opt-barrier": _identity,
    "get-tuple-element": _gte, "tuple": _tuple, "call": _call,
    "reduce": _reduce, "fusion": _call, "while": _while, "bitcast": _bitcast, "convert": _convert,
    "reduce-window": _reduce_window,
    "slice": _slice, "concatenate": _concatenate, "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
    "exponential": _unary_f64(np.exp, (F32, F64)), "tanh": _unary_f64(np.tanh, (F64,)),
    "rsqrt": _unary_f64(_rsqrt_core, (F32, F64)), "sqrt": _sqrt_prep,
    "maximum": _minmax("maximum"), "minimum": _minmax("minimum"),
}


def prepare(inst, ops, st) -> Fast | None:
    """A specialised step for `inst` (operand steps `ops`), or None for its evaluation rule."""
    p = _PREPARERS.get(inst.opcode)
    if p is None:
        return None
    try:
        return p(inst, ops, st)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError):
        return None                          # unusual attributes: the rule reports them at run time
