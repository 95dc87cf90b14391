#!/usr/bin/env python
"""Generate multi-device HLO samples with JAX on 8 XLA CPU host devices into samples/spmd/.

For every case this writes

  <case>.hlo            the module before partitioning (``Lowered.as_text("hlo")``): global shapes,
                        ``sharding=`` annotations and Shardy custom calls / frontend attributes
  <case>.opt.hlo        the partitioned per-device module XLA CPU compiled (``Compiled.as_text()``,
                        ``num_partitions=8``, or ``replica_count`` for the replica cases)
  <case>.inputs.npz     the inputs, keys arg0, arg1, ... in entry-parameter order: global arrays
                        (for the replica cases, per-device arrays stacked on a leading device axis)
  <case>.expected.npz   XLA CPU's results: out0, out1, ... the global results (leaves of the result
                        pytree, depth first); dev_out0, dev_out1, ... each result leaf's per-device
                        values stacked on a leading axis in device-id order
  <case>.json           mesh shape and axis names, input/output shardings in HLO sharding text,
                        result shapes, JAX version, description

Device ids: every mesh is built from ``jax.devices()`` in id order and the generator checks that the
executable's devices are devices 0..7 in that order, so XLA's logical device (partition) id i is JAX
device i, and ``addressable_shards`` sorted by device id are the per-device results in device-id order.

Replica cases: JAX 0.10 no longer produces ``replica_count > 1`` modules (``jax.pmap`` lowers through
``shard_map`` to partitions), so those modules are written here as per-device HLO text, compiled by
XLA CPU with ``num_replicas`` set (through jaxlib's client, as ``jax.jit`` would), and run on per-device
inputs.

Everything is deterministic (fixed seeds; ``--seed`` changes them, for the live differential tests).
Each case is run twice and the results must be bit-identical.

Usage (from the repository root, so the file names in the compiled stack-frame tables are relative):

    python scripts/gen_spmd_samples.py [--out samples/spmd] [--only CASE ...] [--seed N] [--list]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

# 8 host devices: must be set before jax is imported.
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import jax  # noqa: E402

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
jax.config.update("jax_hlo_source_file_canonicalization_regex", "^" + re.escape(_REPO_ROOT + os.sep))

import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

f32 = np.float32
NDEV = 8

CASES: dict = {}
SEED = 0


def case(name, description=""):
    def deco(builder):
        CASES[name] = dict(builder=builder, description=description or (builder.__doc__ or "").strip())
        return builder
    return deco


def _rng(k):
    return np.random.default_rng(SEED * 1000 + k)


def _normal(rng, shape, scale=1.0):
    return (rng.standard_normal(shape) * scale).astype(f32)


def _mesh(shape, names):
    """A mesh over jax.devices() in device-id order (jax.make_mesh would make Explicit axes)."""
    devs = sorted(jax.devices(), key=lambda d: d.id)[: int(np.prod(shape))]
    return Mesh(np.array(devs).reshape(shape), names)


class Jit:
    """A jitted case: fn(*args) with in/out specs (None = let the partitioner choose) on a mesh."""

    def __init__(self, fn, args, mesh, in_specs, out_specs=None, jitted=None):
        self.fn, self.args, self.mesh = fn, args, mesh
        self.in_specs, self.out_specs = in_specs, out_specs
        self.jitted = jitted            # an already staged function (jax.pmap) instead of jax.jit


class Replicas:
    """A replica case: per-device HLO text compiled with num_replicas x num_partitions devices,
    run on per-device inputs (each array [devices, ...])."""

    def __init__(self, text, inputs, replicas, partitions=1):
        self.text, self.inputs = text, inputs
        self.replicas, self.partitions = replicas, partitions


def _shmap(body, mesh, in_specs, out_specs):
    return jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out_specs)


# --------------------------------------------------------------------------
# jit cases (sharding annotations, partitioned by XLA's SPMD partitioner / Shardy)
# --------------------------------------------------------------------------

@case("dp_matmul_1d", "data-parallel matmul + bias + tanh on a 1-D mesh of 8 (batch sharded, weights replicated)")
def _dp_matmul():
    rng = _rng(1)
    x, w, b = _normal(rng, (16, 12)), _normal(rng, (12, 6), 0.3), _normal(rng, (6,), 0.1)
    mesh = _mesh((8,), ("data",))
    return Jit(lambda x, w, b: jnp.tanh(x @ w + b), (x, w, b), mesh, (P("data"), P(), P()), P("data"))


@case("dp_matmul_grad_1d", "gradient of a data-parallel least-squares loss wrt the replicated weights (all-reduce of partial gradients)")
def _dp_matmul_grad():
    rng = _rng(2)
    x, y, w = _normal(rng, (16, 12)), _normal(rng, (16, 6)), _normal(rng, (12, 6), 0.3)

    def f(w, x, y):
        def loss(w):
            return jnp.mean((jnp.tanh(x @ w) - y) ** 2)
        return jax.value_and_grad(loss)(w)
    mesh = _mesh((8,), ("data",))
    return Jit(f, (w, x, y), mesh, (P(), P("data"), P("data")), (P(), P()))


@case("mp_matmul_1d", "model-parallel two-layer MLP on a 1-D mesh of 8 (column- then row-sharded weights, all-reduce of partial sums)")
def _mp_matmul():
    rng = _rng(3)
    x, w1, w2 = _normal(rng, (4, 8)), _normal(rng, (8, 16), 0.3), _normal(rng, (16, 8), 0.3)
    mesh = _mesh((8,), ("model",))
    return Jit(lambda x, w1, w2: jax.nn.relu(x @ w1) @ w2, (x, w1, w2), mesh,
               (P(), P(None, "model"), P("model", None)), P())


@case("mp_matmul_grad_1d", "gradients of a model-parallel two-layer MLP loss wrt both sharded weights")
def _mp_matmul_grad():
    rng = _rng(4)
    x, w1, w2 = _normal(rng, (4, 8)), _normal(rng, (8, 16), 0.3), _normal(rng, (16, 8), 0.3)

    def f(w1, w2, x):
        def loss(w1, w2):
            return jnp.sum(jnp.tanh(jax.nn.relu(x @ w1) @ w2) ** 2)
        return jax.grad(loss, argnums=(0, 1))(w1, w2)
    mesh = _mesh((8,), ("model",))
    return Jit(f, (w1, w2, x), mesh, (P(None, "model"), P("model", None), P()), (P(None, "model"), P("model", None)))


@case("mp_matmul_1x8", "model-parallel matmul on a 1x8 (data, model) mesh, contracting dimension sharded")
def _mp_1x8():
    rng = _rng(5)
    x, w = _normal(rng, (4, 16)), _normal(rng, (16, 6), 0.3)
    mesh = _mesh((1, 8), ("data", "model"))
    return Jit(lambda x, w: x @ w, (x, w), mesh, (P("data", "model"), P("model", None)), P("data", None))


@case("dp_mp_matmul_grad_4x2", "data x model parallel matmul and its gradients on a 4x2 mesh")
def _dp_mp_grad():
    rng = _rng(6)
    x, w, y = _normal(rng, (8, 6)), _normal(rng, (6, 4), 0.3), _normal(rng, (8, 4))

    def f(w, x, y):
        def loss(w, x):
            return jnp.mean((x @ w - y) ** 2)
        l, (gw, gx) = jax.value_and_grad(loss, argnums=(0, 1))(w, x)
        return l, gw, gx
    mesh = _mesh((4, 2), ("data", "model"))
    return Jit(f, (w, x, y), mesh, (P(None, "model"), P("data", None), P("data", "model")),
               (P(), P(None, "model"), P("data", None)))


@case("attention_heads_2x4", "multi-head attention with heads sharded over 'model' and batch over 'data' on a 2x4 mesh (softmax, output projection contracting the heads)")
def _attention():
    rng = _rng(7)
    B, T, D, H = 2, 4, 16, 4
    dh = D // H
    x = _normal(rng, (B, T, D))
    wq, wk, wv = (_normal(rng, (D, H, dh), D ** -0.5) for _ in range(3))
    wo = _normal(rng, (H, dh, D), D ** -0.5)

    def attn(x, wq, wk, wv, wo):
        q = jnp.einsum("btd,dhk->bhtk", x, wq)
        k = jnp.einsum("btd,dhk->bhtk", x, wk)
        v = jnp.einsum("btd,dhk->bhtk", x, wv)
        s = jnp.einsum("bhtk,bhsk->bhts", q, k) / np.sqrt(dh).astype(f32)
        mask = jnp.tril(jnp.ones((T, T), dtype=bool))
        a = jax.nn.softmax(jnp.where(mask, s, -1e9), axis=-1)
        o = jnp.einsum("bhts,bhsk->bhtk", a, v)
        return x + jnp.einsum("bhtk,hkd->btd", o, wo)
    mesh = _mesh((2, 4), ("data", "model"))
    wspec = P(None, "model", None)
    return Jit(attn, (x, wq, wk, wv, wo), mesh,
               (P("data", None, None), wspec, wspec, wspec, P("model", None, None)), P("data", None, None))


@case("scan_layers_4x2", "lax.scan over 3 layers with weights sharded over 'model' (collectives inside the while loop) on a 4x2 mesh")
def _scan_layers():
    rng = _rng(8)
    L, B, D = 3, 8, 8
    ws = _normal(rng, (L, D, D), D ** -0.5)
    bs = _normal(rng, (L, D), 0.1)
    x = _normal(rng, (B, D))

    def f(ws, bs, x):
        def layer(h, wb):
            w, b = wb
            h = jnp.tanh(h @ w + b)
            return h, jnp.sum(h)
        return lax.scan(layer, x, (ws, bs))
    mesh = _mesh((4, 2), ("data", "model"))
    return Jit(f, (ws, bs, x), mesh, (P(None, "model", None), P(None, None), P("data", "model")),
               (P("data", None), P()))


@case("mlp_train_step_2x4", "one SGD step of a 2-layer MLP, data x model parallel on a 2x4 mesh (loss, new parameters)")
def _mlp_train():
    rng = _rng(9)
    params = {"w1": _normal(rng, (8, 16), 0.3), "b1": _normal(rng, (16,), 0.1),
              "w2": _normal(rng, (16, 4), 0.3), "b2": _normal(rng, (4,), 0.1)}
    x = _normal(rng, (8, 8))
    labels = rng.integers(0, 4, size=(8,)).astype(np.int32)

    def step(params, x, labels):
        def loss_fn(p):
            h = jax.nn.relu(x @ p["w1"] + p["b1"])
            logp = jax.nn.log_softmax(h @ p["w2"] + p["b2"])
            return -jnp.mean(jnp.sum(jax.nn.one_hot(labels, 4, dtype=logp.dtype) * logp, axis=-1))
        loss, g = jax.value_and_grad(loss_fn)(params)
        return loss, jax.tree.map(lambda p, g: p - 0.1 * g, params, g)
    mesh = _mesh((2, 4), ("data", "model"))
    pspec = {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None), "b2": P()}
    return Jit(step, (params, x, labels), mesh, (pspec, P("data", None), P("data")), (P(), pspec))


@case("int_bool_reduce_2x4", "integer and bool reductions across a sharded dimension (s32 sum and max, pred any/all) on a 2x4 mesh")
def _int_bool():
    rng = _rng(10)
    a = rng.integers(-50, 50, size=(8, 4)).astype(np.int32)
    m = rng.random((8, 4)) < 0.3

    def f(a, m):
        return jnp.sum(a, axis=0), jnp.max(a, axis=1), jnp.any(m, axis=0), jnp.all(m | (a > -40), axis=0), a * 3 + jnp.where(m, 1, 0)
    mesh = _mesh((2, 4), ("x", "y"))
    return Jit(f, (a, m), mesh, (P(("x", "y"), None), P(("x", "y"), None)), None)


@case("uneven_2x4", "values the mesh does not divide (5 of 8 columns kept, sharded over 4 devices, 3 rows over 2): padded per-device pieces inside, sums and maxima across them")
def _uneven():
    rng = _rng(19)
    x = _normal(rng, (8, 8))
    n = rng.integers(-100, 100, size=(8, 8)).astype(np.int32)
    mesh = _mesh((2, 4), ("x", "y"))

    def f(x, n):
        c = lambda v, spec: jax.lax.with_sharding_constraint(v, NamedSharding(mesh, spec))  # noqa: E731
        a = c(x[:, :5] * 2.0 + 1.0, P("x", "y"))
        m = c(n[:3, 1:6], P("x", "y"))
        return jnp.sum(a, axis=1), jnp.max(a, axis=0), jnp.sum(m, axis=0), jnp.min(m)
    return Jit(f, (x, n), mesh, (P("x", "y"), P("x", "y")), (P("x"), P(), P(), P()))


@case("zero_grad_1d", "data-parallel gradient returned sharded over the devices (ZeRO-style): XLA CPU all-reduces, then each device slices out its part by partition-id")
def _zero_grad():
    rng = _rng(20)
    x, y, w = _normal(rng, (16, 8)), _normal(rng, (16, 4)), _normal(rng, (8, 4), 0.3)

    def f(w, x, y):
        return jax.grad(lambda w: jnp.sum((x @ w - y) ** 2))(w)
    mesh = _mesh((8,), ("data",))
    return Jit(f, (w, x, y), mesh, (P(), P("data"), P("data")), P("data"))


@case("reshard_1d", "resharding from rows to columns (an all-to-all) and a transpose on 8 devices, s32 data")
def _reshard():
    rng = _rng(21)
    a = rng.integers(-1000, 1000, size=(16, 8)).astype(np.int32)
    mesh = _mesh((8,), ("x",))

    def f(a):
        b = jax.lax.with_sharding_constraint(a * 3, NamedSharding(mesh, P(None, "x")))
        return b + 1, b.T
    return Jit(f, (a,), mesh, (P("x", None),), (P(None, "x"), P("x", None)))


@case("halo_conv_1d", "a 1-D convolution over a spatial dimension sharded 8 ways: halo exchange by collective-permute")
def _halo():
    rng = _rng(22)
    x, k = _normal(rng, (1, 32, 2)), _normal(rng, (3, 2, 4), 0.5)

    def f(x, k):
        return lax.conv_general_dilated(x, k, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"))
    mesh = _mesh((8,), ("x",))
    return Jit(f, (x, k), mesh, (P(None, "x", None), P()), P(None, "x", None))


# --------------------------------------------------------------------------
# shard_map cases (explicit collectives)
# --------------------------------------------------------------------------

@case("shmap_psum_pmax_pmin_1d", "shard_map on 8 devices: psum, pmax, pmin (f32 and s32), pmean")
def _shmap_reduce():
    rng = _rng(11)
    a = _normal(rng, (16, 3))
    n = rng.integers(-100, 100, size=(16, 3)).astype(np.int32)

    def body(a, n):
        return (lax.psum(a, "x"), lax.pmax(a, "x"), lax.pmin(a, "x"), lax.pmean(a, "x"),
                lax.psum(n, "x"), lax.pmax(n, "x"), lax.pmin(n, "x"))
    mesh = _mesh((8,), ("x",))
    return Jit(_shmap(body, mesh, (P("x"), P("x")), (P(),) * 7), (a, n), mesh, (P("x"), P("x")))


@case("shmap_axes_2x4", "shard_map on a 2x4 mesh: psum over one axis, over the other, over both; axis_index of each axis")
def _shmap_axes():
    rng = _rng(12)
    a = _normal(rng, (4, 8))

    def body(a):
        i = lax.axis_index("x") * 10 + lax.axis_index("y")
        return lax.psum(a, "y"), lax.psum(a, "x"), lax.psum(a, ("x", "y")), lax.pmax(a, "x") + i.astype(f32), i[None, None]
    mesh = _mesh((2, 4), ("x", "y"))
    spec = P("x", "y")
    return Jit(_shmap(body, mesh, (spec,), (P("x"), P(None, "y"), P(), spec, spec)), (a,), mesh, (spec,))


@case("shmap_gather_scatter_2x4", "shard_map on a 2x4 mesh: all_gather (tiled and stacked), psum_scatter (tiled and not), all_to_all")
def _shmap_gather():
    rng = _rng(13)
    a = _normal(rng, (8, 8))
    b = rng.integers(0, 1000, size=(16, 4)).astype(np.int32)

    def body(a, b):
        g1 = lax.all_gather(a, "y", axis=0, tiled=True)             # [8, 2]
        g2 = lax.all_gather(a, "y", axis=1, tiled=False)            # [4, 4, 2]
        s1 = lax.psum_scatter(a, "y", scatter_dimension=0, tiled=True)   # [1, 2]
        s2 = lax.psum_scatter(b[0], "y", scatter_dimension=0, tiled=False)  # [4] -> []
        t = lax.all_to_all(b, "y", split_axis=1, concat_axis=0, tiled=True)   # [2, 4] -> [8, 1]
        return g1, g2[None], s1, s2[None], t
    mesh = _mesh((2, 4), ("x", "y"))
    return Jit(_shmap(body, mesh, (P("x", "y"), P(("x", "y"))),
                      (P("x", "y"), P(("x", "y")), P("x", "y"), P(("x", "y")), P(("x", "y")))),
               (a, b), mesh, (P("x", "y"), P(("x", "y"))))


@case("shmap_ppermute_1d", "shard_map on 8 devices: a ring shift, a partial permutation (devices nobody sends to get zeros), bool and s32 data")
def _shmap_ppermute():
    rng = _rng(14)
    a = _normal(rng, (16,))
    m = rng.random((16,)) < 0.5
    n = rng.integers(-9, 9, size=(16,)).astype(np.int32)

    def body(a, m, n):
        ring = lax.ppermute(a, "x", [(i, (i + 1) % 8) for i in range(8)])
        part = lax.ppermute(a, "x", [(0, 3), (3, 5), (6, 1)])
        bm = lax.ppermute(m, "x", [(i, (i + 3) % 8) for i in range(8)])
        nn = lax.ppermute(n, "x", [(7, 0), (2, 2)])
        return ring, part, bm, nn, lax.all_gather(m, "x", tiled=True)[None]
    mesh = _mesh((8,), ("x",))
    s = P("x")
    return Jit(_shmap(body, mesh, (s, s, s), (s, s, s, s, s)), (a, m, n), mesh, (s, s, s))


@case("shmap_ppermute_2x4", "shard_map on a 2x4 mesh: ppermute along each axis (partial along 'y'), then a psum")
def _shmap_ppermute_2d():
    rng = _rng(15)
    a = _normal(rng, (4, 8))

    def body(a):
        u = lax.ppermute(a, "y", [(0, 1), (1, 2)])
        v = lax.ppermute(a, "x", [(0, 1), (1, 0)])
        return u, v, lax.psum(u * v, "y")
    mesh = _mesh((2, 4), ("x", "y"))
    spec = P("x", "y")
    return Jit(_shmap(body, mesh, (spec,), (spec, spec, P("x"))), (a,), mesh, (spec,))


@case("pmap_1d", "jax.pmap over 8 devices (JAX 0.10 lowers it through shard_map to 8 partitions): psum, pmax, axis_index, s32 data")
def _pmap():
    rng = _rng(18)
    x, y = _normal(rng, (8, 3)), _normal(rng, (8, 3))
    n = rng.integers(-5, 5, size=(8, 2)).astype(np.int32)

    def f(x, y, n):
        return lax.psum(x * y, "i"), lax.pmax(x, "i"), lax.axis_index("i") * 100 + lax.psum(n, "i")
    pf = jax.pmap(f, axis_name="i")
    mesh = _mesh((8,), ("i",))
    return Jit(f, (x, y, n), mesh, (P("i"),) * 3, jitted=pf)


@case("shmap_divergent_1d", "shard_map on 8 devices: a conditional and a while loop whose branch and trip count depend on the device, then collectives after them")
def _shmap_divergent():
    rng = _rng(23)
    a = rng.integers(-20, 20, size=(16,)).astype(np.int32)
    x = _normal(rng, (16,))

    def body(a, x):
        i = lax.axis_index("x")
        c = lax.cond(i % 3 == 0, lambda v: v * 2 + i, lambda v: v - 7 * i, a)
        # (a multiply only: XLA CPU contracts a multiply-add in a loop fusion into an FMA)
        w = lax.while_loop(lambda s: s[0] < i + 1, lambda s: (s[0] + 1, s[1] * -1.5), (0, x))[1]
        return c, lax.psum(c, "x")[None], w, lax.pmax(w, "x")
    mesh = _mesh((8,), ("x",))
    s = P("x")
    return Jit(_shmap(body, mesh, (s, s), (s, s, s, P())), (a, x), mesh, (s, s))


# --------------------------------------------------------------------------
# replica cases (per-device HLO text, XLA compiles it with num_replicas)
# --------------------------------------------------------------------------

_REPLICA_TEXT = """HloModule replicas_8, replica_count=8

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

