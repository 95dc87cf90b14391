"""cuDNN library calls and TransformerEngine targets (hlo_cli/interpreter/ops/gpu_dnn.py,
gpu_attention.py, transformer_engine.py): small hand-written custom calls against XLA CPU computing
the same plain HLO through JAX (conv_general_dilated and its gradients, dot_product_attention
implementation="xla" and its gradients, softmax / norm / activation formulas).  The shared H200
cases are in test_gpu_dnn_cases.py."""
from __future__ import annotations

import json
import warnings

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hlo_cli.errors import HloEvalError
from hlo_cli.interpreter import run


jax = pytest.importorskip("jax")
pytestmark = pytest.mark.slow          # every reference here is XLA run live through JAX
jnp = jax.numpy
jax.config.update("jax_enable_x64", False)

BF16 = ml_dtypes.bfloat16
HIGHEST = jax.lax.Precision.HIGHEST


def crun(*args, **kw):
    """A run with XLA CPU's numerics (f32 products), what the XLA-computed references use."""
    return run(*args, numerics="cpu", **kw)


# ============================================================================ convolutions

def conv_config(**kw) -> str:
    cfg = {"activation_mode": "kNone", "conv_result_scale": 1, "side_input_scale": 0, "leakyrelu_alpha": 0}
    cfg.update(kw)
    return json.dumps({"cudnn_conv_backend_config": cfg, "operation_queue_id": "0"})


def window_text(k, strides, pads, rdil):
    parts = ["size=" + "x".join(map(str, k))]
    if any(s != 1 for s in strides):
        parts.append("stride=" + "x".join(map(str, strides)))
    if any(p != (0, 0) for p in pads):
        parts.append("pad=" + "x".join(f"{lo}_{hi}" for lo, hi in pads))
    if any(d != 1 for d in rdil):
        parts.append("rhs_dilate=" + "x".join(map(str, rdil)))
    return "{" + " ".join(parts) + "}"


def shp(dt, dims):
    return f"{dt}[{','.join(map(str, dims))}]"


def jconv(x, w, strides, pads, rdil, groups):
    return jax.lax.conv_general_dilated(x, w, strides, pads, rhs_dilation=rdil, dimension_numbers=("NHWC", "OHWI", "NHWC"),
                                        feature_group_count=groups, precision=HIGHEST)


CONVS = [  # (x NHWC, o, k, strides, pads, rhs dilation, groups)
    ((2, 7, 6, 3), 4, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), 1),
    ((2, 9, 8, 4), 6, (3, 2), (2, 2), ((0, 1), (1, 0)), (1, 1), 2),
    ((1, 10, 9, 3), 5, (3, 3), (1, 2), ((2, 2), (0, 0)), (2, 1), 1),
    ((2, 8, 8, 8), 8, (3, 3), (2, 2), ((1, 1), (1, 1)), (1, 1), 8),   # depthwise
    ((1, 6, 7, 2), 3, (1, 1), (2, 1), ((0, 0), (0, 0)), (1, 1), 1),
]


def _conv_case(spec, seed=0):
    xs, o, k, strides, pads, rdil, g = spec
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal((o, *k, xs[3] // g)).astype(np.float32)
    y = np.asarray(jconv(x, w, strides, pads, rdil, g))
    return x, w, y


def conv_module(target, a_shape, b_shape, out_dims, spec, extra=(), cfg=None, out_t="f32", a_t="f32", b_t="f32"):
    xs, o, k, strides, pads, rdil, g = spec
    params = [f"  a = {shp(a_t, a_shape)} parameter(0)", f"  b = {shp(b_t, b_shape)} parameter(1)"]
    ops = ["a", "b"]
    for n, (t, d) in enumerate(extra):
        params.append(f"  e{n} = {shp(t, d)} parameter({2 + n})")
        ops.append(f"e{n}")
    cc = (f"  c = ({shp(out_t, out_dims)}, u8[0]) custom-call({', '.join(ops)}), window={window_text(k, strides, pads, rdil)}, "
          f"dim_labels=b01f_o01i->b01f, feature_group_count={g}, custom_call_target=\"{target}\", "
          f"backend_config={cfg or conv_config()}")
    return "\n".join(["HloModule m", "ENTRY e {", *params, cc,
                      f"  ROOT r = {shp(out_t, out_dims)} get-tuple-element(c), index=0", "}"])


@pytest.mark.parametrize("spec", CONVS)
def test_conv_forward_and_gradients_match_xla(spec):
    """convForward, convBackwardInput and convBackwardFilter against conv_general_dilated and its
    VJPs on XLA CPU."""
    xs, o, k, strides, pads, rdil, g = spec
    x, w, y = _conv_case(spec)
    dy = np.random.default_rng(1).standard_normal(y.shape).astype(np.float32)
    got = crun(conv_module("__cudnn$convForward", x.shape, w.shape, y.shape, spec), x, w)
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-5)
    _, vjp = jax.vjp(lambda a, b: jconv(a, b, strides, pads, rdil, g), x, w)
    dx, dw = (np.asarray(t) for t in vjp(dy))
    got = crun(conv_module("__cudnn$convBackwardInput", dy.shape, w.shape, x.shape, spec), dy, w)
    np.testing.assert_allclose(got, dx, rtol=1e-5, atol=1e-5)
    got = crun(conv_module("__cudnn$convBackwardFilter", x.shape, dy.shape, w.shape, spec), x, dy)
    np.testing.assert_allclose(got, dw, rtol=1e-5, atol=1e-4)


@settings(max_examples=15, deadline=None)
@given(st.integers(0, len(CONVS) - 1), st.integers(0, 10_000))
def test_backward_input_is_the_adjoint_of_forward(i, seed):
    """<conv(x, w), y> = <x, conv_backward_input(y, w)> and = <w, conv_backward_filter(x, y)>."""
    spec = CONVS[i]
    x, w, y0 = _conv_case(spec, seed)
    y = np.random.default_rng(seed + 1).standard_normal(y0.shape).astype(np.float64)
    fwd = crun(conv_module("__cudnn$convForward", x.shape, w.shape, y0.shape, spec, a_t="f64", b_t="f64", out_t="f64"),
              x.astype(np.float64), w.astype(np.float64))
    bx = crun(conv_module("__cudnn$convBackwardInput", y.shape, w.shape, x.shape, spec, a_t="f64", b_t="f64",
                         out_t="f64"), y, w.astype(np.float64))
    bw = crun(conv_module("__cudnn$convBackwardFilter", x.shape, y.shape, w.shape, spec, a_t="f64", b_t="f64",
                         out_t="f64"), x.astype(np.float64), y)
    lhs = float(np.sum(fwd * y))
    assert lhs == pytest.approx(float(np.sum(x * bx)), rel=1e-9, abs=1e-9)
    assert lhs == pytest.approx(float(np.sum(w * bw)), rel=1e-9, abs=1e-9)


ACTS = {"kNone": lambda v, a: v, "kRelu": lambda v, a: jnp.maximum(v, 0), "kRelu6": lambda v, a: jnp.clip(v, 0, 6),
        "kElu": lambda v, a: jnp.where(v > 0, v, jnp.expm1(v)), "kLeakyRelu": lambda v, a: jnp.where(v > 0, v, a * v),
        "kSigmoid": lambda v, a: jax.nn.sigmoid(v), "kTanh": lambda v, a: jnp.tanh(v),
        "kGeluExact": lambda v, a: jax.nn.gelu(v, approximate=False)}


@pytest.mark.parametrize("act", list(ACTS))
@pytest.mark.parametrize("side", [False, True])
def test_bias_activation_matches_xla(act, side):
    """convBiasActivationForward: act(conv_result_scale * conv + side_input_scale * side + bias)."""
    spec = CONVS[1]
    x, w, y = _conv_case(spec)
    rng = np.random.default_rng(3)
    bias = rng.standard_normal(y.shape[-1]).astype(np.float32)
    sidein = rng.standard_normal(y.shape).astype(np.float32)
    extra = [("f32", bias.shape)] + ([("f32", y.shape)] if side else [])
    cfg = conv_config(activation_mode=act, conv_result_scale=0.5, side_input_scale=0.25 if side else 0,
                      leakyrelu_alpha=0.1)
    text = conv_module("__cudnn$convBiasActivationForward", x.shape, w.shape, y.shape, spec, extra, cfg)
    got = crun(text, x, w, bias, *([sidein] if side else []))
    want = 0.5 * y + (0.25 * sidein if side else 0) + bias
    want = np.asarray(ACTS[act](jnp.asarray(want), 0.1))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)


