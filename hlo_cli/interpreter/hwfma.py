"""XLA CPU's contracted multiply-add computed by the processor's own fused multiply-add: one native
pass per FMA, with llvmlite (numba's code generator, the ``native`` extra) compiling LLVM's
``llvm.fma`` intrinsic.

The hardware instruction rounds once (IEEE 754's fusedMultiplyAdd) and XLA CPU's generated code
uses that very instruction, run with the x86 MXCSR flags FTZ (flush results below the smallest
normal, tininess after rounding) and DAZ (read subnormal operands as zeros); each kernel here sets
both flags (and rounding to nearest) itself around its loop and restores the caller's MXCSR, so its results are XLA's bits by
construction (ops/elementwise.fma's exact NumPy emulation is the reference the tests compare with).
What the kernels leave to the NumPy path: a result that is NaN (its sign and payload are the
rule's to decide: the kernel reports one and the caller computes the whole FMA again its own way),
operands of other dtypes, and processors or LLVMs without the instruction.

A kernel walks the output as rows of contiguous elements; each operand is read in place (its
NumPy array object's data pointer, read by the kernel) with its own row step and a column step of
0 or 1, so broadcasts (a scalar, a bias row, a per-row column) and slices need no copy (`_plan`);
only an operand no such walk reads (a transposed one, a broadcast along a middle dimension) is
copied first.  There are 64 kernels (f32/f64, the two signs, the three operands' column steps),
each compiled on its first use (about 0.04 s) and its object code kept in the hlo cache directory,
keyed by the IR, the processor and llvmlite's version (a later process loads it in about 1 ms).

The chain kernels (`chain_kernel`, `_Chain`) run ops/convolution.py's FMA chains: for each output
pixel (a strided grid over the input) and each block of 16 or 32 output features, acc = fma(x at
the pixel plus the term's offset, the term's weights, acc) over the terms in order from +0, the
accumulators in vector registers, under the same flags; one kernel per lane count, its cache file
named by its IR's hash.

When: ``HLO_NATIVE=0`` never; ``HLO_NATIVE=1`` (or ``strict``) from the first FMA on; unset, once the
FMAs this process has computed with NumPy would have saved more time than importing llvmlite and
compiling a kernel (or loading it from the cache) costs -- a short run of small arrays never pays
for it and keeps the NumPy path (`_worth_it`).
"""
from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import platform
import sys
import threading

import numpy as np

from ..sources.cache import cache_dir

_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)
_MXCSR_FLUSH = 0x8040                   # FTZ | DAZ
_MXCSR_ROUNDING = 0x6000                # rounding control (cleared: to nearest even, as XLA runs)
# cost model of `_worth_it` (seconds): importing llvmlite's binding, compiling a kernel or loading it
# from the cache (benchmarks/bench_fma.py measures the first run); what the NumPy path costs more
# than a native pass per call and per element (bench_fma.py's chains and small arrays)
IMPORT_COST = 0.06
COMPILE_COST = 0.05
LOAD_COST = 0.005
CALL_SAVING = 20e-6
ELEMENT_SAVING = {_F32: 4e-9, _F64: 14e-9}

_lock = threading.RLock()
_state: dict = {"kernels": None, "saved": 0.0, "spent": 0.0, "failed": False, "cost": None}


def mode() -> str:
    """'off' (HLO_NATIVE=0, llvmlite missing, not x86-64), 'always' (HLO_NATIVE=1/strict) or 'auto'."""
    if _state["failed"]:
        return "off"
    env = os.environ.get("HLO_NATIVE")
    m = _MODES.get(env)
    if m is None:                       # (asked once per value: FMAs of small arrays call this)
        if _HOST[0] is None:
            _HOST[0] = platform.machine().lower() in ("x86_64", "amd64") and \
                importlib.util.find_spec("llvmlite") is not None
        flag = (env or "").strip().lower()
        m = _MODES[env] = "off" if flag == "0" or not _HOST[0] else \
            "always" if flag in ("1", "strict") else "auto"
    return m


