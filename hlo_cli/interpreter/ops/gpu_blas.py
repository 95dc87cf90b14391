"""XLA GPU's cuBLAS / cuBLASLt custom calls, run with the semantics XLA gives them.

XLA GPU's GemmRewriter (xla/backends/gpu/transforms/gemm_rewriter.cc) turns dots, and the
scaling, bias, activation and conversion around them, into library calls; the thunk emitter
(xla/service/gpu/thunk_emitter.cc) says which operand and result is which.  Each call is checked
against its backend_config before it runs (operand count, shapes and element types, dimension
numbers, epilogue, result tuple); a mismatch is an HloEvalError naming what is wrong.

Targets:

* `__cublas$gemm` (legacy cuBLAS) and `__cublas$lt$matmul` (cuBLASLt): operands
  (a, b, [c when beta != 0], [bias when the epilogue has BIAS]); result D, or a tuple
  (D, [aux for the *_AUX epilogues], [workspace s8[N]]).  With A.B the dot of a and b under
  `dot_dimension_numbers` (result dims: batch, a's free dim, b's free dim, as XLA's dot):

      pre = alpha * (A.B) + beta * C + bias        (alpha = alpha_real + i*alpha_imag)
      D   = act(pre) rounded once to D's type;  aux = pre rounded to D's type

  act: DEFAULT/BIAS identity, RELU max(x, 0), GELU the tanh approximation
  0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3))) (the pattern XLA matches), SILU x*sigmoid(x).
  The bias is a vector along the output's most minor physical dimension (XLA requires it), added
  to every row.  The output aliases C (output_to_operand_aliasing) on the GPU; here C is not
  modified.  Float GEMMs accumulate in f32 (f64/c64/c128 in their own type), with alpha, beta
  and the epilogue applied before the one rounding of D (cuBLASLt's f32 scale type); integer
  GEMMs (s8 x s8 -> s32) are exact and wrap, alpha and beta taken as integers.
  `lhs_stride`/`rhs_stride`, `grad_x`/`grad_y`, `selected_algorithm` and the workspace size
  choose kernels, not values: they are checked for form only (XLA fixes the strides while
  rewriting, before layout assignment, so they do not have to match the final shapes).
* `__cublas$lt$matmul$f8`: operands (a, b, [c], a_scale, b_scale, [bias], [d_scale when D is an
  f8 type]) with f8e4m3fn/f8e5m2 (or fnuz) a and b and f32 scalar scales (older XLA versions add
  a c_scale before d_scale: accepted, unused, as C is never f8);

      pre  = alpha * a_scale * b_scale * (A.B) + beta * C + bias,  then the epilogue (RELU)
      D    = pre for bf16/f16/f32 D, else saturate(pre * d_scale) to the f8 type's finite range
      amax = max |pre| (damax_output: an f32[] result after D), NaN when pre holds NaN

  Fast accumulation (ALG_DOT_ANY_F8_ANY_F8_F32_FAST_ACCUM) is not modelled: sums are f32.
* `__cublas$lt$matmul$mx` (hipBLASLt's block-scaled GEMM, scale_mode 2, from a scaled-dot
  fusion): operands (a, b, a_scale, b_scale), MX element types with f8e8m0fnu block scales along
  the contracting dimension; the scaled-dot rule (ops/linalg.py) under the call's dimension
  numbers, result (D, [workspace]).
* `__cublas$lt$groupedMatmul`: XLA's ragged-dot as one grouped GEMM, operands (a, b,
  group_sizes, [c], [bias]), `grouped_gemm_backend_config` holding the gemm_backend_config and
  the ragged_dot_dimension_numbers: the ragged-dot rule, then alpha/beta/bias/epilogue as above.
* `__cublas$triangularSolve`: the triangular-solve op (backend_config: its
  TriangularSolveOptions), result (X, scratch s8[N]).

Under GPU numerics (numerics.py) f32 GEMMs whose precision_config is DEFAULT/HIGH with the
algorithm unset take TF32 products (cuBLAS's CUBLAS_COMPUTE_32F_FAST_TF32, operands rounded to
nearest even: numerics.CUBLAS_TF32_ROUNDING, measured), and an explicit algorithm its parts;
under CPU numerics plain f32 products.
"""
from __future__ import annotations

import json
from types import SimpleNamespace

import ml_dtypes
import numpy as np

from ...errors import HloEvalError
from ...ir.shape import Shape
from . import numerics
from ..values import np_dtype
from .convert import F32, F64, convert, etype, kind
from .custom_call import target
from .linalg import dot_values, eval_ragged_dot, eval_scaled_dot, eval_triangular_solve

