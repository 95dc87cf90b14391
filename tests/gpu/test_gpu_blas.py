"""XLA GPU's cuBLAS / cuBLASLt calls and GPU numerics (hlo_cli/interpreter/ops/gpu_blas.py,
hlo_cli/interpreter/ops/numerics.py).

* Goldens: the shared H200 cases that use them (samples/gpu/cases{,_cublas}/NAME.*, copied
  unchanged from the GPU runs), before and after XLA GPU's optimizations, against the GPU's
  results within the tolerance of NAME.json, under GPU numerics; where CPU numerics are further
  from the GPU, that is asserted too.
* Hand-written calls of every target and epilogue against XLA CPU through JAX computing the
  equivalent plain program at HIGHEST precision (slow), and against the formula in NumPy (f64).
* The checks made before a call runs, and the numerics laws (hypothesis).
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.errors import HloEvalError
from hlo_cli.interpreter import RunOptions, run_module
from hlo_cli.interpreter.ops import numerics
from hlo_cli.interpreter.values import np_dtype
from hlo_cli import parse_file
from hlo_cli.parser import parse

ROOT = Path(__file__).resolve().parent.parent.parent
GPU = ROOT / "samples" / "gpu"
CASES = [("cases", "mlp_step"), ("cases", "nan_step"), ("cases", "int8_matmul"),
         ("cases_cublas", "mlp_step"), ("cases_cublas", "fp8_matmul")]


# ============================================================================ goldens

def _params(module):
    ps = [i for i in module.computation_map[module.entry].instructions if i.opcode == "parameter"]
    return sorted(ps, key=lambda i: i.parameter_number)


def _case(folder, name, stage):
    base = GPU / folder / name
    module = parse_file(str(base) + f".{stage}.hlo")
    with np.load(str(base) + ".inputs.npz") as z:
        raw = [z[f"arg{k}"] for k in range(len(z.files))]
    args = []
    for a, p in zip(raw, _params(module)):
        dt = np_dtype(p.shape)
        args.append(a.view(dt) if a.dtype.kind == "V" else a.astype(dt))   # f64 stands for f32
    with np.load(str(base) + ".expected.npz") as z:
        expected = [z[f"out{k}"] for k in range(len(z.files))]
    tol = json.loads((GPU / folder / f"{name}.json").read_text())
    return module, args, expected, tol


def _errors(module, args, expected, mode):
    """(max |ours - GPU|, sum |ours - GPU|, all within tolerance fn) of a run under `mode`."""
    out = run_module(module, args, RunOptions(numerics=mode))
    outs = list(out) if isinstance(out, tuple) else [out]
    assert len(outs) == len(expected)
    res = []
    for o, e in zip(outs, expected):
        e = e.view(o.dtype) if e.dtype.kind == "V" else e
        assert o.shape == e.shape
        res.append((np.asarray(o).astype(np.float64), e.astype(np.float64)))
    return res


def _within(pairs, rtol, atol):
    for k, (o, e) in enumerate(pairs):
        np.testing.assert_allclose(o, e, rtol=rtol, atol=atol, equal_nan=True, err_msg=f"out{k}")


def _total(pairs):
    return sum(float(np.nansum(np.abs(o - e))) for o, e in pairs)


@pytest.mark.parametrize("stage", ["pre", "post"])
@pytest.mark.parametrize("folder, name", CASES, ids=[f"{f}/{n}" for f, n in CASES])
def test_shared_case_matches_the_gpu(folder, name, stage):
    module, args, expected, tol = _case(folder, name, stage)
    if stage == "post":        # compiled for a GPU: auto picks GPU numerics
        assert numerics.resolve(module) == "gpu" and numerics.gpu_evidence(module)
    else:                      # the text before optimization does not say so
        assert numerics.resolve(module) == "cpu"
    gpu = _errors(module, args, expected, "gpu")
    _within(gpu, tol["rtol"], tol["atol"])
    if name == "mlp_step":     # f32 GEMMs of DEFAULT precision: TF32 on the H200, and CPU numerics further away
        cpu = _errors(module, args, expected, "cpu")
        assert _total(gpu) < 0.8 * _total(cpu)
        assert max(np.nanmax(np.abs(o - e)) for o, e in gpu[1:]) < max(np.nanmax(np.abs(o - e)) for o, e in cpu[1:])
    if name == "int8_matmul":
        assert all(np.array_equal(o, e) for o, e in gpu)


@pytest.mark.slow
@pytest.mark.parametrize("folder, rounding, other", [("cases", "rna", "rne"), ("cases_cublas", "rne", "rna")])
def test_tf32_rounding_is_the_measured_one(folder, rounding, other, monkeypatch):
    """Triton's dots round the f32 operands to TF32 to nearest, ties away (cvt.rna); cuBLASLt to
    nearest even: the measured choice agrees bit for bit with more of the GPU's values."""
    module, args, expected, _ = _case(folder, "mlp_step", "post")
    name = "TF32_ROUNDING" if folder == "cases" else "CUBLAS_TF32_ROUNDING"
    assert getattr(numerics, name) == rounding

    def exact(how):
        monkeypatch.setattr(numerics, name, how)
        pairs = _errors(parse_file(str(GPU / folder / "mlp_step.post.hlo")), args, expected, "gpu")
        return sum(int((o == e).sum()) for o, e in pairs)
    assert exact(rounding) > exact(other) > exact("trunc")


# ============================================================================ hand-written calls

def _text(target, operands, result, cfg, extra_attrs=""):
    """A module whose ROOT calls `target` on parameters of the shapes `operands`."""
    params = "\n".join(f"  p{k} = {s} parameter({k})" for k, s in enumerate(operands))
    names = ", ".join(f"p{k}" for k in range(len(operands)))
    return (f"HloModule m\n\nENTRY e {{\n{params}\n  ROOT c = {result} custom-call({names}), "
            f"custom_call_target=\"{target}\"{extra_attrs}, backend_config={json.dumps(cfg)}\n}}\n")


def _gemm_cfg(lc=(1,), rc=(0,), lb=(), rb=(), alpha=1.0, alpha_imag=0.0, beta=0.0, epilogue="DEFAULT",
              precision=("DEFAULT", "DEFAULT"), algorithm="ALG_UNSET", damax=False, scale_mode=0, bare=False):
    g = {"alpha_real": alpha, "alpha_imag": alpha_imag, "beta": beta, "epilogue": epilogue,
         "dot_dimension_numbers": {"lhs_contracting_dimensions": [str(d) for d in lc],
                                   "rhs_contracting_dimensions": [str(d) for d in rc],
                                   "lhs_batch_dimensions": [str(d) for d in lb],
                                   "rhs_batch_dimensions": [str(d) for d in rb]},
         "precision_config": {"operand_precision": list(precision), "algorithm": algorithm},
         "grad_x": False, "grad_y": False, "damax_output": damax, "lhs_stride": "32", "rhs_stride": "24",
         "selected_algorithm": "0", "autotune_workspace_size": "0", "scale_mode": scale_mode}
    return g if bare else {"operation_queue_id": "0", "gemm_backend_config": g}


