"""Which processor's arithmetic a run reproduces: XLA CPU's ("cpu") or XLA GPU's ("gpu").

The same HLO gives different numbers on XLA CPU and XLA GPU, mostly in matrix products: on an
NVIDIA GPU of the Ampere generation or newer (compute capability 8.0+), an f32 dot or convolution
whose `algorithm=` is unset and whose operand precisions are DEFAULT or HIGH multiplies TF32
values (f32 rounded to 10 mantissa bits) and accumulates in f32 (cuBLAS/cuBLASLt's
CUBLAS_COMPUTE_32F_FAST_TF32, Triton's tf32 dots, cuDNN's TF32 math); HIGHEST keeps f32.  An
explicit `algorithm=` says how the products are formed (dot_bf16_bf16_f32: operands rounded to
bf16; the _x3/_x6/_x9 forms split each f32 operand into 2 or 3 bf16 (or TF32) parts and sum the
dots of the part pairs, XLA's dot_algorithm_rewriter.cc).  XLA CPU ignores both (every algorithm
gives the DEFAULT bits; hlo_cli/SEMANTICS.md), so under "cpu" numerics none of this applies.

Interface for evaluation rules:

* `RunOptions.numerics` (evaluator.py): None = auto, "cpu" or "gpu".  `resolve(module, requested)`
  settles it before the run (auto: "gpu" for a module compiled for a GPU, see `gpu_evidence`);
  the run's EvalContext carries the result as `ec.numerics` ("cpu" or "gpu") and the GPU
  generation as `ec.gpu_generation` ((major, minor) compute capability, or None when unknown:
  then taken as Ampere or newer, what XLA GPU runs on today).  `mode_of(ec)` reads both safely.
* `dot_algorithm(inst, ec)`: the algorithm a dot-like instruction (dot, convolution, a GEMM's
  precision_config) effectively runs with under the run's numerics, or None for plain f32/f64
  arithmetic (the existing CPU rules).  `precision_algorithm(...)` is the same decision from raw
  values (for custom calls whose precision_config lives in backend_config).
* `product_pairs(lhs, rhs, element_type=..., precision=..., algorithm=..., mode=...)`: the operand
  pairs whose products are summed, as f32 arrays whose products are exact in f32; compute one
  dot (or convolution) per pair, in f32, and `combine(partials)` them in XLA's order (the last
  pair is the high*high one; the others are summed first and a NaN sum of them is replaced by
  0, XLA's guard against inf*0 in the low parts).
* `settle(module, requested)`: what run_module does first: (the module to run, mode,
  generation); under GPU numerics the module is a tagged copy, so that code compiled for one
  mode (compiler.py's cache is per module) is never reused for the other; `module_mode(module)`
  reads the tag (the rules' prepare stages, registry.prepare).
* `round_tf32(x)`: f32 rounded to TF32 (the rounding measured on the H200 results:
  TF32_ROUNDING).
"""
from __future__ import annotations

import os
import re
from typing import Any

import numpy as np

from ..per_module import module_cache

MODES = ("cpu", "gpu")

# how the GPU rounds an f32 operand to TF32 for its products: "rne" (to nearest, ties to even),
# "rna" (to nearest, ties away from zero: Triton's cvt.rna.tf32.f32) or "trunc" (the low 13 bits
# dropped, XLA's own split mask).  Chosen by measurement against the shared H200 results
# (scripts/gpu_case_errors.py; the figures are in hlo_cli/SEMANTICS.md): dots XLA emits itself
# (Triton GEMM fusions) round to nearest, ties away; cuBLASLt GEMM calls to nearest even.
TF32_ROUNDING = "rna"
CUBLAS_TF32_ROUNDING = "rne"

# f32 convolutions: XLA allows cuDNN TF32 algorithms (TENSOR_OP_MATH) for DEFAULT/HIGH precision, and its
# autotuner picks per convolution.  On the shared H200 dumps every cuDNN convolution ran with DEFAULT_MATH
# (f32 FMA; hlo_cli/SEMANTICS.md).  So a `convolution` under GPU numerics keeps f32 products unless its
# algorithm says otherwise; a cuDNN call's own math_type says which it ran (TENSOR_OP_MATH: TF32).
CONV_IMPLIED_TF32 = False

