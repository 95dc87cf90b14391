#!/usr/bin/env python
"""Generate an 8-device benchmark with JAX: a sharded transformer training step (data x model).

JAX runs on 8 simulated host devices (``XLA_FLAGS=--xla_force_host_platform_device_count=8``,
set here before jax is imported) arranged as a 2 x 4 mesh ``("data", "model")``: the batch is
split over "data", attention heads, the MLP hidden units and the (tied) embedding's vocabulary over
"model" (Megatron style), everything else replicated.  One step is: cross-entropy loss of a small
decoder-only transformer (pre-LayerNorm, causal attention, GELU MLP), ``jax.grad``, global gradient
norm, Adam update; parameters and optimizer state keep their shardings.

Written to ``--out`` (default benchmarks/data, gitignored):

``spmd_transformer.hlo``
    the module before partitioning (``lower(...).as_text("hlo")``: global shapes, ``sharding=``
    annotations), what one device computes when it runs the whole program;
``spmd_transformer.opt.hlo``
    the partitioned module XLA CPU runs on each device (``compile().as_text()``,
    ``num_partitions=8``, collectives);
``spmd_transformer.1dev.opt.hlo``
    the unpartitioned module as XLA CPU optimizes it for one device (the same global arithmetic,
    fused; what hlo's one-device time is best compared with);
``spmd_transformer.inputs.npz``
    the global inputs, keys arg0.. in entry parameter order;
``spmd_transformer.inputs_per_device.npz``
    XLA's per-device input buffers, arg0.. each stacked on a leading device axis (device-id order);
``spmd_transformer.expected.npz``
    XLA's global outputs, out0.. (flattened result leaves);
``spmd_transformer.expected_per_device.npz``
    XLA's per-device outputs, out0.. each stacked on a leading device axis (device-id order);
``spmd_transformer.json``
    sizes, shardings, XLA's memory analysis per device and the timings measured here.

Device ids: the mesh is ``jax.devices()`` in order, so the partition (= device) id of a shard is
its device's position in ``mesh.devices.flat``; stacks follow that order.

Usage:
    python benchmarks/gen_spmd_transformer.py [--out benchmarks/data] [--layers 2] [--d-model 256]
"""

from __future__ import annotations

import os
import sys

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _FLAG).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_transformer import _best_of, adam_update  # noqa: E402

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
jax.config.update("jax_hlo_source_file_canonicalization_regex", "^" + re.escape(_REPO_ROOT + os.sep))

NAME = "spmd_transformer"
MESH_SHAPE = (2, 4)
AXES = ("data", "model")
DEFAULTS = {"layers": 2, "d_model": 256, "heads": 8, "ff": 1024, "seq": 64, "batch": 16, "vocab": 1024}


def make_mesh():
    """The 2 x 4 ("data", "model") mesh over the 8 host devices (Auto axes, not jax.make_mesh's Explicit)."""
    devices = jax.devices()
    if len(devices) < 8:
        raise SystemExit(f"need 8 devices, JAX sees {len(devices)} (XLA_FLAGS={os.environ.get('XLA_FLAGS')!r})")
    return Mesh(np.array(devices[:8]).reshape(MESH_SHAPE), AXES)


# --------------------------------------------------------------------------
# model
# --------------------------------------------------------------------------

def init_params(rng, layers, d, heads, ff, vocab, seq):
    dh = d // heads

    def n(shape, scale):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def ln():
        return {"g": (1 + n((d,), 0.02)).astype(np.float32), "b": n((d,), 0.02)}

    params = {"embed": n((vocab, d), 0.02), "pos": n((seq, d), 0.01), "ln_f": ln(), "layers": []}
    for _ in range(layers):
        params["layers"].append({
            "ln1": ln(),
            "wq": n((d, heads, dh), d**-0.5), "wk": n((d, heads, dh), d**-0.5), "wv": n((d, heads, dh), d**-0.5),
            "wo": n((heads, dh, d), d**-0.5 / np.sqrt(2 * layers)),
            "ln2": ln(),
            "w1": n((d, ff), d**-0.5), "b1": n((ff,), 0.02),
            "w2": n((ff, d), ff**-0.5 / np.sqrt(2 * layers)), "b2": n((d,), 0.02),
        })
    return params


def param_specs(params, fsdp=False):
    """PartitionSpecs: heads, MLP hidden and vocabulary on "model"; the rest replicated.  `fsdp`:
    the weights' d_model dimension is split over "data" as well (ZeRO-3 / FSDP style: XLA gathers
    the weights before use and reduce-scatters their gradients)."""
    f = "data" if fsdp else None
    layer = {"ln1": {"g": P(), "b": P()},
             "wq": P(f, "model", None), "wk": P(f, "model", None), "wv": P(f, "model", None),
             "wo": P("model", None, f),
             "ln2": {"g": P(), "b": P()},
             "w1": P(f, "model"), "b1": P("model"), "w2": P("model", f), "b2": P()}
    return {"embed": P("model", f), "pos": P(), "ln_f": {"g": P(), "b": P()},
            "layers": [layer for _ in params["layers"]]}