EPILOGUES = ("DEFAULT", "BIAS", "RELU", "BIAS_RELU", "GELU", "GELU_AUX", "BIAS_GELU", "BIAS_GELU_AUX",
             "SILU", "BIAS_SILU")
_F8 = ("f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz")
_PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST", "PACKED_NIBBLE")
# PrecisionConfig.Algorithm (xla_data.proto)
_ALGORITHMS = ("ALG_UNSET", "ALG_DOT_ANY_F8_ANY_F8_F32", "ALG_DOT_ANY_F8_ANY_F8_F32_FAST_ACCUM", "ALG_DOT_F16_F16_F16",
               "ALG_DOT_F16_F16_F32", "ALG_DOT_BF16_BF16_BF16", "ALG_DOT_BF16_BF16_F32", "ALG_DOT_BF16_BF16_F32_X3",
               "ALG_DOT_BF16_BF16_F32_X6", "ALG_DOT_BF16_BF16_F32_X9", "ALG_DOT_TF32_TF32_F32",
               "ALG_DOT_TF32_TF32_F32_X3", "ALG_DOT_F32_F32_F32", "ALG_DOT_F64_F64_F64")
_FLOAT_IO = ("f16", "bf16", "f32")
# (a type, result types) a cuBLAS/cuBLASLt GEMM takes (XLA's IsCublasSupportedMatMul and the
# BlasLt type table: matching operand types; f16/bf16 into themselves or f32; s8 into s32 or f32)
_GEMM_TYPES = {"f16": ("f16", "f32"), "bf16": ("bf16", "f32"), "f32": ("f32",), "f64": ("f64",),
               "c64": ("c64",), "c128": ("c128",), "s8": ("s32", "f32")}


# ============================================================================ the config

class _Gemm:
    """A GEMM call's gemm_backend_config, read and checked."""

    def __init__(self, inst, cfg: dict):
        def get(key, default):
            v = cfg.get(key, default)
            return default if v is None else v
        try:
            self.alpha = complex(float(get("alpha_real", 1.0)), float(get("alpha_imag", 0.0)))
            self.beta = float(get("beta", 0.0))
        except (TypeError, ValueError):
            raise HloEvalError("gemm_backend_config: alpha_real, alpha_imag and beta must be numbers") from None
        ep = get("epilogue", "DEFAULT")
        if isinstance(ep, int) and 0 <= ep < len(EPILOGUES):
            ep = EPILOGUES[ep]
        if ep not in EPILOGUES:
            raise HloEvalError(f"gemm_backend_config: unknown epilogue {ep!r} (XLA's are {', '.join(EPILOGUES)})")
        self.epilogue = ep
        dn = get("dot_dimension_numbers", {})
        if not isinstance(dn, dict):
            raise HloEvalError("gemm_backend_config: dot_dimension_numbers must be an object")
        self.lb, self.lc, self.rb, self.rc = (_ints(dn.get(k, []), f"dot_dimension_numbers.{k}") for k in
                                              ("lhs_batch_dimensions", "lhs_contracting_dimensions",
                                               "rhs_batch_dimensions", "rhs_contracting_dimensions"))
        pc = get("precision_config", {})
        if not isinstance(pc, dict):
            raise HloEvalError("gemm_backend_config: precision_config must be an object")
        prec = pc.get("operand_precision", []) or []
        if not isinstance(prec, list) or any(p not in _PRECISIONS for p in prec) or len(prec) > 2:
            raise HloEvalError(f"gemm_backend_config: precision_config.operand_precision {prec!r} should list up to "
                               f"two of {', '.join(_PRECISIONS)}")
        self.precision = tuple(prec)
        self.algorithm = pc.get("algorithm", "ALG_UNSET") or "ALG_UNSET"
        if self.algorithm not in _ALGORITHMS:
            raise HloEvalError(f"gemm_backend_config: unknown precision_config.algorithm {self.algorithm!r}")
        for key in ("lhs_stride", "rhs_stride", "selected_algorithm", "autotune_workspace_size"):
            if key in cfg:
                v = _ints([cfg[key]], f"gemm_backend_config.{key}")[0]
                if v < 0 and key != "selected_algorithm":
                    raise HloEvalError(f"gemm_backend_config: {key} is negative ({v})")
        self.damax = bool(get("damax_output", False))
        self.grad = (bool(get("grad_x", False)), bool(get("grad_y", False)))

    @property
    def has_bias(self) -> bool:
        return self.epilogue.startswith("BIAS")

    @property
    def has_aux(self) -> bool:
        return self.epilogue.endswith("_AUX")

    @property
    def activation(self) -> str:
        return self.epilogue.replace("BIAS_", "").replace("BIAS", "DEFAULT").replace("_AUX", "")


