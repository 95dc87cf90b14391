#!/usr/bin/env python
"""Generate convnet training steps (and an fp8 GEMM loop) with JAX (XLA CPU) into benchmarks/data/.

Modules (each written as ``<name>.hlo``, ``<name>.opt.hlo``, ``<name>.inputs.npz`` (arg0..) and
``<name>.expected.npz`` (XLA's outputs, out0..), by ``gen_transformer.dump``):

``mobilenet_v2``
    One training step of MobileNetV2 (NHWC): 3x3 s2 stem, 17 inverted residual blocks (1x1
    expand, depthwise 3x3 with feature_group_count = channels, 1x1 project, residual when the
    shape allows), 1x1 to 1280, global average pooling, dense classifier, softmax
    cross-entropy; batch norm in training mode written as mean/variance reductions (JAX has no
    batch-norm primitive) with running statistics updated, ReLU6, SGD with momentum.
    Default: width 1.0, batch 32, 224x224, 1000 classes.
``resnet18``
    One training step of ResNet-18 (NHWC): 7x7 s2 stem, 3x3 s2 max pooling (reduce-window; its
    gradient is select-and-scatter), basic blocks of 3x3 convolutions, strided convolutions and
    1x1 projection shortcuts, global average pooling, dense classifier; same batch norm, loss and
    optimizer.  Default batch 8, 224x224.
``fp8_loop``
    A 20-iteration ``lax.fori_loop`` whose body adds dot(f8e5m2[32768,1024],
    f8e4m3fn[8192,1024]^T) -> bf16[32768,8192] to its carry; the operands do not change across
    iterations (XLA hoists the dot out of the loop).

With the defaults XLA CPU executes the MobileNetV2 step in about 36 CPU seconds (2-core AMD EPYC;
XLA's depthwise convolutions and their gradients take most of it), the ResNet-18 step in 2.5 and
the fp8 loop (one hoisted 550 GFLOP dot, f32 after exact conversions) in about 12; generating all three takes about 14 minutes
on a loaded 2-core machine.  ``--tiny`` writes the small steps committed in samples/convnets/.

Usage:
    python benchmarks/gen_convnets.py [--only mobilenet_v2 ...] [--batch 32] [--size 224]
        [--width 1.0] [--resnet-batch 8] [--fp8-m 32768]
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from gen_transformer import _REPO_ROOT, dump  # noqa: E402  (also sets the source-path canonicalization)

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

DN = ("NHWC", "HWIO", "NHWC")
BN_EPS = 1e-5
BN_MOMENTUM = 0.9

# --------------------------------------------------------------------------
# shared pieces
# --------------------------------------------------------------------------


class _Init:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def conv(self, kh, kw, cin, cout):
        fan_in = kh * kw * cin
        return (self.rng.standard_normal((kh, kw, cin, cout)) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    def bn(self, c):
        return {"g": (1 + 0.1 * self.rng.standard_normal(c)).astype(np.float32),
                "b": (0.1 * self.rng.standard_normal(c)).astype(np.float32)}

    def bn_state(self, c):
        return {"mean": (0.1 * self.rng.standard_normal(c)).astype(np.float32),
                "var": (1 + 0.1 * self.rng.random(c)).astype(np.float32)}

    def dense(self, cin, cout):
        return {"w": (self.rng.standard_normal((cin, cout)) * cin**-0.5).astype(np.float32),
                "b": np.zeros(cout, np.float32)}


def conv(x, w, stride=1, groups=1, padding="SAME"):
    return lax.conv_general_dilated(x, w, (stride, stride), padding, dimension_numbers=DN,
                                    feature_group_count=groups)


def batch_norm(x, p, state, new_state, key):
    """Training-mode batch norm over N, H, W as reductions; the running statistics go to new_state."""
    mean = jnp.mean(x, axis=(0, 1, 2))
    var = jnp.mean(jnp.square(x - mean), axis=(0, 1, 2))
    new_state[key] = {"mean": BN_MOMENTUM * state["mean"] + (1 - BN_MOMENTUM) * lax.stop_gradient(mean),
                      "var": BN_MOMENTUM * state["var"] + (1 - BN_MOMENTUM) * lax.stop_gradient(var)}
    return (x - mean) * lax.rsqrt(var + BN_EPS) * p["g"] + p["b"]


def cross_entropy(logits, labels):
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def sgd_momentum_step(loss_fn, lr=0.05, mu=0.9):
    """A training step: (loss, new params, new momentum, new batch-norm state)."""
    def step(params, momentum, bn_state, images, labels):
        (loss, new_bn), grads = jax.value_and_grad(loss_fn, has_aux=True)(params, bn_state, images, labels)
        new_m = jax.tree.map(lambda m, g: mu * m + g, momentum, grads)
        new_p = jax.tree.map(lambda p, m: p - lr * m, params, new_m)
        return loss, new_p, new_m, new_bn
    return step


def _step_args(init, params, bn_state, batch, size, classes):
    momentum = jax.tree.map(lambda p: (init.rng.standard_normal(p.shape) * 1e-3).astype(np.float32), params)
    images = init.rng.standard_normal((batch, size, size, 3)).astype(np.float32)
    labels = init.rng.integers(0, classes, size=batch).astype(np.int32)
    return params, momentum, bn_state, images, labels


# --------------------------------------------------------------------------
# MobileNetV2
# --------------------------------------------------------------------------

# (expansion t, output channels c, repeats n, first stride s), as in the paper
MOBILENET_V2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]


def _make_divisible(v, divisor=8):
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def mobilenet_v2_blocks(width, config=MOBILENET_V2):
    cin = _make_divisible(32 * width)
    blocks = []
    for t, c, n, s in config:
        cout = _make_divisible(c * width)
        for i in range(n):
            blocks.append((cin, cin * t, cout, s if i == 0 else 1, t))
            cin = cout
    return _make_divisible(32 * width), blocks, max(1280, _make_divisible(1280 * width))


def build_mobilenet_v2(batch, size, width=1.0, classes=1000, seed=0, config=MOBILENET_V2, last=None):
    init = _Init(seed)
    stem, blocks, full_last = mobilenet_v2_blocks(width, config)
    last = last or full_last
    params = {"stem": init.conv(3, 3, 3, stem), "stem_bn": init.bn(stem), "blocks": []}
    bn_state = {"stem_bn": init.bn_state(stem)}
    for k, (cin, hid, cout, _s, t) in enumerate(blocks):
        b = {}
        if t != 1:
            b["expand"], b["expand_bn"] = init.conv(1, 1, cin, hid), init.bn(hid)
            bn_state[f"b{k}_expand_bn"] = init.bn_state(hid)
        b["dw"], b["dw_bn"] = init.conv(3, 3, 1, hid), init.bn(hid)
        b["project"], b["project_bn"] = init.conv(1, 1, hid, cout), init.bn(cout)
        bn_state[f"b{k}_dw_bn"], bn_state[f"b{k}_project_bn"] = init.bn_state(hid), init.bn_state(cout)
        params["blocks"].append(b)
    cin = blocks[-1][2]
    params["last"], params["last_bn"] = init.conv(1, 1, cin, last), init.bn(last)
    bn_state["last_bn"] = init.bn_state(last)
    params["fc"] = init.dense(last, classes)

    def loss_fn(params, bn_state, images, labels):
        new = {}
        relu6 = lambda x: jnp.clip(x, 0.0, 6.0)  # noqa: E731
        x = relu6(batch_norm(conv(images, params["stem"], 2), params["stem_bn"], bn_state["stem_bn"], new, "stem_bn"))
        for k, ((cin, hid, cout, s, t), b) in enumerate(zip(blocks, params["blocks"], strict=True)):
            h = x
            if t != 1:
                h = relu6(batch_norm(conv(h, b["expand"]), b["expand_bn"], bn_state[f"b{k}_expand_bn"], new,
                                     f"b{k}_expand_bn"))
            h = relu6(batch_norm(conv(h, b["dw"], s, groups=hid), b["dw_bn"], bn_state[f"b{k}_dw_bn"], new,
                                 f"b{k}_dw_bn"))
            h = batch_norm(conv(h, b["project"]), b["project_bn"], bn_state[f"b{k}_project_bn"], new,
                           f"b{k}_project_bn")
            x = x + h if (s == 1 and cin == cout) else h
        x = relu6(batch_norm(conv(x, params["last"]), params["last_bn"], bn_state["last_bn"], new, "last_bn"))
        x = jnp.mean(x, axis=(1, 2))
        logits = x @ params["fc"]["w"] + params["fc"]["b"]
        return cross_entropy(logits, labels), new

    return sgd_momentum_step(loss_fn), _step_args(init, params, bn_state, batch, size, classes)


# --------------------------------------------------------------------------
# ResNet-18
# --------------------------------------------------------------------------

RESNET18 = [(64, 1), (128, 2), (256, 2), (512, 2)]  # (channels, first stride); two basic blocks each


def build_resnet18(batch, size, classes=1000, seed=1, stages=RESNET18):
    init = _Init(seed)
    cin = stages[0][0]
    params = {"stem": init.conv(7, 7, 3, cin), "stem_bn": init.bn(cin), "blocks": []}
    bn_state = {"stem_bn": init.bn_state(cin)}
    layout = []
    for c, s in stages:
        for i in range(2):
            stride = s if i == 0 else 1
            k = len(layout)
            b = {"c1": init.conv(3, 3, cin, c), "bn1": init.bn(c), "c2": init.conv(3, 3, c, c), "bn2": init.bn(c)}
            bn_state[f"b{k}_bn1"], bn_state[f"b{k}_bn2"] = init.bn_state(c), init.bn_state(c)
            proj = stride != 1 or cin != c
            if proj:
                b["proj"], b["proj_bn"] = init.conv(1, 1, cin, c), init.bn(c)
                bn_state[f"b{k}_proj_bn"] = init.bn_state(c)
            layout.append((stride, proj))
            params["blocks"].append(b)
            cin = c
    params["fc"] = init.dense(cin, classes)

    def loss_fn(params, bn_state, images, labels):
        new = {}
        x = jax.nn.relu(batch_norm(conv(images, params["stem"], 2), params["stem_bn"], bn_state["stem_bn"], new,
                                   "stem_bn"))
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME")
        for k, ((stride, proj), b) in enumerate(zip(layout, params["blocks"], strict=True)):
            h = jax.nn.relu(batch_norm(conv(x, b["c1"], stride), b["bn1"], bn_state[f"b{k}_bn1"], new, f"b{k}_bn1"))
            h = batch_norm(conv(h, b["c2"]), b["bn2"], bn_state[f"b{k}_bn2"], new, f"b{k}_bn2")
            if proj:
                x = batch_norm(conv(x, b["proj"], stride), b["proj_bn"], bn_state[f"b{k}_proj_bn"], new,
                               f"b{k}_proj_bn")
            x = jax.nn.relu(x + h)
        x = jnp.mean(x, axis=(1, 2))
        logits = x @ params["fc"]["w"] + params["fc"]["b"]
        return cross_entropy(logits, labels), new

    return sgd_momentum_step(loss_fn), _step_args(init, params, bn_state, batch, size, classes)


# --------------------------------------------------------------------------
# fp8 GEMM loop
# --------------------------------------------------------------------------


def build_fp8_loop(m=32768, n=8192, k=1024, iters=20, seed=2):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * 0.5).astype(jnp.float8_e5m2)
    b = (rng.standard_normal((n, k)) * 0.5).astype(jnp.float8_e4m3fn)

    def fp8_loop(a, b):
        def body(i, acc):
            d = lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.bfloat16)
            return acc + d
        return lax.fori_loop(0, iters, body, jnp.zeros((m, n), jnp.bfloat16))

    return fp8_loop, (a, b)


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------


def store_narrow(name, fn, args, out_dir):
    """Rewrite `name`'s inputs and XLA's outputs with narrow floats (bf16, f8) as raw records, as
    `hlo run --output` stores them (hlo_cli.pipeline.io.storable): NumPy cannot read back the descriptors
    np.savez writes for ml_dtypes arrays.  `hlo run --inputs` reads the records as the parameter's
    type."""
    from hlo_cli.pipeline.io import storable
    outs = [np.asarray(a) for a in jax.tree.leaves(jax.jit(fn)(*args))]
    np.savez(os.path.join(out_dir, f"{name}.inputs.npz"),
             **{f"arg{i}": storable(np.asarray(a)) for i, a in enumerate(jax.tree.leaves(args))})
    np.savez(os.path.join(out_dir, f"{name}.expected.npz"), **{f"out{i}": storable(a) for i, a in enumerate(outs)})

NAMES = ("mobilenet_v2", "resnet18", "fp8_loop")
# the committed samples (samples/convnets/, tests/test_convnet_samples.py): the same steps, tiny
# (batch 2, 32x32 images, 10 classes), every block kind once; batch norm always over >= 32 values
TINY_MOBILENET = [(1, 16, 1, 1), (6, 24, 2, 2)]
TINY_RESNET = [(16, 1), (32, 2)]


def tiny(out_dir):
    fn, fargs = build_mobilenet_v2(2, 32, 0.5, classes=10, config=TINY_MOBILENET, last=64)
    dump("mobilenet_v2_tiny", fn, fargs, out_dir)
    fn, fargs = build_resnet18(2, 32, classes=10, stages=TINY_RESNET)
    dump("resnet_tiny", fn, fargs, out_dir)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(_REPO_ROOT, "benchmarks", "data"))
    ap.add_argument("--only", nargs="*", choices=NAMES)
    ap.add_argument("--batch", type=int, default=32, help="MobileNetV2 batch")
    ap.add_argument("--size", type=int, default=224, help="image height and width (both convnets)")
    ap.add_argument("--width", type=float, default=1.0, help="MobileNetV2 width multiplier")
    ap.add_argument("--resnet-batch", type=int, default=8)
    ap.add_argument("--fp8-m", type=int, default=32768, help="rows of the f8e5m2 operand")
    ap.add_argument("--fp8-n", type=int, default=8192, help="rows of the f8e4m3fn operand")
    ap.add_argument("--suffix", default="", help="appended to every module name (e.g. _small)")
    ap.add_argument("--tiny", action="store_true",
                    help="only the tiny steps committed in samples/convnets/ (written to --out)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    print(f"jax {jax.__version__}, devices {jax.devices()}")
    if args.tiny:
        tiny(args.out)
        return 0
    only = set(args.only or NAMES)
    if "mobilenet_v2" in only:
        fn, fargs = build_mobilenet_v2(args.batch, args.size, args.width)
        dump("mobilenet_v2" + args.suffix, fn, fargs, args.out)
    if "resnet18" in only:
        fn, fargs = build_resnet18(args.resnet_batch, args.size)
        dump("resnet18" + args.suffix, fn, fargs, args.out)
    if "fp8_loop" in only:
        fn, fargs = build_fp8_loop(args.fp8_m, args.fp8_n)
        dump("fp8_loop" + args.suffix, fn, fargs, args.out)
        store_narrow("fp8_loop" + args.suffix, fn, fargs, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