def _layer_norm(x, p):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.var(x, axis=-1, keepdims=True)
    return (x - mu) * lax.rsqrt(var + 1e-5) * p["g"] + p["b"]


def loss_fn(params, tokens, mesh):
    act = NamedSharding(mesh, P("data", None, None))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    t = inputs.shape[1]
    x = params["embed"][inputs] + params["pos"][None, :t]
    x = lax.with_sharding_constraint(x, act)
    mask = jnp.tril(jnp.ones((t, t), bool))
    for lp in params["layers"]:
        h = _layer_norm(x, lp["ln1"])
        q = jnp.einsum("btd,dhk->bthk", h, lp["wq"])
        k = jnp.einsum("btd,dhk->bthk", h, lp["wk"])
        v = jnp.einsum("btd,dhk->bthk", h, lp["wv"])
        s = jnp.einsum("bthk,bshk->bhts", q, k) * (q.shape[-1] ** -0.5)
        s = jnp.where(mask, s, -1e9)
        a = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum("bhts,bshk->bthk", a, v)
        x = lax.with_sharding_constraint(x + jnp.einsum("bthk,hkd->btd", o, lp["wo"]), act)
        h = _layer_norm(x, lp["ln2"])
        u = jax.nn.gelu(h @ lp["w1"] + lp["b1"], approximate=True)
        x = lax.with_sharding_constraint(x + u @ lp["w2"] + lp["b2"], act)
    x = _layer_norm(x, params["ln_f"])
    logits = x @ params["embed"].T                    # tied embeddings: vocabulary sharded on "model"
    logp = jax.nn.log_softmax(logits, axis=-1)
    nll = -jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
    return jnp.mean(nll)


def make_step(mesh, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    def train_step(params, opt_state, tokens):
        loss, grads = jax.value_and_grad(loss_fn)(params, tokens, mesh)
        gnorm, new, state = adam_update(params, grads, opt_state, lr, b1, b2, eps)
        return loss, gnorm, new, state
    return train_step


def build(mesh, layers, d_model, heads, ff, seq, batch, vocab, fsdp=False, seed=0):
    """(jitted step, global args, arg shardings): the same function, shardings and inputs each time."""
    if heads % MESH_SHAPE[1] or ff % MESH_SHAPE[1] or vocab % MESH_SHAPE[1] or batch % MESH_SHAPE[0]:
        raise SystemExit("heads, ff and vocab must divide by 4 and batch by 2")
    rng = np.random.default_rng(seed)
    params = init_params(rng, layers, d_model, heads, ff, vocab, seq)
    m = jax.tree.map(lambda p: (rng.standard_normal(p.shape) * 1e-3).astype(np.float32), params)
    v = jax.tree.map(lambda p: (rng.random(p.shape) * 1e-6).astype(np.float32), params)
    opt_state = {"m": m, "v": v, "step": np.int32(3)}
    tokens = rng.integers(0, vocab, size=(batch, seq + 1)).astype(np.int32)
    pspec = param_specs(params, fsdp)
    specs = (pspec, {"m": pspec, "v": pspec, "step": P()}, P("data", None))
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), specs, is_leaf=lambda s: isinstance(s, P))
    out_shardings = (NamedSharding(mesh, P()), NamedSharding(mesh, P()), shardings[0], shardings[1])
    jitted = jax.jit(make_step(mesh), in_shardings=shardings, out_shardings=out_shardings, keep_unused=True)
    return jitted, (params, opt_state, tokens), shardings


def per_device(arr, mesh):
    """The shards of a jax.Array stacked on a leading axis in device-id (mesh position) order."""
    order = {dev.id: k for k, dev in enumerate(mesh.devices.flat)}
    shards = sorted(arr.addressable_shards, key=lambda s: order[s.device.id])
    if len(shards) != mesh.devices.size:
        raise RuntimeError(f"expected {mesh.devices.size} shards, got {len(shards)}")
    return np.stack([np.asarray(s.data) for s in shards])


def device_args(args, shardings):
    """The global args placed on the devices as the shardings say."""
    return jax.tree.map(lambda a, s: jax.device_put(a, s), args, shardings)