def _ints(v, what) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in v)
    except (TypeError, ValueError):
        raise HloEvalError(f"gemm_backend_config: {what} must hold integers, not {v!r}") from None


def _backend_json(inst) -> dict:
    bc = inst.attrs.get("backend_config")
    js = getattr(bc, "json", None)
    if isinstance(js, dict):
        return js
    text = getattr(bc, "string", None) if bc is not None else None
    text = text if text is not None else (str(bc) if bc is not None else "")
    if not text.strip():
        return {}
    try:
        js = json.loads(text)
    except ValueError:
        raise HloEvalError("backend_config is not the JSON XLA GPU writes for this call") from None
    if not isinstance(js, dict):
        raise HloEvalError("backend_config is not a JSON object")
    return js


def _gemm_config(inst, grouped: bool = False) -> tuple[_Gemm, dict]:
    """The _Gemm of a call (GpuBackendConfig.gemm_backend_config, or an older XLA's bare
    GemmBackendConfig) and the whole JSON."""
    js = _backend_json(inst)
    if grouped:
        g = js.get("grouped_gemm_backend_config")
        if not isinstance(g, dict) or not isinstance(g.get("gemm_backend_config"), dict):
            raise HloEvalError("backend_config has no grouped_gemm_backend_config.gemm_backend_config")
        return _Gemm(inst, g["gemm_backend_config"]), g
    cfg = js.get("gemm_backend_config", js if "dot_dimension_numbers" in js else None)
    if not isinstance(cfg, dict):
        raise HloEvalError("backend_config has no gemm_backend_config (XLA GPU writes the GEMM's dimension "
                           "numbers, alpha, beta and epilogue there)")
    return _Gemm(inst, cfg), js


# ============================================================================ checks

def _tname(x) -> str:
    return etype(np.asarray(x).dtype).name


def _shape_str(t: str, dims) -> str:
    return f"{t}[{','.join(str(d) for d in dims)}]"


def _leaves(inst) -> list[Shape]:
    return list(inst.shape.leaves()) if inst.shape.is_tuple else [inst.shape]


def _check_dims(g: _Gemm, a, b) -> tuple[int, ...]:
    """Check the dimension numbers against a and b; the dims of A.B (batch, a free, b free)."""
    for name, dims, x in (("lhs_batch", g.lb, a), ("lhs_contracting", g.lc, a),
                          ("rhs_batch", g.rb, b), ("rhs_contracting", g.rc, b)):
        for d in dims:
            if not 0 <= d < x.ndim:
                raise HloEvalError(f"gemm_backend_config: {name}_dimensions holds {d}, outside the operand's "
                                   f"rank {x.ndim}")
    for side, bd, cd, x in (("lhs", g.lb, g.lc, a), ("rhs", g.rb, g.rc, b)):
        if len(set(bd + cd)) != len(bd) + len(cd):
            raise HloEvalError(f"gemm_backend_config: a {side} dimension is listed twice in the batch and "
                               f"contracting dimensions")
        if x.ndim - len(bd) - len(cd) > 1:
            raise HloEvalError(f"gemm_backend_config: the {side} operand {_shape_str(_tname(x), x.shape)} has "
                               f"{x.ndim - len(bd) - len(cd)} non-contracting, non-batch dimensions; a GEMM "
                               f"takes at most one")
    if len(g.lb) != len(g.rb) or len(g.lc) != len(g.rc):
        raise HloEvalError("gemm_backend_config: lhs and rhs have different numbers of batch or contracting "
                           "dimensions")
    for kind_, ld, rd in (("batch", g.lb, g.rb), ("contracting", g.lc, g.rc)):
        for i, j in zip(ld, rd):
            if a.shape[i] != b.shape[j]:
                raise HloEvalError(f"gemm_backend_config: {kind_} dimension {i} of the lhs "
                                   f"{_shape_str(_tname(a), a.shape)} has size {a.shape[i]}, dimension {j} of "
                                   f"the rhs {_shape_str(_tname(b), b.shape)} has {b.shape[j]}")
    lf = [a.shape[d] for d in range(a.ndim) if d not in g.lb and d not in g.lc]
    rf = [b.shape[d] for d in range(b.ndim) if d not in g.rb and d not in g.rc]
    return tuple([a.shape[d] for d in g.lb] + lf + rf)


