#!/usr/bin/env python
"""Generate HLO samples from producers other than JAX, with XLA CPU's results for them.

Producers and where their samples go:

  tensorflow  samples/tensorflow/   ``tf.function(jit_compile=True)`` (Keras 3 on the TensorFlow
                                    backend for the models); needs ``pip install tensorflow-cpu``
  torch_xla   samples/torch_xla/    PyTorch/XLA on its CPU device (PJRT_DEVICE=CPU); needs torch and
                                    torch_xla of the same release (torch_xla 2.9.0 needs torch 2.9.0
                                    exactly: its extension does not load with another torch); pass
                                    that Python as ``--torch-python`` (the parent needs jax)

Every case runs in a child process of its own with
``XLA_FLAGS=--xla_dump_to=DIR --xla_dump_large_constants --xla_dump_hlo_as_text`` and writes

  <case>.hlo            XLA's dump ``*.before_optimizations.txt`` of the producer's module, as dumped
  <case>.opt.hlo        XLA's dump ``*.cpu_after_optimizations.txt`` of the same module
  <case>.inputs.npz     the values the producer passed: keys arg0, arg1, ... in ENTRY parameter order
  <case>.expected.npz   what the producer's run returned (XLA CPU computed it): keys out0, out1, ...
                        in the order of the leaves of the ENTRY's ROOT tuple

plus ``MANIFEST.json`` describing every case (producer versions, what each parameter and output is).

How inputs and outputs are matched with the module (checked, not assumed):

* TensorFlow: the ENTRY parameters are the concrete function's inputs in order, the explicit
  arguments first, then the resource variables it captures (read just before the call).  The ROOT
  tuple holds the function's results (``tf.nest.flatten`` order), then the new value of every
  variable the function writes, in the order of its parameters (read just after the call).
* PyTorch/XLA: the case's work is traced lazily and its result tensors synced together
  (``torch_xla._XLAC._xla_sync_multi``), which compiles one module; its parameters are the device
  data the graph reads, in the order ``torch_xla._XLAC._get_tensors_xla_device_data_node`` lists
  them (tensors, model parameters, scalars such as the learning rate, the RNG seed), and its ROOT
  tuple holds the synced tensors in order.  ``<case>.graphs.txt``, for cases that ask for it, is what
  ``XLA_SAVE_TENSORS_FILE`` (with ``XLA_SAVE_TENSORS_FMT=hlo``) saved of that step and a second one.

After each case, the before-optimization text is compiled and run by the XLA that JAX ships on the
same inputs (``hlo_cli.tools.xla_reference``); its results must agree with the producer's (the producers'
XLA builds differ from JAX's, so the agreement is recorded in the manifest: bit-identical, or the
largest difference; a bounded dynamic result, which that runner returns whole, is compared on the
elements the producer returned).  This catches a wrong parameter or output order.  XLA cannot read
its own after-optimization text back, so the before-optimization text on the same inputs is the
reference for both files.

Everything is deterministic (fixed seeds).  The test suite never runs this script; it uses the
committed files (tests/test_producer_samples.py).

Usage (from the repository root):

    python scripts/gen_producer_samples.py tensorflow [--only CASE ...] [--list]
    python scripts/gen_producer_samples.py torch_xla --torch-python /work/venv-torch/bin/python
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DUMP_FLAGS = "--xla_dump_large_constants --xla_dump_hlo_as_text"

# ------------------------------------------------------------------------------------------------
# TensorFlow cases (run in the child; each builds a tf.function and its positional arguments)
# ------------------------------------------------------------------------------------------------

TF_CASES: dict = {}


def tf_case(description):
    def deco(builder):
        TF_CASES[builder.__name__] = dict(builder=builder, description=description)
        return builder
    return deco


def _keras_train_step(model, opt, loss_fn):
    """A jit-compiled training step: forward, loss, GradientTape gradients, the optimizer's update
    (the model's and the optimizer's variables become parameters and extra outputs)."""
    import tensorflow as tf
    opt.build(model.trainable_variables)

    @tf.function(jit_compile=True)
    def train_step(x, y):
        with tf.GradientTape() as tape:
            pred = model(x, training=True)
            loss = loss_fn(y, pred)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss, pred
    return train_step


@tf_case("Keras 3: Conv2D + BatchNormalization + ReLU + Dense, sparse softmax cross-entropy, "
         "GradientTape, Adam update of the resource variables")
def keras_train_step():
    import keras
    keras.utils.set_random_seed(0)
    # no bias before the batch norm: its gradient is 0 up to rounding, which Adam would amplify
    model = keras.Sequential([keras.Input((8, 8, 3)),
                              keras.layers.Conv2D(4, 3, padding="same", use_bias=False),
                              keras.layers.BatchNormalization(), keras.layers.ReLU(),
                              keras.layers.Flatten(), keras.layers.Dense(5)])
    train_step = _keras_train_step(model, keras.optimizers.Adam(1e-2),
                                   keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8, 8, 3)).astype(np.float32)
    y = rng.integers(0, 5, (4,)).astype(np.int32)
    return train_step, [x, y]


@tf_case("Keras 3 LSTM(6) over 5 steps (a while loop over TensorLists), Dense head, mean squared "
         "error, gradients through the loop, SGD with momentum")
def lstm_train_step():
    import keras
    import tensorflow as tf
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((5, 3)), keras.layers.LSTM(6), keras.layers.Dense(2)])
    train_step = _keras_train_step(model, keras.optimizers.SGD(0.05, momentum=0.9),
                                   lambda y, pred: tf.reduce_mean(tf.square(pred - y)))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 5, 3)).astype(np.float32)
    y = rng.standard_normal((3, 2)).astype(np.float32)
    return train_step, [x, y]


@tf_case("tf.linalg: qr (full and reduced), cholesky, triangular_solve (lower/upper, adjoint), "
         "matmul with transposes and batch, band_part, diag_part, trace")
def linalg():
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def linalg_fn(a, b, m):
        q, r = tf.linalg.qr(a)
        qf, rf = tf.linalg.qr(a, full_matrices=True)
        spd = tf.linalg.matmul(m, m, transpose_b=True) + 4.0 * tf.eye(4, batch_shape=[2])
        chol = tf.linalg.cholesky(spd)
        x_lo = tf.linalg.triangular_solve(chol, b, lower=True)
        x_up = tf.linalg.triangular_solve(chol, b, lower=True, adjoint=True)
        prod = tf.linalg.matmul(a, a, transpose_a=True)
        band = tf.linalg.band_part(spd, 1, 0)
        return (q, r, qf, rf, chol, x_lo, x_up, prod, band, tf.linalg.diag_part(spd),
                tf.linalg.trace(spd), tf.linalg.matmul(q, r))

    rng = np.random.default_rng(2)
    a = rng.standard_normal((6, 4)).astype(np.float32)
    b = rng.standard_normal((2, 4, 3)).astype(np.float32)
    m = rng.standard_normal((2, 4, 4)).astype(np.float32)
    return linalg_fn, [a, b, m]


@tf_case("tf.linalg: eigh (self_adjoint_eig), svd, logdet, inv, solve, lstsq, expm on small "
         "batched matrices (lu, det and slogdet have no XLA kernel)")
def linalg_decompositions():
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def decompositions(a, s):
        sym = (s + tf.linalg.matrix_transpose(s)) * 0.5
        w, v = tf.linalg.eigh(sym)
        sv, u, vt = tf.linalg.svd(a)
        spd = tf.linalg.matmul(s, s, transpose_b=True)
        return (w, v, sv, u, vt, tf.linalg.logdet(spd), tf.linalg.inv(s), tf.linalg.solve(s, a),
                tf.linalg.lstsq(s[:, :, :3], a[:, :, :2]), tf.linalg.expm(0.1 * s))

    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 4, 3)).astype(np.float32)
    s = rng.standard_normal((2, 4, 4)).astype(np.float32) + 3.0 * np.eye(4, dtype=np.float32)
    return decompositions, [a, s]


@tf_case("tf.gather (axis, batch_dims), gather_nd, tensor_scatter_nd_update/add/max, "
         "unsorted_segment_sum/max, sort, argsort, top_k, cumsum, one_hot, searchsorted")
def gather_scatter_sort():
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def gss(x, idx, nd_idx, upd, seg, keys):
        return (tf.gather(x, idx, axis=1),
                tf.gather(x, tf.reshape(idx[:4], (4, 1)) % 4, axis=1, batch_dims=1),
                tf.gather_nd(x, nd_idx),
                tf.tensor_scatter_nd_update(x, nd_idx[:2], upd[:2]),
                tf.tensor_scatter_nd_add(x, nd_idx, upd),
                tf.tensor_scatter_nd_max(x, nd_idx, upd),
                tf.math.unsorted_segment_sum(x, seg, 3),
                tf.math.unsorted_segment_max(x, seg, 3),
                tf.sort(keys, direction="DESCENDING"),
                tf.argsort(keys, axis=-1, stable=True),
                tf.math.top_k(keys, k=3),
                tf.math.cumsum(x, axis=1, exclusive=True, reverse=True),
                tf.one_hot(idx, 5),
                tf.searchsorted(tf.sort(keys), x[:, :3]))

    rng = np.random.default_rng(4)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    idx = np.array([5, 0, 3, 3, 1], np.int32)
    nd_idx = np.array([[0, 1], [3, 5], [2, 2], [0, 1]], np.int32)   # a duplicate for add/max
    upd = rng.standard_normal((4,)).astype(np.float32)
    seg = np.array([2, 0, 2, 1], np.int32)
    keys = np.round(rng.standard_normal((4, 6)), 1).astype(np.float32)  # ties for stable sorts
    return gss, [x, idx, nd_idx, upd, seg, keys]


@tf_case("tf.random.stateless_*: uniform with the philox and threefry algorithms, normal "
         "(auto-selected, s64 seed), int32 uniform; seeds are inputs (each sampler is ~300 "
         "instructions: kept to four)")
def stateless_rng():
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def rng_fn(seed, seed64):
        return {"uniform_philox": tf.random.stateless_uniform((3, 5), seed, alg="philox"),
                "uniform_threefry": tf.random.stateless_uniform((3, 5), seed, alg="threefry"),
                "normal": tf.random.stateless_normal((2, 7), seed64),
                "uniform_int": tf.random.stateless_uniform((4, 4), seed, minval=-7, maxval=100,
                                                           dtype=tf.int32)}

    seed = np.array([7, 42], np.int32)
    seed64 = np.array([123456789012, -5], np.int64)
    return rng_fn, [seed, seed64]


@tf_case("tf.while_loop with a data-dependent trip count, tf.cond inside and outside a loop, a "
         "TensorArray filled by a loop (tf.scan), nested loops")
def while_loop():
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def loops(x, n, start):
        # Collatz steps of every element until all reach 1 (data-dependent trip count)
        def body(i, v, steps):
            odd = tf.equal(v % 2, 1)
            active = v > 1
            nv = tf.where(active, tf.where(odd, 3 * v + 1, v // 2), v)
            return i + 1, nv, steps + tf.cast(active, tf.int32)
        _, final, steps = tf.while_loop(lambda i, v, s: tf.reduce_any(v > 1), body,
                                        (tf.constant(0), start, tf.zeros_like(start)))
        # a running product through tf.scan (TensorArray) with a cond in the step
        def step(acc, row):
            return tf.cond(tf.reduce_sum(row) > 0.0, lambda: acc * 0.5 + row, lambda: acc - row)
        scanned = tf.scan(step, x, initializer=tf.zeros_like(x[0]))
        # nested loops, the inner trip count from the outer counter
        def outer(i, total):
            _, inner = tf.while_loop(lambda j, t: j < i, lambda j, t: (j + 1, t + tf.cast(j, tf.float32)),
                                     (tf.constant(0), total))
            return i + 1, inner
        _, nested = tf.while_loop(lambda i, t: i < n, outer, (tf.constant(0), tf.constant(0.0)))
        branch = tf.cond(n > 3, lambda: tf.reduce_max(x, axis=0), lambda: tf.reduce_min(x, axis=0))
        return final, steps, scanned, nested, branch

    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 3)).astype(np.float32)
    n = np.array(5, np.int32)
    start = np.array([6, 7, 1, 27, 12], np.int32)
    return loops, [x, n, start]


@tf_case("Keras 3 with the mixed_bfloat16 policy: Dense + LayerNormalization + Dense in bf16 with "
         "f32 variables, softmax cross-entropy, AdamW")
def keras_bf16_train_step():
    import keras
    import tensorflow as tf
    keras.utils.set_random_seed(2)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = keras.Sequential([keras.Input((12,)), keras.layers.Dense(16, activation="gelu"),
                              keras.layers.LayerNormalization(), keras.layers.Dense(3),
                              keras.layers.Activation("linear", dtype="float32")])
    train_step = _keras_train_step(model, keras.optimizers.AdamW(1e-2),
                                   keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(2)
    x = rng.standard_normal((6, 12)).astype(np.float32)
    y = rng.integers(0, 3, (6,)).astype(np.int32)
    return train_step, [x, y]


@tf_case("tf.nn convolutions and pools with their gradients: strided/dilated conv2d, depthwise "
         "conv2d, conv2d_transpose, max_pool (select-and-scatter), avg_pool, bilinear resize")
def conv_pool_grads():
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def conv_pool(x, w, dw):
        with tf.GradientTape(persistent=True) as tape:
            tape.watch([x, w, dw])
            a = tf.nn.conv2d(x, w, strides=2, padding="SAME")
            b = tf.nn.conv2d(x, w, strides=1, padding="VALID", dilations=2)
            c = tf.nn.depthwise_conv2d(x, dw, strides=[1, 1, 1, 1], padding="SAME")
            d = tf.nn.conv2d_transpose(a, w, output_shape=tf.shape(x), strides=2, padding="SAME")
            m = tf.nn.max_pool2d(c, 2, 2, "VALID")
            v = tf.nn.avg_pool2d(c, 3, 1, "SAME")
            r = tf.image.resize(m, (5, 5), method="bilinear")
            loss = (tf.reduce_sum(a * a) + tf.reduce_sum(tf.sin(b)) + tf.reduce_sum(d * x)
                    + tf.reduce_sum(v * v) + tf.reduce_sum(r))
        return (a, b, c, d, m, v, r, loss, tape.gradient(loss, x), tape.gradient(loss, w),
                tape.gradient(loss, dw))

    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    w = (0.3 * rng.standard_normal((3, 3, 3, 4))).astype(np.float32)
    dw = (0.3 * rng.standard_normal((3, 3, 3, 2))).astype(np.float32)
    return conv_pool, [x, w, dw]


@tf_case("Data-dependent sizes under jit_compile: boolean_mask, tf.where(cond), tf.unique give "
         "bounded dynamic shapes (f32[<=N], SliceToDynamic custom calls); reductions over them")
def dynamic_shapes():
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def dynamic(x, labels):
        kept = tf.boolean_mask(x, x > 0.0)
        where = tf.where(tf.reshape(x, (3, 4)) < -0.5)
        uniq, idx = tf.unique(labels)
        return (kept, tf.reduce_sum(kept), tf.size(kept), where, uniq, idx,
                tf.math.unsorted_segment_sum(tf.ones_like(labels), idx, tf.size(uniq)))

    rng = np.random.default_rng(7)
    x = rng.standard_normal((12,)).astype(np.float32)
    labels = np.array([4, 1, 4, 9, 1, 1, 7], np.int32)
    return dynamic, [x, labels]


@tf_case("Element types and math: TensorFlow's special functions expanded in HLO (lgamma, digamma, "
         "erfinv, bessel_i0e), integer floordiv/floormod/shifts on s32/s64/u8, "
         "round-half-even, f16 and f64 arithmetic, complex64, bitcast, fft/rfft/irfft, logsumexp")
def math_dtypes():
    import tensorflow as tf

    @tf.function(jit_compile=True)
    def math(x, ints, longs, bytes_, halfs, doubles, z):
        pos = tf.abs(x) + 0.5
        return {"lgamma": tf.math.lgamma(pos), "digamma": tf.math.digamma(pos),
                "erfinv": tf.math.erfinv(0.08 * x), "bessel_i0e": tf.math.bessel_i0e(x),
                "floordiv": tf.math.floordiv(ints, 3), "floormod": tf.math.floormod(ints, -4),
                "truncatediv": tf.truncatediv(longs, tf.constant(7, tf.int64)), "s64_shift": tf.bitwise.right_shift(longs, 3),
                "u8_add": bytes_ + 200, "u8_invert": tf.bitwise.invert(bytes_),
                "round": tf.math.round(x * 2.0), "rint": tf.math.rint(x * 2.0),
                "f16": halfs * halfs / (halfs + 3.0) - tf.math.sqrt(tf.abs(halfs)),
                "f16_sum": tf.reduce_sum(halfs), "f16_exp": tf.exp(halfs),
                "f64": tf.math.log1p(tf.abs(doubles)) * tf.math.expm1(doubles / 10.0),
                "c64": z * tf.math.conj(z) + tf.exp(z) / (z + 1.0), "c64_abs": tf.abs(z),
                "bitcast": tf.bitcast(x, tf.int32), "clip": tf.clip_by_value(x, -0.5, 0.7),
                "fft": tf.signal.fft(z), "rfft": tf.signal.rfft(x[:8]),
                "irfft": tf.signal.irfft(tf.signal.rfft(x[:8])),
                "logsumexp": tf.math.reduce_logsumexp(tf.reshape(x, (2, 6)), axis=1),
                "cumprod": tf.math.cumprod(x[:6] + 1.0)}

    rng = np.random.default_rng(8)
    x = (2.0 * rng.standard_normal(12)).astype(np.float32)
    x[:4] = [0.25, -0.25, 1.25, -2.5]                     # ties for round-half-even
    ints = np.array([-7, -6, -1, 0, 5, 2**31 - 1, -2**31], np.int32)
    longs = np.array([-2**62, -15, -7, 0, 13, 2**62 + 5], np.int64)
    bytes_ = np.array([0, 1, 55, 100, 255], np.uint8)
    halfs = (3.0 * rng.standard_normal(9)).astype(np.float16)
    doubles = rng.standard_normal(5) * 4.0
    z = (rng.standard_normal(8) + 1j * rng.standard_normal(8)).astype(np.complex64)
    return math, [x, ints, longs, bytes_, halfs, doubles, z]


def _tf_child(case: str, work: str) -> None:
    """Run one TensorFlow case with XLA's dump on; write work/io.npz and work/meta.json."""
    os.environ["XLA_FLAGS"] = f"--xla_dump_to={os.path.join(work, 'dump')} {DUMP_FLAGS}"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import keras

    fn, args = TF_CASES[case]["builder"]()
    cf = fn.get_concrete_function(*args)
    n_args = len(args)
    inputs = list(cf.inputs)
    if len(inputs) != n_args + len(cf.captured_inputs):
        raise SystemExit(f"{case}: {len(inputs)} graph inputs for {n_args} arguments and "
                         f"{len(cf.captured_inputs)} captures")
    by_handle = {id(v.handle): v for v in cf.graph.variables}
    variables = []
    for c in cf.captured_inputs:
        if c.dtype != tf.resource or id(c) not in by_handle:
            raise SystemExit(f"{case}: a captured input that is not a variable: {c!r}")
        variables.append(by_handle[id(c)])
    written = _tf_written_resources(cf, n_args)
    params = [(f"arg{k}", a) for k, a in enumerate(args)]
    params += [(f"variable {v.name}", v.numpy()) for v in variables]

    result = fn(*args)
    flat = tf.nest.flatten(result)
    paths = [_tf_path(p) for p in _nest_paths(result)]
    assert len(paths) == len(flat)
    outputs = [(path, t.numpy()) for path, t in zip(paths, flat)]
    for k in written:
        v = variables[k - n_args]
        outputs.append((f"variable {v.name} (after)", v.numpy()))

    np.savez(os.path.join(work, "io.npz"), **{f"arg{k}": a for k, (_, a) in enumerate(params)},
             **{f"out{k}": a for k, (_, a) in enumerate(outputs)})
    meta = dict(function=fn.python_function.__name__, versions={"tensorflow": tf.__version__,
                                                                "keras": keras.__version__},
                parameters=[p for p, _ in params], outputs=[p for p, _ in outputs])
    with open(os.path.join(work, "meta.json"), "w") as f:
        json.dump(meta, f)


