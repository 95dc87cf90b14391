"""The machinery of prepared steps, shared by every rule's *prepare* stage and the compiler.

A rule may register a prepare stage next to itself (``@prepares(opcode)`` in its ops/ module,
hlo_cli/interpreter/registry.py): called once per instruction at compile time
(hlo_cli/interpreter/compiler.py) with the instruction, the indices of its operand steps and what
compile time knows (``Static``), it returns a specialised kernel (``Fast``) or None, and then the
rule itself runs.  A kernel computes exactly what its rule computes (the rule stays the reference
and gets the cases it must decide: a NaN's sign, zeros, subnormals).

This module holds what is not about one opcode:

* ``Fast`` (a prepared step) and the step kinds (FOLDED, PURE, WITH_EC, ...);
* ``Static``: folded values and which values are *clean* -- f32/f64 arrays known to hold no
  subnormals (results of FTZ arithmetic, constants checked at compile time, the shape ops of clean
  values), so that their consumers skip the DAZ pass;
* XLA CPU's FTZ/DAZ in software (``TINY``, ``subnormals``, ``flush``) and the probe of the
  processor's own (``hardware_casts``);
* probes of the NaN bits NumPy's loops give (``probe_layouts``, ``minmax_keeps_nan``), which let
  the prepare stages keep a NaN result where it is already the rule's;
* constant folding (``fold_constant``): constants and the pure ops applied only to constants are
  computed once at compile time;
* small helpers the prepare stages share (``shape_dtype``, ``scalar_safe``, ``flag_free``...).
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, replace

import numpy as np

from .fpenv import hardware
from .registry import rule_for
from .values import conforms, np_dtype

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)
C64 = np.dtype(np.complex64)
C128 = np.dtype(np.complex128)
_FLUSHED = {F32, F64, C64, C128}
min_reduce = np.minimum.reduce       # (NaN if a NaN is present)
_probe_lock = threading.Lock()

# The opcodes constant folding computes when every operand is a compile-time constant: pure ops
# whose rules need no EvalContext and are cheap on small values.  A choice of constant folding
# (not an opcode trait): more of the elementwise family would fold correctly, these are the ones
# worth it.
FOLDABLE = frozenset("""constant broadcast reshape transpose convert iota slice concatenate reverse pad
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
            self.clean[k] = not may_hold_subnormals(value)
        elif fast is not None:
            self.clean[k] = fast.clean
        elif inst.opcode == "parameter":
            known = self.param_clean
            n = inst.parameter_number
            self.clean[k] = known[n] if known is not None and n < len(known) else not flushed_type(inst.shape)
        else:
            self.clean[k] = not flushed_type(inst.shape) or rule_result_clean(inst, rule, self)


def rule_result_clean(inst, rule, st) -> bool:
    """Array results an evaluation rule writes with XLA's FTZ (the elementwise factory's rules
    say so with `ftz_result`), or that its `result_clean(inst, st)` vouches for (convert's, for
    integer sources)."""
    if inst.shape.is_tuple:
        return False
    if getattr(rule, "ftz_result", False):
        return True
    vouch = getattr(rule, "result_clean", None)
    return vouch is not None and bool(inst.operands) and vouch(inst, st)


def flushed_type(shape) -> bool:
    """Whether values of `shape` may be flushed by XLA CPU (f32, f64, c64, c128, bf16; a tuple:
    some element may be), i.e. may not be clean without knowing more."""
    if shape.is_tuple:
        return True
    try:
        return np_dtype(shape) in _FLUSHED or shape.element_type == "bf16"
    except Exception:                      # tokens, opaque
        return False


def may_hold_subnormals(value) -> bool:
    """False when the (constant) value is known to hold no subnormal the DAZ pass would flush."""
    if not isinstance(value, np.ndarray):
        return True
    dt = value.dtype
    if dt not in _FLUSHED:
        return dt.kind == "V"              # bf16 and friends: do not vouch
    if dt.kind == "c":
        return may_hold_subnormals(value.real) or may_hold_subnormals(value.imag)
    return subnormals(value) is not None


# ============================================================================ FTZ / DAZ

TINY = {F32: F32.type(2.0 ** -126), F64: F64.type(2.0 ** -1022)}     # smallest normal numbers


def subnormals(x: np.ndarray):
    """The mask of the subnormal elements of an f32/f64 array, or None if there are none.  The
    common case costs one pass over `x` and one over its magnitudes, NaN or not: the smallest
    magnitude read as an unsigned integer (NaN and inf are the largest) is a normal number's."""
    if x.size == 0:
        return None
    a = np.abs(x)
    if not isinstance(a, np.ndarray) or a.ndim == 0:
        a = np.asarray(a)
        return None if not (0 < a < TINY[x.dtype]) else np.ones((), bool)
    ut, tiny = _BITS_OF[x.dtype]
    u = a.view(ut)
    m = np.minimum.reduce(u, axis=None)
    if m >= tiny:
        return None
    if m == 0:
        # a zero: the bit patterns minus one, zero wrapping around to the largest, are below the
        # smallest normal's exactly for the subnormals (one more pass over `a`, our own copy)
        np.subtract(u, ut(1), out=u)
        if np.minimum.reduce(u, axis=None) >= tiny - 1:
            return None
        a = np.abs(x)
    sub = (a < TINY[x.dtype]) & (a > 0)
    return sub if sub.any() else None