def _run(text, args, mode="cpu"):
    return run_module(parse(text), [np.asarray(a) for a in args], RunOptions(numerics=mode))


def _rand(rng, shape, dtype=np.float32, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)


def _gelu(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


_ACT = {"DEFAULT": lambda x: x, "RELU": lambda x: np.where(np.isnan(x), x, np.maximum(x, 0.0)),
        "GELU": _gelu, "SILU": lambda x: x / (1.0 + np.exp(-x))}


def _jax_ref(a, b, c, bias, alpha, beta, act, out_dtype, bias_axis=-1):
    """XLA CPU (through JAX) computing the plain program: dot at HIGHEST, then the epilogue."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    def f(a, b, c, bias):
        d = lax.dot_general(a, b, (((1,), (0,)), ((), ())), precision=lax.Precision.HIGHEST,
                            preferred_element_type=jnp.float32)
        pre = alpha * d
        if c is not None:
            pre = pre + beta * c.astype(jnp.float32)
        if bias is not None:
            pre = pre + (bias.astype(jnp.float32)[None, :] if bias_axis == -1 else bias.astype(jnp.float32)[:, None])
        if act == "RELU":
            y = jnp.maximum(pre, 0.0)
        elif act == "GELU":
            y = 0.5 * pre * (1.0 + jnp.tanh(np.float32(np.sqrt(2 / np.pi)) * (pre + 0.044715 * pre ** 3)))
        elif act == "SILU":
            y = pre * jax.nn.sigmoid(pre)
        else:
            y = pre
        return y.astype(out_dtype), pre.astype(out_dtype)
    with jax.default_device(jax.devices("cpu")[0]):
        y, pre = jax.jit(f)(a, b, c, bias)
    return np.asarray(y), np.asarray(pre)


EPILOGUE_CASES = ["DEFAULT", "BIAS", "RELU", "BIAS_RELU", "GELU", "GELU_AUX", "BIAS_GELU", "BIAS_GELU_AUX",
                  "SILU", "BIAS_SILU"]


def _epilogue_call(epilogue, beta, out="f32", nonfinite=False):
    rng = np.random.default_rng(len(epilogue) + int(beta * 10))
    dt = np_dtype(out)
    a, b = _rand(rng, (5, 7)).astype(dt), _rand(rng, (7, 3)).astype(dt)
    if nonfinite:
        a[0, 1], a[2, 3], b[4, 2] = np.nan, np.inf, -np.inf
    ops = [f"{out}[5,7]", f"{out}[7,3]"]
    args = [a, b]
    c = bias = None
    if beta:
        c = _rand(rng, (5, 3)).astype(dt)
        ops.append(f"{out}[5,3]")
        args.append(c)
    if epilogue.startswith("BIAS"):
        bias = _rand(rng, (3,)).astype(dt)
        ops.append(f"{out}[3]")
        args.append(bias)
    aux = epilogue.endswith("_AUX")
    result = f"({out}[5,3], {out}[5,3], s8[64])" if aux else f"({out}[5,3], s8[64])"
    text = _text("__cublas$lt$matmul", ops, result,
                 _gemm_cfg(alpha=0.75, beta=beta, epilogue=epilogue, precision=("HIGHEST", "HIGHEST")))
    return text, args, a, b, c, bias


def _act_name(epilogue):
    return epilogue.replace("BIAS_", "").replace("BIAS", "DEFAULT").replace("_AUX", "")


@pytest.mark.parametrize("beta", [0.0, 0.5])
@pytest.mark.parametrize("epilogue", EPILOGUE_CASES)
def test_epilogue_formula(epilogue, beta):
    text, args, a, b, c, bias = _epilogue_call(epilogue, beta)
    out = _run(text, args)
    pre = 0.75 * (a.astype(np.float64) @ b.astype(np.float64))
    if c is not None:
        pre = pre + beta * c
    if bias is not None:
        pre = pre + bias[None, :]
    want = _ACT[_act_name(epilogue)](pre)
    np.testing.assert_allclose(out[0], want, rtol=2e-6, atol=2e-6)
    if epilogue.endswith("_AUX"):
        np.testing.assert_allclose(out[1], pre, rtol=2e-6, atol=2e-6)
        assert out[2].dtype == np.int8 and not out[2].any()
    else:
        assert len(out) == 2 and out[1].shape == (64,)


@pytest.mark.slow
@pytest.mark.parametrize("out", ["f32", "bf16"])
@pytest.mark.parametrize("nonfinite", [False, True])
@pytest.mark.parametrize("epilogue", EPILOGUE_CASES)
def test_epilogue_against_xla(epilogue, nonfinite, out):
    beta = 0.5 if out == "f32" else 0.0
    text, args, a, b, c, bias = _epilogue_call(epilogue, beta, out, nonfinite)
    got = _run(text, args)
    y, pre = _jax_ref(a, b, c, bias, np.float32(0.75), np.float32(beta), _act_name(epilogue), np_dtype(out))
    rtol = 1e-5 if out == "f32" else 8e-3
    np.testing.assert_allclose(got[0].astype(np.float64), y.astype(np.float64), rtol=rtol, atol=1e-5, equal_nan=True)
    if epilogue.endswith("_AUX"):
        np.testing.assert_allclose(got[1].astype(np.float64), pre.astype(np.float64), rtol=rtol, atol=1e-5,
                                   equal_nan=True)
    if nonfinite:
        assert np.isnan(got[0]).any() and (np.isnan(got[0]) == np.isnan(y)).all()


def test_bias_follows_the_minor_physical_dimension():
    """An output laid out {0,1} takes its bias along dimension 0 (XLA matches the bias broadcast
    in the output's most minor physical dimension)."""
    rng = np.random.default_rng(3)
    a, b, bias = _rand(rng, (4, 6)), _rand(rng, (6, 3)), _rand(rng, (4,))
    text = _text("__cublas$lt$matmul", ["f32[4,6]", "f32[6,3]", "f32[4]"], "(f32[4,3]{0,1}, s8[8])",
                 _gemm_cfg(epilogue="BIAS"))
    out = _run(text, [a, b, bias])
    np.testing.assert_allclose(out[0], a.astype(np.float64) @ b + bias[:, None], rtol=1e-6, atol=1e-6)


def test_legacy_gemm_alpha_beta_and_complex_alpha():
    rng = np.random.default_rng(4)
    a = (_rand(rng, (3, 4)) + 1j * _rand(rng, (3, 4))).astype(np.complex64)
    b = (_rand(rng, (4, 2)) + 1j * _rand(rng, (4, 2))).astype(np.complex64)
    c = (_rand(rng, (3, 2)) + 1j * _rand(rng, (3, 2))).astype(np.complex64)
    text = _text("__cublas$gemm", ["c64[3,4]", "c64[4,2]", "c64[3,2]"], "c64[3,2]",
                 _gemm_cfg(alpha=0.5, alpha_imag=-2.0, beta=1.5), ', output_to_operand_aliasing={{}: (2, {})}')
    out = _run(text, [a, b, c])
    want = (0.5 - 2j) * (a.astype(np.complex128) @ b) + 1.5 * c
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    assert out.dtype == np.complex64


def test_bare_gemm_backend_config_of_older_xla():
    """Older XLA versions wrote the GemmBackendConfig itself as the backend_config."""
    rng = np.random.default_rng(5)
    a, b = _rand(rng, (3, 4)), _rand(rng, (4, 2))
    out = _run(_text("__cublas$gemm", ["f32[3,4]", "f32[4,2]"], "f32[3,2]", _gemm_cfg(alpha=2.0, bare=True)), [a, b])
    np.testing.assert_allclose(out, 2 * (a.astype(np.float64) @ b), rtol=1e-6)


@pytest.mark.parametrize("mode", ["cpu", "gpu"])
def test_batch_dims_and_transposed_operands(mode):
    """Batch dims not leading, contracting dims on either side: the dot of the dimension numbers."""
    rng = np.random.default_rng(6)
    a, b = _rand(rng, (8, 2, 4)), _rand(rng, (3, 2, 8))         # a: [k, batch, m]; b: [n, batch, k]
    text = _text("__cublas$lt$matmul", ["f32[8,2,4]", "f32[3,2,8]"], "(f32[2,4,3], s8[0])",
                 _gemm_cfg(lc=(0,), rc=(2,), lb=(1,), rb=(1,), precision=("HIGHEST", "HIGHEST")))
    out = _run(text, [a, b], mode)[0]
    want = np.einsum("kbm,nbk->bmn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


def test_grad_flags_and_strides_do_not_change_values():
    rng = np.random.default_rng(7)
    a, b = _rand(rng, (4, 5)), _rand(rng, (5, 6))
    cfg = _gemm_cfg()
    plain = _run(_text("__cublas$lt$matmul", ["f32[4,5]", "f32[5,6]"], "(f32[4,6], s8[4])", cfg), [a, b])[0]
    cfg["gemm_backend_config"].update(grad_x=True, grad_y=True, lhs_stride="999", rhs_stride="1")
    flagged = _run(_text("__cublas$lt$matmul", ["f32[4,5]", "f32[5,6]"], "(f32[4,6], s8[4])", cfg), [a, b])[0]
    assert np.array_equal(plain, flagged)


@pytest.mark.parametrize("out_t", ["s32", "f32"])
def test_int8_gemm_is_exact(out_t):
    rng = np.random.default_rng(8)
    a = rng.integers(-128, 128, (6, 40)).astype(np.int8)
    b = rng.integers(-128, 128, (40, 5)).astype(np.int8)
    out = _run(_text("__cublas$lt$matmul", ["s8[6,40]", "s8[40,5]"], f"({out_t}[6,5], s8[16])", _gemm_cfg()), [a, b])
    assert np.array_equal(out[0], (a.astype(np.int64) @ b.astype(np.int64)).astype(np_dtype(out_t)))


def _f8(rng, shape, dt=ml_dtypes.float8_e4m3fn, scale=4.0):
    return (rng.standard_normal(shape) * scale).astype(dt)


@pytest.mark.parametrize("out_t", ["bf16", "f16", "f32", "f8e4m3fn", "f8e5m2"])
def test_f8_gemm_scales_saturation_and_amax(out_t):
    rng = np.random.default_rng(9)
    a, b = _f8(rng, (8, 16)), _f8(rng, (16, 8))
    sa, sb = np.float32(1.5), np.float32(2.0)
    f8_out = out_t.startswith("f8")
    ops = ["f8e4m3fn[8,16]", "f8e4m3fn[16,8]", "f32[]", "f32[]"] + (["f32[]"] if f8_out else [])
    args = [a, b, sa, sb] + ([np.float32(0.125)] if f8_out else [])
    result = f"({out_t}[8,8], f32[], s8[32])"
    out = _run(_text("__cublas$lt$matmul$f8", ops, result, _gemm_cfg(damax=True, scale_mode=1)), args)
    pre = (a.astype(np.float64) @ b.astype(np.float64)) * 3.0
    if f8_out:
        top = float(ml_dtypes.finfo(np_dtype(out_t)).max)
        want = np.clip((pre.astype(np.float32) * np.float32(0.125)), -top, top).astype(np_dtype(out_t))
        assert np.array_equal(out[0].astype(np.float32), want.astype(np.float32))
        assert np.isfinite(out[0].astype(np.float32)).all()           # saturated, never inf/NaN
    else:
        np.testing.assert_allclose(out[0].astype(np.float64), pre, rtol=1e-2 if out_t != "f32" else 1e-6)
    assert out[1].dtype == np.float32
    np.testing.assert_allclose(out[1], np.abs(pre).max(), rtol=1e-6)


@pytest.mark.parametrize("out_t", ["bf16", "f8e4m3fn"])
def test_f8_gemm_with_c_bias_and_relu(out_t):
    """Operands (a, b, c, a_scale, b_scale, bias[, d_scale]): alpha*sa*sb*A.B + beta*C + bias, RELU,
    then (f8 D) times d_scale, saturated.  An f8 D takes a bf16 C and bias."""
    rng = np.random.default_rng(20)
    a, b = _f8(rng, (8, 32)), _f8(rng, (32, 16))
    c = _rand(rng, (8, 16), scale=20).astype(ml_dtypes.bfloat16)
    bias = _rand(rng, (16,), scale=20).astype(ml_dtypes.bfloat16)
    f8_out = out_t.startswith("f8")
    ops = ["f8e4m3fn[8,32]", "f8e4m3fn[32,16]", "bf16[8,16]", "f32[]", "f32[]", "bf16[16]"]
    ops += ["f32[]"] if f8_out else []
    args = [a, b, c, np.float32(0.5), np.float32(2.0), bias] + ([np.float32(4.0)] if f8_out else [])
    out = _run(_text("__cublas$lt$matmul$f8", ops, f"({out_t}[8,16], s8[8])",
                     _gemm_cfg(alpha=0.5, beta=1.0, epilogue="BIAS_RELU")), args)[0]
    pre = 0.5 * (a.astype(np.float64) @ b.astype(np.float64)) + c.astype(np.float64) + bias.astype(np.float64)
    want = np.maximum(pre, 0)
    if f8_out:
        want = np.clip(want.astype(np.float32) * 4, -448, 448).astype(ml_dtypes.float8_e4m3fn)
        assert np.array_equal(out.astype(np.float32), want.astype(np.float32))
    else:
        np.testing.assert_allclose(out.astype(np.float64), want, rtol=8e-3, atol=1e-6)


def test_f8_gemm_amax_of_nan_is_nan_and_saturation_keeps_nan():
    rng = np.random.default_rng(10)
    a, b = _f8(rng, (4, 16)), _f8(rng, (16, 4))
    a[1, 2] = np.nan
    big = np.float32(1e6)
    out = _run(_text("__cublas$lt$matmul$f8", ["f8e4m3fn[4,16]", "f8e4m3fn[16,4]", "f32[]", "f32[]", "f32[]"],
                     "(f8e4m3fn[4,4], f32[], s8[8])", _gemm_cfg(damax=True)),
               [a, b, big, np.float32(1), np.float32(1)])
    v = out[0].astype(np.float32)
    assert np.isnan(v[1]).all() and np.isnan(out[1])
    assert (np.abs(v[[0, 2, 3]]) == 448).any()                           # saturated to e4m3fn's max


@pytest.mark.slow
def test_f8_gemm_against_xla():
    import jax
    import jax.numpy as jnp
    rng = np.random.default_rng(11)
    a, b = _f8(rng, (16, 32)), _f8(rng, (32, 8), ml_dtypes.float8_e5m2)
    sa, sb, sd = np.float32(0.5), np.float32(3.0), np.float32(0.25)
    out = _run(_text("__cublas$lt$matmul$f8", ["f8e4m3fn[16,32]", "f8e5m2[32,8]", "f32[]", "f32[]", "f32[]"],
                     "(f8e4m3fn[16,8], f32[], s8[8])", _gemm_cfg(damax=True)), [a, b, sa, sb, sd])

    def f(a, b):
        d = jnp.dot(a.astype(jnp.float32), b.astype(jnp.float32), precision="highest") * (sa * sb)
        return jnp.clip(d * sd, -448.0, 448.0).astype(jnp.float8_e4m3fn), jnp.max(jnp.abs(d))
    with jax.default_device(jax.devices("cpu")[0]):
        y, amax = jax.jit(f)(a, b)
    assert np.array_equal(out[0].astype(np.float32), np.asarray(y).astype(np.float32))
    np.testing.assert_allclose(out[1], np.asarray(amax), rtol=1e-6)


def test_mx_gemm_is_the_scaled_dot():
    """__cublas$lt$matmul$mx: a and b times their f8e8m0fnu block scales (blocks of 32 along K)."""
    rng = np.random.default_rng(18)
    a, b = _f8(rng, (4, 64)), _f8(rng, (3, 64))
    sa = (2.0 ** rng.integers(-3, 4, (4, 2))).astype(ml_dtypes.float8_e8m0fnu)
    sb = (2.0 ** rng.integers(-3, 4, (3, 2))).astype(ml_dtypes.float8_e8m0fnu)
    text = _text("__cublas$lt$matmul$mx", ["f8e4m3fn[4,64]", "f8e4m3fn[3,64]", "f8e8m0fnu[4,2]", "f8e8m0fnu[3,2]"],
                 "(f32[4,3], s8[8])", _gemm_cfg(lc=(1,), rc=(1,), scale_mode=2))
    out = _run(text, [a, b, sa, sb])[0]
    wa = a.astype(np.float64) * np.repeat(sa.astype(np.float64), 32, axis=1)
    wb = b.astype(np.float64) * np.repeat(sb.astype(np.float64), 32, axis=1)
    np.testing.assert_allclose(out, wa @ wb.T, rtol=1e-6)


def test_grouped_gemm_is_the_ragged_dot():
    rng = np.random.default_rng(12)
    a, b = _rand(rng, (10, 4)), _rand(rng, (3, 4, 5))
    gs = np.array([3, 0, 6], np.int32)
    cfg = {"operation_queue_id": "0", "grouped_gemm_backend_config": {
        "gemm_backend_config": _gemm_cfg(lc=(1,), rc=(1,), bare=True),
        "ragged_dot_dimension_numbers": {
            "dot_dimension_numbers": {"lhs_contracting_dimensions": ["1"], "rhs_contracting_dimensions": ["1"],
                                      "lhs_batch_dimensions": [], "rhs_batch_dimensions": []},
            "lhs_ragged_dimensions": ["0"], "rhs_group_dimensions": ["0"]}}}
    out = _run(_text("__cublas$lt$groupedMatmul", ["f32[10,4]", "f32[3,4,5]", "s32[3]"], "(f32[10,5], s8[8])", cfg),
               [a, b, gs])[0]
    want = np.zeros((10, 5))
    want[:3] = a[:3].astype(np.float64) @ b[0]
    want[3:9] = a[3:9].astype(np.float64) @ b[2]
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)
    # GPU numerics: TF32 products (DEFAULT precision), as cuBLAS rounds them
    text = _text("__cublas$lt$groupedMatmul", ["f32[10,4]", "f32[3,4,5]", "s32[3]"], "(f32[10,5], s8[8])", cfg)
    gpu = _run(text, [a, b, gs], "gpu")[0]
    ta, tb = (numerics.round_tf32(x, "rne").astype(np.float64) for x in (a, b))
    want[:3], want[3:9] = ta[:3] @ tb[0], ta[3:9] @ tb[2]
    np.testing.assert_allclose(gpu, want, rtol=1e-6, atol=1e-6)


def test_grouped_gemm_result_is_checked_before_it_runs():
    cfg = {"grouped_gemm_backend_config": {
        "gemm_backend_config": _gemm_cfg(lc=(1,), rc=(1,), bare=True),
        "ragged_dot_dimension_numbers": {
            "dot_dimension_numbers": {"lhs_contracting_dimensions": ["1"], "rhs_contracting_dimensions": ["1"]},
            "lhs_ragged_dimensions": ["0"], "rhs_group_dimensions": ["0"]}}}
    with pytest.raises(HloEvalError, match=r"should have the dims \[10, 5\]"):
        _run(_text("__cublas$lt$groupedMatmul", ["f32[10,4]", "f32[3,4,5]", "s32[3]"], "(f32[10,4], s8[8])", cfg),
             [np.zeros((10, 4), np.float32), np.zeros((3, 4, 5), np.float32), np.array([1, 2, 3], np.int32)])


@pytest.mark.parametrize("left, lower, unit, trans", [(True, True, True, "NO_TRANSPOSE"),
                                                      (True, False, False, "TRANSPOSE"),
                                                      (False, True, False, "NO_TRANSPOSE"),
                                                      (False, False, True, "ADJOINT")])
def test_triangular_solve(left, lower, unit, trans):
    rng = np.random.default_rng(13)
    a = _rand(rng, (2, 6, 6)) + 6 * np.eye(6, dtype=np.float32)
    b = _rand(rng, (2, 6, 3) if left else (2, 3, 6))
    cfg = {"left_side": left, "lower": lower, "unit_diagonal": unit, "transpose_a": trans}
    bs = "f32[2,6,3]" if left else "f32[2,3,6]"
    x = _run(_text("__cublas$triangularSolve", ["f32[2,6,6]", bs], f"({bs}, s8[32])", cfg), [a, b])[0]
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        t = t - t * np.eye(6) + np.eye(6)
    op = t if trans == "NO_TRANSPOSE" else np.swapaxes(t, -1, -2)
    res = op.astype(np.float64) @ x if left else x.astype(np.float64) @ op
    np.testing.assert_allclose(res, b, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_triangular_solve_against_xla():
    import jax
    rng = np.random.default_rng(14)
    a = _rand(rng, (6, 6)) + 6 * np.eye(6, dtype=np.float32)
    b = _rand(rng, (6, 3))
    a[0, 0] = np.nan                                       # NaN spreads as XLA's substitution spreads it
    x = _run(_text("__cublas$triangularSolve", ["f32[6,6]", "f32[6,3]"], "(f32[6,3], s8[0])",
                   {"left_side": True, "lower": True, "unit_diagonal": False, "transpose_a": "NO_TRANSPOSE"}),
             [a, b])[0]
    with jax.default_device(jax.devices("cpu")[0]):
        want = np.asarray(jax.jit(lambda a, b: jax.lax.linalg.triangular_solve(a, b, left_side=True, lower=True))(a, b))
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5, equal_nan=True)


# ============================================================================ checks before a call runs

@pytest.mark.parametrize("ops, result, cfg, args, message", [
    (["f32[4,5]", "f32[5,6]"], "(f32[4,7], s8[4])", _gemm_cfg(), None, "should have the dims [4, 6]"),
    (["f32[4,5]", "f32[5,6]"], "(bf16[4,6], s8[4])", _gemm_cfg(), None, "result type bf16"),
    (["f32[4,5]", "f32[6,6]"], "(f32[4,6], s8[4])", _gemm_cfg(), None, "contracting dimension 1 of the lhs"),
    (["f32[4,5]", "f32[5,6]"], "(f32[4,6], s8[4])", _gemm_cfg(beta=1.0), None, "takes 3 operands (a, b, c)"),
    (["f32[4,5]", "f32[5,6]", "f32[4]"], "(f32[4,6], s8[4])", _gemm_cfg(epilogue="BIAS"), None,
     "bias vector f32[4] should have the dims [6]"),
    (["f32[4,5]", "f32[5,6]"], "(f32[4,6], s8[4])", _gemm_cfg(epilogue="SWISH"), None, "unknown epilogue 'SWISH'"),
    (["f32[4,5]", "f32[5,6]"], "(f32[4,6], s8[4])", _gemm_cfg(lc=(2,)), None, "outside the operand's rank 2"),
    (["f32[4,5]", "f32[5,6]"], "(f32[4,6], s8[4])", _gemm_cfg(epilogue="GELU_AUX"), None,
     "(auxiliary output (the pre-activation)) s8[4]: should be f32[4,6]"),
    (["f32[4,5]", "bf16[5,6]"], "(f32[4,6], s8[4])", _gemm_cfg(), None, "operands of types f32 and bf16"),
    (["f32[4,5]", "f32[5,6]"], "(f32[4,6], f32[4,6], s8[4])", _gemm_cfg(), None, "has 3 elements"),
    (["f32[4,5]", "f32[5,6]"], "(f32[4,6], s8[4])", {"operation_queue_id": "0"}, None, "no gemm_backend_config"),
    (["f32[4,5]", "f32[5,6]"], "(f32[4,6], s8[4])", _gemm_cfg(precision=(5,)), None,
     "operand_precision [5] should list up to two of DEFAULT"),
    (["f32[4,5]", "f32[5,6]"], "(f32[4,6], s8[4])", _gemm_cfg(algorithm="ALG_DOT_FOO"), None,
     "unknown precision_config.algorithm 'ALG_DOT_FOO'"),
    (["f32[4,5]", "f32[5,6]"], "(f32[4,6], s8[4])", _gemm_cfg(alpha="x"), None, "must be numbers"),
])
def test_mismatches_are_located_errors(ops, result, cfg, args, message):
    text = _text("__cublas$lt$matmul", ops, result, cfg)
    module = parse(text)
    vals = [np.zeros(p.shape.dims, np_dtype(p.shape)) for p in _params(module)]
    with pytest.raises(HloEvalError) as e:
        run_module(module, vals, RunOptions(numerics="cpu"))
    assert message in str(e.value), str(e.value)
    d = e.value.diagnostics[0]
    assert d.line == _root_line(text) and d.message.startswith("c: ")


def _root_line(text):
    return next(k for k, line in enumerate(text.splitlines(), 1) if "ROOT c" in line)


def test_f8_checks():
    with pytest.raises(HloEvalError, match="should be of an f8 type"):
        _run(_text("__cublas$lt$matmul$f8", ["f32[4,4]", "f8e4m3fn[4,4]", "f32[]", "f32[]"], "(f32[4,4], s8[4])",
                   _gemm_cfg()), [np.zeros((4, 4), np.float32), np.zeros((4, 4), ml_dtypes.float8_e4m3fn),
                                  np.float32(1), np.float32(1)])
    with pytest.raises(HloEvalError, match="a_scale operand f32\\[2\\] should be an f32 scalar"):
        _run(_text("__cublas$lt$matmul$f8", ["f8e4m3fn[4,4]", "f8e4m3fn[4,4]", "f32[2]", "f32[]"], "(f32[4,4], s8[4])",
                   _gemm_cfg()), [np.zeros((4, 4), ml_dtypes.float8_e4m3fn)] * 2 + [np.ones(2, np.float32),
                                                                                  np.float32(1)])


def test_cli_mismatch_exit_code_and_no_traceback(tmp_path):
    from click.testing import CliRunner

    from hlo_cli.cli import main
    f = tmp_path / "g.hlo"
    text = _text("__cublas$lt$matmul", ["f32[4,5]", "f32[5,6]"], "(f32[4,7], s8[4])", _gemm_cfg())
    f.write_text(text)
    r = CliRunner().invoke(main, ["run", str(f), "--random-inputs"], catch_exceptions=False)
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert f"{f}:{_root_line(text)}:" in r.output and "should have the dims [4, 6]" in r.output


# ============================================================================ numerics

def test_gpu_numerics_use_tf32_products_for_default_precision():
    rng = np.random.default_rng(15)
    a, b = _rand(rng, (8, 64)), _rand(rng, (64, 8))
    text = ("HloModule m\nENTRY e {\n  a = f32[8,64] parameter(0)\n  b = f32[64,8] parameter(1)\n"
            "  ROOT d = f32[8,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}PREC\n}\n")
    exact = a.astype(np.float64) @ b
    tf32 = numerics.round_tf32(a).astype(np.float64) @ numerics.round_tf32(b)
    for prec, want in (("", tf32), (", operand_precision={high,default}", tf32),
                       (", operand_precision={highest,default}", exact)):
        got = _run(text.replace("PREC", prec), [a, b], "gpu")
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
        assert np.abs(_run(text.replace("PREC", prec), [a, b], "cpu") - exact).max() < 1e-5
    assert np.abs(tf32 - exact).max() > 1e-3                              # the test tells them apart


@pytest.mark.parametrize("alg, bits", [("dot_bf16_bf16_f32", 1e-2), ("dot_bf16_bf16_f32_x3", 1e-4),
                                       ("dot_bf16_bf16_f32_x6", 1e-6), ("dot_bf16_bf16_f32_x9", 1e-6),
                                       ("dot_tf32_tf32_f32", 5e-3), ("dot_tf32_tf32_f32_x3", 1e-6),
                                       ("dot_f16_f16_f32", 5e-3), ("dot_f32_f32_f32", 1e-6)])
def test_explicit_algorithms_under_gpu_numerics(alg, bits):
    rng = np.random.default_rng(16)
    a, b = _rand(rng, (16, 300)), _rand(rng, (300, 12))
    text = ("HloModule m\nENTRY e {\n  a = f32[16,300] parameter(0)\n  b = f32[300,12] parameter(1)\n"
            f"  ROOT d = f32[16,12] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, "
            f"algorithm={alg}\n}}\n")
    exact = a.astype(np.float64) @ b
    module = parse(text)
    got = run_module(module, [a, b], RunOptions(numerics="gpu"))
    generic = run_module(module, [a, b], RunOptions(numerics="gpu"), compiled=False)
    assert np.array_equal(got, generic)                                  # every path the same bits
    err = np.abs(got - exact).max() / np.abs(exact).max()
    assert err < bits
    if alg == "dot_bf16_bf16_f32":
        want = a.astype(ml_dtypes.bfloat16).astype(np.float64) @ b.astype(ml_dtypes.bfloat16).astype(np.float64)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    cpu = run_module(module, [a, b], RunOptions(numerics="cpu"))       # XLA CPU ignores algorithm=
    assert np.abs(cpu - exact).max() / np.abs(exact).max() < 1e-6


def test_ragged_dot_under_gpu_numerics():
    rng = np.random.default_rng(22)
    a, b = _rand(rng, (6, 64)), _rand(rng, (2, 64, 3))
    text = ("HloModule m\nENTRY e {\n  a = f32[6,64] parameter(0)\n  b = f32[2,64,3] parameter(1)\n"
            "  g = s32[2] parameter(2)\n  ROOT r = f32[6,3] ragged-dot(a, b, g), lhs_contracting_dims={1}, "
            "rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}\n}\n")
    gs = np.array([2, 4], np.int32)
    ta, tb = numerics.round_tf32(a).astype(np.float64), numerics.round_tf32(b).astype(np.float64)
    want = np.concatenate([ta[:2] @ tb[0], ta[2:] @ tb[1]])
    np.testing.assert_allclose(_run(text, [a, b, gs], "gpu"), want, rtol=1e-6, atol=1e-6)
    assert np.abs(_run(text, [a, b, gs], "cpu") - want).max() > 1e-4


def test_split_algorithms_guard_inf_times_zero():
    """x3/x6/x9: a NaN sum of the low parts (inf * 0) is replaced by 0 before the high part."""
    a = np.array([[np.inf, 1.0]], np.float32)
    b = np.array([[1.0], [1.0]], np.float32)
    text = ("HloModule m\nENTRY e {\n  a = f32[1,2] parameter(0)\n  b = f32[2,1] parameter(1)\n"
            "  ROOT d = f32[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
            "algorithm=dot_bf16_bf16_f32_x3\n}\n")
    assert _run(text, [a, b], "gpu")[0, 0] == np.inf


def test_convolution_under_gpu_numerics_keeps_f32_products(monkeypatch):
    """Measured: the H200's cuDNN convolutions ran with DEFAULT_MATH (f32), so a convolution keeps
    f32 products under GPU numerics; with CONV_IMPLIED_TF32 it would take TF32 ones."""
    rng = np.random.default_rng(17)
    x, w = _rand(rng, (1, 16, 8, 8)), _rand(rng, (4, 16, 3, 3))
    text = ("HloModule m\nENTRY e {\n  x = f32[1,16,8,8] parameter(0)\n  w = f32[4,16,3,3] parameter(1)\n"
            "  ROOT c = f32[1,4,6,6] convolution(x, w), window={size=3x3}, dim_labels=bf01_oi01->bf01\n}\n")
    assert np.array_equal(_run(text, [x, w], "gpu"), _run(text, [x, w], "cpu"))
    monkeypatch.setattr(numerics, "CONV_IMPLIED_TF32", True)
    gpu = _run(text, [x, w], "gpu")
    ref = _run(text, [numerics.round_tf32(x), numerics.round_tf32(w)], "cpu")
    np.testing.assert_allclose(gpu, ref, rtol=1e-6, atol=1e-6)
    assert np.abs(gpu - _run(text, [x, w], "cpu")).max() > 1e-4


def test_resolve_reads_the_platform_prefix_and_target_config(tmp_path):
    text = "HloModule m\nENTRY e {\n  ROOT a = f32[2] parameter(0)\n}\n"
    f = tmp_path / "module_0001.jit_f.sm_8.0_gpu_after_optimizations.txt"
    f.write_text(text)
    m = parse_file(str(f))
    assert numerics.resolve(m) == "gpu" and numerics.generation(m) == (8, 0)
    g = tmp_path / "plain.hlo"
    g.write_text(text)
    assert numerics.resolve(parse_file(str(g))) == "cpu"
    assert numerics.resolve(parse_file(str(g)), "gpu") == "gpu"
    (tmp_path / "module_0001.jit_f.gpu_target_config.pbtxt").write_text(
        "gpu_device_info {\n  cuda_compute_capability {\n    major: 7\n    minor: 5\n  }\n}\n")
    m2 = parse_file(str(g))
    assert numerics.resolve(m2) == "gpu" and numerics.generation(m2) == (7, 5)
    assert numerics.precision_algorithm("f32", (), None, "gpu", (7, 5)) is None      # Turing: no TF32
    assert numerics.precision_algorithm("f32", (), None, "gpu", (9, 0)) == "dot_tf32_tf32_f32"
    hopper = dataclasses.replace(m, name="x", source="a.sm_90a_gpu_after_optimizations.txt")
    assert numerics.generation(hopper) == (9, 0)
    plain = dataclasses.replace(m, name="jit_sm_1", source="jit_sm_10.hlo")      # not XLA's prefix
    assert numerics.gpu_evidence(plain) is None and numerics.generation(plain) is None


def test_cli_numerics_option_json_and_expect_hint(tmp_path):
    from click.testing import CliRunner

    from hlo_cli.cli import main
    case = GPU / "cases" / "int8_matmul"
    r = CliRunner().invoke(main, ["run", f"{case}.post.hlo", "--inputs", f"{case}.inputs.npz", "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["numerics"]["mode"] == "gpu" and "__cublas$lt$matmul" in doc["numerics"]["why"]
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "wrong.npz", out0=rng.integers(0, 5, (64, 96)).astype(np.int32))
    r = CliRunner().invoke(main, ["run", f"{case}.post.hlo", "--inputs", f"{case}.inputs.npz", "--expect",
                                  str(tmp_path / "wrong.npz"), "--numerics", "cpu"])
    assert r.exit_code == 1
    assert "XLA CPU's numerics" in r.output and "--numerics gpu" in r.output
    r = CliRunner().invoke(main, ["run", f"{case}.post.hlo", "--inputs", f"{case}.inputs.npz", "--numerics", "tpu"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["run", f"{case}.post.hlo", "--inputs", f"{case}.inputs.npz", "--no-progress"])
    assert r.exit_code == 0 and "note: XLA GPU's numerics, as it calls the GPU target __cublas$lt$matmul" in r.output


# ============================================================================ laws

_F32 = st.floats(width=32, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(_F32, min_size=1, max_size=20), st.sampled_from(["rne", "rna", "trunc"]))
def test_tf32_rounding_laws(xs, how):
    x = np.array(xs, np.float32)
    r = numerics.round_tf32(x, how)
    assert np.array_equal(numerics.round_tf32(r, how), r)                        # idempotent
    finite = np.isfinite(r)
    assert not (r[finite].view(np.uint32) & 0x1FFF).any()                        # 10 mantissa bits
    order = np.argsort(x, kind="stable")
    ro = r[order]
    assert (ro[1:] >= ro[:-1]).all()                                             # monotone (inf included)
    ok = finite & (np.abs(x) < 3e38)
    ulp = np.spacing(np.abs(x[ok]).astype(np.float32)) * 8192
    assert (np.abs(r[ok].astype(np.float64) - x[ok]) <= ulp * (1.0 if how == "trunc" else 0.5)).all()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 9), st.integers(1, 5), st.integers(0, 2 ** 31 - 1))
def test_default_gemm_equals_the_plain_dot(m, k, n, seed):
    """alpha = 1, beta = 0, DEFAULT epilogue: the GEMM is the dot, bit for bit (same numerics)."""
    rng = np.random.default_rng(seed)
    a, b = _rand(rng, (m, k)), _rand(rng, (k, n))
    gemm = _text("__cublas$lt$matmul", [f"f32[{m},{k}]", f"f32[{k},{n}]"], f"(f32[{m},{n}], s8[8])", _gemm_cfg())
    dot = (f"HloModule m\nENTRY e {{\n  a = f32[{m},{k}] parameter(0)\n  b = f32[{k},{n}] parameter(1)\n"
           f"  ROOT d = f32[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n")
    assert np.array_equal(_run(gemm, [a, b], "cpu")[0], _run(dot, [a, b], "cpu"))


@settings(max_examples=60, deadline=None)
@given(st.lists(_F32.filter(lambda v: v == 0 or 1e-30 < abs(v) < 1e30), min_size=1, max_size=8))
def test_split_parts_add_up(xs):
    """The bf16 x3/x6 and TF32 x3 parts of an operand add back to it (x6: exactly)."""
    x = np.array([xs], np.float32)
    one = np.ones((1, 1), np.float32)
    for alg, tol in (("dot_bf16_bf16_f32_x6", 2 ** -24), ("dot_bf16_bf16_f32_x3", 2 ** -16),
                     ("dot_tf32_tf32_f32_x3", 2 ** -21)):
        pairs = numerics.product_pairs(x, one, algorithm=alg, mode="gpu")
        his = {id(p[0]): p[0] for p in pairs}
        total = sum(v.astype(np.float64) for v in his.values())
        assert (np.abs(total - x) <= tol * np.abs(x)).all(), alg


def test_diff_and_bisect_take_numerics(tmp_path):
    """hlo diff runs A and B under one numerics (auto: gpu when either was compiled for a GPU);
    hlo bisect likewise for every stage."""
    from click.testing import CliRunner

    from hlo_cli.cli import main
    case = GPU / "cases_cublas" / "mlp_step"
    for mode in ("auto", "gpu", "cpu"):
        r = CliRunner().invoke(main, ["diff", f"{case}.pre.hlo", f"{case}.post.hlo", "--inputs", f"{case}.inputs.npz",
                                      "--numerics", mode, "--format", "json", "--no-progress"])
        assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["diff", f"{case}.pre.hlo", f"{case}.post.hlo", "--random-inputs", "--numerics", "x"])
    assert r.exit_code == 2
    r = CliRunner().invoke(main, ["bisect", f"{case}.pre.hlo", f"{case}.post.hlo", "--inputs", f"{case}.inputs.npz",
                                  "--numerics", "gpu", "--no-diff", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["status"] == "agree"


@pytest.mark.parametrize("precision, algorithm, want", [
    (("DEFAULT", "DEFAULT"), "ALG_UNSET", "tf32"), (("HIGH", "HIGH"), "ALG_UNSET", "tf32"),
    (("HIGHEST", "DEFAULT"), "ALG_UNSET", "f32"), (("DEFAULT", "DEFAULT"), "ALG_DOT_BF16_BF16_F32", "bf16"),
    (("DEFAULT", "DEFAULT"), "ALG_DOT_F32_F32_F32", "f32")])
def test_gemm_products_under_gpu_numerics(precision, algorithm, want):
    """A cuBLAS GEMM's precision_config under GPU numerics: TF32 products (operands rounded to
    nearest even, as cuBLAS does: measured) for DEFAULT/HIGH, f32 for HIGHEST, explicit algorithms."""
    rng = np.random.default_rng(19)
    a, b = _rand(rng, (6, 200)), _rand(rng, (200, 5))
    text = _text("__cublas$lt$matmul", ["f32[6,200]", "f32[200,5]"], "(f32[6,5], s8[8])",
                 _gemm_cfg(precision=precision, algorithm=algorithm))
    got = _run(text, [a, b], "gpu")[0]
    parts = {"tf32": lambda x: numerics.round_tf32(x, "rne"), "f32": lambda x: x,
             "bf16": lambda x: x.astype(ml_dtypes.bfloat16).astype(np.float32)}[want]
    np.testing.assert_allclose(got, parts(a).astype(np.float64) @ parts(b), rtol=1e-6, atol=1e-6)
    assert np.abs(_run(text, [a, b], "cpu")[0] - a.astype(np.float64) @ b).max() < 1e-5


def test_dots_in_fusions_and_loops_follow_gpu_numerics():
    """A dot inside a fusion (a __triton_gemm one is an ordinary dot) and a while loop's body takes TF32
    products under GPU numerics on the compiled path as on the generic loop."""
    text = """HloModule m
fused_dot {
  p0 = f32[8,64] parameter(0)
  p1 = f32[64,8] parameter(1)
  ROOT d = f32[8,8] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
cond {
  s = (s32[], f32[8,64], f32[64,8], f32[8,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(2)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[8,64], f32[64,8], f32[8,8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  a = f32[8,64] get-tuple-element(s), index=1
  b = f32[64,8] get-tuple-element(s), index=2
  d = f32[8,8] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[8,64], f32[64,8], f32[8,8]) tuple(j, a, b, d)
}
ENTRY e {
  a = f32[8,64] parameter(0)
  b = f32[64,8] parameter(1)
  f = f32[8,8] fusion(a, b), kind=kCustom, calls=fused_dot, backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}
  z = s32[] constant(0)
  t = (s32[], f32[8,64], f32[64,8], f32[8,8]) tuple(z, a, b, f)
  w = (s32[], f32[8,64], f32[64,8], f32[8,8]) while(t), condition=cond, body=body
  l = f32[8,8] get-tuple-element(w), index=3
  ROOT r = (f32[8,8], f32[8,8]) tuple(f, l)
}
"""
    rng = np.random.default_rng(21)
    a, b = _rand(rng, (8, 64)), _rand(rng, (64, 8))
    module = parse(text)
    assert numerics.resolve(module) == "gpu"                    # the __triton_gemm fusion says so
    want = numerics.round_tf32(a).astype(np.float64) @ numerics.round_tf32(b)
    for compiled in (True, False):
        out = run_module(module, [a, b], compiled=compiled)
        for v in out:
            np.testing.assert_allclose(v, want, rtol=1e-6, atol=1e-6)
    cpu = run_module(module, [a, b], RunOptions(numerics="cpu"))
    assert np.abs(cpu[1] - want).max() > 1e-4


def test_output_aliasing_must_name_c():
    a = np.ones((2, 3), np.float32)
    b = np.ones((3, 2), np.float32)
    c = np.ones((2, 2), np.float32)
    ok = _text("__cublas$lt$matmul", ["f32[2,3]", "f32[3,2]", "f32[2,2]"], "(f32[2,2], s8[4])", _gemm_cfg(beta=1.0),
               ", output_to_operand_aliasing={{0}: (2, {})}")
    assert np.array_equal(_run(ok, [a, b, c])[0], np.full((2, 2), 4.0, np.float32))
    bad = ok.replace("(2, {})", "(0, {})")
    with pytest.raises(HloEvalError, match=r"alias operand 0 \(a\); a GEMM's output aliases only its matrix bias C"):
        _run(bad, [a, b, c])


@settings(max_examples=30, deadline=None)
@given(st.integers(-6, 6), st.sampled_from(["cpu", "gpu"]), st.integers(0, 2 ** 31 - 1))
def test_power_of_two_alpha_scales_exactly(k, mode, seed):
    """alpha = 2^k scales the product exactly (no rounding in between): GEMM(alpha) = alpha * GEMM(1)."""
    rng = np.random.default_rng(seed)
    a, b = _rand(rng, (3, 17)), _rand(rng, (17, 4))
    ops, res = ["f32[3,17]", "f32[17,4]"], "(f32[3,4], s8[8])"
    one = _run(_text("__cublas$lt$matmul", ops, res, _gemm_cfg()), [a, b], mode)[0]
    scaled = _run(_text("__cublas$lt$matmul", ops, res, _gemm_cfg(alpha=2.0 ** k)), [a, b], mode)[0]
    assert np.array_equal(scaled, one * np.float32(2.0 ** k))


@pytest.mark.slow
def test_batched_transposed_int8_and_complex_gemms_against_xla():
    """Batch dims not leading with both operands transposed, an s8 GEMM, a complex GEMM with complex
    alpha and beta*C: against XLA CPU (through JAX) computing the plain dot_general at HIGHEST."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    rng = np.random.default_rng(23)
    cpu = jax.devices("cpu")[0]
    a, b = _rand(rng, (8, 2, 4)), _rand(rng, (3, 2, 8))
    a[0, 1, 2] = np.nan
    b[1, 0, 5] = np.inf
    got = _run(_text("__cublas$lt$matmul", ["f32[8,2,4]", "f32[3,2,8]"], "(f32[2,4,3], s8[0])",
                     _gemm_cfg(lc=(0,), rc=(2,), lb=(1,), rb=(1,), alpha=0.5, precision=("HIGHEST", "HIGHEST"))),
               [a, b])[0]
    with jax.default_device(cpu):
        want = jax.jit(lambda a, b: 0.5 * lax.dot_general(a, b, (((0,), (2,)), ((1,), (1,))),
                                                          precision=lax.Precision.HIGHEST))(a, b)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-5, equal_nan=True)
    s, t = rng.integers(-128, 128, (5, 33)).astype(np.int8), rng.integers(-128, 128, (33, 7)).astype(np.int8)
    got = _run(_text("__cublas$lt$matmul", ["s8[5,33]", "s8[33,7]"], "(s32[5,7], s8[0])", _gemm_cfg()), [s, t])[0]
    with jax.default_device(cpu):
        want = jax.jit(lambda s, t: lax.dot(s, t, preferred_element_type=jnp.int32))(s, t)
    assert np.array_equal(got, np.asarray(want))
    x = (_rand(rng, (3, 4)) + 1j * _rand(rng, (3, 4))).astype(np.complex64)
    y = (_rand(rng, (4, 2)) + 1j * _rand(rng, (4, 2))).astype(np.complex64)
    c = (_rand(rng, (3, 2)) + 1j * _rand(rng, (3, 2))).astype(np.complex64)
    got = _run(_text("__cublas$gemm", ["c64[3,4]", "c64[4,2]", "c64[3,2]"], "(c64[3,2], s8[0])",
                     _gemm_cfg(alpha=0.5, alpha_imag=-2.0, beta=1.5)), [x, y, c])[0]
    with jax.default_device(cpu):
        want = jax.jit(lambda x, y, c: jnp.complex64(0.5 - 2j) * jnp.dot(x, y, precision="highest")
                       + jnp.complex64(1.5) * c)(x, y, c)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-5)