_TF_WRITERS = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")


def _tf_written_resources(cf, n_args) -> list[int]:
    """Indices (into the graph inputs) of the resource inputs the function writes, in input order."""
    placeholder_index = {t.op.name: k for k, t in enumerate(cf.inputs)}
    written = set()
    for op in cf.graph.get_operations():
        if op.type in _TF_WRITERS or op.type.startswith(("ResourceApply", "ResourceScatter",
                                                         "ResourceSparseApply")):
            src = op.inputs[0].op
            while src.type == "Identity":
                src = src.inputs[0].op
            if src.name not in placeholder_index:
                raise SystemExit(f"cannot trace the resource written by {op.name} to an input")
            written.add(placeholder_index[src.name])
    bad = [k for k in written if k < n_args]
    if bad:
        raise SystemExit(f"an explicit argument is a resource: {bad}")
    return sorted(written)


def _nest_paths(s, prefix=()):
    """Paths of tf.nest's leaves in tf.nest.flatten order (dict keys sorted, as tf.nest does)."""
    if isinstance(s, dict):
        return [p for k in sorted(s) for p in _nest_paths(s[k], prefix + (repr(k),))]
    if isinstance(s, (list, tuple)) and not hasattr(s, "numpy"):
        fields = getattr(s, "_fields", None)
        return [p for k, v in enumerate(s) for p in
                _nest_paths(v, prefix + ((f".{fields[k]}" if fields else f"[{k}]"),))]
    return [prefix]