# (the unsigned type of a float's bits, the smallest normal's bits as a Python int: compared with
# a NumPy scalar without a conversion per call)
_BITS_OF = {F32: (np.uint32, int(TINY[F32].view(np.uint32))), F64: (np.uint64, int(TINY[F64].view(np.uint64)))}


def flush(x: np.ndarray) -> np.ndarray:
    """XLA CPU's FTZ/DAZ: denormal f32/f64 values (and complex parts) become zeros of the same sign.
    Other dtypes pass through."""
    if x.dtype == F32 or x.dtype == F64:
        sub = subnormals(x)
        if sub is None:
            return x
        return np.where(sub, np.copysign(np.zeros((), x.dtype), x), x)
    if x.dtype == C64 or x.dtype == C128:
        re, im = flush(x.real), flush(x.imag)
        if re is x.real and im is x.imag:
            return x
        out = np.empty(x.shape, x.dtype)
        out.real, out.imag = re, im
        return out
    return x


_casts: list = []


def hardware_casts() -> bool:
    """True when, with the processor's FTZ/DAZ flags set, NumPy's f32 -> f64 conversion reads
    subnormals as zeros of their sign (checked once, on short and long arrays, against the
    software flush)."""
    if not _casts:
        _casts.append(remembered("kernels._probe_casts", _probe_casts))
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


# ============================================================================ constant folding

# ---------------------------------------------------------------- NaN bits of NumPy's loops
# special operands of the probes below: NaNs of both signs, quiet and signaling, with payloads;
# infinities, zeros, normals, a subnormal (bits, per float width)
PROBE_BITS = {
    np.dtype(np.float32): (0x7FC00000, 0xFFC00000, 0x7FC12345, 0xFFD54321, 0x7F800001, 0xFF812345,
                           0x7F800000, 0xFF800000, 0x00000000, 0x80000000, 0x3FC00000, 0xC0200000,
                           0x00000010),
    np.dtype(np.float64): (0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000012345678, 0xFFFC000087654321,
                           0x7FF0000000000001, 0xFFF0000012345678, 0x7FF0000000000000, 0xFFF0000000000000,
                           0, 0x8000000000000000, 0x3FF8000000000000, 0xC004000000000000, 0x10),
}


