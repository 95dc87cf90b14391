"""XLA CPU's contracted multiply-add computed by the processor's own fused multiply-add: one native
pass per FMA, compiled once per process with llvmlite (numba's code generator, the ``native``
extra) from LLVM's ``llvm.fma`` intrinsic.

The hardware instruction rounds once (IEEE 754's fusedMultiplyAdd) and XLA CPU's generated code
uses that very instruction, run with the x86 MXCSR flags FTZ (flush results below the smallest
normal, tininess after rounding) and DAZ (read subnormal operands as zeros); each kernel here sets
both flags itself around its loop and restores the caller's MXCSR, so its results are XLA's bits by
construction (ops/elementwise.fma's exact NumPy emulation is the reference the tests compare with).
What the kernels leave to the NumPy path: a result that is NaN (its sign and payload are the
rule's to decide: the kernel reports one and the caller computes the whole FMA again its own way),
operands of other dtypes, and processors or LLVMs without the instruction.

When: ``HLO_NATIVE=0`` never; ``HLO_NATIVE=1`` (or ``strict``) from the first FMA on; unset, once the
FMAs this process has computed with NumPy would have saved more time than importing llvmlite and
compiling the kernels (or loading them from the on-disk cache) costs -- a short run of small arrays
never pays for it and keeps the NumPy path (`_worth_it`).  The compiled object code is kept in the
hlo cache directory, keyed by the IR, the processor and llvmlite's version.
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
# cost model of `_worth_it` (seconds): importing llvmlite's binding and compiling the 8 kernels, or
# loading them from the cache (measured on a 2-core x86-64: 0.05 s import, 0.03 s compile); what the
# NumPy path costs more than a native pass per call and per element (bench_fma.py's chains and
# small arrays)
IMPORT_COST = 0.06
COMPILE_COST = 0.04
LOAD_COST = 0.005
CALL_SAVING = 20e-6
ELEMENT_SAVING = {_F32: 4e-9, _F64: 14e-9}

_lock = threading.Lock()
_state: dict = {"kernels": None, "saved": 0.0, "failed": False}
_HAVE_LLVMLITE: list = [None]


def mode() -> str:
    """'off' (HLO_NATIVE=0, llvmlite missing, not x86-64), 'always' (HLO_NATIVE=1/strict) or 'auto'."""
    env = os.environ.get("HLO_NATIVE", "").strip().lower()
    if env == "0" or _state["failed"] or platform.machine().lower() not in ("x86_64", "amd64"):
        return "off"
    if _HAVE_LLVMLITE[0] is None:
        _HAVE_LLVMLITE[0] = importlib.util.find_spec("llvmlite") is not None
    if not _HAVE_LLVMLITE[0]:
        return "off"
    return "always" if env in ("1", "strict") else "auto"


def fma(a, b, c, negate_product: bool, negate_addend: bool):
    """(-)a * b (-) c rounded once, as XLA CPU computes it (FTZ/DAZ), for f32 or f64 arrays of one
    dtype already broadcast to one shape; None when the native kernel is not used (see the module
    docstring) or a result is NaN: the caller computes it then."""
    dt = a.dtype
    if dt not in (_F32, _F64) or b.dtype != dt or c.dtype != dt:
        return None
    kernels = _state["kernels"]
    if kernels is None or os.environ.get("HLO_NATIVE") == "0":
        kernels = _build_if_worth_it(dt, a.size)
        if kernels is None:
            return None
    shape = a.shape
    xs = [v if v.flags.c_contiguous and v.shape == shape else np.ascontiguousarray(np.broadcast_to(v, shape))
          for v in (a, b, c)]
    out = np.empty(shape, dt)
    if out.size == 0:
        return out
    fn = kernels[(dt, bool(negate_product), bool(negate_addend))]
    if fn(xs[0].ctypes.data, xs[1].ctypes.data, xs[2].ctypes.data, out.ctypes.data, out.size):
        return None                     # a NaN: the rule's signs
    return out


def ready() -> bool:
    """Whether the kernels are built in this process."""
    return _state["kernels"] is not None


def _build_if_worth_it(dt, size):
    m = mode()
    if m == "off":
        return None
    if m == "auto" and not _worth_it(dt, size):
        return None
    with _lock:
        if _state["kernels"] is None and not _state["failed"]:
            try:
                _state["kernels"] = _build()
            except Exception:                   # noqa: BLE001 -- an LLVM that refuses: NumPy path
                if os.environ.get("HLO_NATIVE", "").strip().lower() == "strict":
                    raise
                _state["failed"] = True
    return _state["kernels"]


def _worth_it(dt, size) -> bool:
    """True once the FMAs computed so far (this one included) would have saved more than the
    kernels cost to get."""
    _state["saved"] += CALL_SAVING + ELEMENT_SAVING[dt] * size
    cost = COMPILE_COST if _cached_object() is None else LOAD_COST
    if "llvmlite.binding" not in sys.modules:
        cost += IMPORT_COST
    return _state["saved"] > cost


# ============================================================================ the kernels

_TYPES = {_F32: ("float", "f32"), _F64: ("double", "f64")}


def _kernel_ir(dt, negate_product: bool, negate_addend: bool) -> str:
    """LLVM IR of ``i32 NAME(T* a, T* b, T* c, T* out, i64 n)``: out[i] = fma((-)a[i], b[i], (-)c[i])
    under FTZ/DAZ (the caller's MXCSR restored), returning 1 when a result is NaN."""
    t, s = _TYPES[dt]
    name = f"fma_{s}_{int(negate_product)}{int(negate_addend)}"
    x = "%xa" if negate_product else "%va"
    z = "%xc" if negate_addend else "%vc"
    neg_a = f"  %xa = fneg {t} %va\n" if negate_product else ""
    neg_c = f"  %xc = fneg {t} %vc\n" if negate_addend else ""
    ptr = f"{t}* noalias nocapture"
    return f"""
define internal i32 @{name}_loop({ptr} readonly %a, {ptr} readonly %b, {ptr} readonly %c, {ptr} %o,
                                 i64 %n) noinline {{
entry:
  %empty = icmp sle i64 %n, 0
  br i1 %empty, label %none, label %loop
loop:
  %i = phi i64 [0, %entry], [%i1, %loop]
  %acc = phi i1 [false, %entry], [%acc1, %loop]
  %pa = getelementptr inbounds {t}, {t}* %a, i64 %i
  %pb = getelementptr inbounds {t}, {t}* %b, i64 %i
  %pc = getelementptr inbounds {t}, {t}* %c, i64 %i
  %po = getelementptr inbounds {t}, {t}* %o, i64 %i
  %va = load {t}, {t}* %pa
  %vb = load {t}, {t}* %pb
  %vc = load {t}, {t}* %pc
{neg_a}{neg_c}  %r = call {t} @llvm.fma.{s}({t} {x}, {t} %vb, {t} {z})
  store {t} %r, {t}* %po
  %nan = fcmp uno {t} %r, %r
  %acc1 = or i1 %acc, %nan
  %i1 = add nuw nsw i64 %i, 1
  %end = icmp eq i64 %i1, %n
  br i1 %end, label %exit, label %loop
exit:
  %res = zext i1 %acc1 to i32
  ret i32 %res
none:
  ret i32 0
}}

define i32 @{name}({t}* %a, {t}* %b, {t}* %c, {t}* %o, i64 %n) {{
entry:
  %old = alloca i32, align 4
  %new = alloca i32, align 4
  %oldp = bitcast i32* %old to i8*
  %newp = bitcast i32* %new to i8*
  call void @llvm.x86.sse.stmxcsr(i8* %oldp)
  %v = load i32, i32* %old
  %f = or i32 %v, {_MXCSR_FLUSH}
  store i32 %f, i32* %new
  call void @llvm.x86.sse.ldmxcsr(i8* %newp)
  %r = call i32 @{name}_loop({t}* %a, {t}* %b, {t}* %c, {t}* %o, i64 %n)
  call void @llvm.x86.sse.ldmxcsr(i8* %oldp)
  ret i32 %r
}}
"""


def module_ir() -> str:
    """The IR of every kernel: f32 and f64, each sign variant."""
    head = ("declare float @llvm.fma.f32(float, float, float)\n"
            "declare double @llvm.fma.f64(double, double, double)\n"
            "declare void @llvm.x86.sse.stmxcsr(i8*)\n"
            "declare void @llvm.x86.sse.ldmxcsr(i8*)\n")
    return head + "".join(_kernel_ir(dt, p, q) for dt in (_F32, _F64) for p in (False, True)
                          for q in (False, True))


def _target():
    import llvmlite.binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = llvm.get_host_cpu_features()
    if not features.get("fma", False):
        raise RuntimeError("no FMA instruction on this processor")
    cpu = llvm.get_host_cpu_name()
    flat = features.flatten()
    tm = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features=flat, opt=3)
    import llvmlite
    key = hashlib.sha256("\n".join([module_ir(), llvm.get_default_triple(), cpu, flat,
                                    llvmlite.__version__]).encode()).hexdigest()[:24]
    return llvm, tm, key