def test_bias_activation_propagates_nan_and_inf():
    """A NaN or Inf operand reaches the outputs it feeds (as XLA's plain HLO does)."""
    spec = CONVS[0]
    x, w, y = _conv_case(spec)
    x[0, 2, 2, 1] = np.nan
    x[1, 0, 0, 0] = np.inf
    bias = np.zeros(y.shape[-1], np.float32)
    text = conv_module("__cudnn$convBiasActivationForward", x.shape, w.shape, y.shape, spec, [("f32", bias.shape)])
    got = crun(text, x, w, bias)
    want = np.asarray(jconv(x, w, spec[3], spec[4], spec[5], spec[6]))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))


def test_forward_graph_runs_its_ops():
    """convForwardGraph: conv, scale (scalar operand), add (tensor operand), relu and an amax aux
    output, the result rounded to f8e4m3fn (saturating)."""
    spec = CONVS[0]
    x, w, y = _conv_case(spec)
    addend = np.random.default_rng(5).standard_normal(y.shape).astype(np.float32)
    graph = "1:[f32]conv();2:[f32]scale(1);3:[f32]add(2);4:[f32]relu(3);5:[f32]amax(4);6:[f8e4m3fn]scale(4);"
    cfg = json.dumps({"cudnn_conv_backend_config": {"activation_mode": "kNone", "conv_result_scale": 1,
                                                    "serialized_graph": graph}})
    xs, o, k, strides, pads, rdil, g = spec
    text = "\n".join([
        "HloModule m", "ENTRY e {", f"  a = {shp('f32', x.shape)} parameter(0)", f"  b = {shp('f32', w.shape)} parameter(1)",
        "  sa = f32[] parameter(2)", f"  t = {shp('f32', y.shape)} parameter(3)", "  sb = f32[] parameter(4)",
        f"  c = ({shp('f8e4m3fn', y.shape)}, f32[], u8[0]) custom-call(a, b, sa, t, sb), window={window_text(k, strides, pads, rdil)}, "
        f"dim_labels=b01f_o01i->b01f, custom_call_target=\"__cudnn$convForwardGraph\", backend_config={cfg}",
        f"  r0 = {shp('f8e4m3fn', y.shape)} get-tuple-element(c), index=0", "  r1 = f32[] get-tuple-element(c), index=1",
        f"  ROOT r = ({shp('f8e4m3fn', y.shape)}, f32[]) tuple(r0, r1)", "}"])
    out, amax = crun(text, x, w, np.float32(2.0), addend, np.float32(100.0))
    relu = np.maximum(2.0 * y + addend, 0)
    np.testing.assert_allclose(float(amax), relu.max(), rtol=1e-5)
    want = np.clip(relu * 100.0, -448, 448).astype(ml_dtypes.float8_e4m3fn)
    np.testing.assert_array_equal(out.astype(np.float32), want.astype(np.float32))


def test_vectorized_int8_matches_plain_int8():
    """An int8 convolution on NCHW_VECT_C operands (s8[...,16,4]: features split, the vector dim
    unnamed in dim_labels) equals the plain one (XLA's convolution_cudnn_test)."""
    rng = np.random.default_rng(7)
    x = rng.integers(-5, 5, (2, 6, 6, 64)).astype(np.int8)
    w = rng.integers(-3, 3, (8, 3, 3, 64)).astype(np.int8)
    cfg = conv_config()
    plain = "\n".join(["HloModule m", "ENTRY e {", "  x = s8[2,6,6,64] parameter(0)", "  w = s8[8,3,3,64] parameter(1)",
                       "  c = (s8[2,6,6,8], u8[0]) custom-call(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_o01i->b01f, "
                       f"custom_call_target=\"__cudnn$convForward\", backend_config={cfg}",
                       "  ROOT r = s8[2,6,6,8] get-tuple-element(c), index=0", "}"])
    vect = "\n".join(["HloModule m", "ENTRY e {", "  x = s8[2,6,6,64] parameter(0)", "  w = s8[8,3,3,64] parameter(1)",
                      "  x1 = s8[2,6,6,16,4] reshape(x)", "  w1 = s8[8,3,3,16,4] reshape(w)",
                      "  c = (s8[2,6,6,2,4], u8[0]) custom-call(x1, w1), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_o01i->b01f, "
                      f"custom_call_target=\"__cudnn$convForward\", backend_config={cfg}",
                      "  g = s8[2,6,6,2,4] get-tuple-element(c), index=0", "  ROOT r = s8[2,6,6,8] reshape(g)", "}"])
    a = crun(plain, x, w)
    b = crun(vect, x, w)
    np.testing.assert_array_equal(a, b)
    acc = np.asarray(jax.lax.conv_general_dilated(x.astype(np.int32), w.astype(np.int32), (1, 1), ((1, 1), (1, 1)),
                                                  dimension_numbers=("NHWC", "OHWI", "NHWC")))
    np.testing.assert_array_equal(a, np.clip(acc, -128, 127))       # cuDNN's int8 output saturates


def test_reorder_filter_and_bias_round_trip():
    """convReorderFilterAndBias permutes as XLA's test spells it; the int8x32 convolution with
    reordered_int8_nchw_vect puts them back."""
    rng = np.random.default_rng(8)
    f = rng.integers(-100, 100, (64, 1, 3, 3, 32)).astype(np.int8)
    b = rng.standard_normal(64).astype(np.float32)
    text = "\n".join(["HloModule m", "ENTRY e {", "  f = s8[64,1,3,3,32] parameter(0)", "  b = f32[64] parameter(1)",
                      "  ROOT r = (s8[64,1,3,3,32], f32[64]) custom-call(f, b), custom_call_target=\"__cudnn$convReorderFilterAndBias\"",
                      "}"])
    rf, rb = crun(text, f, b)
    want_f = f.reshape(8, 4, 2, 1, 3, 3, 8, 4).transpose(3, 4, 5, 0, 2, 6, 1, 7).reshape(f.shape)
    want_b = b.reshape(2, 4, 2, 4).transpose(0, 2, 1, 3).reshape(64)
    np.testing.assert_array_equal(rf, want_f)
    np.testing.assert_array_equal(rb, want_b)
    # an int8x32 bias-activation convolution on the reordered filter and bias = the plain one
    x = rng.integers(-4, 4, (1, 32, 5, 5)).astype(np.int8)          # NCHW, 32 features
    cfg = json.dumps({"cudnn_conv_backend_config": {"activation_mode": "kNone", "conv_result_scale": 1,
                                                    "side_input_scale": 0, "reordered_int8_nchw_vect": True}})
    plain_cfg = conv_config()
    wv = f                                                           # O=64, I/32=1, 3x3, 32
    mod = lambda c, wt: "\n".join([  # noqa: E731
        "HloModule m", "ENTRY e {", "  x = s8[1,1,5,5,32] parameter(0)", "  w = s8[64,1,3,3,32] parameter(1)",
        "  b = f32[64] parameter(2)",
        "  c = (f32[1,2,5,5,32], u8[0]) custom-call(x, w, b), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01, "
        f"custom_call_target=\"__cudnn$convBiasActivationForward\", backend_config={c}",
        "  ROOT r = f32[1,2,5,5,32] get-tuple-element(c), index=0", "}"])
    xv = x.reshape(1, 1, 32, 5, 5).transpose(0, 1, 3, 4, 2).copy()
    want = crun(mod(plain_cfg, wv), xv, wv, b)
    got = crun(mod(cfg, wv), xv, rf, rb)
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_conv_tf32_under_gpu_numerics():
    """Under GPU numerics an f32 cuDNN convolution without an algorithm multiplies TF32 values
    (f32 rounded to 10 mantissa bits); with DEFAULT_MATH (no tensor cores) f32 values."""
    from hlo_cli.interpreter.ops.numerics import round_tf32
    spec = CONVS[0]
    x, w, y = _conv_case(spec)
    text = conv_module("__cudnn$convForward", x.shape, w.shape, y.shape, spec)
    got = run(text, x, w, numerics="gpu")
    want = np.asarray(jconv(round_tf32(x), round_tf32(w), *spec[3:6], spec[6]))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.max(np.abs(got - y)) > 1e-4
    cfg = conv_config(algorithm={"algo_id": "0", "math_type": "DEFAULT_MATH"})
    got = run(conv_module("__cudnn$convForward", x.shape, w.shape, y.shape, spec, cfg=cfg), x, w, numerics="gpu")
    np.testing.assert_allclose(got, y, rtol=1e-5, atol=1e-5)