maxs {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT c = s32[] maximum(a, b)
}

ENTRY main {
  p = f32[4] parameter(0)
  n = s32[2] parameter(1)
  r = u32[] replica-id()
  rf = f32[] convert(r)
  rb = f32[4] broadcast(rf), dimensions={}
  s = f32[4] add(p, rb)
  all = f32[4] all-reduce(s), replica_groups={}, to_apply=add
  pairs = f32[4] all-reduce(s), replica_groups={{0,2,4,6},{1,3,5,7}}, to_apply=add
  nmax = s32[2] all-reduce(n), replica_groups={{0,1},{2,3},{4,5},{6,7}}, to_apply=maxs
  gathered = f32[16] all-gather(p), replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}
  scattered = f32[1] reduce-scatter(s), replica_groups={{0,1,2,3},{4,5,6,7}}, dimensions={0}, to_apply=add
  shifted = f32[4] collective-permute(p), source_target_pairs={{0,1},{1,2},{2,3},{5,4}}
  ROOT t = (f32[4], f32[4], s32[2], f32[16], f32[1], f32[4], u32[]) tuple(all, pairs, nmax, gathered, scattered, shifted, r)
}
"""

_MIXED_TEXT = """HloModule replicas_2x4, replica_count=2, num_partitions=4

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}