def one_device_text(text):
    """`text` (a module before partitioning) as XLA CPU compiles it for one device."""
    sys.path.insert(0, _REPO_ROOT)
    from hlo_cli.tools.xla_reference import XlaExecutable
    return XlaExecutable(text).executable.get_hlo_text()


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(_REPO_ROOT, "benchmarks", "data"))
    for k, v in DEFAULTS.items():
        ap.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    ap.add_argument("--fsdp", action="store_true", help="also split the weights' d_model dimension over \"data\"")
    ap.add_argument("--name", help=f"file name stem (default {NAME}, {NAME}_fsdp with --fsdp)")
    ap.add_argument("--repeat", type=int, default=3, help="executions timed here (best of)")
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    cfg = {k: getattr(a, k) for k in DEFAULTS}
    cfg["fsdp"] = a.fsdp
    name = a.name or (NAME + "_fsdp" if a.fsdp else NAME)
    mesh = make_mesh()
    print(f"jax {jax.__version__}, mesh {dict(mesh.shape)}, config {cfg}")

    jitted, args, shardings = build(mesh, **cfg)
    t0 = time.perf_counter()
    lowered = jitted.lower(*args)
    text = lowered.as_text("hlo")
    t1 = time.perf_counter()
    compiled = lowered.compile()
    opt_text = compiled.as_text()
    t2 = time.perf_counter()
    dargs = device_args(args, shardings)
    out = compiled(*dargs)
    jax.block_until_ready(out)
    execute = _best_of(a.repeat, lambda: jax.block_until_ready(compiled(*dargs)))
    out2 = compiled(*dargs)
    for i, (x, y) in enumerate(zip(jax.tree.leaves(out), jax.tree.leaves(out2), strict=True)):
        if np.asarray(x).tobytes() != np.asarray(y).tobytes():
            raise RuntimeError(f"output {i} differs between two runs")

    in_leaves, in_dev = jax.tree.leaves(args), jax.tree.leaves(dargs)
    out_leaves = jax.tree.leaves(out)
    if "num_partitions=8" not in opt_text.split("\n", 1)[0]:
        raise RuntimeError("the compiled module's header does not say num_partitions=8")
    paths = {k: os.path.join(a.out, f"{name}{suffix}") for k, suffix in (
        ("hlo", ".hlo"), ("opt_hlo", ".opt.hlo"), ("one_device_opt_hlo", ".1dev.opt.hlo"), ("inputs", ".inputs.npz"),
        ("inputs_per_device", ".inputs_per_device.npz"), ("expected", ".expected.npz"),
        ("expected_per_device", ".expected_per_device.npz"), ("meta", ".json"))}
    with open(paths["hlo"], "w") as f:
        f.write(text)
    with open(paths["opt_hlo"], "w") as f:
        f.write(opt_text)
    with open(paths["one_device_opt_hlo"], "w") as f:
        f.write(one_device_text(text))
    np.savez(paths["inputs"], **{f"arg{i}": np.asarray(x) for i, x in enumerate(in_leaves)})
    np.savez(paths["inputs_per_device"], **{f"arg{i}": per_device(x, mesh) for i, x in enumerate(in_dev)})
    np.savez(paths["expected"], **{f"out{i}": np.asarray(x) for i, x in enumerate(out_leaves)})
    np.savez(paths["expected_per_device"], **{f"out{i}": per_device(x, mesh) for i, x in enumerate(out_leaves)})

    mem = compiled.memory_analysis()
    per_dev_bytes = {k: int(getattr(mem, k)) for k in (
        "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
        "generated_code_size_in_bytes") if hasattr(mem, k)} if mem is not None else {}
    meta = {"name": name, "jax": jax.__version__, "mesh": dict(mesh.shape), "config": cfg,
            "inputs": len(in_leaves), "outputs": len(out_leaves),
            "in_shardings": [str(s.spec) for s in jax.tree.leaves(shardings)],
            "xla_memory_per_device": per_dev_bytes,
            "lower_s": t1 - t0, "compile_s": t2 - t1, "xla_execute_s": execute,
            "collectives": {op: len(re.findall(rf"[\]}})] {op}\(", opt_text)) for op in (
                "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                "all-reduce-start", "all-gather-start", "collective-permute-start")}}
    with open(paths["meta"], "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")
    print(f"== {name}: {len(in_leaves)} inputs, {len(out_leaves)} outputs; lower {t1 - t0:.2f}s, "
          f"compile {t2 - t1:.2f}s, execute (best of {a.repeat}) {execute * 1e3:.1f} ms; loss {float(out[0]):.4f}")
    print(f"   collectives in the partitioned module: {meta['collectives']}")
    print(f"   XLA memory per device: {per_dev_bytes}")
    for k, p in paths.items():
        print(f"   {os.path.basename(p):42s} {os.path.getsize(p) / 1e6:8.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