_MODES: dict = {}                       # HLO_NATIVE's value -> mode

_HOST: list = [None]                    # x86-64 with llvmlite installed (asked once)


def fma(a, b, c, negate_product: bool, negate_addend: bool, calls: int = 1):
    """(-)a * b (-) c rounded once, as XLA CPU computes it (FTZ/DAZ), for f32 or f64 arrays of one
    dtype already broadcast to one shape; None when the native kernel is not used (see the module
    docstring) or a result is NaN: the caller computes it then.  `calls`: the FMAs of this shape
    this one stands for in the cost model (a caller that asks once for several: `fma_bare`)."""
    if a.__class__ is not np.ndarray or b.__class__ is not np.ndarray or c.__class__ is not np.ndarray:
        a, b, c = np.asarray(a), np.asarray(b), np.asarray(c)   # (the kernel reads array objects)
        if a.shape != b.shape or a.shape != c.shape:
            return None
    dt = a.dtype
    if dt not in (_F32, _F64) or b.dtype != dt or c.dtype != dt:
        return None
    m = mode()
    if m == "off":
        return None
    kernels = _state["kernels"]
    if kernels is None:
        kernels = _build_if_worth_it(m, dt, a.size, calls)
        if kernels is None:
            return None
    shape = a.shape
    key = (dt, shape, a.strides, b.strides, c.strides)
    plan = _plans.get(key)
    if plan is None:
        plan = _plan(shape, (a.strides, b.strides, c.strides), dt.itemsize)
        if len(_plans) > 4096:
            _plans.clear()
        _plans[key] = plan
    out = np.empty(shape, dt)
    if out.size == 0:
        return out
    if plan is False:                   # operands no 2-d walk reads: contiguous copies
        a, b, c = (np.ascontiguousarray(v) for v in (a, b, c))
        plan = (1, out.size, 0, 0, 0, (1, 1, 1))
    rows, cols, ra, rb, rc, pattern = plan
    k = (dt, bool(negate_product), bool(negate_addend), pattern)
    fn = kernels.get(k)
    if fn is None:
        fn = _kernel(kernels, k, calls * (CALL_SAVING + ELEMENT_SAVING[dt] * out.size))
        if fn is None:
            return None
    if fn(a, b, c, out, rows, cols, ra, rb, rc):
        return None                     # a NaN: the rule's signs
    return out


_plans: dict = {}


