"""cuDNN library calls that XLA GPU writes into a module: convolutions, filter reorders, layer norm
and block-scaled dots, run with the semantics XLA gives them (xla/service/gpu/cublas_cudnn.h, the
rewriters in xla/backends/gpu/transforms/ and the cuDNN graph XLA builds in
stream_executor/cuda/cuda_dnn.cc).  Attention (`__cudnn$fmha*`) is in gpu_attention.py.

Convolutions.  A `__cudnn$conv*` custom call carries the window, dim_labels and feature_group_count
of the *forward* convolution input (x) * filter (w) -> output (y), whatever it computes:

* `convForward`: (x, w) -> y;
* `convBackwardInput`: (dy, w) -> dx, the adjoint of the forward convolution in x (dim_labels'
  output part describes dy, its input part the result);
* `convBackwardFilter`: (x, dy) -> dw, the adjoint in w;
* `convBiasActivationForward`: (x, w, bias[, side_input]) ->
  act(conv_result_scale * conv(x, w) + side_input_scale * side_input + bias), bias along the output
  features, with the activation of CudnnConvBackendConfig.activation_mode (relu, relu6, elu, leaky
  relu with leakyrelu_alpha, sigmoid, tanh, exact gelu, none);
* `convForwardGraph`: (x, w, operands...) -> (y, amax..., scratch): the pointwise ops of the
  config's serialized_graph `UID:[type]op(in-graph operands);...` (conv, add, scale, invscale,
  relu, min, max, elu, amax) in order; a binary op with one in-graph operand takes the next
  custom-call operand; each op's result is rounded to its [type] (fp8 saturating).
Every kind returns (result, u8[scratch]); the scratch is zeros.  The arithmetic is the interpreter's
convolution rule (convolution.py) on a plain `convolution` built from the custom call: the backward
kinds as the transposed convolutions XLA's conv rewriter matched them from (JAX's
conv_general_dilated transpose rules), accumulated in cuDNN's accumulator type (f32 for f32, f16,
bf16 and fp8; s32 for s8) and converted to the declared type once (integers saturate, as cuDNN's
int8 outputs do).  Under GPU numerics an f32 convolution's products are TF32 products (numerics.py)
when the cuDNN algorithm XLA chose uses tensor cores (its math_type is not DEFAULT_MATH).

Vectorized int8 layouts (NCHW_VECT_C): an operand with one dimension more than dim_labels names holds
the features as (feature, vector) pairs, s8[..., C/4, ..., 4] or [..., C/32, ..., 32]; they are merged
before and split after.  With `reordered_int8_nchw_vect` the filter (and bias) are in cuDNN's
int8x32 reordered layout (`convReorderFilter`, `convReorderFilterAndBias`, the permutation of
xla/service/gpu/cudnn_support_utils.h) and are put back first.

`__cudnn$norm` (CudnnNormBackendConfig): layer norm over every dimension where the scale is not 1
(XLA reshapes x to [N, C, 1, 1]): forward (x, scale, bias) -> (y[, mean, 1/sqrt(var + epsilon)]),
backward (x, scale, dy, mean, norm_factor) -> (dx, dscale, dbias), computed in f32.

`__cudnn$blockScaledDot` (block_scaling_rewriter.cc): (lhs [B,]M,K, rhs [B,]N,K, lhs_scale,
rhs_scale[, global_scale]) -> [B,]M,N, each operand dequantized blockwise along K (block_size from
the config, else K / scale columns), scales in cuDNN's swizzled 128x4 tile order; f32 products and
sums.
"""
from __future__ import annotations

import re

import numpy as np

from ...errors import HloEvalError
from ...ir.attributes import ConvDimensionNumbers, Window, WindowDim
from ...ir.module import Instruction
from ...ir.shape import Shape
from . import numerics
from ..values import np_dtype
from .convert import convert
from .convolution import eval_convolution
from .custom_call import target
from .linalg import etype_name, dot_values

F32 = np.dtype(np.float32)


# ============================================================================ shared helpers

def gpu_config(inst, key: str) -> dict:
    """The `key` message of a GPU custom call's backend_config (JSON), {} when absent; a
    backend_config that is not JSON is an HloEvalError."""
    bc = inst.attrs.get("backend_config")
    if bc is None:
        return {}
    js = bc.json if hasattr(bc, "json") else None
    if js is None:
        text = bc.string if hasattr(bc, "string") else str(bc)
        if not text.strip():
            return {}
        raise HloEvalError(f"{inst.attrs.get('custom_call_target')}: backend_config is not the JSON "
                           f"GpuBackendConfig XLA writes: {text[:80]!r}")
    return js.get(key, {}) if isinstance(js, dict) else {}


def cfg_num(d: dict, key: str, default, name: str, kind=float):
    """Config value `key` of dict `d` as a `kind` (float or int), `default` when absent or null; a
    value that is not a number is an HloEvalError naming the option."""
    v = d.get(key, default) if isinstance(d, dict) else default
    if v is None:
        v = default
    try:
        return kind(float(v)) if kind is int and isinstance(v, str) and "." in v else kind(v)
    except (TypeError, ValueError, OverflowError):
        raise HloEvalError(f"{name}: option {key} must be a number, got {v!r}") from None


def leaves(shape: Shape) -> list[Shape]:
    return list(shape.leaves()) if shape.is_tuple else [shape]