def _tf_path(p) -> str:
    return "".join(x if x.startswith((".", "[")) else f"[{x}]" for x in p) or "result"


# ------------------------------------------------------------------------------------------------
# PyTorch/XLA cases (run in the child; each gets the XLA device and returns a function that does the
# work lazily and returns the tensors to sync, as (path, tensor) pairs)
# ------------------------------------------------------------------------------------------------

TORCH_CASES: dict = {}


def torch_case(description, save_graphs=False, env=None):
    def deco(builder):
        TORCH_CASES[builder.__name__] = dict(builder=builder, description=description,
                                             save_graphs=save_graphs, env=env or {})
        return builder
    return deco


def _torch_step_outputs(loss, out, model, opt, state_keys):
    """(path, tensor) for the loss, the forward result, every parameter and its optimizer state."""
    named = [("loss", loss), ("output", out)]
    named += [(f"param {n}", p) for n, p in model.named_parameters()]
    named += [(f"buffer {n}", b) for n, b in model.named_buffers() if b.dtype.is_floating_point]
    for n, p in model.named_parameters():
        named += [(f"state {n} {k}", opt.state[p][k]) for k in state_keys]
    return named


@torch_case("Linear + GELU + LayerNorm + Linear, cross-entropy, backward, SGD with momentum; "
            "<case>.graphs.txt holds this step and a second one as XLA_SAVE_TENSORS_FILE saves "
            "them (XLA_SAVE_TENSORS_FMT=hlo, several modules)", save_graphs=True)