# algorithms that change the products under GPU numerics (explicit ones are kept as written)
_F32_PLAIN = {None, "", "alg_unset", "dot_f32_f32_f32", "dot_f64_f64_f64"}

_GPU_TARGET = re.compile(r"__cublas\$.*|__cudnn\$.*|__gpu\$.*|__triton.*|__cub\$.*|xla\.gpu\..*"
                         r"|cu(solver|sparse|blas|_)[a-z_]*|hip(solver|sparse|blas|_)[a-z_]*|triton_kernel_call.*"
                         r"|mosaic_gpu.*")
_GPU_KEYS = ("operation_queue_id", "gemm_backend_config", "cudnn_conv_backend_config",
             "cudnn_fmha_backend_config", "cudnn_norm_backend_config", "wait_on_operation_queues")
_GPU_FUSION_KINDS = re.compile(r"__triton.*|__cudnn\$fusion|__custom_fusion|__dynamic_memcpy|__cublas\$.*")
# XLA GPU's dump prefix: module_0001.NAME.sm_9.0a_gpu_after_optimizations.txt, gfx942_gpu_... (a bare
# "sm_1" in a function's name is not one)
_SM = re.compile(r"(?:^|[/_.\s])sm_(\d+)(?:\.(\d+))?[a-z]?_gpu(?:_|\.|$)")
_GFX = re.compile(r"(?:^|[/_.\s])gfx[0-9a-f]+(?::[\w+-]+)*_gpu(?:_|\.|$)")


# ============================================================================ the mode

def resolve(module, requested: str | None = None, path: str | None = None) -> str:
    """The numerics of a run: `requested` ("cpu" or "gpu") when given, else "gpu" for a module
    compiled for a GPU (gpu_evidence) and "cpu" otherwise."""
    if requested is not None:
        if requested not in MODES + ("auto",):
            from ...errors import HloEvalError
            raise HloEvalError(f"numerics must be auto, cpu or gpu, not {requested!r}")
        if requested != "auto":
            return requested
    if path is None:                       # the module's own evidence: looked for once
        per = module_cache(module)
        if "numerics_auto" not in per:
            per["numerics_auto"] = "gpu" if gpu_evidence(module) is not None else "cpu"
        return per["numerics_auto"]
    return "gpu" if gpu_evidence(module, path) is not None else "cpu"


def gpu_evidence(module, path: str | None = None) -> str | None:
    """Why `module` looks compiled for a GPU (a short phrase for messages), or None."""
    for name in _names(module, path):
        m = _SM.search(name) or _GFX.search(name)
        if m:
            return f"its name carries XLA GPU's platform prefix '{m.group(0).strip('/_. ')[:-4]}'"
    if _target_config(module, path) is not None:
        return "a gpu_target_config file lies beside it"
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode == "custom-call":
                t = str(inst.attrs.get("custom_call_target", ""))
                if _GPU_TARGET.fullmatch(t):
                    return f"it calls the GPU target {t}"
            bc = inst.attrs.get("backend_config")
            js = getattr(bc, "json", None)
            if isinstance(js, dict):
                for k in _GPU_KEYS:
                    if k in js:
                        return f"its backend_config has XLA GPU's key '{k}'"
                fb = js.get("fusion_backend_config")
                if isinstance(fb, dict) and _GPU_FUSION_KINDS.fullmatch(str(fb.get("kind", ""))):
                    return f"it has a {fb.get('kind')} fusion"
    return None