def _check_result(inst, want_dims, out_types, extra: list[tuple[str, object]]) -> Shape:
    """Check the result: D of dims `want_dims` and a type in `out_types`, then the leaves of
    `extra` ((name, check) with check a Shape-predicate description), then an optional s8
    workspace.  Returns D's shape."""
    leaves = _leaves(inst)
    d = leaves[0]
    if d.is_tuple or tuple(d.dims) != tuple(want_dims):
        raise HloEvalError(f"the result {d.to_str(False)} should have the dims {list(want_dims)} of the product "
                           f"(batch, lhs free, rhs free dims)")
    if d.element_type not in out_types:
        raise HloEvalError(f"the result type {d.element_type} is not one this GEMM produces from these operands "
                           f"({', '.join(out_types)})")
    rest = leaves[1:]
    for k, (name, ok) in enumerate(extra):
        if k >= len(rest):
            raise HloEvalError(f"the result tuple lacks the {name}")
        why = ok(rest[k], d)
        if why:
            raise HloEvalError(f"result {k + 1} ({name}) {rest[k].to_str(False)}: {why}")
    rest = rest[len(extra):]
    if len(rest) > 1:
        raise HloEvalError(f"the result tuple has {len(leaves)} elements; this call returns "
                           f"{1 + len(extra)} and an optional workspace")
    if rest and (rest[0].element_type not in ("s8", "u8") or len(rest[0].dims) != 1):
        raise HloEvalError(f"the last result {rest[0].to_str(False)} should be the s8[N] workspace")
    if not inst.shape.is_tuple and extra:
        raise HloEvalError(f"the result should be a tuple holding the {extra[0][0]}")
    return d


def _same_as_d(leaf, d):
    if tuple(leaf.dims) != tuple(d.dims) or leaf.element_type != d.element_type:
        return f"should be {d.to_str(False)}, like the output"
    return None


def _f32_scalar(leaf, d):
    return None if (leaf.element_type == "f32" and not leaf.dims) else "should be f32[]"


def _check_operand(x, what: str, dims, types) -> None:
    if tuple(x.shape) != tuple(dims):
        raise HloEvalError(f"the {what} {_shape_str(_tname(x), x.shape)} should have the dims {list(dims)}")
    if _tname(x) not in types:
        raise HloEvalError(f"the {what} {_shape_str(_tname(x), x.shape)} should be of type "
                           f"{' or '.join(types)}")


def _bias_dims(d: Shape) -> tuple[int]:
    """The vector bias's dims: the output's most minor physical dimension (XLA requires it)."""
    if not d.dims:
        raise HloEvalError("a BIAS epilogue needs an output of rank 1 or more")
    lay = d.layout
    minor = lay.minor_to_major[0] if lay is not None and lay.minor_to_major else len(d.dims) - 1
    return (d.dims[minor],)


def _c_and_bias(g: _Gemm, args, names: list[str], d: Shape, c_types=None, bias_types=None):
    """The matrix bias C and the bias vector of a call (None where its config has none), checked
    against the output D (of D's type unless `c_types`/`bias_types` say otherwise)."""
    pos = {n: k for k, n in enumerate(names)}
    c = args[pos["c"]] if "c" in pos else None
    if c is not None:
        _check_operand(c, "matrix bias C", d.dims, c_types or (d.element_type,))
    bias = args[pos["bias"]] if "bias" in pos else None
    if bias is not None:
        _check_operand(bias, "bias vector", _bias_dims(d), bias_types or (d.element_type,))
    return c, bias


def _ragged_dims(attrs: dict, a, b, gs) -> tuple[int, ...]:
    """The dims of a ragged dot (XLA's shape inference): [groups] when the ragged dim is
    contracting, then batch, lhs free, rhs free (without the group dim)."""
    lb, lc = attrs["lhs_batch_dims"], attrs["lhs_contracting_dims"]
    rb, rc, rg = attrs["rhs_batch_dims"], attrs["rhs_contracting_dims"], attrs["rhs_group_dims"]
    r = attrs["lhs_ragged_dims"][0]
    head = [gs.shape[-1]] if r in lc else []
    lf = [a.shape[k] for k in range(a.ndim) if k not in lb and k not in lc]
    rf = [b.shape[k] for k in range(b.ndim) if k not in rb and k not in rc and k not in rg]
    return tuple(head + [a.shape[k] for k in lb] + lf + rf)