def mlp_train_step(device):
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16),
                                torch.nn.Linear(16, 4)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = torch.randn(5, 8).to(device)
    y = torch.tensor([0, 3, 1, 2, 3]).to(device)

    def step():
        opt.zero_grad()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        loss.backward()
        opt.step()
        return _torch_step_outputs(loss, logits, model, opt, ["momentum_buffer"])
    return step


@torch_case("Conv2d + BatchNorm2d (training: running statistics updated) + ReLU + MaxPool2d + "
            "Linear, MSE loss, backward, Adam")
def conv_train_step(device):
    import torch
    # no bias before the batch norm: its gradient is 0 up to rounding, which Adam would amplify
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1, bias=False), torch.nn.BatchNorm2d(4),
                                torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
                                torch.nn.Linear(64, 3)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.randn(2, 3, 8, 8).to(device)
    y = torch.randn(2, 3).to(device)

    def step():
        opt.zero_grad()
        out = model(x)
        loss = torch.nn.functional.mse_loss(out, y)
        loss.backward()
        opt.step()
        return _torch_step_outputs(loss, out, model, opt, ["exp_avg", "exp_avg_sq"])
    return step


@torch_case("torch.gather, index_select, scatter_add, index_put with accumulate (duplicates), "
            "sort (stable, descending), argsort, topk, cumsum, embedding, masked_fill, where")