def generation(module, path: str | None = None) -> tuple[int, int] | None:
    """The CUDA compute capability the module was compiled for, (major, minor), from an `sm_X.Y`
    prefix of its file or module name or a gpu_target_config beside it; (0, 0) for an AMD
    (gfx) target; None when nothing says."""
    for name in _names(module, path):
        m = _SM.search(name)
        if m:
            major = m.group(1)
            if m.group(2) is None and len(major) >= 2:       # sm_90 spelling
                return int(major[:-1]), int(major[-1])
            return int(major), int(m.group(2) or 0)
        if _GFX.search(name):
            return (0, 0)
    cfg = _target_config(module, path)
    if cfg is not None:
        text = cfg
        m = re.search(r"cuda_compute_capability\s*\{[^}]*?major:\s*(\d+)(?:[^}]*?minor:\s*(\d+))?", text)
        if m:
            return int(m.group(1)), int(m.group(2) or 0)
        if "rocm_compute_capability" in text or "gcn_arch_name" in text:
            return (0, 0)
    return None


def tf32_capable(gen: tuple[int, int] | None) -> bool:
    """True on an NVIDIA GPU with TF32 tensor cores (Ampere, 8.0, and newer); an unknown
    generation counts as one (what XLA GPU runs on today)."""
    if gen is None:
        return True
    return gen >= (8, 0)


def mode_of(ec) -> tuple[str, tuple[int, int] | None]:
    """(numerics, gpu generation) of the run of EvalContext `ec` ("cpu" when it says nothing)."""
    return getattr(ec, "numerics", "cpu") or "cpu", getattr(ec, "gpu_generation", None)


def _names(module, path):
    names = []
    if path:
        names.append(os.path.basename(str(path)))
    src = getattr(module, "source", None)
    if src and not str(src).startswith("<"):
        names.append(os.path.basename(str(src)))
    if getattr(module, "name", None):
        names.append(str(module.name))
    return names


def _target_config(module, path) -> str | None:
    """The text of a gpu_target_config file beside the module's file, or None."""
    where = path or getattr(module, "source", None)
    if not where or str(where).startswith("<"):
        return None
    d = os.path.dirname(os.path.abspath(str(where)))
    try:
        names = os.listdir(d)
    except OSError:
        return None
    configs = sorted(n for n in names if "gpu_target_config" in n and n.endswith((".pbtxt", ".txt")))
    if not configs:
        return None
    # the module's own (module_NNNN.NAME.gpu_target_config.pbtxt beside module_NNNN.NAME.*), else any
    base = os.path.basename(str(where))
    own = [n for n in configs if base.startswith(n.split("gpu_target_config")[0])]
    try:
        with open(os.path.join(d, (own or configs)[0]), encoding="utf-8", errors="replace") as f:
            return f.read(1 << 16)
    except OSError:
        return None


# ============================================================================ the algorithm

def _algorithm_name(v) -> str | None:
    if v is None:
        return None
    s = str(getattr(v, "value", v)).strip().lower()
    if s.startswith("alg_"):
        s = s[4:]
    return None if s in ("", "unset") else s


def _precision_names(v) -> tuple[str, ...]:
    if not v:
        return ()
    return tuple(str(getattr(p, "value", p)).strip().lower() for p in v)


def precision_algorithm(element_type: str, precision, algorithm, mode: str,
                        gen: tuple[int, int] | None = None, implied: bool = True) -> str | None:
    """The algorithm (lower-case, e.g. "dot_tf32_tf32_f32") a product of operands of
    `element_type` runs with, or None for plain arithmetic in the element type.  `precision`: the
    operand precisions (names or enums: default/high/highest), `algorithm`: the explicit one (a
    name, an enum, "ALG_UNSET"/None).  `implied` False: no TF32 unless asked for (convolutions)."""
    if mode != "gpu":
        return None                        # XLA CPU ignores precision and algorithm (measured)
    alg = _algorithm_name(algorithm)
    if alg is not None:
        return None if alg in _F32_PLAIN else alg
    if element_type != "f32" or not implied:
        return None
    prec = _precision_names(precision)
    if any(p == "highest" for p in prec):
        return None
    return "dot_tf32_tf32_f32" if tf32_capable(gen) else None