def _object_path(key: str):
    base = cache_dir()
    return None if base is None else base / "hwfma" / f"{key}.o"


def _cached_object():
    """The cache file of the compiled kernels when it exists (known without importing llvmlite:
    keyed by the IR and a marker of the processor and llvmlite written beside it)."""
    base = cache_dir()
    if base is None:
        return None
    marker = base / "hwfma" / "latest"
    try:
        key = marker.read_text().strip()
    except OSError:
        return None
    p = base / "hwfma" / f"{key}.o"
    return p if p.exists() else None


def optimized(tm, mod):
    """`mod` optimized at -O3 for the host processor (the loop vectorized)."""
    import llvmlite.binding as llvm
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


def _build():
    """{(dtype, negate_product, negate_addend): ctypes function} compiled (or loaded from the cache)."""
    llvm, tm, key = _target()
    path = _object_path(key)
    mod = llvm.parse_assembly(module_ir())
    mod.verify()
    ee = llvm.create_mcjit_compiler(llvm.parse_assembly(""), tm)
    obj = None
    if path is not None:
        try:
            obj = path.read_bytes()
        except OSError:
            obj = None
    if obj is not None:
        ee.add_object_file(llvm.ObjectFileRef.from_data(obj))
    else:
        optimized(tm, mod)
        obj = tm.emit_object(mod)
        ee.add_object_file(llvm.ObjectFileRef.from_data(obj))
        _store(path, key, obj)
    ee.finalize_object()
    proto = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                             ctypes.c_void_p, ctypes.c_int64)
    out = {}
    for dt in (_F32, _F64):
        for p in (False, True):
            for q in (False, True):
                name = f"fma_{_TYPES[dt][1]}_{int(p)}{int(q)}"
                addr = ee.get_function_address(name)
                if not addr:
                    raise RuntimeError(f"no {name} in the compiled kernels")
                out[(dt, p, q)] = proto(addr)
    _KEEP.append(ee)                    # (the code lives as long as its engine)
    return out


_KEEP: list = []


def _store(path, key, obj) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_bytes(obj)
        os.replace(tmp, path)
        marker = path.parent / "latest"
        tmp = marker.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(key)
        os.replace(tmp, marker)
    except OSError:
        pass


def assembly() -> str:
    """The kernels' machine code as assembly text (tests check it holds real FMA instructions)."""
    llvm, tm, _ = _target()
    mod = llvm.parse_assembly(module_ir())
    return tm.emit_assembly(optimized(tm, mod))