ENTRY main {
  p = f32[3] parameter(0), sharding={manual}
  r = u32[] replica-id(), sharding={manual}
  q = u32[] partition-id(), sharding={manual}
  cross_replica = f32[3] all-reduce(p), replica_groups={}, to_apply=add, sharding={manual}
  cross_partition = f32[12] all-gather(p), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, use_global_device_ids=true, dimensions={0}, sharding={manual}
  cross_both = f32[3] all-reduce(p), channel_id=2, replica_groups={{0,1}}, to_apply=add, sharding={manual}
  global_ids = f32[3] all-reduce(p), channel_id=3, replica_groups={{0,1,4,5},{2,3,6,7}}, use_global_device_ids=true, to_apply=add, sharding={manual}
  ag = f32[24] all-gather(p), channel_id=4, replica_groups={{0,1}}, dimensions={0}, sharding={manual}
  perm = f32[3] collective-permute(p), channel_id=5, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}, sharding={manual}
  ROOT t = (f32[3], f32[12], f32[3], f32[3], f32[24], f32[3], u32[], u32[]) tuple(cross_replica, cross_partition, cross_both, global_ids, ag, perm, r, q), sharding={{manual}, {manual}, {manual}, {manual}, {manual}, {manual}, {manual}, {manual}}
}
"""


@case("replicas_8", "replica_count=8: replica-id, all-reduce over all replicas and over groups (f32, s32 max), all-gather, reduce-scatter, a partial collective-permute")
def _replicas():
    rng = _rng(16)
    p = _normal(rng, (NDEV, 4))
    n = rng.integers(-20, 20, size=(NDEV, 2)).astype(np.int32)
    return Replicas(_REPLICA_TEXT, [p, n], replicas=8)


@case("replicas_2x4", "replica_count=2, num_partitions=4: all-reduce cross-replica, cross-replica-and-partition (channel_id), global device ids; all-gather by global ids and cross-replica-and-partition; collective-permute across partitions; replica-id and partition-id")
def _mixed():
    rng = _rng(17)
    return Replicas(_MIXED_TEXT, [_normal(rng, (NDEV, 3))], replicas=2, partitions=4)


# --------------------------------------------------------------------------
# writing
# --------------------------------------------------------------------------

def _hlo_sharding_text(s, ndim):
    try:
        return str(s._to_xla_hlo_sharding(ndim))
    except Exception:  # noqa: BLE001 - an exotic sharding: its repr is still informative
        return str(s)


def _check_device_order(executable, n):
    ids = [d.id for d in executable.local_devices()]
    if ids != list(range(n)):
        raise SystemExit(f"executable devices are {ids}, not 0..{n - 1} in order: device id != partition id")


def _entry_param_shardings(opt_text):
    """{parameter number: sharding text} of the entry computation of a compiled module's text."""
    entry = opt_text[opt_text.index("\nENTRY"):]
    out = {}
    for m in re.finditer(r"parameter\((\d+)\), sharding=\{", entry):
        depth, k = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(entry[k], 0)
            k += 1
        out[int(m.group(1))] = entry[m.end() - 1:k]
    return out