def dot_algorithm(inst, ec, operands=None, implied: bool = True) -> str | None:
    """precision_algorithm of a dot or convolution instruction under the run of `ec` (None under
    CPU numerics).  The implied TF32 applies to f32 products: an f32 result of f32 operands
    (`operands`: their values, when the caller has them; bf16/f16 values are TF32 already).
    `implied` False: only an explicit algorithm counts (see CONV_IMPLIED_TF32)."""
    mode, gen = mode_of(ec)
    if mode != "gpu":
        return None
    return instruction_algorithm(inst, gen, operands, implied)


def instruction_algorithm(inst, gen=None, operands=None, implied: bool = True) -> str | None:
    """dot_algorithm under GPU numerics on generation `gen`, without a run (the rules' prepare stages, registry.prepare)."""
    shape = inst.shape
    if shape.is_tuple:
        shape = list(shape.leaves())[0]
    et = shape.element_type
    if operands is not None and any(np.asarray(o).dtype != np.float32 for o in operands):
        et = "mixed"
    return precision_algorithm(et, inst.attrs.get("operand_precision"), inst.attrs.get("algorithm"), "gpu", gen,
                               implied)


def apply_pairs(lhs, rhs, algorithm: str, product, result_dtype, rounding: str | None = None) -> np.ndarray:
    """The product of `lhs` and `rhs` under `algorithm`: `product(l, r)` (an f32 dot or
    convolution of one pair of parts, returning f32) for each of product_pairs, combined in
    XLA's order and converted to `result_dtype`."""
    from .convert import convert
    pairs = product_pairs(lhs, rhs, algorithm=algorithm, mode="gpu", rounding=rounding)
    partials = [np.asarray(product(l, r), np.float32) for l, r in pairs]
    return convert(combine(partials), np.dtype(result_dtype))


# ============================================================================ rounding and splits

def round_tf32(x, how: str | None = None) -> np.ndarray:
    """f32 `x` rounded to TF32 (8 exponent bits, 10 mantissa bits), kept as f32; NaN and inf stay.
    `how`: "rne", "rna" or "trunc" (default TF32_ROUNDING)."""
    return _round_bits(x, 13, how or TF32_ROUNDING)


def round_bf16(x) -> np.ndarray:
    """f32 `x` rounded to bf16 (to nearest, ties to even: XLA's convert), kept as f32."""
    return _round_bits(x, 16, "rne")


def truncate_bits(x, bits: int) -> np.ndarray:
    """f32 `x` with its `bits` lowest bits cleared (XLA's split masks: 16 for bf16, 13 for TF32)."""
    return _round_bits(x, bits, "trunc")


def _round_bits(x, bits: int, how: str) -> np.ndarray:
    a = np.asarray(x, dtype=np.float32)
    u = np.ascontiguousarray(a).view(np.uint32)
    mask = np.uint32((0xFFFFFFFF << bits) & 0xFFFFFFFF)
    # (finite values never carry past the sign bit: the largest, 0x7F7FFFFF, plus half a unit is
    # 0x7F800FFF at most; NaN and inf are put back below)
    if how == "trunc":
        r = u & mask
    elif how == "rna":
        r = u + np.uint32(1 << (bits - 1))
        r &= mask
    elif how == "rne":
        r = (u >> np.uint32(bits)) & np.uint32(1)
        r += u
        r += np.uint32((1 << (bits - 1)) - 1)
        r &= mask
    else:
        raise ValueError(f"unknown rounding {how!r}")
    out = r.view(np.float32).reshape(a.shape)
    special = ~np.isfinite(a)
    if special.any():                       # NaN/inf are kept (a NaN payload must not carry into inf)
        out = np.where(special, a, out)
    return out


def _split_bf16(x, parts: int):
    """XLA's Split2xToBF16/Split3xToBF16: the high parts are truncations, the last is rounded."""
    x = np.asarray(x, np.float32)
    out = []
    rest = x
    with np.errstate(all="ignore"):
        for _ in range(parts - 1):
            hi = truncate_bits(rest, 16)
            out.append(hi)
            rest = (rest - hi).astype(np.float32)
        out.append(round_bf16(rest))
    return out


