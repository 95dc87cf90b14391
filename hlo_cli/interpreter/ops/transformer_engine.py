"""TransformerEngine's JAX FFI targets (`te_*_ffi`, transformer_engine/jax/csrc/extensions), as far
as their operands and attributes define them.  Options come in the typed-FFI backend_config dict
(`{scale_factor = 1.250000e-01 : f64}`).

* Softmax: `te_scaled_softmax_forward_ffi` softmax(scale_factor * x) over the last dim;
  `te_scaled_masked_softmax_forward_ffi` (x, mask): positions where the mask is nonzero get the logit
  -10000 (TE's masked kernel); `te_scaled_upper_triang_masked_softmax_forward_ffi`: keys after the
  query (j > i) are excluded (output 0); the backward targets (dy, y) ->
  scale_factor * y * (dy - sum(dy * y)) (the masked one's backward is the plain one's).  x is
  [..., heads, q, k]; computed in f32, rounded to the output type.
* Norms: `te_norm_forward_ffi` (x, scale, gamma, beta) -> (output, colwise output, scale_inv,
  colwise scale_inv, amax, mu, rsigma, workspace) with norm_type 0 = LayerNorm, 1 = RMSNorm,
  zero_centered_gamma (gamma + 1), epsilon; over the last dims holding gamma's elements.
  `te_norm_backward_ffi` (dz, x, mu, rsigma, gamma) -> (dx, dgamma, dbeta, workspace).
* Activations: `te_act_lu_ffi` (x[, scale[, amax]]) -> (output[, colwise output, scale_inv, colwise
  scale_inv, amax]) with act_enum in TE's current numbering (GELU, GEGLU, GLU, SILU, SWIGLU, RELU,
  REGLU, QGELU, QGEGLU, SRELU, SREGLU, CLAMPED_SWIGLU); x is [..., act_len, hidden], a gated
  activation (act_len 2) multiplies act(x[..., 0, :]) by x[..., 1, :]; GELU is TE's tanh form.

Quantized outputs: scaling_mode 0 (none) writes the value in the output type; 1 and 3 (per-tensor
delayed / current scaling) write output = saturate(value * scale) in the fp8 output type, scale_inv
= 1 / scale and amax = max |value| (current scaling takes scale = fp8 max / amax); the colwise
output (is_2x) holds the same values, transposed when its declared shape is the transposed 2-D one.
* Quantization: `te_dbias_quantize_ffi` (x, scale, ...) -> (output, colwise output, scale_inv, colwise
  scale_inv, amax, dbias, workspace), dbias = x summed over the dims before flatten_axis;
  `te_dact_dbias_quantize_ffi` (dz, x[, scale, amax]): the activation's backward, quantized, with dbias;
  `te_dequantize_ffi` (x, amax, scale, scale_inv) -> x * scale_inv.
* GEMM: `te_gemm_ffi` (lhs, lhs_scale_inv, rhs, rhs_scale_inv, bias, gelu_input) -> (output,
  bias_grad, pre_gelu_out, ..., workspace): operands flattened to 2-D at lhs/rhs_axis_boundary
  ([K, M] with lhs_transposed, [N, K] with rhs_transposed), f32 products and sums, bias and GELU
  epilogues forward (fuse_bias, fuse_gelu) and backward (grad: bias_grad = the lhs's column sums,
  output times GELU'(gelu_input)).

* Fused attention: `te_fused_attn_forward_ffi` (q, k, v, bias, seed, q_cu_seqlens, kv_cu_seqlens,
  q_seq_offsets, k_seq_offsets, ...) -> (output, softmax_aux, rng_state, workspace) and
  `te_fused_attn_backward_ffi` (q, k, v, bias, softmax_aux, rng_state, output, doutput, seqlens,
  offsets, ...) -> (dq, dk, dv, dbias, workspace), the attributes of TE's Dictionary (qkv_layout,
  mask_type, bias_type, scaling_factor, dropout_probability, window_size_left/right, ...): the
  BSHD and SBHD layouts, packed or not, with gpu_attention.py's kernels; masks top-left or
  bottom-right causal, padding from cumulative sequence lengths, sliding windows; pre- and
  post-scale biases; softmax_aux holds the log-sum-exp [B, H, T, 1].

The block-scaled modes (MXFP8, NVFP4), collective GEMMs, ALiBi and the THD / paged attention layouts
are refused with a message saying so; TE's grouped GEMM / quantize, router, top-k and
expert-parallel targets are not run (refused as TE kernels, custom_call_known.py).
"""
from __future__ import annotations

import numpy as np

from ...errors import HloEvalError

from ..values import np_dtype
from .custom_call import backend_attrs, target
from .gpu_dnn import cfg_num, leaves, need, result_tuple, shape_text, to_type
from .linalg import dot_values

F32 = np.dtype(np.float32)


def _attr(inst, name: str, default=None):
    a = backend_attrs(inst)
    return a.get(name, default)


def _num(inst, key: str, default, kind=int):
    """Attribute `key` of the FFI backend_config as a number (an HloEvalError when it is not one)."""
    return cfg_num(backend_attrs(inst), key, default, _name(inst), kind)


def _name(inst) -> str:
    return str(inst.attrs.get("custom_call_target"))


# ============================================================================ softmax