def test_conv_operand_mismatch_is_located_error(tmp_path):
    """A cuDNN convolution whose operands disagree with its window is a located HloEvalError."""
    spec = CONVS[0]
    x, w, y = _conv_case(spec)
    text = conv_module("__cudnn$convForward", x.shape, w.shape, (2, 7, 6, 4), (x.shape, 4, (3, 3), (1, 1),
                                                                                 ((0, 0), (0, 0)), (1, 1), 1))
    with pytest.raises(HloEvalError, match=r"output spatial dim 0 is 7; the window gives 5"):
        crun(text, x, w)


# ============================================================================ layer norm

def test_norm_forward_train_and_backward():
    """__cudnn$norm LAYER_FWD_TRAIN and LAYER_BWD against the layer norm's formula and JAX's VJP."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 8, 1, 1)).astype(np.float32) * 3 + 1
    sc = rng.standard_normal((1, 8, 1, 1)).astype(np.float32)
    bi = rng.standard_normal((1, 8, 1, 1)).astype(np.float32)
    dy = rng.standard_normal((6, 8, 1, 1)).astype(np.float32)
    fwd = json.dumps({"cudnn_norm_backend_config": {"epsilon": 0.001, "kind": "LAYER_FWD_TRAIN"}})
    bwd = json.dumps({"cudnn_norm_backend_config": {"epsilon": 0, "kind": "LAYER_BWD"}})
    text = "\n".join([
        "HloModule m", "ENTRY e {", "  x = f32[6,8,1,1] parameter(0)", "  s = f32[1,8,1,1] parameter(1)",
        "  b = f32[1,8,1,1] parameter(2)", "  dy = f32[6,8,1,1] parameter(3)",
        "  f = (f32[6,8,1,1], f32[6,1,1,1], f32[6,1,1,1], u8[16]) custom-call(x, s, b), custom_call_target=\"__cudnn$norm\", "
        f"backend_config={fwd}",
        "  y = f32[6,8,1,1] get-tuple-element(f), index=0", "  m = f32[6,1,1,1] get-tuple-element(f), index=1",
        "  n = f32[6,1,1,1] get-tuple-element(f), index=2",
        "  g = (f32[6,8,1,1], f32[1,8,1,1], f32[1,8,1,1], u8[16]) custom-call(x, s, dy, m, n), custom_call_target=\"__cudnn$norm\", "
        f"backend_config={bwd}",
        "  dx = f32[6,8,1,1] get-tuple-element(g), index=0", "  ds = f32[1,8,1,1] get-tuple-element(g), index=1",
        "  db = f32[1,8,1,1] get-tuple-element(g), index=2",
        "  ROOT r = (f32[6,8,1,1], f32[6,8,1,1], f32[1,8,1,1], f32[1,8,1,1]) tuple(y, dx, ds, db)", "}"])
    y, dx, ds, db = crun(text, x, sc, bi, dy)

    def ln(x, s, b):
        mu = x.mean(axis=1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=1, keepdims=True)
        return (x - mu) / jnp.sqrt(var + 0.001) * s + b
    want, vjp = jax.vjp(ln, x, sc, bi)
    gx, gs, gb = vjp(dy)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    # the backward's epsilon is 0 in XLA's rewrite: the norm factor already holds the forward's
    np.testing.assert_allclose(dx, gx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(ds, gs, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(db, gb, rtol=1e-5, atol=1e-5)


# ============================================================================ attention

def fmha_config(b, n, t, s, scale, mask="NO_MASK", bwd=False, dropout=0.0, window=0, **kw):
    btnh = {"bmm1_dot_dimension_numbers": ((3,), (3,), (0, 2), (0, 2)),
            "bmm2_dot_dimension_numbers": ((3,), (1,), (0, 1), (0, 2)),
            "bmm1_grad_gemm1_dot_dimension_numbers": ((2,), (1,), (0, 1), (0, 2)),
            "bmm1_grad_gemm2_dot_dimension_numbers": ((3,), (1,), (0, 1), (0, 2)),
            "bmm2_grad_gemm1_dot_dimension_numbers": ((2,), (1,), (0, 1), (0, 2)),
            "bmm2_grad_gemm2_dot_dimension_numbers": ((3,), (3,), (0, 2), (0, 2))}
    keys = list(btnh)[2:] if bwd else list(btnh)[:2]
    cfg = {"fmha_scale": scale, "dropout_rate": dropout, "seed": 42, "mask_type": mask, "is_flash_attention": True,
           "sliding_window_length": window, "max_seg_per_batch": 1, "is_paged_attention": False,
           "intermediate_tensor_shape": {"element_type": "BF16", "dimensions": [str(v) for v in (b, n, t, s)]}}
    cfg.update(kw)
    for k in keys:
        lc, rc, lb, rb = btnh[k]
        cfg[k] = {"lhs_contracting_dimensions": [str(v) for v in lc], "rhs_contracting_dimensions": [str(v) for v in rc],
                  "lhs_batch_dimensions": [str(v) for v in lb], "rhs_batch_dimensions": [str(v) for v in rb]}
    return json.dumps({"cudnn_fmha_backend_config": cfg, "operation_queue_id": "0"})


def attention_module(b, t, s, n, nk, h, scale, mask="NO_MASK", bias=False, seqlens=False, window=0, dropout=0.0):
    """fwd (training) + bwd custom calls: parameters q, k, v, dO[, bias][, q_len, kv_len] (BTNH);
    ROOT (O, dQ, dK, dV[, dbias]) in BTNH."""
    q, kv = shp("bf16", (b, t, n, h)), shp("bf16", (b, s, nk, h))
    lines = ["HloModule m", "ENTRY e {", f"  q = {q} parameter(0)", f"  k = {kv} parameter(1)", f"  v = {kv} parameter(2)",
             f"  do = {q} parameter(3)"]
    extra, p = [], 4
    if bias:
        lines.append(f"  bias = {shp('bf16', (1, n, t, s))} parameter({p})")
        extra.append("bias")
        p += 1
    lens = []
    if seqlens:
        lines += [f"  ql = s32[{b}] parameter({p})", f"  kl = s32[{b}] parameter({p + 1})"]
        lens = ["ql", "kl"]
    tag = ("ScaleBias" if bias else "") + "Softmax" + ("Dropout" if dropout else "")
    fcfg = fmha_config(b, n, t, s, scale, mask, dropout=dropout, window=window)
    bcfg = fmha_config(b, n, t, s, scale, mask, bwd=True, dropout=dropout, window=window)
    o_bnth = shp("bf16", (b, n, t, h))
    lines.append(f"  f = ({o_bnth}, f32[{b},{n},{t}], u8[0]) custom-call({', '.join(['q', 'k', 'v'] + extra + lens)}), "
                 f"custom_call_target=\"__cudnn$fmha{tag}\", backend_config={fcfg}")
    lines += [f"  o = {o_bnth} get-tuple-element(f), index=0", f"  st = f32[{b},{n},{t}] get-tuple-element(f), index=1",
              f"  ot = {q} transpose(o), dimensions={{0,2,1,3}}"]
    kv_bnth = shp("bf16", (b, nk, s, h))
    grads = [o_bnth, kv_bnth, kv_bnth] + ([shp("bf16", (1, n, t, s))] if bias else [])
    lines.append(f"  g = ({', '.join(grads)}, u8[0]) custom-call({', '.join(['q', 'k', 'v', 'st', 'do'] + extra + ['ot'] + lens)}), "
                 f"custom_call_target=\"__cudnn$fmha{tag}Backward\", backend_config={bcfg}")
    outs = ["ot"]
    for i, (nm, sh) in enumerate(zip(("dq", "dk", "dv"), (q, kv, kv))):
        lines += [f"  {nm}0 = {grads[i]} get-tuple-element(g), index={i}", f"  {nm} = {sh} transpose({nm}0), dimensions={{0,2,1,3}}"]
        outs.append(nm)
    if bias:
        lines.append(f"  db = {grads[3]} get-tuple-element(g), index=3")
        outs.append("db")
    root_t = [q, q, kv, kv] + ([grads[3]] if bias else [])
    lines += [f"  ROOT r = ({', '.join(root_t)}) tuple({', '.join(outs)})", "}"]
    return "\n".join(lines)


ATTN = [  # (b, t, s, n, nk, h, mask, bias, seqlens, window)
    (2, 16, 16, 2, 2, 8, "NO_MASK", False, False, 0),
    (2, 16, 16, 2, 2, 8, "CAUSAL", False, False, 0),
    (1, 12, 20, 4, 2, 8, "NO_MASK", True, False, 0),          # grouped K/V heads, bias, T != S
    (2, 16, 16, 2, 1, 8, "CAUSAL", True, False, 5),          # sliding window
    (2, 10, 14, 2, 2, 8, "PADDING", False, True, 0),
    (2, 12, 12, 2, 2, 8, "PADDING_CAUSAL", False, True, 0),
]


@pytest.mark.parametrize("spec", ATTN, ids=lambda s: f"{s[6]}-bias{int(s[7])}-gqa{s[3] // s[4]}-w{s[9]}")
def test_attention_forward_backward_match_xla(spec):
    """fMHA forward and backward custom calls against jax.nn.dot_product_attention
    (implementation="xla") and its VJP on the same bf16 values, computed in f32."""
    b, t, s, n, nk, h, mask, bias, seqlens, window = spec
    rng = np.random.default_rng(11)
    q = rng.standard_normal((b, t, n, h)).astype(BF16)
    k = rng.standard_normal((b, s, nk, h)).astype(BF16)
    v = rng.standard_normal((b, s, nk, h)).astype(BF16)
    do = rng.standard_normal((b, t, n, h)).astype(BF16)
    bi = rng.standard_normal((1, n, t, s)).astype(BF16) if bias else None
    ql = np.array([t - 3, t], np.int32)[:b]
    kl = np.array([s, s - 5], np.int32)[:b]
    scale = 1 / np.sqrt(h)
    if seqlens:        # padded query rows: cuDNN ignores them; XLA's masked softmax spreads them uniformly
        do = np.where((np.arange(t)[None, :] < ql[:, None])[:, :, None, None], do, 0).astype(BF16)
    args = [q, k, v, do] + ([bi] if bias else []) + ([ql, kl] if seqlens else [])
    got = run(attention_module(b, t, s, n, nk, h, scale, mask, bias, seqlens, window), *args)

    def ref(q, k, v, bi):
        m = None
        if seqlens:
            m = (jnp.arange(t)[None, :, None] < ql[:, None, None]) & (jnp.arange(s)[None, None, :] < kl[:, None, None])
            m = m[:, None]
        return jax.nn.dot_product_attention(q, k, v, bias=bi, mask=m, scale=scale, is_causal="CAUSAL" in mask,
                                            local_window_size=(window - 1, 0) if window else None, implementation="xla")
    f32 = (lambda a: None if a is None else jnp.asarray(a, jnp.float32))
    want, vjp = jax.vjp(lambda *a: ref(*a), f32(q), f32(k), f32(v), f32(bi))
    grads = vjp(f32(do))
    want_all = [want, *grads[:3]] + ([grads[3]] if bias else [])
    valid = np.ones((b, t, 1, 1), bool)
    if seqlens:
        valid = (np.arange(t)[None, :] < ql[:, None])[:, :, None, None]
    for i, (g, w) in enumerate(zip(got, want_all)):
        g = np.asarray(g, np.float32)
        w = np.asarray(w, np.float32)
        if i in (0, 1):                       # O and dQ rows of padded queries: cuDNN leaves them 0
            w = np.where(valid, w, 0)
        np.testing.assert_allclose(g, w, rtol=0.03, atol=0.03, err_msg=f"result {i}")


def test_causal_attention_ignores_future_keys():
    """Changing keys and values after a query's position leaves its causal output unchanged (finite
    values: a NaN in a masked value may reach the output through 0 * NaN, on the GPU's tensor cores
    as here)."""
    b, t, n, h = 1, 12, 2, 8
    rng = np.random.default_rng(4)
    q, k, v, do = (rng.standard_normal((b, t, n, h)).astype(BF16) for _ in range(4))
    text = attention_module(b, t, t, n, n, h, 0.3, "CAUSAL")
    o1 = run(text, q, k, v, do)[0]
    k2, v2 = k.copy(), v.copy()
    k2[:, 7:] = rng.standard_normal(k2[:, 7:].shape).astype(BF16) * 5
    v2[:, 7:] = rng.standard_normal(v2[:, 7:].shape).astype(BF16) * 7
    o2 = run(text, q, k2, v2, do)[0]
    np.testing.assert_array_equal(np.asarray(o1[:, :7], np.float32), np.asarray(o2[:, :7], np.float32))
    assert not np.array_equal(np.asarray(o1[:, 7:], np.float32), np.asarray(o2[:, 7:], np.float32))


def test_attention_dropout_runs_with_warning_and_keep_rate():
    """Dropout runs with our own mask (a warning says its values differ from the GPU's); the mean
    output over many keys stays the undropped one's within sampling error."""
    b, t, n, h = 1, 8, 2, 4
    rng = np.random.default_rng(6)
    q, k, v, do = (rng.standard_normal((b, t, n, h)).astype(BF16) for _ in range(4))
    with pytest.warns(UserWarning, match="cuDNN's random bits cannot be reproduced"):
        out = run(attention_module(b, t, t, n, n, h, 0.5, "NO_MASK", dropout=0.5), q, k, v, do)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plain = run(attention_module(b, t, t, n, n, h, 0.5, "NO_MASK"), q, k, v, do)
    assert all(np.isfinite(np.asarray(x, np.float32)).all() for x in out)
    assert not np.array_equal(np.asarray(out[0], np.float32), np.asarray(plain[0], np.float32))


def test_dropout_warning_on_the_command_line(tmp_path):
    """hlo run prints the dropout warning as `warning: NAME (TARGET): ...`, not Python's warning form."""
    from click.testing import CliRunner
    from hlo_cli.cli import main
    p = tmp_path / "drop.hlo"
    p.write_text(attention_module(1, 8, 8, 2, 2, 4, 0.5, "NO_MASK", dropout=0.5))
    r = CliRunner().invoke(main, ["run", str(p), "--random-inputs"])
    err = r.stderr if hasattr(r, "stderr") else r.output
    assert r.exit_code == 0, err
    assert "warning: f (__cudnn$fmhaSoftmaxDropout): dropout (rate 0.5)" in err
    assert "DropoutWarning" not in err and "Traceback" not in err


def test_attention_mismatched_operands_are_located_errors(tmp_path):
    """A K whose head size differs from Q's is refused before anything runs, with a location
    (hlo run exits 1 with file:line:col)."""
    from click.testing import CliRunner
    from hlo_cli.cli import main
    cfg = fmha_config(1, 2, 8, 8, 0.3)
    text = "\n".join(["HloModule m", "ENTRY e {", "  q = bf16[1,8,2,8] parameter(0)", "  k = bf16[1,8,2,4] parameter(1)",
                      "  v = bf16[1,8,2,8] parameter(2)",
                      "  f = (bf16[1,2,8,8], u8[0]) custom-call(q, k, v), custom_call_target=\"__cudnn$fmhaSoftmax\", "
                      f"backend_config={cfg}", "  ROOT o = bf16[1,2,8,8] get-tuple-element(f), index=0", "}"])
    p = tmp_path / "bad.hlo"
    p.write_text(text)
    r = CliRunner().invoke(main, ["run", str(p), "--random-inputs"])
    assert r.exit_code == 1
    err = r.stderr if hasattr(r, "stderr") else r.output
    assert "bad.hlo:6:3" in err and "disagree on batch, heads, key length or head size" in err
    assert "Traceback" not in err


# ============================================================================ TransformerEngine

def te_module(target, operands, results, attrs):
    params = [f"  p{i} = {shp(t, d)} parameter({i})" for i, (t, d) in enumerate(operands)]
    res = results if isinstance(results, str) else "(" + ", ".join(shp(t, d) for t, d in results) + ")"
    return "\n".join(["HloModule m", "ENTRY e {", *params,
                      f"  ROOT c = {res} custom-call({', '.join(f'p{i}' for i in range(len(operands)))}), "
                      f"custom_call_target=\"{target}\", api_version=API_VERSION_TYPED_FFI, backend_config={{{attrs}}}",
                      "}"])


@pytest.mark.parametrize("kind", ["te_scaled_softmax_forward_ffi", "te_scaled_masked_softmax_forward_ffi",
                                  "te_scaled_upper_triang_masked_softmax_forward_ffi"])
def test_te_softmax_forward_and_backward(kind):
    """TE's scaled / masked / upper-triangular softmax and its backward against jax.nn.softmax."""
    rng = np.random.default_rng(12)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    mask = (rng.random((2, 1, 6, 6)) < 0.3).astype(np.uint8)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    masked = "_masked_softmax" in kind and "triang" not in kind
    ops = [("f32", x.shape)] + ([("u8", mask.shape)] if masked else [])
    y = run(te_module(kind, ops, shp("f32", x.shape), "scale_factor = 5.000000e-01 : f64"), x, *([mask] if masked else []))
    z = 0.5 * x
    if masked:
        z = np.where(mask != 0, -10000.0, z)
    if "triang" in kind:
        z = np.where(np.tril(np.ones((6, 6), bool)), z, -np.inf)
    want = np.asarray(jax.nn.softmax(jnp.asarray(z), axis=-1))
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    bwd = kind.replace("forward", "backward")
    dx = run(te_module(bwd, [("f32", x.shape)] * 2, shp("f32", x.shape), "scale_factor = 5.000000e-01 : f64"), dy, y)
    _, vjp = jax.vjp(lambda t: jax.nn.softmax(0.5 * t, axis=-1), jnp.asarray(x))
    if not masked and "triang" not in kind:
        np.testing.assert_allclose(dx, np.asarray(vjp(jnp.asarray(dy))[0]), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, 0.5 * y * (dy - (dy * y).sum(-1, keepdims=True)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("norm", [0, 1])
def test_te_norm_forward_backward(norm):
    """te_norm_forward_ffi / te_norm_backward_ffi (LayerNorm, RMSNorm with zero-centered gamma off)
    against JAX's VJP of the formula."""
    rng = np.random.default_rng(13)
    x = rng.standard_normal((4, 5, 16)).astype(np.float32)
    g = rng.standard_normal(16).astype(np.float32)
    b = rng.standard_normal(16).astype(np.float32)
    dz = rng.standard_normal(x.shape).astype(np.float32)
    fa = f"norm_type = {norm} : i64, zero_centered_gamma = false, epsilon = 1.000000e-05 : f64, sm_margin = 0 : i64, " \
         "scaling_mode = 0 : i64, is_2x = false"
    res = [("f32", x.shape), ("f32", (0,)), ("f32", (1,)), ("f32", (0,)), ("f32", (1,)), ("f32", (20,)), ("f32", (20,)),
           ("u8", (0,))]
    out = run(te_module("te_norm_forward_ffi", [("f32", x.shape), ("f32", (1,)), ("f32", (16,)), ("f32", (16,))], res, fa),
              x, np.ones(1, np.float32), g, b)
    y, mu, rs = out[0], out[5], out[6]

    def ref(x, g, b):
        if norm == 0:
            m = x.mean(-1, keepdims=True)
            return (x - m) / jnp.sqrt(((x - m) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b
        return x / jnp.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5) * g
    want, vjp = jax.vjp(ref, x, g, b)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)
    ba = f"norm_type = {norm} : i64, zero_centered_gamma = false, sm_margin = 0 : i64"
    gx, gg, gb = vjp(dz)
    dx, dgam, dbet, _ = run(te_module("te_norm_backward_ffi", [("f32", x.shape), ("f32", x.shape), ("f32", (20,)),
                                                               ("f32", (20,)), ("f32", (16,))],
                                      [("f32", x.shape), ("f32", (16,)), ("f32", (16,)), ("u8", (0,))], ba),
                            dz, x, mu, rs, g)
    np.testing.assert_allclose(dx, gx, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dgam, gg, rtol=1e-4, atol=1e-4)
    if norm == 0:
        np.testing.assert_allclose(dbet, gb, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("act, fn", [(0, lambda a, b: jax.nn.gelu(a, approximate=True)),
                                     (4, lambda a, b: jax.nn.silu(a) * b), (5, lambda a, b: jax.nn.relu(a)),
                                     (9, lambda a, b: jax.nn.relu(a) ** 2), (2, lambda a, b: jax.nn.sigmoid(a) * b)])
def test_te_act_lu(act, fn):
    """te_act_lu_ffi with TE's current act_enum numbering, plain and with delayed fp8 scaling (output
    = saturate(value * scale), scale_inv = 1/scale, amax)."""
    gated = act in (2, 4)
    rng = np.random.default_rng(14)
    x = rng.standard_normal((6, 2 if gated else 1, 8)).astype(np.float32)
    want = np.asarray(fn(jnp.asarray(x[:, 0]), jnp.asarray(x[:, -1])))
    y = run(te_module("te_act_lu_ffi", [("f32", x.shape)], shp("f32", (6, 8)), f"act_enum = {act} : i64"), x)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    res = [("f8e4m3fn", (6, 8)), ("f8e4m3fn", (8, 6)), ("f32", (1,)), ("f32", (1,)), ("f32", (1,))]
    out = run(te_module("te_act_lu_ffi", [("f32", x.shape), ("f32", (1,)), ("f32", (1,))], res,
                        f"act_enum = {act} : i64, scaling_mode = 1 : i64, is_2x = true"),
              x, np.array([4.0], np.float32), np.zeros(1, np.float32))
    q, qt, sinv, _, amax = out
    np.testing.assert_array_equal(q.astype(np.float32), (want * 4).astype(ml_dtypes.float8_e4m3fn).astype(np.float32))
    np.testing.assert_array_equal(qt.astype(np.float32), q.astype(np.float32).T)
    assert float(sinv[0]) == 0.25 and float(amax[0]) == pytest.approx(np.abs(want).max(), rel=1e-6)


def test_te_block_scaling_is_refused_with_reason():
    x = np.zeros((4, 1, 32), np.float32)
    res = [("f8e4m3fn", (4, 32)), ("f8e4m3fn", (0,)), ("u8", (4, 1)), ("u8", (0,)), ("f32", (1,))]
    with pytest.raises(HloEvalError, match="MXFP8_1D_SCALING"):
        run(te_module("te_act_lu_ffi", [("f32", x.shape), ("f32", (1,))], res,
                      "act_enum = 0 : i64, scaling_mode = 2 : i64, is_2x = false"), x, np.ones(1, np.float32))


@pytest.mark.parametrize("fuse", ["none", "bias", "gelu", "bias_gelu"])
@pytest.mark.parametrize("lt, rt", [(False, False), (False, True), (True, False)])
def test_te_gemm_forward(fuse, lt, rt):
    """te_gemm_ffi: operands split at the axis boundaries, transposes, bias and GELU epilogues, against
    jnp.dot at HIGHEST precision and jax.nn.gelu(approximate=True)."""
    rng = np.random.default_rng(15)
    a = rng.standard_normal((2, 3, 8)).astype(np.float32)                     # [M=6, K=8]
    b = rng.standard_normal((8, 5)).astype(np.float32)                        # [K, N=5]
    bias = rng.standard_normal(5).astype(np.float32)
    a_op = a.reshape(6, 8).T.copy() if lt else a
    b_op = b.T.copy() if rt else b
    fb, fg = "bias" in fuse, "gelu" in fuse
    attrs = (f"scaling_mode = 0 : i64, lhs_axis_boundary = {1 if lt else 2} : i64, rhs_axis_boundary = 1 : i64, "
             f"lhs_transposed = {str(lt).lower()}, rhs_transposed = {str(rt).lower()}, fuse_bias = {str(fb).lower()}, "
             f"fuse_gelu = {str(fg).lower()}, grad = false, use_split_accumulator = false, collective_op = 0 : i64")
    ops = [("f32", a_op.shape), ("f32", (1,)), ("f32", b_op.shape), ("f32", (1,)), ("f32", (5,)),
           ("f32", (6, 5) if fg else (0,))]
    res = [("f32", (2, 3, 5)), ("f32", (5,)), ("f32", (6, 5) if fg else (0,)), ("u8", (256,))]
    out = run(te_module("te_gemm_ffi", ops, res, attrs), a_op, np.ones(1, np.float32), b_op, np.ones(1, np.float32),
              bias, np.zeros((6, 5) if fg else (0,), np.float32))
    want = np.asarray(jnp.dot(a.reshape(6, 8), b, precision=HIGHEST)) + (bias if fb else 0)
    pre = want
    if fg:
        want = np.asarray(jax.nn.gelu(jnp.asarray(want), approximate=True))
        np.testing.assert_allclose(out[2], pre, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[0].reshape(6, 5), want, rtol=1e-5, atol=1e-5)


def test_te_gemm_backward_epilogues_and_quantize():
    """grad GEMM: bias_grad is the lhs's column sums and the output is multiplied by GELU'; dbias
    quantize sums rows; dequantize multiplies by scale_inv; dact matches JAX's VJP of SwiGLU."""
    rng = np.random.default_rng(16)
    dy = rng.standard_normal((6, 8)).astype(np.float32)
    w = rng.standard_normal((5, 8)).astype(np.float32)                       # rhs_transposed: [N, K]
    gi = rng.standard_normal((6, 5)).astype(np.float32)
    attrs = ("scaling_mode = 0 : i64, lhs_axis_boundary = 1 : i64, rhs_axis_boundary = 1 : i64, lhs_transposed = false, "
             "rhs_transposed = true, fuse_bias = true, fuse_gelu = true, grad = true, use_split_accumulator = false, "
             "collective_op = 0 : i64")
    ops = [("f32", (6, 8)), ("f32", (1,)), ("f32", (5, 8)), ("f32", (1,)), ("f32", (8,)), ("f32", (6, 5))]
    res = [("f32", (6, 5)), ("f32", (8,)), ("f32", (6, 5)), ("u8", (256,))]
    out, bgrad, pre, _ = run(te_module("te_gemm_ffi", ops, res, attrs), dy, np.ones(1, np.float32), w,
                             np.ones(1, np.float32), np.zeros(8, np.float32), gi)
    _, gvjp = jax.vjp(lambda t: jax.nn.gelu(t, approximate=True), jnp.asarray(gi))
    want = np.asarray(gvjp(jnp.asarray(dy @ w.T))[0])
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(bgrad, dy.sum(0), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(pre, gi)
    # dbias quantize with delayed fp8 scaling, then dequantize
    qres = [("f8e4m3fn", (6, 8)), ("f8e4m3fn", (0,)), ("f32", (1,)), ("f32", (0,)), ("f32", (1,)), ("f32", (8,)),
            ("u8", (0,))]
    q, _, sinv, _, amax, dbias, _ = run(te_module("te_dbias_quantize_ffi", [("f32", (6, 8)), ("f32", (1,))], qres,
                                                  "scaling_mode = 1 : i64, q_layout = 0 : i64, is_dbias = true, "
                                                  "flatten_axis = -1 : i64"), dy, np.array([8.0], np.float32))
    np.testing.assert_allclose(dbias, dy.sum(0), rtol=1e-5, atol=1e-5)
    assert float(amax[0]) == pytest.approx(np.abs(dy).max())
    back = run(te_module("te_dequantize_ffi", [("f8e4m3fn", (6, 8)), ("f32", (1,)), ("f32", (1,)), ("f32", (1,))],
                         shp("f32", (6, 8)), ""), q, amax, np.array([8.0], np.float32), sinv)
    np.testing.assert_allclose(back, dy, rtol=0.07, atol=0.02)             # e4m3: 3 mantissa bits
    # SwiGLU backward
    x = rng.standard_normal((6, 2, 8)).astype(np.float32)
    dz = rng.standard_normal((6, 8)).astype(np.float32)
    dres = [("f32", (6, 2, 8)), ("f32", (0,)), ("f32", (1,)), ("f32", (0,)), ("f32", (1,)), ("f32", (2, 8)),
            ("u8", (0,))]
    d, *_, db, _ = run(te_module("te_dact_dbias_quantize_ffi", [("f32", (6, 8)), ("f32", (6, 2, 8)), ("f32", (1,))],
                                 dres, "scaling_mode = 0 : i64, is_2x = false, act_enum = 4 : i64, is_dbias = true"),
                       dz, x, np.ones(1, np.float32))
    _, vjp = jax.vjp(lambda t: jax.nn.silu(t[:, 0]) * t[:, 1], jnp.asarray(x))
    np.testing.assert_allclose(d, np.asarray(vjp(jnp.asarray(dz))[0]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(db, d.sum(0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout, mask, bias_type", [(9, 2, 0), (5, 0, 2), (7, 1, 1), (9, 4, 0)])
def test_te_fused_attention_forward_backward(layout, mask, bias_type):
    """te_fused_attn_forward_ffi / backward_ffi (BSHD separate, qkv-packed, kv-packed; causal, padding,
    bottom-right causal; post- and pre-scale bias) against jax.nn.dot_product_attention and its VJP."""
    b, t, h, d = 2, 8, 2, 8
    s = 12 if layout == 9 and mask == 4 else t
    rng = np.random.default_rng(17)
    q, k, v = (rng.standard_normal((b, n_, h, d)).astype(BF16) for n_ in (t, s, s))
    bias = rng.standard_normal((1, h, t, s)).astype(BF16) if bias_type else np.zeros((0,), BF16)
    do = rng.standard_normal((b, t, h, d)).astype(BF16)
    ql = np.array([t, t - 3], np.int32)
    cu_q = np.concatenate([[0], np.cumsum(ql if mask == 1 else [t] * b)]).astype(np.int32)
    cu_k = np.concatenate([[0], np.cumsum(ql if mask == 1 else [s] * b)]).astype(np.int32)
    if mask == 1:
        do = np.where((np.arange(t)[None, :] < ql[:, None])[:, :, None, None], do, 0).astype(BF16)
    if layout == 5:
        ops_qkv = [np.stack([q, k, v], axis=2), np.zeros((0,), BF16), np.zeros((0,), BF16)]
    elif layout == 7:
        ops_qkv = [q, np.stack([k, v], axis=2), np.zeros((0,), BF16)]
    else:
        ops_qkv = [q, k, v]
    scale = 0.35
    attrs = (f"input_batch = {b} : i64, bias_batch = 1 : i64, q_max_seqlen = {t} : i64, kv_max_seqlen = {s} : i64, "
             f"attn_heads = {h} : i64, num_gqa_groups = {h} : i64, bias_heads = {h} : i64, qk_head_dim = {d} : i64, "
             f"v_head_dim = {d} : i64, max_segments_per_seq = 1 : i64, window_size_left = -1 : i64, "
             f"window_size_right = -1 : i64, scaling_factor = {scale} : f64, dropout_probability = 0.0 : f64, "
             f"bias_type = {bias_type} : i64, mask_type = {mask} : i64, qkv_layout = {layout} : i64, is_training = true, "
             f"deterministic = false")
    t_of = (lambda a: "bf16" if a.dtype == BF16 else ("s32" if a.dtype == np.int32 else "u32"))
    seed = np.array([42, 0], np.uint32)
    f_ops = ops_qkv + [bias, seed, cu_q, cu_k, np.zeros(0, np.int32), np.zeros(0, np.int32)]
    fwd = te_module("te_fused_attn_forward_ffi", [(t_of(a), a.shape) for a in f_ops],
                    [("bf16", (b, t, h, d)), ("f32", (b, h, t, 1)), ("u32", (2,)), ("u8", (0,))], attrs)
    o, aux, rng_state, _ = run(fwd, *f_ops)
    b_ops = ops_qkv + [bias, aux, rng_state, o, do, cu_q, cu_k, np.zeros(0, np.int32), np.zeros(0, np.int32)]
    res = [(t_of(a), a.shape) for a in ops_qkv] + [("bf16", bias.shape), ("u8", (0,))]
    bwd = te_module("te_fused_attn_backward_ffi", [(t_of(a) if a.dtype != np.float32 else "f32", a.shape) for a in b_ops],
                    res, attrs)
    dq, dk, dv, dbias, _ = run(bwd, *b_ops)
    if layout == 5:
        dq, dk, dv = dq[:, :, 0], dq[:, :, 1], dq[:, :, 2]
    elif layout == 7:
        dq, dk, dv = dq, dk[:, :, 0], dk[:, :, 1]

    def ref(q, k, v, bias):
        m = None
        if mask == 1:
            m = ((jnp.arange(t)[None, :, None] < ql[:, None, None]) & (jnp.arange(s)[None, None, :] < ql[:, None, None]))[:, None]
        if mask == 4:
            m = (jnp.arange(s)[None, :] <= jnp.arange(t)[:, None] + (s - t))[None, None]
        bb = None if not bias_type else (bias * scale if bias_type == 1 else bias)
        return jax.nn.dot_product_attention(q, k, v, bias=bb, mask=m, scale=scale, is_causal=mask == 2,
                                            implementation="xla")
    f32 = (lambda a: jnp.asarray(a, jnp.float32))
    want, vjp = jax.vjp(ref, f32(q), f32(k), f32(v), f32(bias) if bias_type else None)
    gq, gk, gv, gb = vjp(f32(do))
    valid = np.ones((b, t, 1, 1), bool) if mask != 1 else (np.arange(t)[None, :] < ql[:, None])[:, :, None, None]
    np.testing.assert_allclose(np.asarray(o, np.float32), np.where(valid, want, 0), rtol=0.03, atol=0.03)
    for g, w in ((dq, gq), (dk, gk), (dv, gv)):
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w), rtol=0.03, atol=0.03)
    if bias_type:
        np.testing.assert_allclose(np.asarray(dbias, np.float32), np.asarray(gb), rtol=0.03, atol=0.03)


def test_attention_nan_and_inf_operands_match_xla():
    """A NaN in one query makes that query's outputs NaN and leaves the others finite; an -inf bias
    entry masks that key; both as XLA's plain attention does."""
    b, t, n, h = 1, 6, 2, 8
    rng = np.random.default_rng(18)
    q, k, v, do = (rng.standard_normal((b, t, n, h)).astype(BF16) for _ in range(4))
    q[0, 2, 1, 3] = np.nan
    bi = rng.standard_normal((1, n, t, t)).astype(BF16)
    bi[0, 0, :, 4] = -np.inf
    got = run(attention_module(b, t, t, n, n, h, 0.3, "NO_MASK", bias=True), q, k, v, do, bi)
    f32 = (lambda a: jnp.asarray(a, jnp.float32))
    want = np.asarray(jax.nn.dot_product_attention(f32(q), f32(k), f32(v), bias=f32(bi), scale=0.3,
                                                   implementation="xla"))
    o = np.asarray(got[0], np.float32)
    np.testing.assert_array_equal(np.isnan(o), np.isnan(want))
    ok = ~np.isnan(want)
    np.testing.assert_allclose(o[ok], want[ok], rtol=0.03, atol=0.03)


def fmha_forward_module(target, operands, out_dims, cfg, stats_dims=None, extra_results=()):
    """One forward fMHA custom call on `operands` [(type, dims)]; ROOT its results but the scratch."""
    params = [f"  p{i} = {shp(t, d)} parameter({i})" for i, (t, d) in enumerate(operands)]
    res = [("bf16", out_dims)] + list(extra_results) + ([("f32", stats_dims)] if stats_dims else [])
    tup = ", ".join(shp(t, d) for t, d in res)
    lines = ["HloModule m", "ENTRY e {", *params,
             f"  f = ({tup}, u8[0]) custom-call({', '.join(f'p{i}' for i in range(len(operands)))}), "
             f"custom_call_target=\"{target}\", backend_config={cfg}"]
    names = []
    for i, (t, d) in enumerate(res):
        lines.append(f"  r{i} = {shp(t, d)} get-tuple-element(f), index={i}")
        names.append(f"r{i}")
    lines += [f"  ROOT r = ({tup}) tuple({', '.join(names)})", "}"]
    return "\n".join(lines)


def _dense_reference(q, k, v, scale, mask=None, causal=False):
    f32 = (lambda a: jnp.asarray(a, jnp.float32))
    return np.asarray(jax.nn.dot_product_attention(f32(q), f32(k), f32(v), mask=mask, scale=scale, is_causal=causal,
                                                   implementation="xla"))


def test_paged_attention_gathers_blocks():
    """is_paged_attention: K/V blocks [num_blocks, block, N, H] gathered through page tables [B,1,pages,1]
    give the dense attention over the gathered keys (the kv lengths mask the rest)."""
    b, t, n, h, blk, pages, nblocks = 2, 4, 2, 8, 4, 3, 7
    rng = np.random.default_rng(19)
    q = rng.standard_normal((b, t, n, h)).astype(BF16)
    kb = rng.standard_normal((nblocks, blk, n, h)).astype(BF16)
    vb = rng.standard_normal((nblocks, blk, n, h)).astype(BF16)
    table = np.array([[6, 1, 3], [0, 5, 2]], np.int32).reshape(b, 1, pages, 1)
    ql = np.array([t, t], np.int32)
    kl = np.array([12, 9], np.int32)
    cfg = fmha_config(b, n, t, blk, 0.3, "NO_MASK", is_paged_attention=True)
    ops = [("bf16", q.shape), ("bf16", kb.shape), ("bf16", vb.shape), ("s32", (b,)), ("s32", (b,)),
           ("s32", table.shape), ("s32", table.shape)]
    (o,) = run(fmha_forward_module("__cudnn$fmhaSoftmax", ops, (b, n, t, h), cfg), q, kb, vb, ql, kl, table, table)
    idx = table[:, 0, :, 0]
    kd = kb[idx].reshape(b, pages * blk, n, h)
    vd = vb[idx].reshape(b, pages * blk, n, h)
    m = (np.arange(pages * blk)[None, :] < kl[:, None])[:, None, None, :]
    want = _dense_reference(q, kd, vd, 0.3, mask=m)
    np.testing.assert_allclose(np.asarray(o, np.float32).transpose(0, 2, 1, 3), want, rtol=0.03, atol=0.03)


def test_packed_segments_attend_within_themselves():
    """max_seg_per_batch > 1: each packed segment (token offsets x N*H, lengths) is its own attention;
    the statistics have B * segments rows."""
    b, t, n, h = 2, 8, 2, 4
    rng = np.random.default_rng(20)
    q, k, v = (rng.standard_normal((b, t, n, h)).astype(BF16) for _ in range(3))
    # batch 0: segments [0,3) and [3,8); batch 1: [0,5) (then padding): JAX's fixed offsets and lengths
    lens = np.array([3, 5, 5, 0], np.int32)
    offs = (np.array([0, 3, 8, 13, 16], np.int32) * n * h)
    cfg = fmha_config(b, n, t, t, 0.5, "PADDING", max_seg_per_batch=2)
    ops = [("bf16", q.shape)] * 3 + [("s32", (4,)), ("s32", (4,)), ("s32", (5,)), ("s32", (5,))]
    o, stats = run(fmha_forward_module("__cudnn$fmhaSoftmax", ops, (b, n, t, h), cfg, stats_dims=(4, n, t)),
                   q, k, v, lens, lens, offs, offs)
    o = np.asarray(o, np.float32).transpose(0, 2, 1, 3).reshape(b * t, n, h)
    qt, kt, vt = (x.reshape(b * t, n, h) for x in (q, k, v))
    for start, ln in ((0, 3), (3, 5), (8, 5)):
        sl = slice(start, start + ln)
        want = _dense_reference(qt[None, sl], kt[None, sl], vt[None, sl], 0.5)[0]
        np.testing.assert_allclose(o[sl], want, rtol=0.03, atol=0.03)
    np.testing.assert_array_equal(o[13:], 0)
    assert stats.shape == (4, n, t) and np.isfinite(stats[0, :, :3]).all()


def test_alibi_runs_as_xla_gpu_does():
    """mask_type ALIBI: XLA's cuDNN graph sets no ALiBi bias (cuda_dnn.cc), so the kernel is unmasked."""
    b, t, n, h = 1, 6, 2, 8
    rng = np.random.default_rng(21)
    q, k, v = (rng.standard_normal((b, t, n, h)).astype(BF16) for _ in range(3))
    ops = [("bf16", q.shape)] * 3
    (a,) = run(fmha_forward_module("__cudnn$fmhaSoftmax", ops, (b, n, t, h), fmha_config(b, n, t, t, 0.4, "ALIBI")), q, k, v)
    (c,) = run(fmha_forward_module("__cudnn$fmhaSoftmax", ops, (b, n, t, h), fmha_config(b, n, t, t, 0.4)), q, k, v)
    np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(c, np.float32))


def test_fp8_attention_forward():
    """fmhaSoftmaxF8: S = QK^T descale_q descale_k scale, P to fp8 after scale_s, O = P V descale_s descale_v,
    output scaled by scale_o; amax of P and of O."""
    b, t, n, h = 1, 8, 2, 16
    rng = np.random.default_rng(22)
    F8 = ml_dtypes.float8_e4m3fn
    q, k, v = (rng.standard_normal((b, t, n, h)).astype(F8) for _ in range(3))
    sc = [np.full((1, 1, 1, 1), x, np.float32) for x in (0.5, 2.0, 1.5, 1 / 64, 64.0, 0.25)]
    cfg = fmha_config(b, n, t, t, 0.25, "CAUSAL")
    ops = [("f8e4m3fn", q.shape)] * 3 + [("f32", (1, 1, 1, 1))] * 6
    text = fmha_forward_module("__cudnn$fmhaSoftmaxF8", ops, (b, n, t, h), cfg,
                               extra_results=[("f32", (1, 1, 1, 1)), ("f32", (1, 1, 1, 1))]).replace(
        f"bf16[{b},{n},{t},{h}]", f"f8e4m3fn[{b},{n},{t},{h}]")
    o, amax_s, amax_o = run(text, q, k, v, *sc)
    qf, kf, vf = (np.asarray(x, np.float32).transpose(0, 2, 1, 3) for x in (q, k, v))
    s = qf @ kf.transpose(0, 1, 3, 2) * (0.5 * 2.0 * 0.25)
    s = np.where(np.tril(np.ones((t, t), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    p8 = (p * 64.0).astype(F8).astype(np.float32)
    ov = p8 @ vf * (1 / 64 * 1.5)
    assert float(amax_s.reshape(())) == pytest.approx(p.max(), rel=1e-5)
    assert float(amax_o.reshape(())) == pytest.approx(np.abs(ov).max(), rel=1e-4)
    want = np.clip(ov * 0.25, -448, 448).astype(F8).astype(np.float32)
    got = np.asarray(o, np.float32)
    assert np.mean(got == want) > 0.97            # rounding ties of the f32 sums may flip an fp8 step
    np.testing.assert_allclose(got, want, rtol=0.13, atol=0.02)


def test_block_scaled_dot_mxfp8():
    """__cudnn$blockScaledDot: lhs/rhs f8e4m3fn, e8m0 scales per 32 elements in cuDNN's swizzled
    128x4 tile order, result = the dot of the dequantized operands."""
    rng = np.random.default_rng(23)
    m, nn, kk = 128, 128, 128
    lhs = rng.standard_normal((m, kk)).astype(ml_dtypes.float8_e4m3fn)
    rhs = rng.standard_normal((nn, kk)).astype(ml_dtypes.float8_e4m3fn)
    ls = (2.0 ** rng.integers(-3, 4, (m, kk // 32))).astype(ml_dtypes.float8_e8m0fnu)
    rs = (2.0 ** rng.integers(-3, 4, (nn, kk // 32))).astype(ml_dtypes.float8_e8m0fnu)

    def swz(s):
        r, c = s.shape
        return s.reshape(1, r // 128, 4, 32, c // 4, 4).transpose(0, 1, 4, 3, 2, 5).reshape(r, c)
    cfg = json.dumps({"block_scaled_dot_backend_config": {"block_size": 32}})
    text = "\n".join(["HloModule m", "ENTRY e {", f"  a = f8e4m3fn[{m},{kk}] parameter(0)",
                      f"  b = f8e4m3fn[{nn},{kk}] parameter(1)", f"  c = f8e8m0fnu[{m},4] parameter(2)",
                      f"  d = f8e8m0fnu[{nn},4] parameter(3)",
                      f"  r = (f32[{m},{nn}], u8[0]) custom-call(a, b, c, d), custom_call_target=\"__cudnn$blockScaledDot\", "
                      f"backend_config={cfg}", f"  ROOT g = f32[{m},{nn}] get-tuple-element(r), index=0", "}"])
    got = run(text, lhs, rhs, swz(ls), swz(rs), numerics="cpu")
    deq = (lambda x, s: x.astype(np.float32) * np.repeat(s.astype(np.float32), 32, axis=1))
    want = deq(lhs, ls).astype(np.float64) @ deq(rhs, rs).astype(np.float64).T
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)


def test_fp8_attention_backward_close_to_exact_gradients():
    """fmhaSoftmaxBackwardF8 with unit scales (descale 1, scale_s and scale_dP large enough for fp8's
    range) stays within fp8 rounding of JAX's exact attention gradients; four amax outputs."""
    b, t, n, h = 1, 8, 2, 16
    rng = np.random.default_rng(24)
    F8 = ml_dtypes.float8_e4m3fn
    q, k, v, do = (rng.standard_normal((b, t, n, h)).astype(F8) for _ in range(4))
    f32 = (lambda a: jnp.asarray(np.asarray(a, np.float32)))
    out, vjp = jax.vjp(lambda a, b_, c: jax.nn.dot_product_attention(a, b_, c, scale=0.25, implementation="xla"),
                       f32(q), f32(k), f32(v))
    gq, gk, gv = (np.asarray(g) for g in vjp(f32(do)))
    qf, kf = (np.asarray(x, np.float32).transpose(0, 2, 1, 3) for x in (q, k))
    s = qf @ kf.transpose(0, 1, 3, 2) * 0.25
    lse = (s.max(-1) + np.log(np.exp(s - s.max(-1, keepdims=True)).sum(-1))).astype(np.float32)
    o8 = np.asarray(out).astype(F8)
    ones = [np.ones((1, 1, 1, 1), np.float32)] * 7
    scales = [np.full((1, 1, 1, 1), x, np.float32) for x in (1.0, 1.0, 1.0, 1.0, 1.0)]   # s, dQ, dK, dV, dP
    cfg = fmha_config(b, n, t, t, 0.25, "NO_MASK", bwd=True)
    q8, kv8 = shp("f8e4m3fn", (b, t, n, h)), shp("f8e4m3fn", (b, n, t, h))
    params = [f"  p{i} = {q8} parameter({i})" for i in range(5)] + [f"  p5 = f32[{b},{n},{t}] parameter(5)"] + \
             [f"  p{6 + i} = f32[1,1,1,1] parameter({6 + i})" for i in range(12)]
    res = f"({kv8}, {kv8}, {kv8}, f32[1,1,1,1], f32[1,1,1,1], f32[1,1,1,1], f32[1,1,1,1], u8[0])"
    text = "\n".join(["HloModule m", "ENTRY e {", *params,
                      f"  g = {res} custom-call({', '.join(f'p{i}' for i in range(18))}), "
                      f"custom_call_target=\"__cudnn$fmhaSoftmaxBackwardF8\", backend_config={cfg}",
                      *[f"  r{i} = {kv8 if i < 3 else 'f32[1,1,1,1]'} get-tuple-element(g), index={i}" for i in range(7)],
                      f"  ROOT r = ({kv8}, {kv8}, {kv8}, f32[1,1,1,1], f32[1,1,1,1], f32[1,1,1,1], f32[1,1,1,1]) "
                      f"tuple(r0, r1, r2, r3, r4, r5, r6)", "}"])
    dq, dk, dv, *amax = run(text, q, k, v, o8, do, lse, *ones, *scales)
    for g, w in ((dq, gq), (dk, gk), (dv, gv)):
        g = np.asarray(g, np.float32).transpose(0, 2, 1, 3)
        assert np.max(np.abs(g - w)) < 0.15 * np.max(np.abs(w)) + 0.05
    assert all(float(a.reshape(())) > 0 for a in amax)