def result_tuple(inst, outs: list) -> tuple | np.ndarray:
    """The declared result from computed leaves, each converted to its declared type; the leaves
    after them (cuDNN's u8 scratch) are zeros."""
    vals = []
    for k, s in enumerate(leaves(inst.shape)):
        dt = np_dtype(s)
        if k < len(outs) and outs[k] is not None:
            v = np.asarray(outs[k])
            v = convert(v, dt) if v.dtype != dt else v
            v = v.reshape(s.dims)
            vals.append(v if v.flags.c_contiguous else v.copy())
        else:
            vals.append(np.zeros(s.dims, dt))
    return tuple(vals) if inst.shape.is_tuple else vals[0]


def shape_text(a: np.ndarray) -> str:
    return f"{etype_name(a.dtype)}[{','.join(map(str, a.shape))}]"


def need(cond: bool, name: str, what: str):
    """A check of a library call's operands against its config, as an HloEvalError."""
    if not cond:
        raise HloEvalError(f"{name}: {what}")


def to_type(x: np.ndarray, dt) -> np.ndarray:
    """x converted to dtype dt the way cuDNN writes an output: floats round to nearest (fp8 types
    saturate to their largest finite value), integers round and saturate."""
    dt = np.dtype(dt)
    if x.dtype == dt:
        return x
    if dt.kind in "iu":
        info = np.iinfo(dt)
        with np.errstate(invalid="ignore"):
            y = np.rint(np.asarray(x, np.float64))
            y = np.where(np.isnan(y), 0, np.clip(y, info.min, info.max))
        return y.astype(dt)
    if etype_name(dt).startswith(("f8", "f4", "f6")):
        import ml_dtypes
        big = float(ml_dtypes.finfo(dt).max)
        with np.errstate(invalid="ignore"):
            x = np.clip(np.asarray(x, F32), -big, big)
    return convert(np.asarray(x), dt)


# ============================================================================ convolutions

_CONV_KINDS = {
    "__cudnn$convForward": "forward",
    "__cudnn$convBackwardInput": "backward_input",
    "__cudnn$convBackwardFilter": "backward_filter",
    "__cudnn$convBiasActivationForward": "bias_activation",
    "__cudnn$convForwardGraph": "graph",
}


def _acc_type(dt: np.dtype) -> np.dtype:
    """cuDNN's accumulator type (GetConvAccumulatorType): s32 for integers, f64 for f64, else f32."""
    if dt.kind in "iu":
        return np.dtype(np.int32)
    if dt == np.float64:
        return np.dtype(np.float64)
    if dt.kind == "c":
        return dt
    return F32


def _vect_dim(rank: int, named) -> int | None:
    """The vectorized-feature dimension: the first dimension dim_labels does not name."""
    for d in range(rank):
        if d not in named:
            return d
    return None


def _merge_vect(x: np.ndarray, feat: int, named, name: str, what: str):
    """An NCHW_VECT_C operand -> (array with the vector dim merged into feature dim `feat`, the
    vector size, where the vector dim was).  Plain operands pass unchanged (size 1)."""
    v = _vect_dim(x.ndim, named)
    if v is None:
        return x, 1, None
    need(x.ndim == len(named) + 1, name, f"the {what} {shape_text(x)} has {x.ndim - len(named)} dimensions that "
         f"dim_labels does not name; a vectorized int8 layout has one (of size 4 or 32)")
    size = x.shape[v]
    order = [d for d in range(x.ndim) if d != v]
    fi = order.index(feat)
    y = x.transpose(order[:fi + 1] + [v] + order[fi + 1:])
    shp = list(y.shape)
    shp[fi:fi + 2] = [shp[fi] * shp[fi + 1]]
    return y.reshape(shp), size, v