def _check_aliasing(inst, args, names: list[str]) -> None:
    """output_to_operand_aliasing, where given: the output written in place of C (XLA aliases D
    with the matrix bias), of C's shape and type."""
    alias = inst.attrs.get("output_to_operand_aliasing")
    for e in getattr(alias, "entries", ()) or ():
        k = e.operand_index
        if k >= len(args) or names[k] != "c":
            raise HloEvalError(f"output_to_operand_aliasing makes the output alias operand {k}"
                               f"{' (' + names[k] + ')' if k < len(names) else ''}; a GEMM's output aliases only "
                               f"its matrix bias C (an operand when beta != 0)")
        leaf = inst.shape
        for j in e.output_index:
            leaf = leaf.tuple_shapes[j] if leaf.is_tuple and j < len(leaf.tuple_shapes) else None
            if leaf is None:
                raise HloEvalError(f"output_to_operand_aliasing names output {list(e.output_index)}, which the "
                                   f"result does not have")
        c = args[k]
        if leaf.is_tuple or tuple(leaf.dims) != tuple(c.shape) or leaf.element_type != _tname(c):
            raise HloEvalError(f"output {list(e.output_index)} {leaf.to_str(False)} aliases C "
                               f"{_shape_str(_tname(c), c.shape)}: they must have one shape")


def _count(args, want: int, names: list[str]):
    if len(args) != want:
        raise HloEvalError(f"takes {want} operands ({', '.join(names)}) under its backend_config, got {len(args)}")


# ============================================================================ arithmetic

def _acc_type(t: str) -> np.dtype:
    """The type a GEMM of operands of type t accumulates in."""
    if t in ("f64", "c64", "c128"):
        return np_dtype(t)
    if kind(np_dtype(t)) in ("int", "uint"):
        return np.dtype(np.int32)
    return F32


def _product(g: _Gemm, a, b, ec, acc_t: np.dtype, contract=None) -> np.ndarray:
    """A.B in the accumulation type, with the products the run's numerics give (numerics.py).
    `contract(l, r, dtype)`: the product of two operands (default: the dot of g's dimension
    numbers)."""
    if contract is None:
        def contract(l, r, t):
            return dot_values(l, r, g.lb, g.lc, g.rb, g.rc, t)
    mode, gen = numerics.mode_of(ec)
    et = "f32" if (a.dtype == F32 and b.dtype == F32) else "mixed"
    alg = numerics.precision_algorithm(et, g.precision, g.algorithm, mode, gen)
    if alg is not None and acc_t == F32:
        return numerics.apply_pairs(a, b, alg, lambda l, r: contract(l, r, F32), F32, numerics.CUBLAS_TF32_ROUNDING)
    return contract(a, b, acc_t)


def _epilogue(g: _Gemm, acc: np.ndarray, c, bias, out_t: np.dtype, scale: float = 1.0):
    """(pre-activation, activated) of alpha*scale*acc + beta*C + bias, in the wide type."""
    if kind(acc.dtype) in ("int", "uint"):
        with np.errstate(all="ignore"):
            pre = acc.astype(np.int64) * int(g.alpha.real)
            if c is not None:
                pre = pre + int(g.beta) * np.asarray(c).astype(np.int64)
        return pre, pre
    cplx = kind(acc.dtype) == "complex"
    wide = np.complex128 if cplx else np.float64
    alpha = g.alpha if cplx else g.alpha.real
    with np.errstate(all="ignore"):
        pre = acc.astype(wide) * (alpha * scale) if (alpha * scale) != 1 else acc.astype(wide)
        if c is not None:
            pre = pre + g.beta * _wide(c, wide)
        if bias is not None:
            pre = pre + _wide(bias, wide)           # along the last axis of D: see _bias_axis
        act = _activate(g.activation, pre)
    return pre, act


def _wide(x, wide):
    x = np.asarray(x)
    if x.dtype not in (np.float64, np.complex128, np.float32, np.complex64):
        x = convert(x, F32)
    return x.astype(wide)


def _activate(name: str, x: np.ndarray) -> np.ndarray:
    if name == "DEFAULT":
        return x
    if name == "RELU":
        return np.where(np.isnan(x), x, np.maximum(x, 0.0))
    if name == "GELU":
        return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x * x * x)))
    if name == "SILU":
        return x / (1.0 + np.exp(-x))
    raise HloEvalError(f"unknown activation {name}")


def _round(x: np.ndarray, out_t: np.dtype) -> np.ndarray:
    """A wide value rounded once to the output type (f32 first for the narrow float types, as the
    f32 epilogue hands its value to the conversion)."""
    if kind(out_t) in ("int", "uint"):
        return x.astype(np.int64).astype(out_t)     # wraps (two's complement)
    with np.errstate(all="ignore"):
        if kind(out_t) == "complex" or out_t in (F64, F32):
            return convert(x, out_t)
        return convert(convert(x, F32), out_t)


def _bias_moved(bias, d: Shape):
    """The bias vector shaped to broadcast along D's most minor physical dimension."""
    if bias is None:
        return None
    lay = d.layout
    minor = lay.minor_to_major[0] if lay is not None and lay.minor_to_major else len(d.dims) - 1
    shape = [1] * len(d.dims)
    shape[minor] = d.dims[minor]
    return np.asarray(bias).reshape(shape)


