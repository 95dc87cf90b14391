#!/usr/bin/env python
"""Generate real HLO sample modules with JAX (XLA CPU) into samples/jax/.

For every case this writes

  <case>.hlo            HLO text before optimization (``Lowered.as_text("hlo")``)
  <case>.opt.hlo        HLO text after optimization by XLA CPU (``Compiled.as_text()``)
  <case>.inputs.npz     inputs, keys arg0, arg1, ... in entry-parameter order
                        (flattened pytree leaves of the positional arguments)
  <case>.arg<i>.npy     the same inputs one file each (for single-file CLI usage)
  <case>.expected.npz   XLA CPU's outputs, keys out0, out1, ... = leaves of the
                        result pytree, depth-first (``jax.tree_util`` order)

plus ``MANIFEST.json`` describing every case (files, parameter and output
shapes/dtypes, pytree paths, jax version).

Arrays of ml_dtypes types (bfloat16, float8_*) are saved as they are; NumPy
loads them back as raw ``|V2`` / ``|V1`` records -- use the ``dtype`` recorded
in the manifest to reinterpret them.

Everything is deterministic (fixed seeds).  Each text is checked with XLA's own
parser and each compiled executable is run twice to check that the outputs are
bit-identical.  Cases that need 64-bit types (``mixed_dtypes``) are generated in
a subprocess with ``jax_enable_x64`` turned on.

Usage (run from the repository root so that the file names recorded in the
after-optimization stack-frame tables are relative):

    python scripts/gen_samples.py [--out samples/jax] [--only CASE ...] [--list]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

# x64 must be configured before any tracing happens.
_X64 = "--_x64-child" in sys.argv

import jax  # noqa: E402

if _X64:
    jax.config.update("jax_enable_x64", True)

# Record source locations relative to the repository root (keeps the
# after-optimization texts independent of where the checkout lives).
_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
jax.config.update("jax_hlo_source_file_canonicalization_regex", "^" + re.escape(_REPO_ROOT + os.sep))

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jaxlib import _hlo  # noqa: E402

import jaxlib  # noqa: E402
import ml_dtypes  # noqa: E402

f32 = np.float32

# --------------------------------------------------------------------------
# case registry
# --------------------------------------------------------------------------

CASES: dict = {}


def case(name, x64=False, description=""):
    def deco(builder):
        CASES[name] = dict(builder=builder, x64=x64, description=description or (builder.__doc__ or "").strip())
        return builder

    return deco


def _rng(seed):
    return np.random.default_rng(seed)


def _normal(rng, shape, scale=1.0, dtype=np.float32):
    return (rng.standard_normal(shape) * scale).astype(dtype)


# --------------------------------------------------------------------------
# cases: each builder returns (fn, args) where args is a tuple of pytrees of
# numpy arrays; fn(*args) is jitted.
# --------------------------------------------------------------------------


@case("mlp_train_step", description="2-layer MLP, softmax cross-entropy, jax.value_and_grad, SGD update")
def _mlp_train_step():
    rng = _rng(0)
    params = {
        "w1": _normal(rng, (8, 32), 0.3),
        "b1": _normal(rng, (32,), 0.1),
        "w2": _normal(rng, (32, 4), 0.3),
        "b2": _normal(rng, (4,), 0.1),
    }
    x = _normal(rng, (16, 8))
    labels = rng.integers(0, 4, size=(16,)).astype(np.int32)

    def train_step(params, x, labels):
        def loss_fn(p):
            h = jax.nn.relu(x @ p["w1"] + p["b1"])
            logits = h @ p["w2"] + p["b2"]
            logp = jax.nn.log_softmax(logits)
            onehot = jax.nn.one_hot(labels, 4, dtype=logp.dtype)
            return -jnp.mean(jnp.sum(onehot * logp, axis=-1))

        loss, grads = jax.value_and_grad(loss_fn)(params)
        new_params = jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)
        return loss, new_params

    return train_step, (params, x, labels)


@case("cnn", description="conv net forward (NHWC/HWIO, SAME, strides, max-pool reduce_window, relu, mean) + grad wrt conv weights")
def _cnn():
    rng = _rng(1)
    params = {
        "c1": _normal(rng, (3, 3, 3, 8), 0.3),
        "b1": _normal(rng, (8,), 0.1),
        "c2": _normal(rng, (3, 3, 8, 8), 0.2),
        "fc": _normal(rng, (8, 5), 0.3),
    }
    x = _normal(rng, (2, 8, 8, 3))
    dn = ("NHWC", "HWIO", "NHWC")

    def forward(c1, c2, b1, fc, x):
        y = lax.conv_general_dilated(x, c1, window_strides=(1, 1), padding="SAME", dimension_numbers=dn)
        y = jax.nn.relu(y + b1)
        y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")  # max-pool 2x2
        y = lax.conv_general_dilated(y, c2, window_strides=(2, 2), padding="SAME", dimension_numbers=dn)
        y = jax.nn.relu(y)
        return jnp.mean(y, axis=(1, 2)) @ fc  # global average pool + dense

    def cnn(params, x):
        def loss_fn(c1, c2):
            out = forward(c1, c2, params["b1"], params["fc"], x)
            return jnp.mean(out**2), out

        (loss, out), (g1, g2) = jax.value_and_grad(loss_fn, argnums=(0, 1), has_aux=True)(params["c1"], params["c2"])
        return out, loss, g1, g2

    return cnn, (params, x)


@case("attention", description="pre-LN multi-head causal self-attention block (layernorm, softmax, -inf mask, residual)")
def _attention():
    rng = _rng(2)
    B, T, D, H = 2, 8, 32, 4
    params = {
        "ln_g": (1.0 + _normal(rng, (D,), 0.1)).astype(f32),
        "ln_b": _normal(rng, (D,), 0.1),
        "wq": _normal(rng, (D, D), D**-0.5),
        "wk": _normal(rng, (D, D), D**-0.5),
        "wv": _normal(rng, (D, D), D**-0.5),
        "wo": _normal(rng, (D, D), D**-0.5),
    }
    x = _normal(rng, (B, T, D))

    def layernorm(x, g, b, eps=1e-5):
        mu = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
        return (x - mu) * lax.rsqrt(var + eps) * g + b

    def attention(p, x):
        b, t, d = x.shape
        dh = d // H
        h = layernorm(x, p["ln_g"], p["ln_b"])
        q = (h @ p["wq"]).reshape(b, t, H, dh)
        k = (h @ p["wk"]).reshape(b, t, H, dh)
        v = (h @ p["wv"]).reshape(b, t, H, dh)
        s = jnp.einsum("bthd,bshd->bhts", q, k) / np.sqrt(dh).astype(f32)
        mask = jnp.tril(jnp.ones((t, t), dtype=bool))
        s = jnp.where(mask, s, -jnp.inf)
        a = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhts,bshd->bthd", a, v).reshape(b, t, d)
        return x + o @ p["wo"], a

    return attention, (params, x)


@case("scan_loop", description="lax.scan over 16 steps of an RNN cell (-> while loop)")
def _scan_loop():
    rng = _rng(3)
    params = {
        "wx": _normal(rng, (8, 16), 0.3),
        "wh": _normal(rng, (16, 16), 0.25),
        "b": _normal(rng, (16,), 0.1),
    }
    h0 = _normal(rng, (2, 16), 0.5)
    xs = _normal(rng, (16, 2, 8))

    def scan_loop(p, h0, xs):
        def cell(h, x):
            h = jnp.tanh(x @ p["wx"] + h @ p["wh"] + p["b"])
            return h, jnp.sum(h, axis=-1)

        h_final, ys = lax.scan(cell, h0, xs)
        return h_final, ys

    return scan_loop, (params, h0, xs)


@case("fori_loop", description="lax.fori_loop with static and dynamic trip counts, lax.while_loop with data-dependent condition")
def _fori_loop():
    rng = _rng(4)
    x = _normal(rng, (4, 4))
    n = np.int32(7)
    s = np.float32(100.0)

    def fori(x, n, s):
        def body(i, carry):
            y, acc = carry
            y = jnp.sin(y) * 1.5 + i.astype(jnp.float32) * 0.01
            return y, acc + y

        static = lax.fori_loop(0, 10, body, (x, jnp.zeros_like(x)))
        dynamic = lax.fori_loop(0, n, body, (x, jnp.zeros_like(x)))

        def cond(c):
            return c[0] > 1.0

        def wbody(c):
            return c[0] * 0.7, c[1] + 1

        w_val, w_count = lax.while_loop(cond, wbody, (s, jnp.int32(0)))
        return static, dynamic, w_val, w_count

    return fori, (x, n, s)


@case("cond_switch", description="lax.cond on a data-dependent predicate, lax.switch (incl. out-of-range index clamping)")
def _cond_switch():
    rng = _rng(5)
    x = _normal(rng, (3, 4))
    pred_val = np.float32(-0.5)
    idx = np.int32(1)

    def cond_switch(x, pred_val, idx):
        a = lax.cond(pred_val > 0, lambda v: jnp.sin(v), lambda v: jnp.cos(v) * 2.0, x)
        b = lax.cond(pred_val < 0, lambda v: (v + 1.0, jnp.sum(v)), lambda v: (v * v, jnp.max(v)), x)
        branches = [lambda v: v + 1.0, lambda v: v * v, lambda v: -v, lambda v: jnp.exp(v)]
        c = lax.switch(idx, branches, x)
        d = lax.switch(idx + 5, branches, x)  # out of range -> clamped to the last branch
        e = lax.switch(idx - 3, branches, x)  # negative -> clamped to branch 0
        return a, b, c, d, e

    return cond_switch, (x, pred_val, idx)


@case("sort_gather_scatter", description="sort/argsort (NaN, -0.0, ties), top_k, gather (fancy indexing, take fill mode), scatter add/set/max with duplicates and out-of-bounds, dynamic_slice/dynamic_update_slice with clamping")
def _sort_gather_scatter():
    rng = _rng(6)
    xs = _normal(rng, (16,))
    xs[3] = np.nan
    xs[5] = -0.0
    xs[6] = 0.0
    xs[9] = xs[2]  # tie (argsort must be stable)
    xs[12] = -np.inf
    m = _normal(rng, (6, 8))
    idx = np.array([0, 5, -1, 2, 2], np.int32)
    idx_oob = np.array([1, 7, -7, 3], np.int32)
    upd = _normal(rng, (5,))
    start = np.int32(4)

    def sgs(xs, m, idx, idx_oob, upd, start):
        out = {}
        out["sort"] = jnp.sort(xs)
        out["argsort"] = jnp.argsort(xs)
        out["argsort_desc"] = jnp.argsort(xs, descending=True)
        out["sort_axis0"] = jnp.sort(m, axis=0)
        out["topk_values"], out["topk_indices"] = lax.top_k(m, 3)
        out["gather_rows"] = m[idx]
        out["gather_2d"] = m[idx[:3, None], idx[None, 1:4] + 2]
        out["take_along"] = jnp.take_along_axis(m, out["topk_indices"], axis=1)
        out["take_fill"] = jnp.take(m, idx_oob, axis=0, mode="fill")
        out["take_clip"] = jnp.take(m, idx_oob, axis=0, mode="clip")
        out["scatter_add"] = jnp.zeros((8,), jnp.float32).at[idx].add(upd)  # duplicate index 2
        out["scatter_add_oob"] = jnp.zeros((8,), jnp.float32).at[idx_oob].add(upd[:4])  # 7 in range, -7 -> 1
        out["scatter_set"] = m.at[1, jnp.array([0, 3, 7])].set(upd[:3])
        out["scatter_max"] = m.at[idx[:2], 2].max(upd[:2] * 10.0)
        out["scatter_set_drop"] = jnp.zeros((4,), jnp.float32).at[idx_oob + 3].set(1.0)  # 10 dropped
        out["dynamic_slice"] = lax.dynamic_slice(m, (start, jnp.int32(2)), (3, 4))  # clamped to row 3
        out["dynamic_update_slice"] = lax.dynamic_update_slice(m, jnp.ones((2, 3), jnp.float32) * upd[0], (start + 1, start + 3))
        return out

    return sgs, (xs, m, idx, idx_oob, upd, start)


@case("mixed_dtypes", x64=True, description="bf16/f16/f8/int8/uint8/int32/int64/bool/complex64/float64 ops, converts, bitwise ops, shifts (incl. >= bit width), integer div/rem with negatives and by zero (x64 enabled)")
def _mixed_dtypes():
    rng = _rng(7)
    bf = _normal(rng, (4, 4)).astype(ml_dtypes.bfloat16)
    h = np.array([[0.5, -1.25, 3.0, 12.0], [-0.0, 65504.0, 1e-5, -7.5]], np.float16)
    i8 = np.array([-128, -7, -1, 0, 1, 7, 100, 127], np.int8)
    u8 = np.array([0, 1, 7, 100, 128, 200, 254, 255], np.uint8)
    i32 = np.array([-2147483648, -7, -6, -1, 0, 5, 7, 2147483647], np.int32)
    div = np.array([-1, 2, -4, 3, 0, -2, 0, 3], np.int32)
    shift = np.array([0, 1, 3, 31, 32, 33, 7, 40], np.int32)
    b = np.array([True, False, True, True, False, False, True, False])
    c = (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64)
    d = np.array([np.pi, -1e-300, 1e300, 0.1], np.float64)
    f8 = np.array([0.5, -1.5, 448.0, 0.01], ml_dtypes.float8_e4m3fn)

    def mixed(bf, h, i8, u8, i32, div, shift, b, c, d, f8):
        o = {}
        # bf16 / f16 / f8
        o["bf_arith"] = bf * bf + bf
        o["bf_dot_f32"] = lax.dot(bf, bf, preferred_element_type=jnp.float32)
        o["bf_to_f32"] = bf.astype(jnp.float32)
        o["f32_to_bf"] = (bf.astype(jnp.float32) / 3.0).astype(jnp.bfloat16)
        o["h_exp"] = jnp.exp(h)  # overflows to inf
        o["h_mul"] = h * h
        o["h_to_bf"] = h.astype(jnp.bfloat16)
        o["f8_to_f32"] = f8.astype(jnp.float32)
        o["f32_to_f8e4m3fn"] = (bf.astype(jnp.float32) * 3.3).astype(jnp.float8_e4m3fn)
        o["f32_to_f8e5m2"] = (bf.astype(jnp.float32) * 3.3).astype(jnp.float8_e5m2)
        o["bf_bits"] = lax.bitcast_convert_type(bf, jnp.uint16)
        # small ints: wrap-around
        o["i8_add_wrap"] = i8 + i8
        o["i8_abs"] = jnp.abs(i8)  # abs(-128) == -128
        o["i8_neg"] = -i8
        o["u8_mul_wrap"] = u8 * u8
        o["u8_sub_wrap"] = u8 - jnp.uint8(100)
        o["u8_not"] = ~u8
        o["i8_to_u8"] = i8.astype(jnp.uint8)
        o["u8_to_i8"] = u8.astype(jnp.int8)
        o["i32_to_i8"] = i32.astype(jnp.int8)
        o["i8_to_f32"] = i8.astype(jnp.float32)
        # int32 bitwise / shifts
        o["and"] = i32 & div
        o["or"] = i32 | div
        o["xor"] = i32 ^ div
        o["not"] = ~i32
        o["shl"] = lax.shift_left(i32, shift)
        o["shr_arith"] = lax.shift_right_arithmetic(i32, shift)
        o["shr_logical"] = lax.shift_right_logical(i32, shift)
        o["u8_shl"] = lax.shift_left(u8, shift.astype(jnp.uint8))
        o["u8_shr"] = lax.shift_right_logical(u8, shift.astype(jnp.uint8))
        o["popcnt"] = lax.population_count(i32)
        o["clz"] = lax.clz(i32)
        o["u8_clz"] = lax.clz(u8)
        # integer division / remainder
        o["lax_div"] = lax.div(i32, div)  # truncating; x/0 == -1, INT_MIN/-1 == INT_MIN
        o["lax_rem"] = lax.rem(i32, div)  # sign of dividend; x%0 == x
        o["floor_div"] = jnp.floor_divide(i32, jnp.where(div == 0, 3, div))
        o["floor_mod"] = jnp.remainder(i32, jnp.where(div == 0, 3, div))
        o["i8_div"] = lax.div(i8, jnp.int8(-3))
        o["i8_rem"] = lax.rem(i8, jnp.int8(-3))
        o["u8_div"] = u8 // jnp.uint8(7)
        o["u8_rem"] = u8 % jnp.uint8(7)
        # float <-> int
        o["f32_to_i32"] = (bf.astype(jnp.float32) * 10.0).astype(jnp.int32)  # truncation toward zero
        o["i32_to_f32"] = i32.astype(jnp.float32)  # rounding of large ints
        o["i32_bitcast_f32"] = lax.bitcast_convert_type(i32, jnp.float32)
        o["f32_bitcast_u32"] = lax.bitcast_convert_type(bf.astype(jnp.float32), jnp.uint32)
        # bool
        o["b_and"] = b & (i32 > 0)
        o["b_xor"] = b ^ (div < 0)
        o["b_not"] = ~b
        o["b_to_i32"] = b.astype(jnp.int32) + b.astype(jnp.int32)
        o["i32_to_b"] = i32.astype(jnp.bool_)
        o["select"] = jnp.where(b, i32, div)
        # 64-bit
        o["i64_mul"] = i32.astype(jnp.int64) * jnp.int64(3_000_000_000)
        o["u64_shr"] = lax.shift_right_logical(i32.astype(jnp.uint64), jnp.uint64(3))
        o["f64_ops"] = jnp.sqrt(jnp.abs(d)) + d * d
        o["f64_log"] = jnp.log(jnp.abs(d))
        o["f64_to_f32"] = d.astype(jnp.float32)  # 1e300 -> inf, -1e-300 -> -0
        o["f64_to_bf"] = d.astype(jnp.bfloat16)
        # complex
        o["c_mul"] = c * c
        o["c_div"] = c / (c + jnp.complex64(1 + 2j))
        o["c_abs"] = jnp.abs(c)
        o["c_conj"] = jnp.conj(c)
        o["c_exp"] = jnp.exp(c)
        o["c_real_imag"] = jnp.real(c) - jnp.imag(c)
        o["c_make128"] = lax.complex(d, d * 2)
        o["c_to_c128"] = c.astype(jnp.complex128)
        o["c_dot"] = jnp.dot(c, c)
        return o

    return mixed, (bf, h, i8, u8, i32, div, shift, b, c, d, f8)


@case("fft_linalg", description="fft/ifft/rfft/irfft 1-D and 2-D, cholesky, solve_triangular, qr, eigh, svd (LAPACK custom calls on CPU)")
def _fft_linalg():
    rng = _rng(8)
    c = (rng.standard_normal(16) + 1j * rng.standard_normal(16)).astype(np.complex64)
    r = _normal(rng, (16,))
    c2 = (rng.standard_normal((4, 8)) + 1j * rng.standard_normal((4, 8))).astype(np.complex64)
    r2 = _normal(rng, (4, 8))
    a = _normal(rng, (4, 4))
    b = _normal(rng, (4, 2))

    def fft_linalg(c, r, c2, r2, a, b):
        o = {}
        o["fft"] = jnp.fft.fft(c)
        o["ifft"] = jnp.fft.ifft(c)
        o["rfft"] = jnp.fft.rfft(r)
        o["irfft"] = jnp.fft.irfft(jnp.fft.rfft(r) * 0.5, n=16)
        o["fft2"] = jnp.fft.fft2(c2)
        o["ifft2"] = jnp.fft.ifft2(c2)
        o["rfft2"] = jnp.fft.rfft2(r2)
        o["irfft2"] = jnp.fft.irfft2(c2[:, :5], s=(4, 8))
        spd = a @ a.T + 4.0 * jnp.eye(4, dtype=a.dtype)
        L = jnp.linalg.cholesky(spd)
        o["cholesky"] = L
        o["solve_triangular"] = jax.scipy.linalg.solve_triangular(L, b, lower=True)
        o["solve_triangular_T"] = jax.scipy.linalg.solve_triangular(L, b, lower=True, trans=1)
        q, rr = jnp.linalg.qr(a)
        o["qr_q"], o["qr_r"] = q, rr
        o["qr_reconstruct"] = q @ rr
        w, v = jnp.linalg.eigh(spd)
        o["eigh_w"], o["eigh_v"] = w, v
        o["eigh_reconstruct"] = (v * w) @ v.T
        u, s, vt = jnp.linalg.svd(a)
        o["svd_u"], o["svd_s"], o["svd_vt"] = u, s, vt
        o["svd_reconstruct"] = (u * s) @ vt
        o["svdvals"] = jnp.linalg.svd(b, compute_uv=False)
        return o

    return fft_linalg, (c, r, c2, r2, a, b)


@case("rng", description="jax.random normal/uniform/bits/split/fold_in with threefry2x32 (default), rbg and unsafe_rbg (rng-bit-generator)")
def _rng_case():
    seed = np.uint32(42)

    def rng(seed):
        o = {}
        # Every random op expands to hundreds of instructions after
        # optimization, so keep the list short.
        k = jax.random.key(seed)  # threefry2x32 (default)
        k1, k2 = jax.random.split(k)
        o["threefry2x32"] = {
            "key_data": jax.random.key_data(k),
            "split_data": jax.random.key_data(jax.random.split(k, 3)),
            "normal": jax.random.normal(k1, (4, 8)),
            "uniform": jax.random.uniform(k2, (16,), minval=-1.0, maxval=2.0),
            "bits32": jax.random.bits(jax.random.fold_in(k, 7), (8,), jnp.uint32),
        }
        for impl in ("rbg", "unsafe_rbg"):  # rng-bit-generator
            k = jax.random.key(seed, impl=impl)
            o[impl] = {
                "key_data": jax.random.key_data(k),
                "normal": jax.random.normal(k, (4, 8)),
                "bits8": jax.random.bits(k, (8,), jnp.uint8),
            }
        return o

    return rng, (seed,)


@case("reductions", description="sum/max/min/prod/argmax/argmin/any/all/cumsum/cumprod/logsumexp/mean/var over various axes, NaN propagation, reduce_precision")
def _reductions():
    rng = _rng(9)
    x = _normal(rng, (3, 4, 5))
    xi = rng.integers(-50, 50, size=(3, 4)).astype(np.int32)
    xb = rng.random((3, 4)) < 0.5
    xn = np.array([1.0, np.nan, 3.0, -np.inf, 3.0, 2.0], np.float32)
    xt = np.array([2.0, 5.0, 5.0, -1.0, 5.0, 0.0], np.float32)  # ties for argmax/argmin

    def reductions(x, xi, xb, xn, xt):
        o = {}
        o["sum_0"] = jnp.sum(x, axis=0)
        o["sum_12"] = jnp.sum(x, axis=(1, 2))
        o["sum_all"] = jnp.sum(x)
        o["max_1"] = jnp.max(x, axis=1)
        o["min_02"] = jnp.min(x, axis=(0, 2))
        o["prod_2"] = jnp.prod(x, axis=2)
        o["mean_1"] = jnp.mean(x, axis=1)
        o["var_2"] = jnp.var(x, axis=2)
        o["argmax_1"] = jnp.argmax(x, axis=1)
        o["argmin_last"] = jnp.argmin(x, axis=-1)
        o["argmax_ties"] = jnp.argmax(xt)
        o["argmin_ties"] = jnp.argmin(xt)
        o["argmax_nan"] = jnp.argmax(xn)
        o["argmin_nan"] = jnp.argmin(xn)
        o["max_nan"] = jnp.max(xn)
        o["min_nan"] = jnp.min(xn)
        o["any_1"] = jnp.any(xb, axis=1)
        o["all_0"] = jnp.all(xb, axis=0)
        o["any_all"] = jnp.any(xb)
        o["cumsum_1"] = jnp.cumsum(x, axis=1)
        o["cumprod_2"] = jnp.cumprod(x, axis=2)
        o["cumsum_rev"] = lax.cumsum(x, axis=0, reverse=True)
        o["cummax"] = lax.cummax(x, axis=2)
        o["logsumexp"] = jax.nn.logsumexp(x, axis=-1)
        o["logsumexp_all"] = jax.nn.logsumexp(x)
        o["isum_1"] = jnp.sum(xi, axis=1)
        o["imax"] = jnp.max(xi)
        o["imin_0"] = jnp.min(xi, axis=0)
        o["iprod"] = jnp.prod(xi[:, :2], axis=0)
        o["reduce_precision_e5m10"] = lax.reduce_precision(x * 1000.0, exponent_bits=5, mantissa_bits=10)
        o["reduce_precision_e8m7"] = lax.reduce_precision(x, exponent_bits=8, mantissa_bits=7)
        o["reduce_precision_e4m3"] = lax.reduce_precision(x * 100.0, exponent_bits=4, mantissa_bits=3)
        return o

    return reductions, (x, xi, xb, xn, xt)


# --------------------------------------------------------------------------
# generation machinery
# --------------------------------------------------------------------------


def _dtype_name(dt) -> str:
    return np.dtype(dt).name  # 'bfloat16', 'float8_e4m3fn', 'float32', 'bool', ...


def _savable(a: np.ndarray) -> np.ndarray:
    """ml_dtypes arrays are stored as raw void records of the same item size.

    np.save would store most of them as '<V2'/'<V1' anyway, but float8_e5m2
    claims the descriptor '<f1', which np.load cannot read back."""
    try:
        builtin = np.dtype(a.dtype.str) == a.dtype
    except TypeError:
        builtin = False
    return a if builtin else a.view(f"V{a.dtype.itemsize}")


def _same_bits(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _shape_of_hlo(s) -> str:
    return str(s)


def generate_case(name: str, out_dir: str) -> dict:
    spec = CASES[name]
    fn, args = spec["builder"]()
    jitted = jax.jit(fn, keep_unused=True)

    leaves_with_path, _ = jax.tree_util.tree_flatten_with_path(args)
    in_leaves = [np.asarray(l) for _, l in leaves_with_path]
    in_paths = [jax.tree_util.keystr(p) for p, _ in leaves_with_path]

    lowered = jitted.lower(*args)
    text = lowered.as_text("hlo")
    if jitted.lower(*args).as_text("hlo") != text:
        raise RuntimeError(f"{name}: lowering is not deterministic")
    compiled = lowered.compile()
    opt_text = compiled.as_text()

    # XLA's parser must accept both texts.
    mod = _hlo.hlo_module_from_text(text)
    _hlo.hlo_module_from_text(opt_text)
    pshape = _hlo.XlaComputation(mod.as_serialized_hlo_module_proto()).program_shape()
    params = pshape.parameter_shapes()
    if len(params) != len(in_leaves):
        raise RuntimeError(f"{name}: {len(params)} entry parameters but {len(in_leaves)} input leaves")
    for i, (s, a) in enumerate(zip(params, in_leaves)):
        if tuple(s.dimensions()) != a.shape or np.dtype(s.numpy_dtype()) != a.dtype:
            raise RuntimeError(f"{name}: parameter {i} is {s} but input is {a.dtype}{a.shape}")

    # Run twice: outputs must be bit-identical.
    out1 = compiled(*args)
    out2 = compiled(*args)
    out_with_path, _ = jax.tree_util.tree_flatten_with_path(out1)
    out_leaves = [np.asarray(l) for _, l in out_with_path]
    out_paths = [jax.tree_util.keystr(p) for p, _ in out_with_path]
    out2_leaves = [np.asarray(l) for l in jax.tree_util.tree_leaves(out2)]
    for i, (a, b) in enumerate(zip(out_leaves, out2_leaves, strict=True)):
        if not _same_bits(a, b):
            raise RuntimeError(f"{name}: output {i} differs between two runs")
    res = pshape.result_shape()
    res_leaves = res.tuple_shapes() if res.is_tuple() else [res]
    if len(res_leaves) != len(out_leaves):
        raise RuntimeError(f"{name}: {len(res_leaves)} result leaves in HLO but {len(out_leaves)} outputs")
    for i, (s, a) in enumerate(zip(res_leaves, out_leaves)):
        if tuple(s.dimensions()) != a.shape or np.dtype(s.numpy_dtype()) != a.dtype:
            raise RuntimeError(f"{name}: result {i} is {s} but output is {a.dtype}{a.shape}")

    files = {
        "hlo": f"{name}.hlo",
        "opt_hlo": f"{name}.opt.hlo",
        "inputs": f"{name}.inputs.npz",
        "expected": f"{name}.expected.npz",
        "args": [f"{name}.arg{i}.npy" for i in range(len(in_leaves))],
    }
    with open(os.path.join(out_dir, files["hlo"]), "w") as f:
        f.write(text)
    with open(os.path.join(out_dir, files["opt_hlo"]), "w") as f:
        f.write(opt_text)
    np.savez(os.path.join(out_dir, files["inputs"]), **{f"arg{i}": _savable(a) for i, a in enumerate(in_leaves)})
    np.savez(os.path.join(out_dir, files["expected"]), **{f"out{i}": _savable(a) for i, a in enumerate(out_leaves)})
    for i, a in enumerate(in_leaves):
        np.save(os.path.join(out_dir, files["args"][i]), _savable(a))

    return {
        "description": spec["description"],
        "x64": bool(spec["x64"]),
        "files": files,
        "parameters": [
            {"key": f"arg{i}", "path": p, "shape": list(a.shape), "dtype": _dtype_name(a.dtype), "hlo_shape": str(s)}
            for i, (p, a, s) in enumerate(zip(in_paths, in_leaves, params))
        ],
        "outputs": [
            {"key": f"out{i}", "path": p, "shape": list(a.shape), "dtype": _dtype_name(a.dtype), "hlo_shape": str(s)}
            for i, (p, a, s) in enumerate(zip(out_paths, out_leaves, res_leaves))
        ],
        "text_bytes": {"hlo": len(text.encode()), "opt_hlo": len(opt_text.encode())},
    }


def _run_child(names, out_dir) -> dict:
    """Generate x64 cases in a subprocess with jax_enable_x64 on."""
    with tempfile.NamedTemporaryFile("r", suffix=".json", delete=False) as tf:
        result_path = tf.name
    try:
        cmd = [sys.executable, sys.argv[0], "--out", out_dir, "--_x64-child", "--_result", result_path, "--only", *names]
        subprocess.run(cmd, check=True)
        with open(result_path) as f:
            return json.load(f)
    finally:
        os.unlink(result_path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "samples", "jax"))
    ap.add_argument("--only", nargs="+", metavar="CASE", help="generate only these cases (MANIFEST entries of the others are kept)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    ap.add_argument("--_x64-child", dest="x64_child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--_result", dest="result", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.list:
        for n, s in CASES.items():
            print(f"{n:22s} {'(x64) ' if s['x64'] else ''}{s['description']}")
        return 0

    names = args.only or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s): {', '.join(unknown)}")
    out_dir = os.path.normpath(args.out)
    os.makedirs(out_dir, exist_ok=True)

    if args.x64_child:
        entries = {}
        for n in names:
            entries[n] = generate_case(n, out_dir)
        with open(args.result, "w") as f:
            json.dump(entries, f)
        return 0

    entries = {}
    x64_names = [n for n in names if CASES[n]["x64"]]
    for n in names:
        if CASES[n]["x64"]:
            continue
        print(f"[gen_samples] {n}", flush=True)
        entries[n] = generate_case(n, out_dir)
    if x64_names:
        print(f"[gen_samples] {', '.join(x64_names)} (x64 subprocess)", flush=True)
        entries.update(_run_child(x64_names, out_dir))

    manifest_path = os.path.join(out_dir, "MANIFEST.json")
    cases = {}
    if args.only and os.path.exists(manifest_path):
        with open(manifest_path) as f:
            cases = json.load(f).get("cases", {})
    cases.update(entries)
    manifest = {
        "generator": "scripts/gen_samples.py",
        "jax_version": jax.__version__,
        "jaxlib_version": jaxlib.__version__,
        "backend": "cpu",
        "notes": [
            "<case>.hlo = Lowered.as_text('hlo') (before optimization); <case>.opt.hlo = Compiled.as_text() (after XLA CPU optimization)",
            "inputs.npz keys arg0.. follow entry parameter order (flattened pytree leaves); expected.npz keys out0.. are the flattened result leaves",
            "ml_dtypes arrays (bfloat16, float8_*) are stored as raw |V2/|V1 records: reinterpret with the dtype given here (e.g. a.view(ml_dtypes.bfloat16))",
        ],
        "cases": {n: cases[n] for n in sorted(cases, key=lambda n: list(CASES).index(n) if n in CASES else len(CASES))},
    }
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
        f.write("\n")

    for n, e in entries.items():
        print(f"  {n:22s} params={len(e['parameters']):3d} outputs={len(e['outputs']):3d} "
              f"hlo={e['text_bytes']['hlo']:8d}B opt={e['text_bytes']['opt_hlo']:8d}B")
    return 0


if __name__ == "__main__":
    sys.exit(main())