def _tiles(sharding_text, shape, n):
    """{device: per-dimension (start, stop)} as XLA's sharding text places a global array, reading
    its tile assignment with XLA's own parser (logical device ids)."""
    from jax._src.lib import xla_client as xc
    hs = xc.HloSharding.from_string(sharding_text)
    full = tuple((0, d) for d in shape)
    if hs.is_replicated() or hs.is_manual():
        return {d: full for d in range(n)}
    dims = list(hs.tile_assignment_dimensions())
    devs = list(hs.tile_assignment_devices())
    out = {}
    for pos, dev in enumerate(devs):
        coords = np.unravel_index(pos, dims)
        sl = []
        for i, size in enumerate(shape):
            t = -(-size // dims[i])
            sl.append((min(coords[i] * t, size), min((coords[i] + 1) * t, size)))
        out[dev] = tuple(sl)
    return out


def _check_device_ids_are_partition_ids(name, opt_text, in_sh, leaves_in, n):
    """Where JAX places each input tile (by device id) is where the compiled module's parameter
    sharding places it (by partition id): device id == partition id."""
    texts = _entry_param_shardings(opt_text)
    for k, (sh, a) in enumerate(zip(in_sh, leaves_in)):
        if k not in texts:
            continue
        shape = np.shape(a)
        jax_map = {d.id: tuple((s.start or 0, shape[i] if s.stop is None else s.stop)
                               for i, s in enumerate(idx))
                   for d, idx in sh.devices_indices_map(shape).items()}
        xla_map = _tiles(texts[k], shape, n)
        if jax_map != xla_map:
            raise SystemExit(f"{name}: parameter {k}: JAX places tiles {jax_map}, the compiled sharding "
                             f"{texts[k]} {xla_map}")


def _per_device(arr, n):
    shards = sorted(arr.addressable_shards, key=lambda s: s.device.id)
    if [s.device.id for s in shards] != list(range(n)):
        raise SystemExit(f"shards on devices {[s.device.id for s in shards]}")
    return np.stack([np.asarray(s.data) for s in shards])


def _same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _gen_jit(name, c: Jit):
    leaves_in = jax.tree_util.tree_leaves(c.args)
    mesh = c.mesh
    n = mesh.devices.size
    to_sh = lambda spec: NamedSharding(mesh, spec)  # noqa: E731
    in_sh = jax.tree_util.tree_map(to_sh, c.in_specs, is_leaf=lambda x: isinstance(x, P))
    kw = dict(in_shardings=in_sh)
    if c.out_specs is not None:
        kw["out_shardings"] = jax.tree_util.tree_map(to_sh, c.out_specs, is_leaf=lambda x: isinstance(x, P))
    jf = c.jitted or jax.jit(c.fn, **kw)
    lowered = jf.lower(*c.args)
    compiled = lowered.compile()
    _check_device_order(compiled.runtime_executable(), n)
    _check_device_ids_are_partition_ids(name, compiled.as_text(), jax.tree_util.tree_leaves(compiled.input_shardings[0]),
                                        leaves_in, n)
    results = [jf(*c.args) for _ in range(2)]
    outs = [jax.tree_util.tree_leaves(r) for r in results]
    glob, dev = [], []
    for o1, o2 in zip(*outs):
        g1, g2 = np.asarray(o1), np.asarray(o2)
        d1, d2 = _per_device(o1, n), _per_device(o2, n)
        if not (_same(g1, g2) and _same(d1, d2)):
            raise SystemExit(f"{name}: two runs differ")
        glob.append(g1)
        dev.append(d1)
    ins = jax.tree_util.tree_leaves(compiled.input_shardings[0])
    outsh = jax.tree_util.tree_leaves(compiled.output_shardings)
    paths_in = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(c.args)[0]]
    paths_out = [jax.tree_util.keystr(k) for k, _ in jax.tree_util.tree_flatten_with_path(results[0])[0]]
    meta = dict(
        kind="jit", input_paths=paths_in, output_paths=paths_out,
        mesh_shape=[int(d) for d in mesh.devices.shape], mesh_axes=list(mesh.axis_names),
        replicas=1, partitions=n, per_device_inputs=False,
        in_shardings=[_hlo_sharding_text(s, np.ndim(a)) for s, a in zip(ins, leaves_in)],
        out_shardings=[_hlo_sharding_text(s, g.ndim) for s, g in zip(outsh, glob)],
    )
    return lowered.as_text("hlo"), compiled.as_text(), leaves_in, glob, dev, meta