def _plan(shape, strides, itemsize):
    """(rows, columns, the three operands' row steps, their column steps (0 or 1)) in elements:
    the operands' elements as a walk over rows of contiguous output elements; False when their
    strides allow no such walk (a transposed or reversed operand)."""
    dims = [(d, [s[k] for s in strides]) for k, d in enumerate(shape) if d != 1]
    merged: list = []
    for d, st in dims:                  # merge a dimension into the one before it where every
        if merged:                      # operand steps over both as over one
            pd, pst = merged[-1]
            if all(ps == s * d for ps, s in zip(pst, st)):
                merged[-1] = (pd * d, st)
                continue
        merged.append((d, st))
    if len(merged) > 2:
        return False
    while len(merged) < 2:
        merged.insert(0, (1, [0, 0, 0]))
    (rows, rst), (cols, cst) = merged
    if any(v % itemsize for v in rst + cst):
        return False
    cst = tuple(v // itemsize for v in cst)
    if any(v not in (0, 1) for v in cst):
        return False
    ra, rb, rc = (v // itemsize for v in rst)
    return rows, cols, ra, rb, rc, cst


def ready() -> bool:
    """Whether the kernels are built in this process."""
    return _state["kernels"] is not None


def _build_if_worth_it(m, dt, size, calls=1):
    """The kernels (built now, once `mode` `m` and the cost model allow), or None."""
    if m == "auto" and not _worth_it(dt, size, calls):
        return None
    with _lock:
        if _state["kernels"] is None and not _state["failed"]:
            try:
                _state["kernels"] = _Kernels()
            except Exception:                   # noqa: BLE001 -- an LLVM that refuses: NumPy path
                _give_up()
    return _state["kernels"]


def _kernel(kernels, k, saving: float):
    """Kernel `k` loaded or compiled now; None (the NumPy path) while, unless ``HLO_NATIVE=1``, the
    FMA work of this process (`saving`: what this call saves, in seconds) has not yet paid for
    compiling one more kernel, or when LLVM refuses."""
    if not kernels.cached(k) and mode() == "auto":
        _state["saved"] += saving
        if _state["saved"] < _state["spent"] + COMPILE_COST:
            return None
        _state["spent"] += COMPILE_COST
    try:
        return kernels[k]
    except Exception:                   # noqa: BLE001 -- an LLVM that refuses: NumPy path
        _give_up()
        return None


def _give_up():
    """No native kernels in this process any more (``HLO_NATIVE=strict``: the error is raised)."""
    if os.environ.get("HLO_NATIVE", "").strip().lower() == "strict":
        raise
    _state["failed"] = True
    _state["kernels"] = None


def _worth_it(dt, size, calls=1) -> bool:
    """True once the FMAs computed so far (these `calls` included) would have saved more than the
    kernels cost to get."""
    _state["saved"] += calls * (CALL_SAVING + ELEMENT_SAVING[dt] * size)
    cost = _state["cost"]
    if cost is None:                    # (asked once: a look at the cache directory)
        _state["spent"] = LOAD_COST + (0.0 if "llvmlite.binding" in sys.modules else IMPORT_COST)
        cost = _state["cost"] = _state["spent"] + (COMPILE_COST if _cached_object() is None else 0.0)
    return _state["saved"] > cost       # (each kernel compiled, not loaded: COMPILE_COST more)


# ============================================================================ the kernels

_TYPES = {_F32: ("float", "f32"), _F64: ("double", "f64")}


# an operand's step along the inner dimension: 0 (broadcast along it) or 1 (contiguous)
PATTERNS = [(x, y, z) for x in (0, 1) for y in (0, 1) for z in (0, 1)]
_DATA_AT = 16                           # offset of `data` in NumPy's PyArrayObject (checked: _probe)


def _name(dt, negate_product, negate_addend, pattern) -> str:
    return f"fma_{_TYPES[dt][1]}_{int(negate_product)}{int(negate_addend)}_{''.join(map(str, pattern))}"


def _kernel_ir(dt, negate_product: bool, negate_addend: bool, pattern) -> str:
    """LLVM IR of ``i32 NAME(a, b, c, out, R, C, ra, rb, rc)`` (a, b, c, out: NumPy arrays, read
    through their data pointers): for r < R, j < C, out[r*C + j] = fma((-)a[r*ra + j*pa], b[r*rb +
    j*pb], (-)c[r*rc + j*pc]) with (pa, pb, pc) = `pattern`, under FTZ/DAZ (the caller's MXCSR
    restored); returns 1 when a result is NaN."""
    t, s = _TYPES[dt]
    name = _name(dt, negate_product, negate_addend, pattern)
    x = "%xa" if negate_product else "%va"
    z = "%xc" if negate_addend else "%vc"
    neg_a = f"  %xa = fneg {t} %va\n" if negate_product else ""
    neg_c = f"  %xc = fneg {t} %vc\n" if negate_addend else ""
    pa, pb, pc = ("%j" if k else "0" for k in pattern)
    data = "".join(f"""  %{v}q = getelementptr i8, i8* %{v}obj, i64 {_DATA_AT}
  %{v}d = bitcast i8* %{v}q to {t}**
  %{v}0 = load {t}*, {t}** %{v}d
""" for v in "abco")
    return f"""
define internal i32 @{name}_loop(i8* %aobj, i8* %bobj, i8* %cobj, i8* %oobj, i64 %R, i64 %C, i64 %ra,
                                 i64 %rb, i64 %rc) noinline {{
entry:
{data}  br label %row
row:
  %r = phi i64 [0, %entry], [%r1, %next]
  %acc = phi i1 [false, %entry], [%acc1, %next]
  %ao = mul i64 %r, %ra
  %bo = mul i64 %r, %rb
  %co = mul i64 %r, %rc
  %oo = mul i64 %r, %C
  %a = getelementptr inbounds {t}, {t}* %a0, i64 %ao
  %b = getelementptr inbounds {t}, {t}* %b0, i64 %bo
  %c = getelementptr inbounds {t}, {t}* %c0, i64 %co
  %o = getelementptr inbounds {t}, {t}* %o0, i64 %oo
  br label %col
col:
  %j = phi i64 [0, %row], [%j1, %col]
  %accj = phi i1 [%acc, %row], [%acc1, %col]
  %pa = getelementptr inbounds {t}, {t}* %a, i64 {pa}
  %pb = getelementptr inbounds {t}, {t}* %b, i64 {pb}
  %pc = getelementptr inbounds {t}, {t}* %c, i64 {pc}
  %po = getelementptr inbounds {t}, {t}* %o, i64 %j
  %va = load {t}, {t}* %pa
  %vb = load {t}, {t}* %pb
  %vc = load {t}, {t}* %pc
{neg_a}{neg_c}  %v = call {t} @llvm.fma.{s}({t} {x}, {t} %vb, {t} {z})
  store {t} %v, {t}* %po
  %nan = fcmp uno {t} %v, %v
  %acc1 = or i1 %accj, %nan
  %j1 = add nuw nsw i64 %j, 1
  %endj = icmp eq i64 %j1, %C
  br i1 %endj, label %next, label %col
next:
  %r1 = add nuw nsw i64 %r, 1
  %endr = icmp eq i64 %r1, %R
  br i1 %endr, label %exit, label %row
exit:
  %res = zext i1 %acc1 to i32
  ret i32 %res
}}

{_flushing_entry(name, "i8* %a, i8* %b, i8* %c, i8* %o, i64 %R, i64 %C, i64 %ra, i64 %rb, i64 %rc")}"""


# ============================================================================ the FMA chain

# output features per vector of the chain kernels (the accumulators: 2 or 4 AVX registers)
CHAIN_LANES = (32, 16)
# what a chain kernel saves per FMA over the NumPy chain (ops/convolution._chain_rows: about five
# passes over f64 temporaries per step)
CHAIN_SAVING = 6e-9
_CHAIN_PARAMS = ("float* %x, i64* %off, i64 %T, float* %w, i64 %WO, i64 %NB, float* %out, i64 %P, "
                 "i64 %P12, i64 %P2, i64 %s0, i64 %s1, i64 %s2")


def _chain_name(lanes: int) -> str:
    return f"chain_f32_{lanes}"


def _chain_ir(lanes: int) -> str:
    """LLVM IR of ``i32 NAME(x, off, T, w, WO, NB, out, P, P12, P2, s0, s1, s2)`` (pointers to f32 /
    i64 data): for each pixel p < P, with (a, b, c) its index in a (P / P12, P12 / P2, P2) grid and
    base = a*s0 + b*s1 + c*s2, and each block of `lanes` output features ob < NB:
    out[p*WO + ob*lanes + i] = the chain acc = fma(x[base + off[t]], w[t*WO + ob*lanes + i], acc)
    over t < T from +0, the accumulators in registers, under FTZ/DAZ; returns 1 when a result is NaN."""
    name, v = _chain_name(lanes), f"<{lanes} x float>"
    return f"""
define internal i32 @{name}_loop({_CHAIN_PARAMS}) noinline {{
entry:
  %empty = icmp eq i64 %P, 0
  br i1 %empty, label %exit, label %pixel
pixel:
  %p = phi i64 [0, %entry], [%p1, %pnext]
  %nanp = phi i1 [false, %entry], [%nanb1, %pnext]
  %a = udiv i64 %p, %P12
  %rest = urem i64 %p, %P12
  %b = udiv i64 %rest, %P2
  %c = urem i64 %rest, %P2
  %ba = mul i64 %a, %s0
  %bb = mul i64 %b, %s1
  %bc = mul i64 %c, %s2
  %bab = add i64 %ba, %bb
  %base = add i64 %bab, %bc
  %xp = getelementptr inbounds float, float* %x, i64 %base
  %oo = mul i64 %p, %WO
  %op = getelementptr inbounds float, float* %out, i64 %oo
  br label %block
block:
  %ob = phi i64 [0, %pixel], [%ob1, %bnext]
  %nanb = phi i1 [%nanp, %pixel], [%nanb1, %bnext]
  %wo = mul i64 %ob, {lanes}
  %wb = getelementptr inbounds float, float* %w, i64 %wo
  br label %term
term:
  %t = phi i64 [0, %block], [%t1, %term]
  %acc = phi {v} [zeroinitializer, %block], [%acc1, %term]
  %offp = getelementptr inbounds i64, i64* %off, i64 %t
  %o = load i64, i64* %offp
  %xq = getelementptr inbounds float, float* %xp, i64 %o
  %xs = load float, float* %xq
  %xi = insertelement {v} undef, float %xs, i32 0
  %xv = shufflevector {v} %xi, {v} undef, <{lanes} x i32> zeroinitializer
  %wt = mul i64 %t, %WO
  %wq = getelementptr inbounds float, float* %wb, i64 %wt
  %wr = bitcast float* %wq to {v}*
  %wv = load {v}, {v}* %wr, align 4
  %acc1 = call {v} @llvm.fma.v{lanes}f32({v} %xv, {v} %wv, {v} %acc)
  %t1 = add nuw nsw i64 %t, 1
  %endt = icmp eq i64 %t1, %T
  br i1 %endt, label %bnext, label %term
bnext:
  %oq = getelementptr inbounds float, float* %op, i64 %wo
  %or = bitcast float* %oq to {v}*
  store {v} %acc1, {v}* %or, align 4
  %uno = fcmp uno {v} %acc1, %acc1
  %mask = bitcast <{lanes} x i1> %uno to i{lanes}
  %isnan = icmp ne i{lanes} %mask, 0
  %nanb1 = or i1 %nanb, %isnan
  %ob1 = add nuw nsw i64 %ob, 1
  %endb = icmp eq i64 %ob1, %NB
  br i1 %endb, label %pnext, label %block
pnext:
  %p1 = add nuw nsw i64 %p, 1
  %endp = icmp eq i64 %p1, %P
  br i1 %endp, label %exit, label %pixel
exit:
  %nan = phi i1 [false, %entry], [%nanb1, %pnext]
  %res = zext i1 %nan to i32
  ret i32 %res
}}

declare {v} @llvm.fma.v{lanes}f32({v}, {v}, {v})

{_flushing_entry(name, _CHAIN_PARAMS)}"""


def chain_kernel(fmas: int, width: int):
    """The chain runner (`_Chain`) for `width` output features (a multiple of 16) when the native
    kernels are used for `fmas` chained FMAs (the cost model of `fma`, each FMA saving
    CHAIN_SAVING), else None."""
    m = mode()
    if m == "off":
        return None
    kernels = _state["kernels"]
    if kernels is None:
        kernels = _build_if_worth_it(m, _F32, int(fmas * CHAIN_SAVING / ELEMENT_SAVING[_F32]))
        if kernels is None:
            return None
    k = ("chain", next(n for n in CHAIN_LANES if width % n == 0))
    if k not in kernels and _kernel(kernels, k, fmas * CHAIN_SAVING) is None:
        return None
    return _Chain(kernels)


class _Chain:
    """Runs FMA chains over a strided pixel grid through the compiled chain kernels."""

    def __init__(self, kernels):
        self.kernels = kernels

    def __call__(self, x: np.ndarray, start: int, grid, offsets: np.ndarray, w: np.ndarray,
                 out: np.ndarray) -> bool:
        """out (P, WO) f32 C-contiguous <- for each pixel p of `grid` ((count, step) x 3, steps in
        elements of x, P the product of the counts) and output feature o < WO: acc = fma(x[start +
        base(p) + offsets[t]], w[t, o], acc) over t in order from +0 (XLA's FTZ/DAZ).  x: a
        C-contiguous f32 array, offsets: (T,) int64 (every index read lies in x), w: (T, WO)
        C-contiguous f32 with WO a multiple of 16.  Returns True when a result is NaN (its bits
        are the caller's to decide)."""
        if any(v.dtype != _F32 or not v.flags.c_contiguous for v in (x, w, out)) or offsets.dtype != np.int64:
            raise ValueError("the chain kernel reads C-contiguous f32 arrays and int64 offsets")
        lanes = next(n for n in CHAIN_LANES if w.shape[1] % n == 0)
        (p0, s0), (p1, s1), (p2, s2) = grid
        fn = self.kernels[("chain", lanes)]
        xp = x.ctypes.data + 4 * start
        return bool(fn(xp, offsets.ctypes.data, offsets.shape[0], w.ctypes.data, w.shape[1],
                       w.shape[1] // lanes, out.ctypes.data, p0 * p1 * p2, p1 * p2, p2, s0, s1, s2))


def _flushing_entry(name: str, params: str) -> str:
    """LLVM IR of ``i32 NAME(params)``: calls ``NAME_loop`` with the same arguments under FTZ/DAZ and
    rounding to nearest, then restores the caller's MXCSR."""
    call = ", ".join(" ".join(p.split()) for p in params.split(","))
    return f"""define i32 @{name}({params}) {{
entry:
  %old = alloca i32, align 4
  %new = alloca i32, align 4
  %oldp = bitcast i32* %old to i8*
  %newp = bitcast i32* %new to i8*
  call void @llvm.x86.sse.stmxcsr(i8* %oldp)
  %v = load i32, i32* %old
  %g = and i32 %v, {~_MXCSR_ROUNDING}
  %f = or i32 %g, {_MXCSR_FLUSH}
  store i32 %f, i32* %new
  call void @llvm.x86.sse.ldmxcsr(i8* %newp)
  %r = call i32 @{name}_loop({call})
  call void @llvm.x86.sse.ldmxcsr(i8* %oldp)
  ret i32 %r
}}
"""


_HEAD = ("declare float @llvm.fma.f32(float, float, float)\n"
         "declare double @llvm.fma.f64(double, double, double)\n"
         "declare void @llvm.x86.sse.stmxcsr(i8*)\n"
         "declare void @llvm.x86.sse.ldmxcsr(i8*)\n")
# where NumPy's array object holds its data pointer, read back to check _DATA_AT
_PROBE = ("define i64 @data_of(i8* %obj) {\n"
          f"  %q = getelementptr i8, i8* %obj, i64 {_DATA_AT}\n"
          "  %d = bitcast i8* %q to i64*\n  %v = load i64, i64* %d\n  ret i64 %v\n}\n")
KEYS = [(dt, p, q, pat) for dt in (_F32, _F64) for p in (False, True) for q in (False, True)
        for pat in PATTERNS]


def _target():
    """(llvmlite.binding, a maker of target machines for this processor, the cache's key of it)."""
    import llvmlite
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features()
    if not features.get("fma", False):
        raise RuntimeError("no FMA instruction on this processor")
    cpu, flat = llvm.get_host_cpu_name(), features.flatten()
    target = llvm.Target.from_default_triple()

    def machine():
        return target.create_target_machine(cpu=cpu, features=flat, opt=3)
    key = hashlib.sha256("\n".join([_kernel_ir(*KEYS[-1]), llvm.get_default_triple(), cpu, flat,
                                    llvmlite.__version__]).encode()).hexdigest()[:24]
    return llvm, machine, key


def _cached_object():
    """Whether the cache holds kernels compiled for this setup (known without importing llvmlite:
    the directory a marker names)."""
    base = cache_dir()
    if base is None:
        return None
    try:
        key = (base / "hwfma" / "latest").read_text().strip()
    except OSError:
        return None
    p = base / "hwfma" / key
    return p if key and p.is_dir() and any(p.iterdir()) else None


def optimized(tm, mod):
    """`mod` optimized at -O3 for the host processor (the loops vectorized)."""
    import llvmlite.binding as llvm
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = False          # (a memory-bound loop: compiled in a third of the time,
    pto.loop_interleaving = False       # no slower)
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


class _Kernels(dict):
    """{(dtype, negate_product, negate_addend, pattern): ctypes function}, each kernel compiled on
    its first use (or loaded from the cache: a program needs few of the 64)."""

    def __init__(self):
        super().__init__()
        self.llvm, self.machine, self.key = _target()
        base = cache_dir()
        self.dir = None if base is None else base / "hwfma" / self.key
        self.engines: list = []          # (the code lives as long as its engine)
        self.on_disk: dict = {}
        probe = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.py_object)(self._address(_PROBE, "data_of", None))
        for v in (np.zeros(3), np.zeros((4, 5), np.float32)[1:, 2:], np.broadcast_to(np.ones(2), (3, 2))):
            if probe(v) != v.ctypes.data:
                raise RuntimeError("NumPy's array objects hold their data elsewhere")
        self.proto = ctypes.CFUNCTYPE(ctypes.c_int32, *[ctypes.py_object] * 4, *[ctypes.c_int64] * 5)
        self.chain_proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64,
                                            ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p,
                                            *[ctypes.c_int64] * 6)

    def cached(self, k) -> bool:
        """Whether kernel `k` is compiled in this process or its object code is in the cache."""
        got = self.on_disk.get(k)
        if got is None:
            got = self.on_disk[k] = self.dir is not None and (self.dir / f"{_source(k)[2]}.o").exists()
        return got or k in self

    def __missing__(self, k):
        with _lock:
            if k not in self:
                ir, name, file = _source(k)
                proto = self.chain_proto if isinstance(k[0], str) else self.proto
                self[k] = proto(self._address(_HEAD + ir, name, file))
        return dict.__getitem__(self, k)

    def _address(self, ir: str, name: str, cached):
        """The address of function `name` of the module `ir`, its object code loaded from the
        cache file `cached` (a name) when there, else compiled (and stored there)."""
        llvm = self.llvm
        path = None if cached is None or self.dir is None else self.dir / f"{cached}.o"
        obj = None
        if path is not None:
            try:
                obj = path.read_bytes()
            except OSError:
                obj = None
        if obj is None:
            mod = llvm.parse_assembly(ir)
            mod.verify()
            obj = self.machine().emit_object(optimized(self.machine(), mod))
            if path is not None:
                _store(path, self.key, obj)
        ee = llvm.create_mcjit_compiler(llvm.parse_assembly(""), self.machine())
        ee.add_object_file(llvm.ObjectFileRef.from_data(obj))
        ee.finalize_object()
        self.engines.append(ee)
        addr = ee.get_function_address(name)
        if not addr:
            raise RuntimeError(f"no {name} in the compiled kernels")
        return addr


def _source(k) -> tuple:
    """(LLVM IR, function name, cache file name) of kernel `k`: an fma kernel (dtype, signs,
    pattern) or a chain kernel ("chain", lanes), whose file name holds its IR's hash (a changed
    kernel is compiled again, not loaded)."""
    if isinstance(k[0], str):
        ir, name = _chain_ir(k[1]), _chain_name(k[1])
        return ir, name, f"{name}_{hashlib.sha256(ir.encode()).hexdigest()[:12]}"
    name = _name(*k)
    return _kernel_ir(*k), name, name


def _store(path, key, obj) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(obj)
        os.replace(tmp, path)
        marker = path.parent.parent / "latest"
        tmp = marker.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(key)
        os.replace(tmp, marker)
    except OSError:
        pass


def assembly(keys) -> str:
    """The machine code of the kernels `keys` (`_source`) as assembly text (tests check it holds
    real FMA instructions and no separate multiply or add)."""
    llvm, machine, _ = _target()
    mod = llvm.parse_assembly(_HEAD + "".join(_source(k)[0] for k in keys))
    return machine().emit_assembly(optimized(machine(), mod))