def _split_tf32(x, rounding=None):
    x = np.asarray(x, np.float32)
    hi = truncate_bits(x, 13)
    with np.errstate(all="ignore"):
        lo = (x - hi).astype(np.float32)
    return hi, round_tf32(lo, rounding)             # the low dot is a TF32 dot: its operands are rounded


def _to(x, dtype_name: str) -> np.ndarray:
    from .convert import convert
    from ..values import np_dtype
    with np.errstate(all="ignore"):
        return convert(convert(np.asarray(x), np_dtype(dtype_name)), np.dtype(np.float32))


def product_pairs(lhs, rhs, *, element_type: str = "f32", precision=None, algorithm=None,
                  mode: str = "cpu", generation: tuple[int, int] | None = None,
                  rounding: str | None = None) -> list[tuple[Any, Any]]:
    """The (lhs_part, rhs_part) pairs whose dots (or convolutions), computed in f32 and summed
    with `combine`, make the product of `lhs` and `rhs` under `mode`.  Plain arithmetic: one pair,
    the operands as they are.  Otherwise the parts are f32 arrays:

      dot_tf32_tf32_f32           (tf32(l), tf32(r))
      dot_tf32_tf32_f32_x3        hi = l with 13 low bits cleared, lo = tf32(l - hi):
                                  (lo, hi), (hi, lo), (hi, hi)
      dot_bf16_bf16_f32[_bf16]    (bf16(l), bf16(r)), rounded to nearest even
      dot_bf16_bf16_f32_x3        hi = l with 16 low bits cleared, lo = bf16(l - hi):
                                  (lo, hi), (hi, lo), (hi, hi)
      dot_bf16_bf16_f32_x6        hi, mid (truncated), lo (rounded): (mid, mid), (hi, lo), (lo, hi),
                                  (hi, mid), (mid, hi), (hi, hi)
      dot_bf16_bf16_f32_x9        every pair, low ones first, (hi, hi) last
      dot_f16_f16_f32[_f16]       (f16(l), f16(r))
      dot_any_f8_any_f8_f32*      one pair, the operands as they are

    (XLA's dot_algorithm_rewriter.cc; the Triton emitter forms the same parts.)  `rounding`: the
    TF32 rounding of the operands (default TF32_ROUNDING; CUBLAS_TF32_ROUNDING for cuBLAS calls)."""
    alg = precision_algorithm(element_type, precision, algorithm, mode, generation)
    if alg is None:
        return [(lhs, rhs)]
    if alg == "dot_tf32_tf32_f32":
        return [(round_tf32(_to(lhs, "f32"), rounding), round_tf32(_to(rhs, "f32"), rounding))]
    if alg == "dot_tf32_tf32_f32_x3":
        lh, ll = _split_tf32(_to(lhs, "f32"), rounding)
        rh, rl = _split_tf32(_to(rhs, "f32"), rounding)
        return [(ll, rh), (lh, rl), (lh, rh)]
    if alg in ("dot_bf16_bf16_f32", "dot_bf16_bf16_bf16"):
        return [(_to(lhs, "bf16"), _to(rhs, "bf16"))]
    if alg == "dot_bf16_bf16_f32_x3":
        lh, ll = _split_bf16(_to(lhs, "f32"), 2)
        rh, rl = _split_bf16(_to(rhs, "f32"), 2)
        return [(ll, rh), (lh, rl), (lh, rh)]
    if alg in ("dot_bf16_bf16_f32_x6", "dot_bf16_bf16_f32_x9"):
        lh, lm, ll = _split_bf16(_to(lhs, "f32"), 3)
        rh, rm, rl = _split_bf16(_to(rhs, "f32"), 3)
        if alg.endswith("x6"):
            return [(lm, rm), (lh, rl), (ll, rh), (lh, rm), (lm, rh), (lh, rh)]
        return [(ll, rl), (ll, rm), (lm, rl), (lm, rm), (lh, rl), (ll, rh), (lh, rm), (lm, rh), (lh, rh)]
    if alg in ("dot_f16_f16_f32", "dot_f16_f16_f16"):
        return [(_to(lhs, "f16"), _to(rhs, "f16"))]
    return [(lhs, rhs)]                    # any_f8 (fast accumulation is not modelled) and the rest