def _gen_replicas(name, c: Replicas):
    from jax._src.lib import _jax as xla
    from jaxlib import _hlo
    n = c.replicas * c.partitions
    module = _hlo.hlo_module_from_text(c.text)
    stablehlo = xla.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    devs = sorted(jax.devices(), key=lambda d: d.id)[:n]
    opts = xla.CompileOptions()
    opts.num_replicas, opts.num_partitions = c.replicas, c.partitions
    # device = replica * num_partitions + partition, as XLA numbers them
    opts.device_assignment = xla.DeviceAssignment.create(np.arange(n).reshape(c.replicas, c.partitions))
    if c.partitions > 1:
        # XLA CPU runs several partitions only through the SPMD partitioner; the module's
        # instructions are all manually sharded, so it leaves them as they are
        opts.executable_build_options.use_spmd_partitioning = True
    exe = devs[0].client.compile_and_load(stablehlo, xla.DeviceList(tuple(devs)), opts)
    _check_device_order(exe, n)
    flat = Mesh(np.array(devs), ("d",))

    def run():
        args = []
        for a in c.inputs:
            bufs = [jax.device_put(a[i], devs[i]) for i in range(n)]
            glob_shape = (n * a.shape[1],) + a.shape[2:] if a.ndim > 1 else (n,)
            parts = bufs if a.ndim > 1 else [b.reshape(1) for b in bufs]
            args.append(jax.make_array_from_single_device_arrays(glob_shape, NamedSharding(flat, P("d")), parts))
        res = exe.execute_sharded(args).disassemble_into_single_device_arrays()
        return [np.stack([np.asarray(x) for x in leaf]) for leaf in res]
    r1, r2 = run(), run()
    if not all(_same(a, b) for a, b in zip(r1, r2)):
        raise SystemExit(f"{name}: two runs differ")
    meta = dict(kind="replicas", mesh_shape=[c.replicas, c.partitions], mesh_axes=["replica", "partition"],
                replicas=c.replicas, partitions=c.partitions, per_device_inputs=True,
                in_shardings=[], out_shardings=[])
    opt = exe.hlo_modules()[0].to_string()
    return c.text, opt, list(c.inputs), [], r1, meta