def gather_scatter_sort(device):
    import torch
    x = torch.randn(4, 6).to(device)
    idx = torch.tensor([[0, 5, 2], [1, 1, 4], [3, 0, 0], [5, 2, 1]]).to(device)
    rows = torch.tensor([0, 2, 2, 3]).to(device)
    keys = torch.round(torch.randn(4, 6) * 4).to(device)        # ties
    table = torch.randn(7, 3).to(device)
    tokens = torch.tensor([[6, 0, 2], [2, 2, 5]]).to(device)

    def run():
        srt = torch.sort(keys, dim=1, descending=True, stable=True)
        top = torch.topk(x, 3, dim=1)
        acc = torch.zeros(4, 6, device=device).index_put((rows, idx[:, 0]), x[:, 0], accumulate=True)
        return [("gather", torch.gather(x, 1, idx)),
                ("index_select", torch.index_select(x, 0, rows)),
                ("scatter_add", torch.zeros(4, 6, device=device).scatter_add(1, idx, x[:, :3])),
                ("index_put_accumulate", acc),
                ("sort.values", srt.values), ("sort.indices", srt.indices),
                ("argsort", torch.argsort(keys, dim=0, stable=True)),
                ("topk.values", top.values), ("topk.indices", top.indices),
                ("cumsum", torch.cumsum(x, dim=1)),
                ("embedding", torch.nn.functional.embedding(tokens, table)),
                ("masked_fill", x.masked_fill(x > 0.5, -1.0)),
                ("where", torch.where(keys > 0, x, keys))]
    return run