def _softmax(x: np.ndarray, keep: np.ndarray | None = None) -> np.ndarray:
    with np.errstate(all="ignore"):
        if keep is not None:
            x = np.where(keep, x, np.float32(-np.inf))
        m = np.max(x, axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, np.float32(0))
        e = np.exp(x - m)
        s = np.sum(e, axis=-1, keepdims=True, dtype=F32)
        return np.where(s > 0, e / s, np.float32(0)).astype(F32)


@target("te_scaled_softmax_forward_ffi", "te_scaled_masked_softmax_forward_ffi",
        "te_scaled_upper_triang_masked_softmax_forward_ffi")
def cc_te_softmax_forward(inst, args, ec):
    """TE's fused scaled softmax forward (see the module docstring)."""
    name = _name(inst)
    masked = "_masked_" in name and "upper_triang" not in name
    need(len(args) == (2 if masked else 1), name, f"takes {'(input, mask)' if masked else 'the input'}, got "
                                                  f"{len(args)} operands")
    x = np.asarray(args[0])
    need(x.ndim >= 2, name, f"the input {shape_text(x)} must be [..., q, k]")
    need(tuple(inst.shape.dims) == x.shape and not inst.shape.is_tuple, name,
         f"the output must have the input's shape {list(x.shape)}, declared {inst.shape.to_str(False)}")
    scale = np.float32(_num(inst, "scale_factor", 1.0, float))
    with np.errstate(all="ignore"):
        z = x.astype(F32) * scale
    keep = None
    if masked:
        mask = np.asarray(args[1])
        need(mask.ndim == x.ndim and mask.shape[-2:] == x.shape[-2:], name,
             f"the mask {shape_text(mask)} must be [batch or 1, 1, q, k] for the input {shape_text(x)}")
        z = np.where(mask != 0, np.float32(-10000.0), z)
    elif "upper_triang" in name:
        q, k = x.shape[-2:]
        need(q == k, name, f"the upper-triangular mask needs a square [q, k], got {shape_text(x)}")
        keep = np.arange(k)[None, :] <= np.arange(q)[:, None]
    return to_type(_softmax(z, keep), np_dtype(inst.shape))


@target("te_scaled_softmax_backward_ffi", "te_scaled_masked_softmax_backward_ffi",
        "te_scaled_upper_triang_masked_softmax_backward_ffi")
def cc_te_softmax_backward(inst, args, ec):
    """dx = scale_factor * y * (dy - sum(dy * y)) from (dy, y)."""
    name = _name(inst)
    need(len(args) == 2, name, f"takes (grad_output, softmax_output), got {len(args)} operands")
    dy, y = (np.asarray(a).astype(F32) for a in args)
    need(dy.shape == y.shape == tuple(inst.shape.dims), name,
         f"grad_output {shape_text(np.asarray(args[0]))}, softmax_output {shape_text(np.asarray(args[1]))} and the "
         f"result {inst.shape.to_str(False)} must have one shape")
    scale = np.float32(_num(inst, "scale_factor", 1.0, float))
    with np.errstate(all="ignore"):
        dx = scale * y * (dy - np.sum(dy * y, axis=-1, keepdims=True, dtype=F32))
    return to_type(dx, np_dtype(inst.shape))


# ============================================================================ quantized outputs

_MODES = {0: "NO_SCALING", 1: "DELAYED_TENSOR_SCALING", 2: "MXFP8_1D_SCALING", 3: "CURRENT_TENSOR_SCALING",
          4: "NVFP4_1D_SCALING", 5: "NVFP4_2D_SCALING"}


def _quantized(inst, value: np.ndarray, scale, first: int, name: str) -> list:
    """(output, colwise output, scale_inv, colwise scale_inv, amax) from the f32 value, declared as
    results first..first+4 (see the module docstring)."""
    outs = leaves(inst.shape)
    mode = _num(inst, "scaling_mode", 0)
    need(mode in (0, 1, 3), name, f"scaling_mode {_MODES.get(mode, mode)} (block scaling) is not run by hlo: "
                                  f"its scale layout is TE's own; per-tensor modes and NO_SCALING are")
    out_dt = np_dtype(outs[first])
    amax = np.float32(np.max(np.abs(value))) if value.size else np.float32(0)
    is_fp8 = str(outs[first].element_type).startswith("f8")
    if is_fp8 and mode in (1, 3):
        if mode == 3:
            import ml_dtypes
            big = np.float32(ml_dtypes.finfo(out_dt).max)
            s = big / amax if amax > 0 and np.isfinite(amax) else np.float32(1)
        else:
            s = np.float32(np.asarray(scale).reshape(-1)[0]) if scale is not None and np.asarray(scale).size else np.float32(1)
        q = to_type(value * s, out_dt)
        sinv = np.float32(1) / s
    else:
        q = to_type(value, out_dt)
        sinv = np.float32(1)
    res = [q]
    if len(outs) > first + 1:
        cs = outs[first + 1]
        if int(np.prod(cs.dims)) == 0:
            res.append(None)
        elif tuple(cs.dims) == q.shape:
            res.append(to_type(q, np_dtype(cs)))
        else:
            q2 = q.reshape(-1, q.shape[-1]) if q.ndim else q
            need(int(np.prod(cs.dims)) == q.size, name, f"the colwise output {cs.to_str(False)} must hold the "
                                                         f"output's {q.size} values")
            res.append(q2.T.reshape(cs.dims) if q2.ndim == 2 else q2.reshape(cs.dims))
        for k in (2, 3):
            if len(outs) > first + k:
                s_ = outs[first + k]
                res.append(np.full(s_.dims, sinv, np_dtype(s_)) if int(np.prod(s_.dims)) else None)
        if len(outs) > first + 4:
            res.append(np.full(outs[first + 4].dims, amax, F32))
    return res