def _outputs(inst, d: Shape, leaves: list) -> object:
    """The call's result: `leaves` (D and the extras), then a zero workspace if declared."""
    shapes = _leaves(inst)
    vals = [np.ascontiguousarray(v).reshape(s.dims) for v, s in zip(leaves, shapes)]
    for s in shapes[len(vals):]:
        vals.append(np.zeros(s.dims, np_dtype(s)))
    return tuple(vals) if inst.shape.is_tuple else vals[0]


# ============================================================================ the targets

@target("__cublas$gemm", "__cublas$lt$matmul")
def cublas_gemm(inst, args, ec):
    """cuBLAS / cuBLASLt GEMM with alpha, beta*C and the epilogue (module docstring)."""
    g, _ = _gemm_config(inst)
    legacy = inst.attrs.get("custom_call_target") == "__cublas$gemm"
    if legacy and g.epilogue != "DEFAULT":
        raise HloEvalError(f"__cublas$gemm (legacy cuBLAS) has no epilogue; its backend_config asks for "
                           f"{g.epilogue} (only __cublas$lt$matmul runs epilogues)")
    names = ["a", "b"] + (["c"] if g.beta != 0 else []) + (["bias"] if g.has_bias else [])
    _count(args, len(names), names)
    _check_aliasing(inst, args, names)
    a, b = args[0], args[1]
    ta, tb = _tname(a), _tname(b)
    if ta != tb or ta not in _GEMM_TYPES:
        raise HloEvalError(f"operands of types {ta} and {tb}: a cuBLAS GEMM takes two operands of one of the "
                           f"types {', '.join(_GEMM_TYPES)} (f8 GEMMs are __cublas$lt$matmul$f8)")
    dims = _check_dims(g, a, b)
    extra = [("auxiliary output (the pre-activation)", _same_as_d)] if g.has_aux else []
    d = _check_result(inst, dims, _GEMM_TYPES[ta], extra)
    out_t = np_dtype(d)
    c, bias = _c_and_bias(g, args, names, d)
    if g.alpha.imag != 0 and kind(out_t) != "complex":
        raise HloEvalError(f"alpha_imag is {g.alpha.imag:g} for a real GEMM")
    acc = _product(g, a, b, ec, _acc_type(ta))
    pre, act = _epilogue(g, acc, c, _bias_moved(bias, d), out_t)
    outs = [_round(act, out_t)] + ([_round(pre, out_t)] if g.has_aux else [])
    return _outputs(inst, d, outs)


@target("__cublas$lt$matmul$f8")
def cublas_f8_gemm(inst, args, ec):
    """cuBLASLt's scaled f8 GEMM (module docstring)."""
    g, _ = _gemm_config(inst)
    if g.has_aux or g.activation not in ("DEFAULT", "RELU"):
        raise HloEvalError(f"the f8 GEMM takes the epilogues DEFAULT, BIAS, RELU and BIAS_RELU, not {g.epilogue}")
    leaves = _leaves(inst)
    d_type = leaves[0].element_type
    fixed = ["a", "b"] + (["c"] if g.beta != 0 else []) + ["a_scale", "b_scale"] + (["bias"] if g.has_bias else [])
    f8_out = d_type in _F8
    names = fixed + (["d_scale"] if f8_out else [])
    if f8_out and len(args) == len(names) + 1:
        names = fixed + ["c_scale", "d_scale"]                   # older XLA versions
    _count(args, len(names), names)
    _check_aliasing(inst, args, names)
    a, b = args[0], args[1]
    for what, x in (("a", a), ("b", b)):
        if _tname(x) not in _F8:
            raise HloEvalError(f"operand {what} {_shape_str(_tname(x), x.shape)} of an f8 GEMM should be of an "
                               f"f8 type ({', '.join(_F8)})")
    dims = _check_dims(g, a, b)
    extra = [("amax of the output", _f32_scalar)] if g.damax else []
    d = _check_result(inst, dims, _F8 + _FLOAT_IO, extra)
    pos = {n: k for k, n in enumerate(names)}
    for n in names:
        if n.endswith("scale"):
            x = args[pos[n]]
            if x.shape != () or _tname(x) != "f32":
                raise HloEvalError(f"the {n} operand {_shape_str(_tname(x), x.shape)} should be an f32 scalar")
    wide = ("bf16", "f16", "f32") if f8_out else None          # an f8 D takes a wider C and bias
    c, bias = _c_and_bias(g, args, names, d, wide, wide)
    scale = float(args[pos["a_scale"]]) * float(args[pos["b_scale"]])
    acc = dot_values(a, b, g.lb, g.lc, g.rb, g.rc, F32)          # f8 products are exact in f32
    pre, act = _epilogue(g, acc, c, _bias_moved(bias, d), np_dtype(d), scale)
    pre32 = convert(act, F32)
    outs = []
    if f8_out:
        dt = np_dtype(d)
        top = float(ml_dtypes.finfo(dt).max)
        with np.errstate(all="ignore"):
            scaled = convert(pre32.astype(np.float64) * float(args[pos["d_scale"]]), F32)
            sat = np.where(np.isnan(scaled), scaled, np.clip(scaled, -top, top))
        outs.append(convert(sat, dt))
    else:
        outs.append(_round(act, np_dtype(d)))
    if g.damax:
        with np.errstate(all="ignore"):
            mag = np.abs(pre32)
            amax = np.float32(np.nan) if np.isnan(mag).any() else (mag.max() if mag.size else np.float32(0))
        outs.append(np.asarray(amax, F32))
    return _outputs(inst, d, outs)