@torch_case("torch.rand, randn, randint, bernoulli, dropout on the XLA device: rng-bit-generator "
            "seeded from the device's seed, which is a parameter")
def random_ops(device):
    import torch
    import torch_xla.core.xla_model as xm
    xm.set_rng_state(1234, device=device)
    ones = torch.ones(4, 5).to(device)

    def run():
        return [("rand", torch.rand(3, 4, device=device)),
                ("randn", torch.randn(2, 5, device=device)),
                ("randint", torch.randint(-3, 9, (6,), device=device)),
                ("bernoulli", torch.bernoulli(torch.full((8,), 0.3, device=device))),
                ("dropout", torch.nn.functional.dropout(ones, 0.4, training=True))]
    return run


@torch_case("Gradients of max_pool2d (select-and-scatter), avg_pool2d, bilinear interpolate and an "
            "embedding (scatter-add); bfloat16 matmul, softmax and layer norm; int8/uint8 arithmetic")
def pool_embed_bf16(device):
    import torch
    x = torch.randn(2, 3, 8, 8).to(device).requires_grad_()
    table = torch.randn(10, 4).to(device).requires_grad_()
    tokens = torch.tensor([[1, 7, 7, 0], [9, 1, 1, 1]]).to(device)
    a = torch.randn(4, 8).to(device)
    b = torch.randn(8, 5).to(device)
    i8 = torch.tensor([-128, -7, 0, 5, 127], dtype=torch.int8).to(device)
    u8 = torch.tensor([0, 3, 200, 255, 17], dtype=torch.uint8).to(device)

    def run():
        f = torch.nn.functional
        mp = f.max_pool2d(x, 2)
        ap = f.avg_pool2d(x, 3, stride=1, padding=1, count_include_pad=False)
        up = f.interpolate(mp, size=(6, 6), mode="bilinear", align_corners=False)
        emb = f.embedding(tokens, table)
        loss = (mp * mp).sum() + ap.sin().sum() + up.sum() + (emb * emb).sum()
        gx, gt = torch.autograd.grad(loss, [x, table])
        hb = a.bfloat16() @ b.bfloat16()
        return [("loss", loss), ("max_pool", mp), ("avg_pool", ap), ("interpolate", up),
                ("grad_x", gx), ("grad_table", gt),
                ("bf16_matmul", hb.float()), ("bf16_softmax", hb.softmax(-1).float()),
                ("bf16_layer_norm", f.layer_norm(hb, (5,)).float()),
                ("int8_mul", i8 * 3), ("int8_div", torch.div(i8, 4, rounding_mode="trunc")),
                ("uint8_add", u8 + 100), ("uint8_shift", u8 >> 2)]
    return run


@torch_case("Bounded dynamic shapes (nonzero, masked_select with XLA_EXPERIMENTAL=nonzero:"
            "masked_select: s32[<=N,1], f32[<=N]), int64 floor division and remainder with negative "
            "operands, bitwise ops, f16 and complex64 arithmetic, integer cumsum",
            env={"XLA_EXPERIMENTAL": "nonzero:masked_select"})
def dynamic_dtypes(device):
    import torch
    x = torch.randn(10).to(device)
    longs = torch.tensor([-7, 7, -2**40, 2**40 + 3, 0, -1]).to(device)
    halfs = (torch.randn(6) * 3).half().to(device)
    z = torch.randn(5, dtype=torch.complex64).to(device)
    ints = torch.tensor([3, -4, 5, 2**30, 7], dtype=torch.int32).to(device)

    def run():
        kept = torch.masked_select(x, x > 0)
        return [("nonzero", torch.nonzero(x < -0.3)), ("masked_select", kept),
                ("masked_select_sum", kept.sum()),
                ("floor_div", torch.div(longs, 3, rounding_mode="floor")),
                ("remainder", torch.remainder(longs, -3)), ("fmod", torch.fmod(longs, 4)),
                ("bitwise", (longs & 0xFF) ^ (longs >> 3)),
                ("f16", halfs * halfs / (halfs.abs() + 1) - halfs.exp()),
                ("c64", z * z.conj() + z.exp() / (z + 2)),
                ("int_cumsum", torch.cumsum(ints, 0))]
    return run