def generate(out_dir, only=None):
    os.makedirs(out_dir, exist_ok=True)
    for name, entry in CASES.items():
        if only and name not in only:
            continue
        c = entry["builder"]()
        gen = _gen_jit if isinstance(c, Jit) else _gen_replicas
        hlo, opt, ins, glob, dev, meta = gen(name, c)
        base = os.path.join(out_dir, name)
        with open(base + ".hlo", "w") as fh:
            fh.write(hlo)
        with open(base + ".opt.hlo", "w") as fh:
            fh.write(opt)
        np.savez(base + ".inputs.npz", **{f"arg{i}": np.asarray(a) for i, a in enumerate(ins)})
        expected = {f"out{i}": g for i, g in enumerate(glob)}
        expected.update({f"dev_out{i}": d for i, d in enumerate(dev)})
        np.savez(base + ".expected.npz", **expected)
        meta.update(
            name=name, description=entry["description"], jax_version=jax.__version__, seed=SEED,
            inputs=[dict(shape=list(np.shape(a)), dtype=str(np.asarray(a).dtype)) for a in ins],
            outputs=[dict(shape=list(d.shape[1:]), dtype=str(d.dtype),
                          global_shape=(list(glob[i].shape) if glob else None)) for i, d in enumerate(dev)],
        )
        with open(base + ".json", "w") as fh:
            json.dump(meta, fh, indent=1)
            fh.write("\n")
        print(f"{name}: {len(ins)} inputs, {len(dev)} outputs", file=sys.stderr)


def main(argv=None):
    global SEED
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(_REPO_ROOT, "samples", "spmd"))
    ap.add_argument("--only", nargs="*", help="case names")
    ap.add_argument("--seed", type=int, default=0, help="input seed (0 = the committed samples)")
    ap.add_argument("--list", action="store_true", help="list the cases and exit")
    args = ap.parse_args(argv)
    if args.list:
        for name, entry in CASES.items():
            print(f"{name}: {entry['description']}")
        return 0
    if len(jax.devices()) < NDEV:
        raise SystemExit(f"need {NDEV} host devices, have {len(jax.devices())} (XLA_FLAGS set too late?)")
    unknown = set(args.only or ()) - set(CASES)
    if unknown:
        raise SystemExit(f"unknown cases: {sorted(unknown)}")
    SEED = args.seed
    generate(args.out, args.only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