def _split_vect(y: np.ndarray, feat_after: int, size: int, v: int) -> np.ndarray:
    """The inverse of _merge_vect for a result: split feature dim `feat_after` (an index in the
    merged array) into (feature, vector) and put the vector dim at position v."""
    shp = list(y.shape)
    shp[feat_after:feat_after + 1] = [shp[feat_after] // size, size]
    z = y.reshape(shp)
    return np.moveaxis(z, feat_after + 1, v)


def _merged_dnums(dn: ConvDimensionNumbers, vx, vw, vy) -> ConvDimensionNumbers:
    """dim_labels for operands whose vector dims (at vx, vw, vy; None: none) were merged away."""
    def fix(d, v):
        return d - 1 if v is not None and d > v else d
    return ConvDimensionNumbers(
        fix(dn.input_batch_dimension, vx), fix(dn.input_feature_dimension, vx),
        tuple(fix(d, vx) for d in dn.input_spatial_dimensions),
        fix(dn.kernel_input_feature_dimension, vw), fix(dn.kernel_output_feature_dimension, vw),
        tuple(fix(d, vw) for d in dn.kernel_spatial_dimensions),
        fix(dn.output_batch_dimension, vy), fix(dn.output_feature_dimension, vy),
        tuple(fix(d, vy) for d in dn.output_spatial_dimensions))


def _conv(inst, lhs, rhs, dn, window, out_dims, out_dt, fgc=1, bgc=1, ec=None) -> np.ndarray:
    """A plain XLA convolution through the interpreter's convolution rule, with the custom call's
    operand precisions (under GPU numerics an f32 convolution then has TF32 products, unless the
    cuDNN algorithm chosen says DEFAULT_MATH: no tensor cores, f32 products)."""
    shape = Shape.array(etype_name(out_dt), tuple(int(d) for d in out_dims))
    attrs = {"dim_labels": dn, "window": window, "feature_group_count": fgc, "batch_group_count": bgc}
    if inst.attrs.get("operand_precision") is not None:
        attrs["operand_precision"] = inst.attrs["operand_precision"]
    math = str(gpu_config(inst, "cudnn_conv_backend_config").get("algorithm", {}).get("math_type", ""))
    if math == "DEFAULT_MATH":
        attrs["algorithm"] = "dot_f32_f32_f32"
    conv = Instruction(name=inst.name, opcode="convolution", shape=shape, operands=(), attrs=attrs, loc=inst.loc)
    if math != "DEFAULT_MATH" and "algorithm" not in attrs:
        # tensor cores allowed (TENSOR_OP_MATH, or no algorithm chosen yet): the TF32 products a dot of
        # this precision has on the GPU (a plain `convolution` does not imply them: CONV_IMPLIED_TF32)
        alg = numerics.dot_algorithm(conv, ec, [lhs, rhs], implied=True)
        if alg is not None:
            conv = Instruction(name=inst.name, opcode="convolution", shape=shape, operands=(),
                               attrs={**attrs, "algorithm": alg}, loc=inst.loc)
    return eval_convolution(conv, [lhs, rhs], ec)


def _dilate(n: int, d: int) -> int:
    return 0 if n == 0 else 1 + d * (n - 1)


def _out_size(n: int, wd: WindowDim) -> int:
    """The forward convolution's output size along one spatial dim."""
    padded = _dilate(n, wd.base_dilation) + wd.padding_low + wd.padding_high
    k = _dilate(wd.size, wd.window_dilation)
    if padded < k:
        return 0
    return (padded - k) // wd.stride + 1


def _check_conv(name, dn, window, x_shape, w_shape, y_shape, fgc, bgc):
    """The forward convolution x * w -> y that a cuDNN convolution's attributes describe must be
    consistent (feature counts, groups, spatial sizes)."""
    ns = len(dn.input_spatial_dimensions)
    need(len(window.dimensions) == ns, name, f"the window has {len(window.dimensions)} dimensions, dim_labels "
         f"{ns} spatial ones")
    c = x_shape[dn.input_feature_dimension]
    n = x_shape[dn.input_batch_dimension]
    i = w_shape[dn.kernel_input_feature_dimension]
    o = w_shape[dn.kernel_output_feature_dimension]
    need(c == i * fgc, name, f"input features {c} must be filter input features {i} x feature_group_count {fgc}")
    need(o % fgc == 0 and o % bgc == 0, name, f"filter output features {o} must divide by the group counts")
    need(y_shape[dn.output_feature_dimension] == o, name,
         f"output features {y_shape[dn.output_feature_dimension]} must be the filter's output features {o}")
    need(y_shape[dn.output_batch_dimension] * bgc == n, name,
         f"output batch {y_shape[dn.output_batch_dimension]} must be the input batch {n} / batch_group_count {bgc}")
    for k, wd in enumerate(window.dimensions):
        need(w_shape[dn.kernel_spatial_dimensions[k]] == wd.size, name,
             f"filter spatial dim {k} is {w_shape[dn.kernel_spatial_dimensions[k]]}, the window size {wd.size}")
        want = _out_size(x_shape[dn.input_spatial_dimensions[k]], wd)
        got = y_shape[dn.output_spatial_dimensions[k]]
        need(got == want, name, f"output spatial dim {k} is {got}; the window gives {want} for input size "
             f"{x_shape[dn.input_spatial_dimensions[k]]}")


def conv_forward(inst, x, w, dn, window, fgc, bgc, out_dims, acc, ec=None):
    return _conv(inst, x, w, dn, window, out_dims, acc, fgc, bgc, ec)


def conv_backward_input(inst, dy, w, dn, window, fgc, dx_dims, acc, ec=None):
    """dx = the adjoint of x -> conv(x, w) applied to dy: a convolution of dy (lhs-dilated by the
    strides, padded) with the spatially reversed filter, input and output features swapped."""
    ns = len(dn.input_spatial_dimensions)
    kin, kout = dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension
    ks = dn.kernel_spatial_dimensions
    wc = np.transpose(w, [kout, kin, *ks])                       # (O, I, *K)
    o, i = wc.shape[:2]
    flip = tuple(2 + k for k, wd in enumerate(window.dimensions) if not wd.window_reversal)
    if flip:
        wc = np.flip(wc, flip)
    # groups: O = (G, O/G) -> kernel (in = O/G, out = G*I)
    wt = wc.reshape((fgc, o // fgc, i) + wc.shape[2:]).transpose((1, 0, 2) + tuple(range(3, 3 + ns)))
    wt = wt.reshape((o // fgc, fgc * i) + wc.shape[2:])
    tdn = ConvDimensionNumbers(dn.output_batch_dimension, dn.output_feature_dimension, dn.output_spatial_dimensions,
                               0, 1, tuple(range(2, 2 + ns)),
                               dn.input_batch_dimension, dn.input_feature_dimension, dn.input_spatial_dimensions)
    dims = []
    for k, wd in enumerate(window.dimensions):
        n_in = dx_dims[dn.input_spatial_dimensions[k]]
        n_out = dy.shape[dn.output_spatial_dimensions[k]]
        kd = _dilate(wd.size, wd.window_dilation)
        lo = kd - 1 - wd.padding_low
        hi = _dilate(n_in, wd.base_dilation) + kd - 1 - _dilate(n_out, wd.stride) - lo
        dims.append(WindowDim(size=wd.size, stride=wd.base_dilation, padding_low=lo, padding_high=hi,
                              window_dilation=wd.window_dilation, base_dilation=wd.stride))
    return _conv(inst, dy, np.ascontiguousarray(wt), tdn, Window(tuple(dims)), dx_dims, acc, fgc, 1, ec)


def conv_backward_filter(inst, x, dy, dn, window, fgc, bgc, dw_dims, acc, ec=None):
    """dw = the adjoint of w -> conv(x, w) applied to dy: a convolution of x (batch and features
    swapped) with dy as the kernel, strides and window dilations swapped, feature groups as batch
    groups."""
    tdn = ConvDimensionNumbers(dn.input_feature_dimension, dn.input_batch_dimension, dn.input_spatial_dimensions,
                               dn.output_batch_dimension, dn.output_feature_dimension, dn.output_spatial_dimensions,
                               dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension,
                               dn.kernel_spatial_dimensions)
    dims = []
    for k, wd in enumerate(window.dimensions):
        n_in = x.shape[dn.input_spatial_dimensions[k]]
        n_out = dy.shape[dn.output_spatial_dimensions[k]]
        kd = _dilate(wd.size, wd.window_dilation)
        hi = (_dilate(n_out, wd.stride) - _dilate(n_in, wd.base_dilation)) + (kd - wd.padding_low - 1)
        dims.append(WindowDim(size=n_out, stride=wd.window_dilation, padding_low=wd.padding_low, padding_high=hi,
                              window_dilation=wd.stride, base_dilation=wd.base_dilation))
    t_fgc, t_bgc = (bgc, 1) if bgc > 1 else (1, fgc)
    dw = _conv(inst, x, dy, tdn, Window(tuple(dims)), dw_dims, acc, t_fgc, t_bgc, ec)
    rev = tuple(dn.kernel_spatial_dimensions[k] for k, wd in enumerate(window.dimensions) if wd.window_reversal)
    return np.flip(dw, rev) if rev else dw


def _activation(mode, y: np.ndarray, alpha: float, name: str) -> np.ndarray:
    """cuDNN's activation (stream_executor dnn.proto ActivationMode) on the f32 result."""
    m = str(mode)
    modes = {"0": "kNone", "1": "kSigmoid", "2": "kRelu", "3": "kRelu6", "4": "kReluX", "5": "kTanh",
             "6": "kBandPass", "7": "kElu", "8": "kLeakyRelu", "9": "kGeluExact"}
    m = modes.get(m, m)
    with np.errstate(all="ignore"):
        if m == "kNone":
            return y
        if m == "kRelu":
            return np.where(y > 0, y, np.zeros((), y.dtype)) if y.dtype.kind == "f" else np.maximum(y, 0)
        if m == "kRelu6":
            return np.clip(y, 0, 6)
        if m == "kElu":
            return np.where(y > 0, y, np.expm1(y))
        if m == "kLeakyRelu":
            return np.where(y > 0, y, y * y.dtype.type(alpha))
        if m == "kSigmoid":
            return (1 / (1 + np.exp(-y))).astype(y.dtype)
        if m == "kTanh":
            return np.tanh(y)
        if m == "kGeluExact":
            from scipy.special import erf
            return (0.5 * y * (1 + erf(y / np.sqrt(2)))).astype(y.dtype)
    raise HloEvalError(f"{name}: activation_mode {mode!r} is not one XLA GPU fuses into a cuDNN convolution "
                       f"(kNone, kRelu, kRelu6, kElu, kLeakyRelu, kSigmoid, kTanh, kGeluExact)")


# serialized_graph ops: (external operand kind, result kind); XLA's OpNameStringToOperandKindAndMode
_GRAPH_OPS = {"add": "tensor", "min": "tensor", "max": "tensor", "scale": "scalar", "invscale": "scalar",
              "elu": None, "relu": None, "amax": None}
_GRAPH_ITEM = re.compile(r"(\d+):\[(\w+)\](\w+)\(([\d,]*)\);")


def parse_graph(text: str, name: str) -> list[tuple[int, str, str, list[int]]]:
    """`UID:[type]op(uid,...);...` -> [(uid, element type, op, in-graph operand uids)]; a graph XLA's
    runtime would refuse is an HloEvalError."""
    ops, pos = [], 0
    while pos < len(text):
        m = _GRAPH_ITEM.match(text, pos)
        need(m is not None, name, f"cannot read serialized_graph {text!r} at character {pos} (expected "
                                  f"'UID:[type]op(operands);')")
        uid, ty, op, operands = m.groups()
        ins = [int(u) for u in operands.split(",") if u]
        if not ops:
            need(op == "conv" and not ins, name, f"serialized_graph must start with conv(), got {op}({operands})")
        else:
            need(op in _GRAPH_OPS, name, f"serialized_graph op {op!r} is not one cuDNN graphs XLA builds have "
                                         f"({', '.join(['conv'] + sorted(_GRAPH_OPS))})")
            need(bool(ins) and all(any(u == o[0] for o in ops) for u in ins), name,
                 f"serialized_graph op {uid}:{op} must take earlier ops of the graph, got ({operands})")
        ops.append((int(uid), ty, op, ins))
        pos = m.end()
    need(bool(ops), name, "serialized_graph is empty")
    return ops


def run_graph(inst, ops, conv_value: np.ndarray, extra: list, name: str):
    """Evaluate a parsed cuDNN graph on the convolution's f32 value: (final tensor, [amax scalars])."""
    from ...ir.dtypes import element_type
    vals: dict[int, np.ndarray] = {}
    used: set[int] = set()
    amaxes, last = [], None
    nxt = 0

    def rounded(v, ty):
        et = element_type(ty.lower())
        if et is None:
            raise HloEvalError(f"{name}: serialized_graph type [{ty}] is not an element type")
        dt = np.dtype(et.numpy)
        return np.asarray(to_type(v, dt), dtype=dt).astype(F32) if dt != F32 else v.astype(F32)

    for uid, ty, op, ins in ops:
        if op == "conv":
            v = rounded(conv_value, ty)
            vals[uid] = v
            last = uid
            continue
        a = vals[ins[0]]
        used.update(ins)
        ext = None
        kind = _GRAPH_OPS[op]
        if kind is not None and len(ins) == 1:
            need(nxt < len(extra), name, f"serialized_graph op {uid}:{op} needs operand {2 + nxt} of the custom "
                                         f"call; it has {2 + len(extra)}")
            ext = np.asarray(extra[nxt], F32) if extra[nxt].dtype != F32 else extra[nxt]
            nxt += 1
            if kind == "scalar":
                need(ext.size == 1, name, f"serialized_graph op {uid}:{op} takes a scalar, operand {1 + nxt} is "
                                          f"{shape_text(extra[nxt - 1])}")
                ext = ext.reshape(())
        b = vals[ins[1]] if len(ins) > 1 else ext
        with np.errstate(all="ignore"):
            if op == "add":
                v = a + b
            elif op == "min":
                v = np.minimum(a, b)
            elif op == "max":
                v = np.maximum(a, b)
            elif op == "scale":
                v = a * b
            elif op == "invscale":
                v = a / b
            elif op == "relu":
                v = np.maximum(a, np.float32(0))
            elif op == "elu":
                v = np.where(a > 0, a, np.expm1(a))
            else:                                    # amax: a scalar output
                amaxes.append(np.max(np.abs(a)).astype(F32) if a.size else np.float32(0))
                vals[uid] = a
                continue
        vals[uid] = rounded(np.asarray(v, F32), ty)
        last = uid
    need(nxt == len(extra), name, f"serialized_graph uses {nxt} operand(s) after the input and filter; the "
                                  f"custom call has {len(extra)}")
    return vals[last], amaxes


def _unreorder_filter(w: np.ndarray, name: str) -> np.ndarray:
    """The inverse of cuDNN's int8x32 filter reordering (filter [O, I/32, H, W, 32])."""
    need(w.ndim == 5 and w.shape[4] == 32 and w.shape[0] % 8 == 0, name,
         f"a reordered int8x32 filter is [O, I/32, H, W, 32] with O a multiple of 8, got {shape_text(w)}")
    o, i32, h, ww, _ = w.shape
    t = w.reshape(i32, h, ww, o // 8, 2, 8, 4, 4)
    inv = np.argsort([3, 4, 5, 0, 2, 6, 1, 7])
    return np.ascontiguousarray(t.transpose(inv).reshape(w.shape))


def _reorder_filter(w: np.ndarray, name: str) -> np.ndarray:
    """cuDNN's int8x32 filter reordering (cudnnReorderFilterAndBias), as XLA's test spells it."""
    need(w.ndim == 5 and w.shape[4] == 32 and w.shape[0] % 8 == 0, name,
         f"the filter must be [O, I/32, H, W, 32] with O a multiple of 8, got {shape_text(w)}")
    o, i32, h, ww, _ = w.shape
    t = w.reshape(o // 8, 4, 2, i32, h, ww, 8, 4).transpose(3, 4, 5, 0, 2, 6, 1, 7)
    return np.ascontiguousarray(t.reshape(w.shape))


def _reorder_bias(b: np.ndarray, name: str, inverse: bool = False) -> np.ndarray:
    need(b.ndim == 1 and b.shape[0] % 32 == 0, name, f"the bias must be [O] with O a multiple of 32, got {shape_text(b)}")
    if inverse:
        return np.ascontiguousarray(b.reshape(-1, 2, 4, 4).transpose(0, 2, 1, 3).reshape(b.shape))
    return np.ascontiguousarray(b.reshape(-1, 4, 2, 4).transpose(0, 2, 1, 3).reshape(b.shape))


@target("__cudnn$convReorderFilter")
def cc_reorder_filter(inst, args, ec):
    """cuDNN's int8x32 filter reordering: s8[O, I/32, H, W, 32] permuted as
    [O/8,4,2,I/32,H,W,8,4] -> dims {3,4,5,0,2,6,1,7}."""
    name = inst.attrs.get("custom_call_target")
    need(len(args) == 1, name, f"takes the filter, got {len(args)} operands")
    return result_tuple(inst, [_reorder_filter(np.asarray(args[0]), name)])


@target("__cudnn$convReorderFilterAndBias")
def cc_reorder_filter_and_bias(inst, args, ec):
    """The filter reordering above and the f32 bias [O] permuted as [O/32,4,2,4] -> {0,2,1,3}."""
    name = inst.attrs.get("custom_call_target")
    need(len(args) == 2, name, f"takes the filter and the bias, got {len(args)} operands")
    return result_tuple(inst, [_reorder_filter(np.asarray(args[0]), name), _reorder_bias(np.asarray(args[1]), name)])


@target(*_CONV_KINDS)
def cc_cudnn_conv(inst, args, ec):
    """A cuDNN convolution (see the module docstring for each kind's operands and semantics)."""
    name = inst.attrs.get("custom_call_target")
    kind = _CONV_KINDS[name]
    cfg = gpu_config(inst, "cudnn_conv_backend_config")
    dn = inst.attrs.get("dim_labels")
    window = inst.attrs.get("window") or Window(())
    need(isinstance(dn, ConvDimensionNumbers), name, "a cuDNN convolution needs dim_labels (the forward "
                                                     "convolution's dimension numbers)")
    fgc = int(inst.attrs.get("feature_group_count", 1) or 1)
    bgc = int(inst.attrs.get("batch_group_count", 1) or 1)
    outs = leaves(inst.shape)
    need(len(outs) >= 2 and outs[-1].element_type == "u8" and len(outs[-1].dims) == 1, name,
         f"returns (result, ..., u8[scratch]), declared {inst.shape.to_str(False)}")
    res_shape = outs[0]
    res_dt = np_dtype(res_shape)
    n_ops = {"forward": (2, 2), "backward_input": (2, 2), "backward_filter": (2, 2),
             "bias_activation": (3, 4), "graph": (2, 64)}[kind]
    need(n_ops[0] <= len(args) <= n_ops[1], name,
         f"takes {n_ops[0]}{'' if n_ops[0] == n_ops[1] else '-' + str(n_ops[1])} operands, got {len(args)}")
    reordered = bool(cfg.get("reordered_int8_nchw_vect", False))
    ins_named = (dn.input_batch_dimension, dn.input_feature_dimension, *dn.input_spatial_dimensions)
    ker_named = (dn.kernel_input_feature_dimension, dn.kernel_output_feature_dimension, *dn.kernel_spatial_dimensions)
    out_named = (dn.output_batch_dimension, dn.output_feature_dimension, *dn.output_spatial_dimensions)
    a0, a1 = np.asarray(args[0]), np.asarray(args[1])
    res_dims = tuple(res_shape.dims)
    # which array plays x, w and y of the forward convolution
    if kind == "backward_input":
        y_arr, w_arr = a0, a1
    elif kind == "backward_filter":
        x_arr, y_arr = a0, a1
    else:
        x_arr, w_arr = a0, a1
    if reordered:
        need(kind in ("forward", "bias_activation", "graph"), name,
             "reordered_int8_nchw_vect is set on a backward convolution")
        w_arr = _unreorder_filter(w_arr, name)
    vx = vw = vy = None
    sx = sw = sy = 1
    if kind == "backward_input":
        y_arr, sy, vy = _merge_vect(y_arr, dn.output_feature_dimension, out_named, name, "gradient")
        w_arr, sw, vw = _merge_vect(w_arr, dn.kernel_input_feature_dimension, ker_named, name, "filter")
        vx = _vect_dim(len(res_dims), ins_named)
    elif kind == "backward_filter":
        x_arr, sx, vx = _merge_vect(x_arr, dn.input_feature_dimension, ins_named, name, "input")
        y_arr, sy, vy = _merge_vect(y_arr, dn.output_feature_dimension, out_named, name, "gradient")
        vw = _vect_dim(len(res_dims), ker_named)
    else:
        x_arr, sx, vx = _merge_vect(x_arr, dn.input_feature_dimension, ins_named, name, "input")
        w_arr, sw, vw = _merge_vect(w_arr, dn.kernel_input_feature_dimension, ker_named, name, "filter")
        vy = _vect_dim(len(res_dims), out_named)
    mdn = _merged_dnums(dn, vx, vw, vy)

    def merged_dims(dims, v, feat):
        if v is None:
            return tuple(dims), 1
        d = list(dims)
        size = d.pop(v)
        f = feat - 1 if v < feat else feat
        d[f] *= size
        return tuple(d), size
    if kind == "backward_input":
        rdims, rsize = merged_dims(res_dims, vx, dn.input_feature_dimension)
    elif kind == "backward_filter":
        rdims, rsize = merged_dims(res_dims, vw, dn.kernel_input_feature_dimension)
    else:
        rdims, rsize = merged_dims(res_dims, vy, dn.output_feature_dimension)

    acc = _acc_type(np.dtype(a0.dtype))
    if kind == "forward" or kind in ("bias_activation", "graph"):
        _check_conv(name, mdn, window, x_arr.shape, w_arr.shape, rdims, fgc, bgc)
        y = conv_forward(inst, x_arr, w_arr, mdn, window, fgc, bgc, rdims, acc, ec)
    elif kind == "backward_input":
        _check_conv(name, mdn, window, rdims, w_arr.shape, y_arr.shape, fgc, bgc)
        need(bgc == 1, name, "a backward-input convolution has no batch groups")
        y = conv_backward_input(inst, y_arr, w_arr, mdn, window, fgc, rdims, acc, ec)
    else:
        _check_conv(name, mdn, window, x_arr.shape, rdims, y_arr.shape, fgc, bgc)
        y = conv_backward_filter(inst, x_arr, y_arr, mdn, window, fgc, bgc, rdims, acc, ec)

    extras = []
    if kind == "bias_activation":
        feat = mdn.output_feature_dimension
        o = rdims[feat]
        bias = np.asarray(args[2])
        if reordered:
            bias = _reorder_bias(bias, name, inverse=True)
        need(bias.size == o, name, f"the bias {shape_text(bias)} must hold one value per output feature ({o})")
        yf = np.asarray(y, np.float64 if acc == np.float64 else F32)
        with np.errstate(all="ignore"):
            yf = yf * yf.dtype.type(cfg_num(cfg, "conv_result_scale", 1, name))
            if len(args) == 4:
                side = np.asarray(args[3])
                side, _, _ = _merge_vect(side, dn.output_feature_dimension, out_named, name, "side input")
                need(side.shape == rdims, name, f"the side input {shape_text(np.asarray(args[3]))} must have the "
                                                f"result's shape {list(res_dims)}")
                s = cfg_num(cfg, "side_input_scale", 0, name)
                if s != 0:
                    yf = yf + side.astype(yf.dtype) * yf.dtype.type(s)
            bshape = [1] * yf.ndim
            bshape[feat] = o
            yf = yf + bias.astype(yf.dtype).reshape(bshape)
        y = _activation(cfg.get("activation_mode", "kNone"), yf, cfg_num(cfg, "leakyrelu_alpha", 0, name), name)
    elif kind == "graph":
        graph = cfg.get("serialized_graph")
        need(isinstance(graph, str) and graph, name, "convForwardGraph needs the config's serialized_graph")
        ops = parse_graph(graph, name)
        y, extras = run_graph(inst, ops, np.asarray(y, F32), [np.asarray(a) for a in args[2:]], name)
        need(len(outs) == 2 + len(extras), name,
             f"the graph has {len(extras)} amax output(s); the result must be (y, amax..., scratch), declared "
             f"{inst.shape.to_str(False)}")
    elif kind in ("forward", "backward_input", "backward_filter"):
        cs = cfg_num(cfg, "conv_result_scale", 1, name)
        if cs != 1:
            with np.errstate(all="ignore"):
                y = np.asarray(y, F32) * np.float32(cs)
    # split a vectorized result back, then the declared type
    if rsize > 1:
        if kind == "backward_input":
            feat = mdn.input_feature_dimension
            vdim = vx
        elif kind == "backward_filter":
            feat = mdn.kernel_input_feature_dimension
            vdim = vw
        else:
            feat = mdn.output_feature_dimension
            vdim = vy
        y = _split_vect(np.asarray(y), feat, rsize, vdim)
    y = to_type(np.asarray(y), res_dt)
    return result_tuple(inst, [y] + list(extras))


# ============================================================================ layer norm

@target("__cudnn$norm")
def cc_cudnn_norm(inst, args, ec):
    """cuDNN layer norm (CudnnNormBackendConfig.kind): LAYER_FWD_INFER (x, scale, bias) -> (y, scratch);
    LAYER_FWD_TRAIN -> (y, mean, norm_factor, scratch); LAYER_BWD (x, scale, dy, mean, norm_factor) ->
    (dx, dscale, dbias, scratch).  Normalized over the dims where scale is not 1; f32 arithmetic."""
    name = inst.attrs.get("custom_call_target")
    cfg = gpu_config(inst, "cudnn_norm_backend_config")
    kind = str(cfg.get("kind", "LAYER_FWD_INFER"))
    kind = {"0": "LAYER_FWD_INFER", "1": "LAYER_FWD_TRAIN", "2": "LAYER_BWD"}.get(kind, kind)
    eps = cfg_num(cfg, "epsilon", 0.0, name)
    outs = leaves(inst.shape)
    want = {"LAYER_FWD_INFER": (3, 2), "LAYER_FWD_TRAIN": (3, 4), "LAYER_BWD": (5, 4)}
    need(kind in want, name, f"kind {kind!r} is not LAYER_FWD_INFER, LAYER_FWD_TRAIN or LAYER_BWD")
    n_in, n_out = want[kind]
    need(len(args) == n_in and len(outs) == n_out, name,
         f"{kind} takes {n_in} operands and returns {n_out} arrays (the last the u8 scratch); got {len(args)} "
         f"operands and {inst.shape.to_str(False)}")
    x = np.asarray(args[0])
    scale = np.asarray(args[1])
    need(scale.ndim == x.ndim and all(s in (1, d) for s, d in zip(scale.shape, x.shape)), name,
         f"the scale {shape_text(scale)} must broadcast to the input {shape_text(x)} (1 or the input's size per dim)")
    # XLA reshapes x to [rows, normalized, 1, 1]: every dim after the first where the scale spans x
    axes = tuple(d for d in range(1, x.ndim) if scale.shape[d] == x.shape[d]) or tuple(range(1, x.ndim))
    xf = x.astype(F32)
    sf = scale.astype(F32)
    with np.errstate(all="ignore"):
        if kind != "LAYER_BWD":
            bias = np.asarray(args[2])
            need(bias.shape == scale.shape, name, f"the bias {shape_text(bias)} must have the scale's shape "
                                                  f"{shape_text(scale)}")
            mean = xf.mean(axis=axes, keepdims=True, dtype=np.float64).astype(F32)
            var = np.square(xf - mean).mean(axis=axes, keepdims=True, dtype=np.float64).astype(F32)
            nf = (1 / np.sqrt(var + np.float32(eps))).astype(F32)
            y = (xf - mean) * nf * sf + bias.astype(F32)
            if kind == "LAYER_FWD_INFER":
                return result_tuple(inst, [y])
            for k in (1, 2):
                need(outs[k].num_elements == mean.size, name,
                     f"result {k} must hold one value per normalized row ({mean.size}), declared {outs[k].to_str(False)}")
            return result_tuple(inst, [y, mean.reshape(outs[1].dims), nf.reshape(outs[2].dims)])
        dy = np.asarray(args[2]).astype(F32)
        need(dy.shape == x.shape, name, f"dy {shape_text(np.asarray(args[2]))} must have the input's shape {shape_text(x)}")
        keep = tuple(1 if d in axes else x.shape[d] for d in range(x.ndim))
        mean = np.asarray(args[3]).astype(F32)
        nf = np.asarray(args[4]).astype(F32)
        for k, a in ((3, mean), (4, nf)):
            need(a.size == int(np.prod(keep)), name, f"operand {k} must hold one value per normalized row "
                                                     f"({int(np.prod(keep))}), got {shape_text(np.asarray(args[k]))}")
        mean, nf = mean.reshape(keep), nf.reshape(keep)
        xhat = (xf - mean) * nf
        red = tuple(d for d in range(x.ndim) if d not in axes)
        dscale = (dy * xhat).sum(axis=red, keepdims=True, dtype=np.float64).astype(F32)
        dbias = dy.sum(axis=red, keepdims=True, dtype=np.float64).astype(F32)
        g = dy * sf
        m1 = g.mean(axis=axes, keepdims=True, dtype=np.float64).astype(F32)
        m2 = (g * xhat).mean(axis=axes, keepdims=True, dtype=np.float64).astype(F32)
        dx = nf * (g - m1 - xhat * m2)
        return result_tuple(inst, [dx, dscale.reshape(outs[1].dims), dbias.reshape(outs[2].dims)])


# ============================================================================ block-scaled dot

def _unswizzle(scale: np.ndarray, rows: int) -> np.ndarray:
    """cuDNN's block-scale layout -> row-major [B, R, C]: the swizzle groups rows in tiles of 128
    (4 x 32) and columns in tiles of 4 (BuildCudnnScaledDotInput)."""
    b, r, c = scale.shape
    if r % 128 or c % 4:
        return scale
    t = scale.reshape(b, r // 128, c // 4, 32, 4, 4).transpose(0, 1, 4, 3, 2, 5)
    return t.reshape(b, r, c)


@target("__cudnn$blockScaledDot")
def cc_block_scaled_dot(inst, args, ec):
    """Block-scaled (MX / NVFP4) dot: sum_k lhs[m,k] s_l[m,k/bs] * rhs[n,k] s_r[n,k/bs] (* global scale)."""
    name = inst.attrs.get("custom_call_target")
    need(len(args) in (4, 5), name, f"takes (lhs, rhs, lhs_scale, rhs_scale[, global_scale]), got {len(args)} operands")
    lhs, rhs, ls, rs = (np.asarray(a) for a in args[:4])
    need(lhs.ndim in (2, 3) and rhs.ndim == lhs.ndim and ls.ndim == lhs.ndim and rs.ndim == lhs.ndim, name,
         f"operands must be [B,]rows,K of one rank 2 or 3, got {', '.join(shape_text(a) for a in (lhs, rhs, ls, rs))}")
    b3 = (lambda a: a if a.ndim == 3 else a[None])
    l3, r3, ls3, rs3 = b3(lhs), b3(rhs), b3(ls), b3(rs)
    k = l3.shape[2]
    need(r3.shape[2] == k and l3.shape[0] == r3.shape[0], name,
         f"lhs {shape_text(lhs)} and rhs {shape_text(rhs)} must share the batch and contracting (last) dims")
    cfg = gpu_config(inst, "block_scaled_dot_backend_config")
    bs = cfg_num(cfg, "block_size", 0, name, int)
    if not bs:
        need(ls3.shape[2] > 0 and k % ls3.shape[2] == 0, name,
             f"no block_size in the config and K={k} is not a multiple of the scale columns {ls3.shape[2]}")
        bs = k // ls3.shape[2]
    nb = -(-k // bs)
    for a, s, what in ((l3, ls3, "lhs"), (r3, rs3, "rhs")):
        need(s.shape[0] == a.shape[0] and s.shape[1] >= a.shape[1] and s.shape[2] >= nb, name,
             f"the {what} scale {shape_text(s)} must cover {a.shape[1]} rows and {nb} blocks of {bs}")

    def deq(a, s):
        s = _unswizzle(s, s.shape[1])[:, :a.shape[1], :nb].astype(F32)
        return a.astype(F32) * np.repeat(s, bs, axis=2)[:, :, :k]
    lf, rf = deq(l3, ls3), deq(r3, rs3)
    out = dot_values(lf, rf, [0], [2], [0], [2], F32)
    if len(args) == 5:
        out = out * np.asarray(args[4]).astype(F32).reshape(())
    res = leaves(inst.shape)[0]
    want = (tuple(res.dims) if lhs.ndim == 3 else (1,) + tuple(res.dims))
    need(out.shape == want, name, f"the result must be [B,]M,N = {list(out.shape[lhs.ndim == 2:])}, declared "
                                  f"{res.to_str(False)}")
    return result_tuple(inst, [out.reshape(res.dims)])


# ============================================================================ workspace allocation

@target("__nop")
def cc_workspace(inst, args, ec):
    """XLA GPU's workspace allocation (kWorkspaceAllocationCustomCallTarget): a cuDNN fusion's root
    tuple(result, custom-call()) reserves scratch memory; its contents are unspecified, here zeros."""
    need(not args, "__nop", f"a workspace allocation takes no operands, got {len(args)}")
    return result_tuple(inst, [])