def _torch_child(case: str, work: str) -> None:
    """Run one PyTorch/XLA case with XLA's dump on; write work/io.npz and work/meta.json."""
    dump = os.path.join(work, "dump")
    os.environ["XLA_FLAGS"] = f"--xla_dump_to={dump} {DUMP_FLAGS}"
    os.environ["PJRT_DEVICE"] = "CPU"
    spec = TORCH_CASES[case]
    os.environ.update(spec["env"])
    if spec["save_graphs"]:
        os.environ["XLA_SAVE_TENSORS_FILE"] = os.path.join(work, "graphs.txt")
        os.environ["XLA_SAVE_TENSORS_FMT"] = "hlo"
    import torch
    import torch_xla

    torch.manual_seed(0)
    device = torch_xla.device()
    run = spec["builder"](device)
    torch_xla.sync()                       # the inputs are device data before the traced work
    named = run()
    tensors = [t for _, t in named]
    # the graph's parameters, in parameter order: the device data its roots read
    _, data = torch_xla._XLAC._get_tensors_xla_device_data_node(tensors)
    params = [a.detach().cpu().numpy() for a in data]
    seen = set(glob.glob(os.path.join(dump, "*.before_optimizations.txt")))
    if spec["env"].get("XLA_EXPERIMENTAL"):
        # dynamic results: torch_xla's XLA cannot read a synced dynamic tensor back (its PadToStatic
        # custom call is missing), but fetching them together compiles the same single graph
        fetched = torch_xla._XLAC._xla_get_cpu_tensors(tensors)
    else:
        torch_xla._XLAC._xla_sync_multi(tensors, devices=[], wait=True)
        fetched = [t.detach().cpu() for t in tensors]
    new = sorted(set(glob.glob(os.path.join(dump, "*.before_optimizations.txt"))) - seen)
    if len(new) != 1:
        raise SystemExit(f"{case}: expected one new module from the sync, got {new}")
    outputs = [(p, t.numpy()) for (p, _), t in zip(named, fetched)]
    if spec["save_graphs"]:
        run()                                # a second step: the saved file holds several modules
        torch_xla.sync()
    np.savez(os.path.join(work, "io.npz"), **{f"arg{k}": a for k, a in enumerate(params)},
             **{f"out{k}": a for k, (_, a) in enumerate(outputs)})
    meta = dict(dump_file=os.path.basename(new[0]),
                versions={"torch": torch.__version__, "torch_xla": torch_xla.__version__},
                parameters=[f"device data {k}" for k in range(len(params))],
                outputs=[p for p, _ in outputs])
    with open(os.path.join(work, "meta.json"), "w") as f:
        json.dump(meta, f)


# ------------------------------------------------------------------------------------------------
# the parent: run children, pick the dumped module, verify with JAX's XLA, write the samples
# ------------------------------------------------------------------------------------------------

def _find_dump(dump: str, meta: dict) -> tuple[str, str]:
    """(before, after) dump files of the case's module (named by the child, or found by function)."""
    if "dump_file" in meta:
        before = [os.path.join(dump, meta["dump_file"])]
    else:
        before = [p for p in glob.glob(os.path.join(dump, "*.before_optimizations.txt"))
                  if f"inference_{meta['function']}_" in os.path.basename(p)]
    if len(before) != 1:
        raise SystemExit(f"expected one dumped module for {meta['function']}, found {before}")
    after = before[0].replace(".before_optimizations.txt", ".cpu_after_optimizations.txt")
    if not os.path.isfile(after):
        raise SystemExit(f"no after-optimization dump {after}")
    return before[0], after


def _compare(ours: np.ndarray, ref: np.ndarray) -> tuple[bool, float]:
    """(bit-identical?, largest |difference| relative to max(1, |ref|))."""
    if ours.shape != ref.shape or ours.dtype != ref.dtype:
        return False, float("inf")
    if ours.dtype.kind not in "fc":
        same = np.array_equal(ours, ref)
        return same, 0.0 if same else float("inf")
    a, b = ours.astype(np.complex128 if ours.dtype.kind == "c" else np.float64), \
        ref.astype(np.complex128 if ref.dtype.kind == "c" else np.float64)
    if not np.array_equal(np.isnan(a), np.isnan(b)):
        return False, float("inf")
    same = np.array_equal(np.ascontiguousarray(ours).view(np.uint8), np.ascontiguousarray(ref).view(np.uint8))
    fin = ~np.isnan(a)
    diff = float(np.max(np.abs(a[fin] - b[fin]) / np.maximum(1.0, np.abs(b[fin])), initial=0.0))
    return same, diff