_MX = ("f8e4m3fn", "f8e5m2", "f4e2m1fn", "f6e2m3fn", "f6e3m2fn")


@target("__cublas$lt$matmul$mx")
def cublas_mx_gemm(inst, args, ec):
    """hipBLASLt's block-scaled (MX) GEMM: the scaled-dot of its operands (module docstring)."""
    g, _ = _gemm_config(inst)
    if g.epilogue != "DEFAULT" or g.beta != 0:
        raise HloEvalError(f"the block-scaled GEMM takes no epilogue or C (epilogue {g.epilogue}, beta {g.beta:g})")
    names = ["a", "b", "a_scale", "b_scale"]
    _count(args, 4, names)
    a, b, sa, sb = args
    for what, x, types in (("a", a, _MX), ("b", b, _MX), ("a_scale", sa, ("f8e8m0fnu",)),
                           ("b_scale", sb, ("f8e8m0fnu",))):
        if _tname(x) not in types:
            raise HloEvalError(f"operand {what} {_shape_str(_tname(x), x.shape)} should be of type "
                               f"{' or '.join(types)}")
    for what, x, s_ in (("a", a, sa), ("b", b, sb)):
        if s_.ndim != x.ndim or any(d % k for d, k in zip(x.shape, s_.shape) if k):
            raise HloEvalError(f"the {what}_scale {_shape_str(_tname(s_), s_.shape)} does not divide {what} "
                               f"{_shape_str(_tname(x), x.shape)} into blocks")
    d = _check_result(inst, _check_dims(g, a, b), ("f32", "bf16", "f16"), [])
    probe = SimpleNamespace(opcode="scaled-dot", shape=d,
                            attrs={"lhs_batch_dims": g.lb, "lhs_contracting_dims": g.lc,
                                   "rhs_batch_dims": g.rb, "rhs_contracting_dims": g.rc})
    out = eval_scaled_dot(probe, [a, b, sa, sb], ec)
    if g.alpha != 1:
        out = _round(_epilogue(g, convert(out, F32), None, None, np_dtype(d))[1], np_dtype(d))
    return _outputs(inst, d, [out])