@functools.lru_cache(maxsize=4)
def probe_layouts(dt):
    """(a, b) operand pairs holding every pair of the special operands (PROBE_BITS) in the layouts
    NumPy's ufunc loops tell apart: contiguous at every offset of a SIMD register and in its tail,
    strided, transposed 2-D, a scalar on either side (0-d and stride-0 broadcast)."""
    u = np.uint32 if dt.itemsize == 4 else np.uint64
    v = np.array(PROBE_BITS[dt], u).view(dt)
    a, b = np.repeat(v, v.size), np.tile(v, v.size)
    pairs = [(np.roll(a, k)[:n], np.roll(b, k)[:n]) for k in range(17) for n in (a.size, a.size - k, 1 + k)]
    pairs.append((np.repeat(a, 2)[::2], np.repeat(b, 2)[::2]))
    pairs.append((np.repeat(a, 2)[::2], b))
    sq = a[:(a.size // 13) * 13].reshape(13, -1)
    pairs.append((sq.T, np.ascontiguousarray(sq[::-1].T)))
    for n in range(1, 41):              # NaN against NaN in every tail of a SIMD body
        pairs += [(np.full(n, v[p]), np.full(n, v[q])) for p, q in ((0, 2), (3, 4))]
    for c in v:
        for n in (7, 67):
            arr = np.resize(v, n)
            pairs += [(np.asarray(c), arr), (arr, np.asarray(c)), (np.broadcast_to(c, (n,)), arr),
                      (arr, np.broadcast_to(c, (n,)))]
    return pairs


def lone_value(x):
    """The one value of a scalar or of a view broadcasting one element (every stride zero), else
    None."""
    if x.__class__ is not np.ndarray:
        return x
    if x.ndim == 0 or (x.size and not any(x.strides)):
        return x.reshape(-1)[0] if x.ndim else x[()]
    return None


_KEEPS_NAN: dict = {}


def minmax_keeps_nan(ufunc, dt) -> bool:
    """True when np.maximum / np.minimum (`ufunc`) on f32/f64 gives, wherever an operand is NaN,
    the first operand's bits if it is NaN, else the second's, unchanged (signaling NaNs too), in
    every layout of probe_layouts (where a scalar operand is NaN, only where the array's element is
    not).  Measured once per ufunc and type on this NumPy build.  (np.add and np.multiply do not
    keep the order of two NaN operands: their loops swap the operands in a SIMD body's tail.)"""
    return probed(_KEEPS_NAN, _probe_keeps_nan, ufunc, dt)


def probed(table: dict, probe, fn, dt) -> bool:
    """probe(fn, dt) (a float dtype), measured once per (fn, dt) and kept in `table` (and, for a
    NumPy function with a name, on disk: `remembered`)."""
    dt = np.dtype(dt)
    key = (fn, dt)
    got = table.get(key)
    if got is None:
        name = getattr(fn, "__name__", None)
        if name is None or getattr(np, name, None) is not fn:
            got = probe(fn, dt)
        else:
            got = remembered(f"{probe.__module__}.{probe.__qualname__}({name}, {dt.str})", probe, fn, dt)
        table[key] = got
    return got


# ---------------------------------------------------------------- probes kept on disk
# A probe measures what NumPy's loops or the processor do (a few ms each, ten or more in a run);
# its answer depends only on NumPy's build, the processor (NumPy's dispatch, the FTZ/DAZ flags),
# Python and hlo's own sources, so it is kept in one small JSON file of the cache directory under
# a key of all of these, and a later process reads it instead of measuring again.

_REMEMBERED: dict = {}                  # {"file": path or None, "values": {name: bool}}


def remembered(name: str, probe, *args) -> bool:
    """bool(probe(*args)), the probe `name`'s answer: read from the probes file of this setup when
    it holds it, else measured now and added to it (the cache off: measured in each process)."""
    with _probe_lock:
        if not _REMEMBERED:
            _REMEMBERED["file"], _REMEMBERED["values"] = _probes_file()
        got = _REMEMBERED["values"].get(name)
    if got is not None:
        return got
    got = bool(probe(*args))
    with _probe_lock:
        values = _REMEMBERED["values"]
        values[name] = got
        path = _REMEMBERED["file"]
        if path is not None:
            _write_probes(path, values)
    return got


def _probes_file():
    """(the probes file of this setup or None, what it holds)."""
    import json
    import os
    import platform
    import sys
    from ..sources.cache import cache_dir, sources_fingerprint
    base = cache_dir()
    if base is None:
        return None, {}
    umath = getattr(getattr(np, "_core", None) or getattr(np, "core", None), "_multiarray_umath", None)
    setup = json.dumps([np.__version__, sys.version, platform.machine(), hardware() is not None,
                        sorted(getattr(umath, "__cpu_features__", {}).items()),
                        list(getattr(umath, "__cpu_baseline__", [])), list(getattr(umath, "__cpu_dispatch__", [])),
                        os.environ.get("NPY_DISABLE_CPU_FEATURES"), os.environ.get("NPY_ENABLE_CPU_FEATURES"),
                        sources_fingerprint().hex()])
    import hashlib
    path = base / "probes" / f"{hashlib.sha256(setup.encode()).hexdigest()[:32]}.json"
    try:
        values = json.loads(path.read_text())
    except (OSError, ValueError):
        return path, {}
    if not isinstance(values, dict):
        return path, {}
    return path, {k: v for k, v in values.items() if isinstance(k, str) and isinstance(v, bool)}


def _write_probes(path, values) -> None:
    import json
    import os
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.stem}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(values, sort_keys=True))
        os.replace(tmp, path)
    except OSError:
        pass


def _probe_keeps_nan(ufunc, dt) -> bool:
    if dt not in PROBE_BITS:
        return False
    u = np.uint32 if dt.itemsize == 4 else np.uint64
    rs, xs, ys, skip = probe_results(ufunc, dt)
    nan = (np.isnan(xs) | np.isnan(ys)) & ~skip
    want = np.where(np.isnan(xs), xs, ys)
    return bool(np.array_equal(rs.view(u)[nan], want.view(u)[nan]))


def probe_results(ufunc, dt, flags=None):
    """ufunc over every pair of probe_layouts(dt) (under the processor's flags `flags`, a
    (set, on, off) triple, if given): (results, first operands, second operands, the positions
    where both are NaN beside a scalar or broadcast operand), each flattened and joined, so that a
    probe checks them all in one pass."""
    rs = []
    with np.errstate(all="ignore"):
        if flags is not None:
            flags[0](flags[1])
        try:
            for a, b in probe_layouts(dt):
                rs.append(np.asarray(ufunc(a, b)).reshape(-1))
        finally:
            if flags is not None:
                flags[0](flags[2])
    return (np.concatenate(rs),) + _probe_operands(dt)