# ============================================================================ norms

def _gamma(inst, g: np.ndarray) -> np.ndarray:
    g = g.astype(F32)
    return g + np.float32(1) if bool(_attr(inst, "zero_centered_gamma", False)) else g


@target("te_norm_forward_ffi")
def cc_te_norm_forward(inst, args, ec):
    """LayerNorm / RMSNorm forward over gamma's elements (see the module docstring)."""
    name = _name(inst)
    outs = leaves(inst.shape)
    need(len(args) == 4 and len(outs) == 8, name,
         f"takes (x, scale, gamma, beta) and returns (output, colwise output, scale_inv, colwise scale_inv, amax, "
         f"mu, rsigma, workspace); got {len(args)} operands and {len(outs)} results")
    x, scale, gamma, beta = (np.asarray(a) for a in args)
    h = gamma.size
    need(h > 0 and x.size % h == 0 and (gamma.ndim != 1 or x.shape[-1] == h), name,
         f"the input {shape_text(x)} must end in gamma's {h} elements")
    norm = _num(inst, "norm_type", 0)
    need(norm in (0, 1), name, f"norm_type {norm} is not LayerNorm (0) or RMSNorm (1)")
    eps = np.float32(_num(inst, "epsilon", 1e-6, float))
    xf = x.astype(F32).reshape(-1, h)
    g = _gamma(inst, gamma).reshape(h)
    with np.errstate(all="ignore"):
        if norm == 0:
            mu = xf.mean(axis=1, dtype=np.float64).astype(F32)
            var = np.square(xf - mu[:, None]).mean(axis=1, dtype=np.float64).astype(F32)
            rs = (1 / np.sqrt(var + eps)).astype(F32)
            y = (xf - mu[:, None]) * rs[:, None] * g + beta.astype(F32).reshape(h)
        else:
            mu = np.zeros(xf.shape[0], F32)
            rs = (1 / np.sqrt(np.square(xf).mean(axis=1, dtype=np.float64).astype(F32) + eps)).astype(F32)
            y = xf * rs[:, None] * g
    y = y.reshape(x.shape)
    res = _quantized(inst, y, scale, 0, name)
    for k, v in ((5, mu), (6, rs)):
        need(int(np.prod(outs[k].dims)) in (v.size, 0), name, f"result {k} must hold one value per row ({v.size}), "
                                                              f"declared {outs[k].to_str(False)}")
    res += [mu.reshape(outs[5].dims) if outs[5].dims and int(np.prod(outs[5].dims)) else None,
            rs.reshape(outs[6].dims)]
    return result_tuple(inst, res)


@target("te_norm_backward_ffi")
def cc_te_norm_backward(inst, args, ec):
    """LayerNorm / RMSNorm backward: (dz, x, mu, rsigma, gamma) -> (dx, dgamma, dbeta, workspace)."""
    name = _name(inst)
    outs = leaves(inst.shape)
    need(len(args) == 5 and len(outs) == 4, name, f"takes (dz, x, mu, rsigma, gamma) and returns (dx, dgamma, dbeta, "
                                                  f"workspace); got {len(args)} operands and {len(outs)} results")
    dz, x, mu, rs, gamma = (np.asarray(a) for a in args)
    h = gamma.size
    need(h > 0 and dz.shape == x.shape and x.size % h == 0, name,
         f"dz {shape_text(dz)} and x {shape_text(x)} must agree and hold rows of gamma's {h} elements")
    rows = x.size // h
    need(rs.size == rows and (mu.size in (rows, 0)), name, f"mu and rsigma must hold one value per row ({rows})")
    norm = _num(inst, "norm_type", 0)
    xf, dzf = x.astype(F32).reshape(rows, h), dz.astype(F32).reshape(rows, h)
    r = rs.astype(F32).reshape(rows, 1)
    g = _gamma(inst, gamma).reshape(h)
    with np.errstate(all="ignore"):
        xhat = (xf - (mu.astype(F32).reshape(rows, 1) if norm == 0 else np.float32(0))) * r
        dgamma = (dzf * xhat).sum(axis=0, dtype=np.float64).astype(F32)
        dbeta = dzf.sum(axis=0, dtype=np.float64).astype(F32)
        dxhat = dzf * g
        m2 = (dxhat * xhat).mean(axis=1, keepdims=True, dtype=np.float64).astype(F32)
        m1 = dxhat.mean(axis=1, keepdims=True, dtype=np.float64).astype(F32) if norm == 0 else np.float32(0)
        dx = r * (dxhat - m1 - xhat * m2)
    return result_tuple(inst, [dx.reshape(x.shape), dgamma.reshape(outs[1].dims),
                               dbeta.reshape(outs[2].dims) if norm == 0 else None])


# ============================================================================ activations

_ACTS = ("GELU", "GEGLU", "GLU", "SILU", "SWIGLU", "RELU", "REGLU", "QGELU", "QGEGLU", "SRELU", "SREGLU",
         "CLAMPED_SWIGLU")