def combine(partials: list) -> np.ndarray:
    """The sum of the per-pair results in XLA's order: all but the last added first (f32, in
    order), a NaN sum of them replaced by 0 (XLA selects it where inf >= |sum|: an infinite one
    stays), then the last (the high*high part) added."""
    if len(partials) == 1:
        return partials[0]
    with np.errstate(all="ignore"):
        acc = np.asarray(partials[0], np.float32)
        for p in partials[1:-1]:
            acc = (acc + np.asarray(p, np.float32)).astype(np.float32)
        acc = np.where(np.abs(acc) <= np.float32(np.inf), acc, np.float32(0))
        return (acc + np.asarray(partials[-1], np.float32)).astype(np.float32)


# ============================================================================ the run

def settle(module, requested: str | None = None, path: str | None = None):
    """(module to run, numerics, gpu generation) of a run of `module` asked for `requested`.
    Under GPU numerics the module is a shallow copy tagged with the mode (cached per module)."""
    mode = resolve(module, requested, path)
    if mode != "gpu":
        return module, mode, None
    per = module_cache(module)
    got = per.get("numerics_gpu")
    if got is None:
        import dataclasses
        gen = generation(module, path)
        copy = dataclasses.replace(module)
        module_cache(copy)["numerics"] = ("gpu", gen)
        got = per["numerics_gpu"] = (copy, gen)
    return got[0], mode, got[1]


def module_mode(module) -> tuple[str, tuple[int, int] | None]:
    """(numerics, generation) a module returned by `settle` was tagged with; ("cpu", None) for
    any other module."""
    if module is None:
        return "cpu", None
    return module_cache(module).get("numerics", ("cpu", None))


def report(module, requested: str | None = None, path: str | None = None) -> dict:
    """What a run of `module` uses, for reports: {"mode", "requested", "why", "gpu_generation"}."""
    mode = resolve(module, requested, path)
    why = gpu_evidence(module, path)
    doc = {"mode": mode, "requested": requested or "auto"}
    if requested in (None, "auto"):
        doc["why"] = why if mode == "gpu" else "nothing in the module says it was compiled for a GPU"
    if mode == "gpu":
        gen = generation(module, path)
        doc["gpu_generation"] = f"sm_{gen[0]}.{gen[1]}" if gen and gen != (0, 0) else \
            ("AMD" if gen == (0, 0) else "unknown (taken as Ampere or newer: TF32 products)")
    return doc


def mismatch_hint(doc: dict) -> str:
    """What to say when a run under numerics `doc` (report's) differs from its reference."""
    if doc["mode"] == "gpu":
        return ("the run used XLA GPU's numerics (TF32 products for f32 dots and convolutions of DEFAULT/HIGH "
                "precision on Ampere and newer); a reference made by XLA CPU needs --numerics cpu")
    return ("the run used XLA CPU's numerics (f32 products); if the reference came from a GPU, try --numerics gpu "
            "(TF32 products for f32 dots and convolutions of DEFAULT/HIGH precision)")


def resolve_together(modules, requested: str | None = None) -> str:
    """One numerics for several texts of one program (hlo bisect's stages, hlo diff's A and B):
    `requested`, else "gpu" when any of them was compiled for a GPU.  `modules`: modules, or
    callables returning one (or None), looked at in order until one says GPU (give the most
    optimized first: it shows the most)."""
    if requested not in (None, "auto"):
        return resolve(None, requested)
    for m in modules:
        module = m() if callable(m) else m
        if module is not None and resolve(module) == "gpu":
            return "gpu"
    return "cpu"