@target("__cublas$lt$groupedMatmul")
def cublas_grouped_gemm(inst, args, ec):
    """XLA's ragged-dot as a cuBLASLt grouped GEMM (module docstring)."""
    g, grouped = _gemm_config(inst, grouped=True)
    rd = grouped.get("ragged_dot_dimension_numbers")
    if not isinstance(rd, dict):
        raise HloEvalError("grouped_gemm_backend_config has no ragged_dot_dimension_numbers")
    names = ["a", "b", "group_sizes"] + (["c"] if g.beta != 0 else []) + (["bias"] if g.has_bias else [])
    _count(args, len(names), names)
    if g.has_aux:
        raise HloEvalError(f"a grouped GEMM has no auxiliary output; its epilogue is {g.epilogue}")
    a, b, gs = args[0], args[1], args[2]
    if kind(gs.dtype) not in ("int", "uint"):
        raise HloEvalError(f"group_sizes {_shape_str(_tname(gs), gs.shape)} should be integers")
    dn = rd.get("dot_dimension_numbers", {}) or {}
    attrs = {"lhs_batch_dims": _ints(dn.get("lhs_batch_dimensions", []), "lhs_batch_dimensions"),
             "lhs_contracting_dims": _ints(dn.get("lhs_contracting_dimensions", []), "lhs_contracting_dimensions"),
             "rhs_batch_dims": _ints(dn.get("rhs_batch_dimensions", []), "rhs_batch_dimensions"),
             "rhs_contracting_dims": _ints(dn.get("rhs_contracting_dimensions", []), "rhs_contracting_dimensions"),
             "lhs_ragged_dims": _ints(rd.get("lhs_ragged_dimensions", []), "lhs_ragged_dimensions"),
             "rhs_group_dims": _ints(rd.get("rhs_group_dimensions", []), "rhs_group_dimensions")}
    if len(attrs["lhs_ragged_dims"]) != 1:
        raise HloEvalError("ragged_dot_dimension_numbers needs exactly one lhs ragged dimension")
    ta, tb = _tname(a), _tname(b)
    if ta != tb or ta not in _GEMM_TYPES:
        raise HloEvalError(f"operands of types {ta} and {tb}: a grouped GEMM takes two operands of one type")
    for n, x in (("lhs", a), ("rhs", b)):
        for key in (f"{n}_batch_dims", f"{n}_contracting_dims") + (("lhs_ragged_dims",) if n == "lhs" else
                                                                    ("rhs_group_dims",)):
            if any(not 0 <= v < x.ndim for v in attrs[key]):
                raise HloEvalError(f"ragged_dot_dimension_numbers: {key} {list(attrs[key])} is outside the {n}'s "
                                   f"rank {x.ndim}")
    d = _check_result(inst, _ragged_dims(attrs, a, b, gs), _GEMM_TYPES[ta], [])
    c, bias = _c_and_bias(g, args, names, d)
    acc_t = _acc_type(ta)
    probe = SimpleNamespace(opcode="ragged-dot", attrs=attrs, shape=Shape.array(etype(acc_t).name, d.dims))
    acc = _product(g, a, b, ec, acc_t, lambda l, r, t: eval_ragged_dot(probe, [l, r, gs], None))
    pre, act = _epilogue(g, acc, c, _bias_moved(bias, d), np_dtype(d))
    return _outputs(inst, d, [_round(act, np_dtype(d))])


_TRANSPOSE = {"NO_TRANSPOSE": "NO_TRANSPOSE", "TRANSPOSE": "TRANSPOSE", "ADJOINT": "ADJOINT",
              1: "NO_TRANSPOSE", 2: "TRANSPOSE", 3: "ADJOINT"}


@target("__cublas$triangularSolve")
def cublas_triangular_solve(inst, args, ec):
    """The triangular-solve op as cuBLAS's trsm: backend_config = TriangularSolveOptions,
    result (X, scratch)."""
    opts = _backend_json(inst)
    _count(args, 2, ["a", "b"])
    a, b = args
    t = opts.get("transpose_a", "NO_TRANSPOSE")
    if t not in _TRANSPOSE:
        raise HloEvalError(f"backend_config: transpose_a {t!r} is not NO_TRANSPOSE, TRANSPOSE or ADJOINT")
    left = bool(opts.get("left_side", False))
    if a.ndim < 2 or a.shape[-1] != a.shape[-2] or a.ndim != b.ndim or a.shape[:-2] != b.shape[:-2]:
        raise HloEvalError(f"a {_shape_str(_tname(a), a.shape)} should be square matrices with b's batch "
                           f"dimensions ({_shape_str(_tname(b), b.shape)})")
    k = b.shape[-2] if left else b.shape[-1]
    if a.shape[-1] != k:
        raise HloEvalError(f"a {_shape_str(_tname(a), a.shape)} does not fit b {_shape_str(_tname(b), b.shape)} "
                           f"on the {'left' if left else 'right'}")
    if _tname(a) != _tname(b) or _tname(a) not in ("f32", "f64", "c64", "c128"):
        raise HloEvalError(f"a and b of types {_tname(a)} and {_tname(b)}: trsm takes two operands of one of "
                           f"f32, f64, c64, c128")
    shapes = _leaves(inst)
    x = shapes[0]
    if x.is_tuple or tuple(x.dims) != tuple(b.shape) or x.element_type != _tname(b):
        raise HloEvalError(f"the result {x.to_str(False)} should be {_shape_str(_tname(b), b.shape)}, like b")
    if len(shapes) > 2 or (len(shapes) == 2 and shapes[1].element_type not in ("s8", "u8")):
        raise HloEvalError("the result should be (X, s8[N] scratch)")
    probe = SimpleNamespace(opcode="triangular-solve", shape=x,
                            attrs={"left_side": left, "lower": bool(opts.get("lower", False)),
                                   "unit_diagonal": bool(opts.get("unit_diagonal", False)),
                                   "transpose_a": _TRANSPOSE[t]})
    return _outputs(inst, x, [eval_triangular_solve(probe, [a, b], ec)])