def _act(kind: str, a: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        if kind in ("GELU", "GEGLU"):
            return 0.5 * a * (1 + np.tanh(np.float32(0.7978845608) * (a + np.float32(0.044715) * a * a * a)))
        if kind in ("SILU", "SWIGLU"):
            return a / (1 + np.exp(-a))
        if kind == "GLU":
            return 1 / (1 + np.exp(-a))
        if kind in ("RELU", "REGLU"):
            return np.maximum(a, np.float32(0))
        if kind in ("QGELU", "QGEGLU"):
            return a / (1 + np.exp(np.float32(-1.702) * a))
        return np.square(np.maximum(a, np.float32(0)))         # SRELU, SREGLU


@target("te_act_lu_ffi")
def cc_te_act_lu(inst, args, ec):
    """TE activation (optionally gated) of x [..., act_len, hidden]; see the module docstring."""
    name = _name(inst)
    need(1 <= len(args) <= 3, name, f"takes (x[, scale[, amax]]), got {len(args)} operands")
    x = np.asarray(args[0])
    need(x.ndim >= 2 and x.shape[-2] in (1, 2), name, f"the input {shape_text(x)} must be [..., act_len (1 or 2), hidden]")
    e = _num(inst, "act_enum", 0)
    need(0 <= e < len(_ACTS), name, f"act_enum {e} is not one of TE's activations (0..{len(_ACTS) - 1})")
    kind = _ACTS[e]
    gated = kind in ("GEGLU", "GLU", "SWIGLU", "REGLU", "QGEGLU", "SREGLU", "CLAMPED_SWIGLU")
    need(x.shape[-2] == (2 if gated else 1), name, f"{kind} takes act_len {2 if gated else 1}, the input is {shape_text(x)}")
    xf = x.astype(F32)
    with np.errstate(all="ignore"):
        if kind == "CLAMPED_SWIGLU":
            attrs = backend_attrs(inst)
            lim = next((cfg_num(attrs, k, 0, name) for k in attrs if "limit" in k), None)
            alpha = next((cfg_num(attrs, k, 0, name) for k in attrs if "alpha" in k), None)
            need(lim is not None and alpha is not None, name, "CLAMPED_SWIGLU needs its limit and alpha attributes")
            gt = np.minimum(xf[..., 0, :], np.float32(lim))
            lin = np.clip(xf[..., 1, :], -np.float32(lim), np.float32(lim))
            y = gt / (1 + np.exp(-np.float32(alpha) * gt)) * (lin + 1)
        elif gated:
            y = _act(kind, xf[..., 0, :]) * xf[..., 1, :]
        else:
            y = _act(kind, xf[..., 0, :])
    outs = leaves(inst.shape)
    if len(outs) == 1 and not inst.shape.is_tuple:
        return to_type(y.reshape(inst.shape.dims), np_dtype(inst.shape))
    scale = np.asarray(args[1]) if len(args) > 1 else None
    need(int(np.prod(outs[0].dims)) == y.size, name, f"the output must hold {y.size} values, declared {outs[0].to_str(False)}")
    res = _quantized(inst, y.reshape(outs[0].dims), scale, 0, name)
    return result_tuple(inst, res)


def _act_grad(kind: str, a: np.ndarray) -> np.ndarray:
    """d act(a) / d a for the activations of _act (f32)."""
    with np.errstate(all="ignore"):
        if kind in ("GELU", "GEGLU"):
            c = np.float32(0.7978845608)
            t = np.tanh(c * (a + np.float32(0.044715) * a * a * a))
            return 0.5 * (1 + t) + 0.5 * a * (1 - t * t) * c * (1 + np.float32(3 * 0.044715) * a * a)
        if kind in ("SILU", "SWIGLU"):
            s = 1 / (1 + np.exp(-a))
            return s * (1 + a * (1 - s))
        if kind == "GLU":
            s = 1 / (1 + np.exp(-a))
            return s * (1 - s)
        if kind in ("RELU", "REGLU"):
            return (a > 0).astype(F32)
        if kind in ("QGELU", "QGEGLU"):
            s = 1 / (1 + np.exp(np.float32(-1.702) * a))
            return s * (1 + np.float32(1.702) * a * (1 - s))
        return 2 * np.maximum(a, np.float32(0))                 # SRELU, SREGLU


def _rows(x: np.ndarray, axis) -> np.ndarray:
    """x as a 2-D [rows, columns] matrix split at `axis` (TE's flatten_axis; negative from the end)."""
    try:
        ax = int(axis) if axis is not None else -1
    except (TypeError, ValueError):
        raise HloEvalError(f"an axis boundary (flatten_axis, lhs/rhs_axis_boundary) must be an integer, got {axis!r}") from None
    ax = ax + x.ndim if ax < 0 else ax
    ax = min(max(ax, 0), x.ndim)
    return x.reshape(int(np.prod(x.shape[:ax], dtype=np.int64)), -1)


@target("te_dbias_quantize_ffi")
def cc_te_dbias_quantize(inst, args, ec):
    """Quantize x (per-tensor scaling or none) and, with is_dbias, dbias = x summed over the rows
    (the dims before flatten_axis).  Results: output, colwise output, scale_inv, colwise scale_inv,
    amax, dbias, workspace."""
    name = _name(inst)
    outs = leaves(inst.shape)
    need(len(args) >= 2 and len(outs) == 7, name, f"takes (x, scale, ...) and returns (output, colwise output, "
                                                  f"scale_inv, colwise scale_inv, amax, dbias, workspace); got "
                                                  f"{len(args)} operands and {len(outs)} results")
    x = np.asarray(args[0]).astype(F32)
    res = _quantized(inst, x, np.asarray(args[1]), 0, name)
    dbias = None
    if bool(_attr(inst, "is_dbias", False)):
        dbias = _rows(x, _attr(inst, "flatten_axis", -1)).sum(axis=0, dtype=np.float64).astype(F32)
        need(dbias.size == int(np.prod(outs[5].dims)), name, f"dbias must hold {dbias.size} values, declared "
                                                             f"{outs[5].to_str(False)}")
        dbias = dbias.reshape(outs[5].dims)
    return result_tuple(inst, res + [dbias])


@target("te_dact_dbias_quantize_ffi")
def cc_te_dact_dbias_quantize(inst, args, ec):
    """The activation's backward: (dz, x[, scale[, amax]]) -> dact (quantized as te_act_lu_ffi's
    output), and with is_dbias dbias = dact summed over rows.  A gated activation's dact is
    [..., 2, hidden]: (dz * act'(gate) * linear, dz * act(gate))."""
    name = _name(inst)
    outs = leaves(inst.shape)
    need(len(args) >= 2 and len(outs) == 7, name, f"takes (dz, x[, scale, amax]) and returns (output, colwise output, "
                                                  f"scale_inv, colwise scale_inv, amax, dbias, workspace); got "
                                                  f"{len(args)} operands and {len(outs)} results")
    dz, x = np.asarray(args[0]).astype(F32), np.asarray(args[1]).astype(F32)
    e = _num(inst, "act_enum", 0)
    need(0 <= e < len(_ACTS) and _ACTS[e] != "CLAMPED_SWIGLU", name,
         f"act_enum {e} is not one of TE's activations with a backward here (0..{len(_ACTS) - 2})")
    kind = _ACTS[e]
    gated = kind in ("GEGLU", "GLU", "SWIGLU", "REGLU", "QGEGLU", "SREGLU")
    need(x.ndim >= 2 and x.shape[-2] == (2 if gated else 1), name,
         f"x {shape_text(np.asarray(args[1]))} must be [..., {2 if gated else 1}, hidden] for {kind}")
    need(dz.size * (2 if gated else 1) == x.size, name, f"dz {shape_text(np.asarray(args[0]))} must hold one value per "
                                                        f"activation output of x {shape_text(np.asarray(args[1]))}")
    g = dz.reshape(x.shape[:-2] + x.shape[-1:])
    with np.errstate(all="ignore"):
        if gated:
            gate, lin = x[..., 0, :], x[..., 1, :]
            d = np.stack([g * _act_grad(kind, gate) * lin, g * _act(kind, gate)], axis=-2)
        else:
            d = (g * _act_grad(kind, x[..., 0, :]))[..., None, :]
    d = d.reshape(outs[0].dims) if int(np.prod(outs[0].dims)) == d.size else d
    scale = np.asarray(args[2]) if len(args) > 2 else None
    res = _quantized(inst, d, scale, 0, name)
    dbias = None
    if bool(_attr(inst, "is_dbias", False)):
        dbias = d.reshape(-1, d.shape[-2] * d.shape[-1] if d.ndim >= 2 else d.size).sum(axis=0, dtype=np.float64)
        need(dbias.size == int(np.prod(outs[5].dims)), name, f"dbias must hold {dbias.size} values, declared "
                                                             f"{outs[5].to_str(False)}")
        dbias = dbias.astype(F32).reshape(outs[5].dims)
    return result_tuple(inst, res + [dbias])


@target("te_dequantize_ffi")
def cc_te_dequantize(inst, args, ec):
    """(x, amax, scale, scale_inv) -> x * scale_inv in the output type (per-tensor scaling)."""
    name = _name(inst)
    need(len(args) == 4, name, f"takes (x, amax, scale, scale_inv), got {len(args)} operands")
    x = np.asarray(args[0]).astype(F32)
    sinv = np.asarray(args[3]).astype(F32)
    need(sinv.size == 1, name, f"scale_inv {shape_text(np.asarray(args[3]))} must hold one value (per-tensor scaling)")
    with np.errstate(all="ignore"):
        return to_type(x * sinv.reshape(()), np_dtype(inst.shape))


def _gemm_operand(x: np.ndarray, sinv, boundary, name: str, what: str) -> np.ndarray:
    m = _rows(np.asarray(x), boundary).astype(F32)
    if sinv is not None and np.asarray(sinv).size:
        s = np.asarray(sinv).astype(F32)
        need(s.size == 1, name, f"the {what} scale_inv {shape_text(np.asarray(sinv))} must hold one value (per-tensor "
                                f"scaling; block scaling is not run)")
        m = m * s.reshape(())
    return m


@target("te_gemm_ffi")
def cc_te_gemm(inst, args, ec):
    """TE's GEMM (no collective): lhs and rhs as 2-D matrices split at lhs/rhs_axis_boundary ([K, M]
    when lhs_transposed, [N, K] when rhs_transposed), dequantized by their scale_inv (per-tensor),
    f32 products and sums; fuse_bias adds bias (forward) or returns the bias gradient, the lhs's
    column sums (grad); fuse_gelu applies TE's tanh GELU (forward, pre-GELU value as pre_gelu_out)
    or multiplies by GELU'(gelu_input) (grad).  Results: output, bias_grad, pre_gelu_out, workspace."""
    name = _name(inst)
    outs = leaves(inst.shape)
    need(len(args) >= 6 and len(outs) >= 4, name, f"takes (lhs, lhs_scale_inv, rhs, rhs_scale_inv, bias, gelu_input) "
                                                   f"and returns (output, bias_grad, pre_gelu_out, ..., workspace); got "
                                                   f"{len(args)} operands and {len(outs)} results")
    mode = _num(inst, "scaling_mode", 0)
    need(mode in (0, 1, 3), name, f"scaling_mode {_MODES.get(mode, mode)} (block scaling) is not run by hlo")
    coll = _num(inst, "collective_op", 0)
    need(coll == 0, name, f"collective_op {coll}: a collective GEMM needs the other devices' shards")
    lhs, lsinv, rhs, rsinv, bias, gelu_in = (np.asarray(a) for a in args[:6])
    lt, rt = bool(_attr(inst, "lhs_transposed", False)), bool(_attr(inst, "rhs_transposed", False))
    a = _gemm_operand(lhs, lsinv if mode else None, _attr(inst, "lhs_axis_boundary", -1), name, "lhs")
    b = _gemm_operand(rhs, rsinv if mode else None, _attr(inst, "rhs_axis_boundary", -1), name, "rhs")
    a = a.T if lt else a
    b = b.T if rt else b
    need(a.shape[1] == b.shape[0], name, f"the contracting sizes differ: lhs {shape_text(lhs)} gives [M, K] = "
                                         f"{list(a.shape)}, rhs {shape_text(rhs)} gives [K, N] = {list(b.shape)}")
    out = dot_values(a, b, [], [1], [], [0], F32)
    need(int(np.prod(outs[0].dims)) == out.size, name, f"the output must hold [M, N] = {list(out.shape)} values, "
                                                       f"declared {outs[0].to_str(False)}")
    grad = bool(_attr(inst, "grad", False))
    fuse_bias, fuse_gelu = bool(_attr(inst, "fuse_bias", False)), bool(_attr(inst, "fuse_gelu", False))
    bias_grad = pre_gelu = None
    with np.errstate(all="ignore"):
        if fuse_bias and not grad:
            need(bias.size == out.shape[1], name, f"the bias {shape_text(bias)} must hold N = {out.shape[1]} values")
            out = out + bias.astype(F32).reshape(1, -1)
            bias_grad = bias
        elif fuse_bias:
            bias_grad = a.sum(axis=0, dtype=np.float64).astype(F32)
            need(bias_grad.size == int(np.prod(outs[1].dims)), name,
                 f"bias_grad must hold K = {bias_grad.size} values, declared {outs[1].to_str(False)}")
        if fuse_gelu and not grad:
            pre_gelu = out
            out = _act("GELU", out)
        elif fuse_gelu:
            gi = gelu_in.astype(F32).reshape(out.shape)
            out = out * _act_grad("GELU", gi)
            pre_gelu = gelu_in
    res = [to_type(out.reshape(outs[0].dims), np_dtype(outs[0])),
           None if bias_grad is None else np.asarray(bias_grad).reshape(outs[1].dims),
           None if pre_gelu is None else np.asarray(pre_gelu).reshape(outs[2].dims)]
    return result_tuple(inst, res)


# ============================================================================ fused attention

# NVTE_QKV_Layout: (format, packing); packing "3" (qkv packed in q: [.., 3, H, D]), "h3" ([.., H, 3, D]),
# "2" (kv packed in k: [.., 2, H, D]), "h2" ([.., H, 2, D]) or "sep" (q, k, v apart)
_LAYOUTS = {0: ("sbhd", "3"), 1: ("sbhd", "h3"), 2: ("sbhd", "2"), 3: ("sbhd", "h2"), 4: ("sbhd", "sep"),
            5: ("bshd", "3"), 6: ("bshd", "h3"), 7: ("bshd", "2"), 8: ("bshd", "h2"), 9: ("bshd", "sep")}
_TE_MASKS = ("NO_MASK", "PADDING", "CAUSAL", "PADDING_CAUSAL", "CAUSAL_BOTTOM_RIGHT", "PADDING_CAUSAL_BOTTOM_RIGHT")


class _TeAttn:
    """The attributes of a TE fused-attention call, checked (the run's `cfg` for gpu_attention's kernels)."""

    def __init__(self, inst, name: str):
        a = backend_attrs(inst)
        self.name = name
        self.where = f"{inst.name} ({name})"
        layout = cfg_num(a, "qkv_layout", 9, name, int)
        need(layout in _LAYOUTS, name, f"qkv_layout {layout} (THD, paged or mixed formats) is not run by hlo; the "
                                       f"BSHD and SBHD layouts (0..9) are")
        self.fmt, self.pack = _LAYOUTS[layout]
        mask = cfg_num(a, "mask_type", 0, name, int)
        need(0 <= mask < len(_TE_MASKS), name, f"mask_type {mask} is not one of TE's ({', '.join(_TE_MASKS)})")
        self.mask = _TE_MASKS[mask]
        self.bias_type = cfg_num(a, "bias_type", 0, name, int)
        need(self.bias_type in (0, 1, 2), name, f"bias_type {self.bias_type} (ALiBi) is not run by hlo; no bias, "
                                                f"pre-scale and post-scale biases are")
        self.scale = cfg_num(a, "scaling_factor", 1.0, name)
        self.dropout = cfg_num(a, "dropout_probability", 0.0, name)
        self.seed = 0
        self.left = cfg_num(a, "window_size_left", -1, name, int)
        self.right = cfg_num(a, "window_size_right", -1, name, int)
        self.training = bool(a.get("is_training", True))

    def keep(self, b, t, s, q_len, kv_len) -> np.ndarray:
        """Keys each query may see: bool (B or 1, 1, T, S)."""
        i = np.arange(t)[:, None]
        j = np.arange(s)[None, :]
        shift = (s - t) if "BOTTOM_RIGHT" in self.mask else 0
        m = np.ones((t, s), bool)
        right = 0 if "CAUSAL" in self.mask else self.right
        if right >= 0:
            m &= j <= i + shift + right
        if self.left >= 0:
            m &= j >= i + shift - self.left
        m = m[None, None]
        if "PADDING" in self.mask:
            m = m & (np.arange(t)[None, None, :, None] < q_len[:, None, None, None]) \
                  & (np.arange(s)[None, None, None, :] < kv_len[:, None, None, None])
        return m


def _te_qkv(cfg: _TeAttn, q, k, v, name: str):
    """(q, k, v) as (B, H, S, D) f32 arrays from the layout's packing and format."""
    def bshd(x):                                       # [B, S, H, D] or [S, B, H, D] -> (B, H, S, D)
        return np.transpose(x, (0, 2, 1, 3) if cfg.fmt == "bshd" else (1, 2, 0, 3))

    def part(x, axis, k_):
        need(x.ndim == 5 and x.shape[axis] in (2, 3), name, f"a packed operand {shape_text(x)} must hold its 2 or 3 "
                                                            f"parts in dim {axis}")
        return np.take(x, k_, axis=axis)
    q, k, v = (np.asarray(x) for x in (q, k, v))
    if cfg.pack in ("3", "h3"):
        ax = 2 if cfg.pack == "3" else 3
        return tuple(bshd(part(q, ax, i)).astype(F32) for i in range(3))
    if cfg.pack in ("2", "h2"):
        ax = 2 if cfg.pack == "2" else 3
        need(q.ndim == 4, name, f"q {shape_text(q)} must be [B, S, H, D] (or SBHD)")
        return bshd(q).astype(F32), bshd(part(k, ax, 0)).astype(F32), bshd(part(k, ax, 1)).astype(F32)
    for x, w in ((q, "q"), (k, "k"), (v, "v")):
        need(x.ndim == 4, name, f"{w} {shape_text(x)} must be [B, S, H, D] (or SBHD)")
    return bshd(q).astype(F32), bshd(k).astype(F32), bshd(v).astype(F32)


def _te_pack(cfg: _TeAttn, dq, dk, dv):
    """Gradients (B, H, S, D) back to the layout of q, k, v: (dq, dk, dv) with packed ones in dq / dk."""
    def back(x):
        return np.transpose(x, (0, 2, 1, 3) if cfg.fmt == "bshd" else (2, 0, 1, 3))
    if cfg.pack in ("3", "h3"):
        return np.stack([back(dq), back(dk), back(dv)], axis=2 if cfg.pack == "3" else 3), None, None
    if cfg.pack in ("2", "h2"):
        return back(dq), np.stack([back(dk), back(dv)], axis=2 if cfg.pack == "2" else 3), None
    return back(dq), back(dk), back(dv)


def _te_lengths(cfg, cu, b: int, s: int, name: str, what: str):
    if "PADDING" not in cfg.mask:
        return None
    c = np.asarray(cu).reshape(-1).astype(np.int64)
    need(c.size >= b + 1, name, f"{what} {shape_text(np.asarray(cu))} must hold B + 1 = {b + 1} cumulative lengths")
    return np.clip(np.diff(c[:b + 1]), 0, s)


def _te_bias(cfg, bias, b, n, t, s, name):
    if cfg.bias_type == 0:
        return None
    x = np.asarray(bias).astype(F32)
    need(x.ndim == 4 and x.shape[2:] == (t, s) and x.shape[0] in (1, b) and x.shape[1] in (1, n), name,
         f"the bias {shape_text(np.asarray(bias))} must be [B or 1, H or 1, {t}, {s}]")
    return x * np.float32(cfg.scale) if cfg.bias_type == 1 else x    # pre-scale: scale * (QK^T + bias)


@target("te_fused_attn_forward_ffi")
def cc_te_fused_attn_forward(inst, args, ec):
    """TE fused attention forward: (q, k, v, bias, seed, q_cu_seqlens, kv_cu_seqlens, q_seq_offsets,
    k_seq_offsets, ...) -> (output, softmax_aux, rng_state, workspace), BSHD/SBHD layouts; the
    softmax_aux is the log-sum-exp [B, H, T, 1] (cuDNN's statistics)."""
    from .gpu_attention import expand_heads, forward_dense
    name = _name(inst)
    outs = leaves(inst.shape)
    need(len(args) >= 9 and len(outs) == 4, name, f"takes (q, k, v, bias, seed, q_cu_seqlens, kv_cu_seqlens, "
                                                  f"q_seq_offsets, k_seq_offsets, ...) and returns (output, softmax_aux, "
                                                  f"rng_state, workspace); got {len(args)} operands and {len(outs)} results")
    cfg = _TeAttn(inst, name)
    cfg.seed = int(np.asarray(args[4]).reshape(-1)[0]) if np.asarray(args[4]).size else 0
    q, k, v = _te_qkv(cfg, *args[:3], name)
    b, n, t, d = q.shape
    need(k.shape[0] == b and k.shape[3] == d and v.shape[:3] == k.shape[:3], name, "q, k and v disagree on batch, "
                                                                                    "heads, key length or head size")
    s_len = k.shape[2]
    nk = k.shape[1]
    ke, ve = expand_heads(k, n, name, "k"), expand_heads(v, n, name, "v")
    mask = cfg.keep(b, t, s_len, _te_lengths(cfg, args[5], b, t, name, "q_cu_seqlens"),
                    _te_lengths(cfg, args[6], b, s_len, name, "kv_cu_seqlens"))
    bias = _te_bias(cfg, args[3], b, n, t, s_len, name)
    o, lse = forward_dense(cfg, q, ke, ve, bias, mask, np.asarray(args[0]).dtype)
    del nk
    back = (0, 2, 1, 3) if cfg.fmt == "bshd" else (2, 0, 1, 3)
    o = np.transpose(o, back)
    need(int(np.prod(outs[0].dims)) == o.size, name, f"the output must hold {list(o.shape)}, declared {outs[0].to_str(False)}")
    aux = outs[1]
    need(int(np.prod(aux.dims)) == lse.size, name, f"softmax_aux {aux.to_str(False)} is not the [B, H, T, 1] statistics "
                                                   f"of the arbitrary-length backend (the max-512 backend's softmax output "
                                                   f"is not run)")
    return result_tuple(inst, [to_type(o.reshape(outs[0].dims), np_dtype(outs[0])), lse.reshape(aux.dims)])


@target("te_fused_attn_backward_ffi")
def cc_te_fused_attn_backward(inst, args, ec):
    """TE fused attention backward: (q, k, v, bias, softmax_aux, rng_state, output, doutput,
    q_cu_seqlens, kv_cu_seqlens, q_seq_offsets, k_seq_offsets, ...) -> (dq, dk, dv, dbias, workspace)."""
    from .gpu_attention import backward_dense, expand_heads, fold_heads, reduce_to
    name = _name(inst)
    outs = leaves(inst.shape)
    need(len(args) >= 12 and len(outs) == 5, name, f"takes (q, k, v, bias, softmax_aux, rng_state, output, doutput, "
                                                   f"q_cu_seqlens, kv_cu_seqlens, q_seq_offsets, k_seq_offsets, ...) and "
                                                   f"returns (dq, dk, dv, dbias, workspace); got {len(args)} operands "
                                                   f"and {len(outs)} results")
    cfg = _TeAttn(inst, name)
    rng_state = np.asarray(args[5]).reshape(-1)
    cfg.seed = int(rng_state[0]) if rng_state.size else 0
    q, k, v = _te_qkv(cfg, *args[:3], name)
    b, n, t, d = q.shape
    s_len, nk = k.shape[2], k.shape[1]
    ke, ve = expand_heads(k, n, name, "k"), expand_heads(v, n, name, "v")
    fwd = (0, 2, 1, 3) if cfg.fmt == "bshd" else (1, 2, 0, 3)
    o = np.transpose(np.asarray(args[6]), fwd).astype(F32)
    do = np.transpose(np.asarray(args[7]), fwd).astype(F32)
    need(o.shape == (b, n, t, v.shape[3]) == do.shape, name, "output and doutput must be [B, T, H, D] like q")
    lse = np.asarray(args[4]).astype(F32)
    need(lse.size == b * n * t, name, f"softmax_aux {shape_text(np.asarray(args[4]))} must be the [B, H, T, 1] statistics")
    mask = cfg.keep(b, t, s_len, _te_lengths(cfg, args[8], b, t, name, "q_cu_seqlens"),
                    _te_lengths(cfg, args[9], b, s_len, name, "kv_cu_seqlens"))
    bias = _te_bias(cfg, args[3], b, n, t, s_len, name)
    dq, dk, dv, ds = backward_dense(cfg, q, ke, ve, do, o, lse.reshape(b, n, t), bias, mask, np.asarray(args[0]).dtype)
    dk, dv = fold_heads(dk, nk), fold_heads(dv, nk)
    gq, gk, gv = _te_pack(cfg, dq, dk, dv)
    dbias = None
    if bias is not None and int(np.prod(outs[3].dims)):
        dbias = reduce_to(ds, bias.shape) * (np.float32(cfg.scale) if cfg.bias_type == 1 else np.float32(1))
    res = []
    for kk, g in enumerate((gq, gk, gv)):
        if g is None or int(np.prod(outs[kk].dims)) == 0:
            res.append(None)
            continue
        need(int(np.prod(outs[kk].dims)) == g.size, name, f"result {kk} must hold {list(g.shape)}, declared "
                                                          f"{outs[kk].to_str(False)}")
        res.append(to_type(g.reshape(outs[kk].dims), np_dtype(outs[kk])))
    res.append(None if dbias is None else to_type(dbias.reshape(outs[3].dims), np_dtype(outs[3])))
    return result_tuple(inst, res)