def _xla_check(text: str, args: list[np.ndarray], expected: list[np.ndarray]) -> dict:
    """Run `text` with JAX's XLA CPU on `args` and compare every output with the producer's."""
    from hlo_cli.tools.xla_reference import run_with_xla
    got = run_with_xla(text, args)
    if len(got) != len(expected):
        raise SystemExit(f"JAX's XLA returned {len(got)} outputs, the producer {len(expected)}")
    worst, identical = 0.0, 0
    dynamic = []
    for k, (g, e) in enumerate(zip(got, expected)):
        g = np.asarray(g)
        if g.shape != e.shape and g.ndim == e.ndim and all(n <= b for n, b in zip(e.shape, g.shape)):
            # a bounded dynamic result (f32[<=N]): the runner gives the whole bound, the producer
            # the elements that are there
            g = g[tuple(slice(0, n) for n in e.shape)]
            dynamic.append(f"out{k}")
        same, diff = _compare(g, e)
        if diff > 1e-3:
            raise SystemExit(f"out{k}: JAX's XLA and the producer disagree ({g.dtype}{list(g.shape)} vs "
                             f"{e.dtype}{list(e.shape)}, relative difference {diff:.3g}): wrong order?")
        identical += same
        worst = max(worst, diff)
    return {"runner": "jax " + __import__("jax").__version__, "outputs_bit_identical": identical,
            "outputs": len(expected), "max_relative_difference": worst,
            **({"dynamic_outputs_compared_within_their_bound": dynamic} if dynamic else {})}


def _shape_of(a: np.ndarray) -> dict:
    return {"shape": list(a.shape), "dtype": str(a.dtype)}


def generate(producer: str, cases: list[str], out: str, python: str) -> dict:
    manifest_path = os.path.join(out, "MANIFEST.json")
    manifest = json.load(open(manifest_path)) if os.path.isfile(manifest_path) else {"cases": {}}
    os.makedirs(out, exist_ok=True)
    for case in cases:
        with tempfile.TemporaryDirectory(prefix=f"gen_{producer}_") as work:
            cmd = [python, os.path.abspath(__file__), "--_child", producer, case, work]
            print(f"[{producer}] {case} ...", flush=True)
            subprocess.run(cmd, check=True, cwd=ROOT)
            meta = json.load(open(os.path.join(work, "meta.json")))
            with np.load(os.path.join(work, "io.npz")) as z:
                args = [z[f"arg{k}"] for k in range(len(meta["parameters"]))]
                outs = [z[f"out{k}"] for k in range(len(meta["outputs"]))]
            before, after = _find_dump(os.path.join(work, "dump"), meta)
            text = open(before).read()
            check = _xla_check(text, args, outs)
            shutil.copyfile(before, os.path.join(out, f"{case}.hlo"))
            shutil.copyfile(after, os.path.join(out, f"{case}.opt.hlo"))
            np.savez(os.path.join(out, f"{case}.inputs.npz"), **{f"arg{k}": a for k, a in enumerate(args)})
            np.savez(os.path.join(out, f"{case}.expected.npz"), **{f"out{k}": a for k, a in enumerate(outs)})
            graphs = glob.glob(os.path.join(work, "graphs.txt*"))
            if graphs:
                shutil.copyfile(graphs[0], os.path.join(out, f"{case}.graphs.txt"))
        manifest["cases"][case] = {
            "description": CASES[producer][case]["description"],
            "dumped_as": os.path.basename(before),
            "files": {"hlo": f"{case}.hlo", "opt_hlo": f"{case}.opt.hlo",
                      "inputs": f"{case}.inputs.npz", "expected": f"{case}.expected.npz",
                      **({"graphs": f"{case}.graphs.txt"} if graphs else {})},
            "parameters": [dict(key=f"arg{k}", what=w, **_shape_of(a))
                           for k, (w, a) in enumerate(zip(meta["parameters"], args))],
            "outputs": [dict(key=f"out{k}", path=w, **_shape_of(a))
                        for k, (w, a) in enumerate(zip(meta["outputs"], outs))],
            "xla_check": check,
        }
        manifest.update(generator="scripts/gen_producer_samples.py", producer=producer,
                        versions=meta["versions"], xla_flags=f"--xla_dump_to=DIR {DUMP_FLAGS}")
        manifest["cases"] = dict(sorted(manifest["cases"].items()))
        with open(manifest_path, "w") as f:     # after every case: a later failure keeps the others
            json.dump(manifest, f, indent=1)
            f.write("\n")
        print(f"  {len(args)} parameters, {len(outs)} outputs; JAX's XLA agrees: "
              f"{check['outputs_bit_identical']}/{check['outputs']} bit-identical, "
              f"max relative difference {check['max_relative_difference']:.3g}", flush=True)
    return manifest


CASES = {"tensorflow": TF_CASES, "torch_xla": TORCH_CASES}
CHILDREN = {"tensorflow": _tf_child, "torch_xla": _torch_child}


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_child"]:
        producer, case, work = argv[1:4]
        CHILDREN[producer](case, work)
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("producer", choices=sorted(CASES))
    ap.add_argument("--only", nargs="+", metavar="CASE")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--out", help="default: samples/<producer>")
    ap.add_argument("--torch-python", default=sys.executable,
                    help="the Python with torch and torch_xla (torch_xla cases run in it)")
    ns = ap.parse_args(argv)
    cases = CASES[ns.producer]
    if ns.list:
        for name, c in cases.items():
            print(f"{name:24} {c['description']}")
        return
    chosen = ns.only or list(cases)
    unknown = [c for c in chosen if c not in cases]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; --list shows them")
    python = ns.torch_python if ns.producer == "torch_xla" else sys.executable
    generate(ns.producer, chosen, ns.out or os.path.join(ROOT, "samples", ns.producer), python)


if __name__ == "__main__":
    main()