@functools.lru_cache(maxsize=4)
def _probe_operands(dt):
    xs, ys, lone = [], [], []
    for a, b in probe_layouts(dt):
        x, y = np.broadcast_arrays(a, b)
        xs.append(x.reshape(-1))
        ys.append(y.reshape(-1))
        lone.append(np.full(x.size, 0 in x.strides or 0 in y.strides or x.ndim == 0))
    x, y, lone = (np.concatenate(v) for v in (xs, ys, lone))
    return x, y, lone & np.isnan(x) & np.isnan(y)


def fold_constant(inst, operand_values):
    """The value of `inst` if it is pure and all its operands are compile-time constants, else None."""
    op = inst.opcode
    if op not in FOLDABLE or any(v is None for v in operand_values):
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

def shape_dtype(inst):
    """The NumPy dtype of an array-shaped instruction's result, else None."""
    s = inst.shape
    if s.is_tuple or s.is_dynamic:
        return None
    try:
        return np_dtype(s)
    except Exception:
        return None


def operand_dtypes(ops, st):
    """shape_dtype of each operand step."""
    return [shape_dtype(st.node(j)) for j in ops]


def scalar_safe(fn, rank0):
    """`fn`, returning an array (not a NumPy scalar) for rank-0 results."""
    if not rank0:
        return fn
    return lambda *a: np.asarray(fn(*a))


@dataclass(frozen=True)
class Capabilities:
    """What a kernel declares to the code generators (compiler.py, loopgen.py) beyond being called:
    the forms in which they may write it into generated code.  Declared with `declare(fn, ...)` by the
    prepare stage that makes the kernel, read with `capabilities(fn)`; a kernel that declares nothing
    is only called.

    hw_ufunc    f32/f64 arithmetic that is exactly this ufunc under the processor's FTZ/DAZ flags
                (runs of such steps execute with the flags set; ops/elementwise.py)
    raw_unary   the f64 core of a unary op, run with the flags set (ops/elementwise.py)
    raw_dot     (lhs perm, lhs 3-d dims, rhs perm, rhs 3-d dims, result dims): a dot as one matmul of
                3-d views (ops/linalg.py)
    raw_sum     (flagged, start_of): a reduce-add's flat sum (ops/reduction.py)
    raw_fold    (axes or None, init, result shape): its fold over the reduced axes
    raw_minmax  (ufunc, axes, scalar init): a reduce-max/min as one ufunc reduction
    where       a dynamic-(update-)slice's start-index reader, for in-place code (ops/indexing.py)
    nan_exact   its hw_ufunc's NaN results under the flags are the rule's bits wherever at most one
                operand is NaN (a default NaN where none is): a run of such steps needs the rule only
                where two NaNs meet (compiler._float_runs; ops/elementwise.py probes it)
    nan_pairs   and also where two NaNs meet (NumPy keeps the operands' order): never the rule
    flag_free   does no float arithmetic (a view): may run inside a run of float steps with the flags
                set (ops/shape_ops.py)
    callee      a call's compiled computation, which the compiler may inline (ops/control.py)
    prepare     declared on an evaluation rule: its own prepare stage, (inst, ops, st) -> Fast or None,
                used by the compiler in place of the opcode's (a contracted add is an FMA and an
                unread product a placeholder: contraction.py)"""
    hw_ufunc: object = None
    raw_unary: object = None
    raw_dot: tuple | None = None
    raw_sum: tuple | None = None
    raw_fold: tuple | None = None
    raw_minmax: tuple | None = None
    where: object = None
    nan_exact: bool = False
    nan_pairs: bool = False
    flag_free: bool = False
    callee: object = None
    prepare: object = None


NOTHING_DECLARED = Capabilities()


def declare(fn, **capabilities_):
    """Declare capabilities of kernel `fn` (added to those it declared already); returns `fn`.  An
    unknown capability is a TypeError (Capabilities' fields are the whole vocabulary)."""
    fn.capabilities = replace(getattr(fn, "capabilities", NOTHING_DECLARED), **capabilities_)
    return fn


def capabilities(fn) -> Capabilities:
    """What kernel `fn` declared (nothing: it is only called)."""
    return getattr(fn, "capabilities", NOTHING_DECLARED)


def flag_free(fn):
    """Declare that `fn` does no float arithmetic (a view): it may run with the processor's FTZ/DAZ
    flags set, inside a run of float steps (compiler.py)."""
    return declare(fn, flag_free=True)


def all_clean(ops, st):
    """Every operand step's value is clean."""
    return all(st.is_clean(j) for j in ops)


def factory_rule(rule) -> bool:
    """True for a rule made by the elementwise factory (ops/elementwise.unary), the one the prepare
    stages reproduce; a rule put in its place (a test's, a plugin's) runs as it is."""
    return rule is not None and hasattr(rule, "ftz_result")
