"""Hand-written multi-device modules (samples/spmd/handwritten/) for what JAX does not emit.

Each valid module has per-device inputs and the expected per-device results computed here in NumPy
from the operation's definition (never by hlo itself).  They are run through the library
(`run_devices`) and through the CLI (`hlo run --per-device --inputs X.npz --output Y.npz`).
Where XLA CPU can run a module, `test_expectations_match_xla_cpu` runs the same text on 8 XLA CPU
host devices (a subprocess running this file) and checks the NumPy expectations against XLA, so the
expectations are XLA's, not our reading of the spec.  XLA CPU cannot run collective-broadcast,
send/recv nor reducers it cannot name; for those the expectation follows XLA's source (cited at
the case).

The modules under errors/ must be refused with exit code 1 and a message naming the instruction and
the devices, quickly (never a hang): collectives reached by only some devices, and replica groups
that name a device twice, out of range, or of unequal sizes.
"""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "samples" / "spmd" / "handwritten"
ERRORS = DIR / "errors"


# ----------------------------------------------------------------------------- NumPy collectives

def distinct(n: int, shape, dtype=np.float32, base: int = 1) -> np.ndarray:
    """[n, *shape]: device d's array is base + 100*d + 0, 1, 2...  (distinct, exact in float32)."""
    size = int(np.prod(shape, dtype=np.int64))
    return np.stack([(base + 100 * d + np.arange(size)).reshape(shape) for d in range(n)]).astype(dtype)


def group_of(groups, n: int) -> dict[int, tuple[int, ...]]:
    out = {d: tuple(g) for g in groups for d in g}
    assert sorted(out) == list(range(n)), groups
    return out


def all_reduce(x: np.ndarray, groups, op=np.add) -> np.ndarray:
    g = group_of(groups, len(x))
    out = np.empty_like(x)
    for d, members in g.items():
        acc = x[members[0]].copy()
        for m in members[1:]:
            acc = op(acc, x[m])
        out[d] = acc
    return out


def all_gather(x: np.ndarray, groups, axis: int) -> np.ndarray:
    g = group_of(groups, len(x))
    return np.stack([np.concatenate([x[m] for m in g[d]], axis=axis) for d in range(len(x))])


def reduce_scatter(x: np.ndarray, groups, axis: int, op=np.add) -> np.ndarray:
    g = group_of(groups, len(x))
    summed = all_reduce(x, groups, op)
    return np.stack([np.split(summed[d], len(g[d]), axis=axis)[g[d].index(d)] for d in range(len(x))])


def all_to_all(x: np.ndarray, groups, axis: int) -> np.ndarray:
    """Array form, split and concat dimension `axis`: the member at position i of a group receives
    chunk i of every member, concatenated in group order."""
    g = group_of(groups, len(x))
    out = []
    for d in range(len(x)):
        i = g[d].index(d)
        out.append(np.concatenate([np.split(x[m], len(g[d]), axis=axis)[i] for m in g[d]], axis=axis))
    return np.stack(out)


def permute(x: np.ndarray, pairs) -> np.ndarray:
    """collective-permute: target gets source's value; a device nobody sends to gets zeros."""
    out = np.zeros_like(x)
    for s, t in pairs:
        out[t] = x[s]
    return out


# ----------------------------------------------------------------------------- cases

@dataclass
class Case:
    name: str
    inputs: list                      # per parameter: [devices, ...]
    expected: list                    # per result leaf (depth first): [devices, ...]
    xla: bool | None = True           # True: XLA CPU runs it; False: it refuses today (the note says where
                                      # the facts are from; if a later XLA runs it, it is compared too);
                                      # None: not even tried (it crashes the process)
    xla_leaves: tuple | None = None   # only these leaves are compared with XLA (None: all)
    note: str = ""


def _collective_broadcast() -> Case:
    x = distinct(4, (2, 3))
    # The first device listed in each group is the root (XLA's GPU runtime broadcasts from rank 0,
    # "the first id in replica_groups"; StableHLO's collective_broadcast says the same).
    exp = np.stack([x[1], x[1], x[2], x[2]])
    return Case("collective_broadcast", [x], [exp], xla=False,
                note="XLA CPU: collective-broadcast is not supported by the CPU thunk emitter")


def _device_ids() -> Case:
    x = distinct(8, (3,), np.uint32)
    r = np.arange(8, dtype=np.uint32) // 4
    p = np.arange(8, dtype=np.uint32) % 4
    return Case("device_ids", [x], [r, p, x + (10 * r + p)[:, None]])


def _mode_cross_replica() -> Case:
    x = distinct(4, (4,))
    return Case("mode_cross_replica", [x], [
        all_reduce(x, [[0, 2], [1, 3]]),
        all_reduce(x, [[0, 1, 2, 3]]),
        all_gather(x, [[3, 2, 1, 0]], 0)])


def _mode_cross_replica_and_partition() -> Case:
    x = distinct(4, (3,), np.int32)
    # replica groups {0},{1} x every partition: devices {0,1} (replica 0) and {2,3} (replica 1)
    return Case("mode_cross_replica_and_partition", [x], [
        all_reduce(x, [[0, 1], [2, 3]]),
        all_reduce(x, [[0, 1, 2, 3]])])


def _mode_flattened_ids() -> Case:
    x = distinct(8, (4,))
    return Case("mode_flattened_ids", [x], [
        all_reduce(x, [[0, 5], [1, 4], [2, 7], [3, 6]]),
        all_gather(x, [[7, 0], [1, 2], [3, 4], [5, 6]], 0),
        reduce_scatter(x, [[0, 1], [2, 3], [4, 5], [6, 7]], 0)])


def _mode_cross_partition() -> Case:
    x = distinct(8, (4, 2))
    # partition groups within each replica: replica r's partitions are devices 4r .. 4r+3
    return Case("mode_cross_partition", [x], [
        all_to_all(x, [[0, 1, 2, 3], [4, 5, 6, 7]], 0),
        all_to_all(x, [[0, 3], [1, 2], [4, 7], [5, 6]], 0)])


def _modes_other_ops() -> Case:
    x = distinct(8, (8,))
    def dev(r, p):                                          # 2 replicas x 4 partitions
        return 4 * r + p

    def crp(groups):
        """cross-replica-and-partition: the listed replicas in order, each with all its partitions
        (replica-major; XLA's reduce-scatter ranks measured with the order {1,0})"""
        return [[dev(r, p) for r in g for p in range(4)] for g in groups]

    def cr(groups):
        """cross-replica: the listed replicas within each partition"""
        return [[dev(r, p) for r in g] for p in range(4) for g in groups]

    def cp(groups):
        """cross-partition: the listed partitions within each replica"""
        return [[dev(r, p) for p in g] for r in range(2) for g in groups]

    return Case("modes_other_ops", [x], [
        all_gather(x, crp([[1], [0]]), 0),
        reduce_scatter(x, crp([[1, 0]]), 0),
        all_to_all(x, cr([[1, 0]]), 0),
        all_to_all(x, cp([[0, 1, 2, 3]]), 0),
        permute(x, [(dev(0, p), dev(1, p)) for p in range(4)]),
        permute(x, [(dev(r, s), dev(r, (s + 1) % 4)) for r in range(2) for s in range(4)])])


def _iota_groups() -> Case:
    x = distinct(8, (2,))
    fours = np.arange(8).reshape(2, 4)                     # [2,4]<=[8]
    twos = np.arange(8).reshape(2, 4).T.reshape(4, 2)      # [4,2]<=[2,4]T(1,0)
    return Case("iota_groups", [x], [
        all_reduce(x, fours.tolist()),
        all_reduce(x, twos.tolist()),
        all_gather(x, twos.tolist(), 0)])


def _mesh_groups() -> Case:
    x = distinct(8, (2,))
    mesh = np.arange(8).reshape(2, 4)                      # axes x=2, y=4 over devices 0..7
    ordered = np.array([0, 2, 4, 6, 1, 3, 5, 7]).reshape(2, 4)   # the same mesh over device_ids
    # Groups over an axis: the devices that differ only in that axis' coordinate (XLA's
    # MeshAxesReplicaGroupList reshapes the mesh's device assignment and keeps the grouped axes last).
    return Case("mesh_groups", [x], [
        all_reduce(x, mesh.tolist()),
        all_reduce(x, mesh.T.tolist()),
        all_reduce(x, ordered.T.tolist())],
        xla_leaves=(0, 1),
        note="XLA CPU (through JAX's HLO->StableHLO import) drops `device_ids=` of a mesh; that leaf "
             "follows XLA's replica_group.cc")


def _ragged_all_to_all() -> Case:
    n = 4
    inp = distinct(n, (6, 2))
    out0 = np.full((n, 8, 2), -1, np.float32)
    sizes = np.array([[(i + j) % 3 for j in range(n)] for i in range(n)], np.int32)    # i sends j
    in_off = np.concatenate([np.zeros((n, 1), np.int32), np.cumsum(sizes, 1)[:, :-1]], 1).astype(np.int32)
    # j packs what it receives in sender order: sender i's rows go at sum(sizes[:i, j])
    out_off = np.concatenate([np.zeros((1, n), np.int32), np.cumsum(sizes, 0)[:-1]], 0).astype(np.int32)
    recv = sizes.T.copy()                                   # recv[j][i]: what j gets from i
    exp = out0.copy()
    for i in range(n):
        for j in range(n):
            k, o = sizes[i, j], out_off[i, j]
            exp[j, o:o + k] = inp[i, in_off[i, j]:in_off[i, j] + k]
    # output_offsets[j] is an offset into peer j's output (XLA's GPU ragged-all-to-all thunk
    # exchanges them with an all-to-all to learn its local offsets)
    return Case("ragged_all_to_all", [inp, out0, in_off, sizes, out_off, recv], [exp], xla=None,
                note="XLA CPU has no ragged-all-to-all (the process crashes); semantics from XLA's "
                     "GPU runtime")


def _send_recv_pipeline() -> Case:
    x = distinct(4, (2, 2))
    # XLA's GPU pipeline tests: a recv whose device is no pair's target gives zeros.
    return Case("send_recv_pipeline", [x], [permute(x, [(0, 1), (1, 2), (2, 3)])], xla=False,
                note="XLA CPU: send/recv are not supported by the CPU thunk emitter")


def _send_recv_while() -> Case:
    x = distinct(4, (2, 2))
    v = x
    for _ in range(3):
        v = permute(v, [(0, 1), (1, 2), (2, 3)])
    return Case("send_recv_while", [x], [v], xla=False,
                note="XLA CPU: send/recv are not supported by the CPU thunk emitter")


def _send_recv_channels() -> Case:
    x = distinct(4, (2, 2))
    # XLA's GPU pipeline tests give the send channel 1 and the recv channel 2: the runtime matches
    # them by the pairs (NCCL point-to-point), and its verifier's deadlock check matches a send with
    # the recv carrying the same _xla_send_recv_source_target_pairs.
    return Case("send_recv_channels", [x], [permute(x, [(0, 1), (1, 2), (2, 3)])], xla=False,
                note="XLA CPU: send/recv are not supported by the CPU thunk emitter")


def _send_recv_pipelined() -> Case:
    x = distinct(4, (2, 2))
    v = x
    for _ in range(3):            # one transfer started before the loop, one per iteration (2)
        v = permute(v, [(0, 1), (1, 2), (2, 3)])
    return Case("send_recv_pipelined", [x], [v], xla=False,
                note="XLA CPU: send/recv are not supported by the CPU thunk emitter")


def _divergent_branches() -> Case:
    x = distinct(4, (3,)) * np.array([1, -1, 1], np.float32)
    pairs = [[0, 1], [2, 3]]
    exp = np.concatenate([all_reduce(x, pairs)[:2], all_reduce(x, pairs, np.maximum)[2:]])
    return Case("divergent_branches", [x], [exp])


def _divergent_while() -> Case:
    x = distinct(4, (3,)) * np.array([1, -1, 1], np.float32)
    pair_sum = all_reduce(x, [[0, 1], [2, 3]])
    steps = np.array([1, 1, 3, 3], np.uint32)
    # one step on partitions 0, 1; three on 2, 3 (each later step doubles the pair's equal values)
    return Case("divergent_while", [x], [steps, pair_sum * np.array([1, 1, 4, 4], np.float32)[:, None]])


def _async_forms() -> Case:
    x = distinct(4, (4, 2))
    return Case("async_forms", [x], [
        all_reduce(x, [[0, 1], [2, 3]]),
        all_gather(x, [[0, 2], [1, 3]], 0),
        permute(x, [(0, 1), (1, 2), (2, 3), (3, 0)]),
        reduce_scatter(x, [[0, 1], [2, 3]], 0),
        all_to_all(x, [[0, 1, 2, 3]], 0)])


def _combined_forms() -> Case:
    x = distinct(4, (4, 2))
    y = distinct(4, (2,), base=-50)
    return Case("combined_forms", [x, y], [all_gather(x, [[0, 2], [1, 3]], 0), all_gather(y, [[0, 2], [1, 3]], 0)])


def _combined_more() -> Case:
    x = distinct(4, (4, 2))
    y = distinct(4, (2,), base=-50)
    pairs, everyone = [[0, 1], [2, 3]], [[0, 1, 2, 3]]
    return Case("combined_more", [x, y], [
        reduce_scatter(x, [[1, 0], [3, 2]], 0), reduce_scatter(y, [[1, 0], [3, 2]], 0),
        all_reduce(x, pairs), all_reduce(y, pairs), all_gather(x, everyone, 0), all_gather(y, everyone, 0)],
        xla=False, note="JAX's HLO->StableHLO import refuses a reduce-scatter of several operands and "
                        "async tuple all-reduce/all-gather")


def _permute_forms() -> Case:
    x = distinct(4, (4, 2))
    return Case("permute_forms", [x], [permute(x, [(0, 2), (2, 0), (1, 3)])])


def _permute_combined() -> Case:
    x = distinct(4, (4, 2))
    y = distinct(4, (3,), np.int32, base=-150)
    ring = [(0, 1), (1, 2), (2, 3), (3, 0)]
    return Case("permute_combined", [x, y], [permute(x, ring), permute(y, ring)], xla=False,
                note="JAX's HLO->StableHLO import refuses a collective-permute of several operands")


def _permute_in_place() -> Case:
    inp = distinct(4, (4, 2))
    out = np.full((4, 6, 2), -1, np.float32) - np.arange(4, dtype=np.float32)[:, None, None]
    exp = out.copy()
    for s, t in [(0, 1), (1, 2), (2, 3)]:
        exp[t, 3:5, 0:2] = inp[s, 1:3, 0:2]
    # The result is the `output` operand updated in place (XLA's dataflow analysis aliases the two),
    # so device 0, which nobody sends to, keeps its `output` unchanged.
    return Case("permute_in_place", [inp, out], [exp], xla=False,
                note="JAX's HLO->StableHLO import refuses the in-place form; no XLA runtime runs it")


def _dimensions_and_types() -> Case:
    x = distinct(4, (2, 4))
    flags = np.array([[1, 1, 0, 0, 1], [1, 0, 1, 0, 1], [1, 1, 0, 0, 1], [1, 1, 1, 0, 1]], bool)
    flags[:, 3] = [0, 0, 1, 0]                               # one device alone says yes
    bytes_ = np.array([[200, 1, 255], [100, 2, 255], [0, 3, 1], [7, 4, 2]], np.uint8)
    big = np.array([[2 ** 20, -3], [2 ** 20, 5], [2 ** 20, 7], [2 ** 5, -11]], np.int64)
    everyone = [[0, 1, 2, 3]]
    return Case("dimensions_and_types", [x, flags, bytes_, big], [
        all_gather(x, everyone, 1),
        reduce_scatter(x, [[0, 1], [2, 3]], 1),
        all_to_all(x, everyone, 1),
        all_reduce(flags, everyone, np.logical_and),
        all_reduce(flags, everyone, np.logical_or),
        all_reduce(bytes_, everyone),                        # wraps modulo 256
        all_reduce(big, everyone, np.multiply),              # 2^65 wraps modulo 2^64
        all_gather(flags, everyone, 0)])


def _all_reduce_tuple() -> Case:
    x = distinct(4, (3,))[[2, 0, 3, 1]] * np.array([1, -1, 1], np.float32)   # the max moves around
    y = np.stack([np.array([[1, 9], [5, -2]]) * (d % 2 * 2 - 1) + d for d in range(4)]).astype(np.float32)
    z = np.stack([np.array([2, -3, 7]) + d for d in range(4)]).astype(np.int32)
    return Case("all_reduce_tuple", [x, y, z], [
        all_reduce(x, [[0, 1, 2, 3]], np.maximum),
        all_reduce(y, [[0, 1, 2, 3]], np.maximum),
        all_reduce(z, [[0, 3], [1, 2]], np.multiply)])


def _all_reduce_uneven() -> Case:
    x = distinct(4, (2,))
    return Case("all_reduce_uneven", [x], [all_reduce(x, [[0, 1, 2], [3]])])


def _all_reduce_rounding() -> Case:
    import ml_dtypes
    x = np.array([[1e8, 1, 3, 1e-8, 7, 0.1],
                  [1, 1e8, -1e8, 1, 1e8, 0.2],
                  [-1e8, -1e8, 1, 3e7, -1e8, 0.3],
                  [1, 1, 1e8, -3e7, 3, 0.4]], np.float32)
    y = np.array([[256, 1, 1, 1, 0.1, 3, 2**30], [1, 256, 1, 1, 0.2, 5, 1], [1, 1, 256, 1, 0.3, 7, -2**30],
                  [1, 1, 1, 256, 0.4, 11, 1]]).astype(ml_dtypes.bfloat16)
    z = np.array([[2048, 0.1], [1, 0.2], [1, 0.3], [1, 0.4]], np.float16)

    def fold(a, order, dtype):
        acc = a[order[0]].astype(dtype)
        for k in order[1:]:
            acc = (acc + a[k].astype(dtype)).astype(dtype)
        return np.broadcast_to(acc, a.shape).copy()
    # Measured on XLA CPU (test_expectations_match_xla_cpu): the values are added one after the
    # other in the order the group lists them; bf16 is summed the same way in f32 and rounded
    # once (256 + 1 + 1 + 1 is 260, not 256 as when rounding every step; 2^30 + 1 - 2^30 + 1 is 1,
    # not the exact 2), while f16 is rounded after every step (2048 + 1 + 1 + 1 is 2048).
    return Case("all_reduce_rounding", [x, y, z], [
        fold(x, [0, 1, 2, 3], np.float32),
        fold(x, [2, 0, 3, 1], np.float32),
        fold(y, [0, 1, 2, 3], np.float32).astype(ml_dtypes.bfloat16),
        fold(z, [0, 1, 2, 3], np.float16)])


def _all_reduce_custom() -> Case:
    z = np.stack([np.array([2, -3, 7]) * (d + 1) for d in range(4)]).astype(np.int32)
    return Case("all_reduce_custom", [z], [all_reduce(z, [[0, 1, 2, 3]])], xla=False,
                note="XLA CPU refuses a reducer it cannot name ('Unsupported reduction computation'); "
                     "max(a,b)+min(a,b) is a+b, whatever the order")


def _all_to_all_tuple() -> Case:
    ops = [distinct(4, (2,), base=1000 * k) for k in range(4)]     # ops[k][i]: device i's k-th operand
    # element i of device d's result is operand d of device i
    fwd = [np.stack([ops[d][i] for d in range(4)]) for i in range(4)]
    # group {3,2,1,0}: device d sits at position 3-d; element q of its result comes from the member at
    # position q (device 3-q), which sends its operand number (3-d)
    rev = [np.stack([ops[3 - d][3 - q] for d in range(4)]) for q in range(4)]
    return Case("all_to_all_tuple", ops, fwd + rev)


CASES: dict[str, Callable[[], Case]] = {f.__name__[1:]: f for f in (
    _collective_broadcast, _device_ids, _mode_cross_replica, _mode_cross_replica_and_partition,
    _mode_flattened_ids, _mode_cross_partition, _modes_other_ops, _iota_groups, _mesh_groups, _ragged_all_to_all,
    _send_recv_pipeline, _send_recv_while, _send_recv_channels, _send_recv_pipelined,
    _divergent_branches, _divergent_while, _async_forms, _combined_forms, _combined_more, _permute_forms, _permute_combined,
    _permute_in_place,
    _dimensions_and_types, _all_reduce_tuple, _all_reduce_uneven, _all_reduce_rounding, _all_reduce_custom, _all_to_all_tuple)}


def case(name: str) -> Case:
    return CASES[name]()


def header_grid(text: str) -> tuple[int, int]:
    r = re.search(r"replica_count=(\d+)", text)
    p = re.search(r"num_partitions=(\d+)", text)
    return (int(r.group(1)) if r else 1, int(p.group(1)) if p else 1)


def assert_leaves(got: list, expected: list, what: str):
    assert len(got) == len(expected), f"{what}: {len(got)} result leaves, expected {len(expected)}"
    for k, (g, e) in enumerate(zip(got, expected)):
        g = np.asarray(g)
        if g.dtype.kind == "V" and g.dtype.itemsize == e.dtype.itemsize:
            g = g.view(e.dtype)           # npz keeps bf16 & co. as raw records (hlo's and ours alike)
        assert g.dtype == e.dtype, f"{what}: leaf {k} dtype {g.dtype}, expected {e.dtype}"
        assert g.shape == e.shape, f"{what}: leaf {k} shape {g.shape}, expected {e.shape}"
        np.testing.assert_array_equal(g, e, err_msg=f"{what}: leaf {k}")


# ----------------------------------------------------------------------------- XLA CPU (subprocess)

def _manual_text(text: str) -> str:
    """The module with every instruction marked sharding={manual}: XLA's SPMD partitioner (on
    whenever num_partitions > 1) then leaves the per-device program as written."""
    from hlo_cli.parser import parse

    def leaves(shape):
        return sum(leaves(s) for s in shape.tuple_shapes) if shape.is_tuple else 1

    lines = text.split("\n")
    for comp in parse(text).computations:
        for inst in comp.instructions:
            n = leaves(inst.shape)
            mark = "{manual}" if not inst.shape.is_tuple else "{" + ",".join(["{manual}"] * n) + "}"
            lines[inst.loc.line - 1] = lines[inst.loc.line - 1].rstrip() + ", sharding=" + mark
    return "\n".join(lines)


def _xla_run(text: str, inputs: list) -> list:
    """Compile `text` for replica_count x num_partitions XLA CPU devices and run it on per-device
    inputs; the result leaves stacked over the devices."""
    import jax

    from hlo_cli.tools.xla_reference import run_on_devices
    jax.config.update("jax_enable_x64", True)      # s64/u64/f64 inputs kept as they are
    replicas, partitions = header_grid(text)
    if partitions > 1:
        text = _manual_text(text)
    return run_on_devices(text, inputs, replicas, partitions)


def _xla_main(out_dir: str):
    """Run every case XLA CPU can run, and compile every module under errors/; write the results
    (npz per case) and a summary (json) into out_dir."""
    summary = {}
    for name in CASES:
        c = case(name)
        if c.xla is None:
            continue
        print(name, file=sys.stderr, flush=True)
        try:
            got = _xla_run((DIR / f"{name}.hlo").read_text(), c.inputs)
            np.savez(Path(out_dir) / f"{name}.npz", *got)
            summary[name] = "ok"
        except Exception as e:                 # reported by the test, with XLA's message
            summary[name] = f"error: {e}"
    for path in sorted(p for p in ERRORS.glob("*.hlo") if not p.stem.startswith("mismatch_")):
        text = path.read_text()
        replicas, partitions = header_grid(text)
        try:
            _xla_run(text, [np.zeros((replicas * partitions, 2), np.float32)])
            summary[path.name] = "accepted"
        except Exception as e:
            summary[path.name] = f"refused: {str(e).splitlines()[0]}"
    (Path(out_dir) / "summary.json").write_text(json.dumps(summary, indent=1))


# ----------------------------------------------------------------------------- the tests

VALID = sorted(p.stem for p in DIR.glob("*.hlo"))
MISMATCHED = sorted(p.stem for p in ERRORS.glob("mismatch_*.hlo"))
BAD_IDS = sorted(p.stem for p in ERRORS.glob("*.hlo") if p.stem not in MISMATCHED)


def test_every_module_has_a_case():
    assert VALID == sorted(CASES)
    assert sorted(MISMATCHED + BAD_IDS) == sorted(p.stem for p in ERRORS.glob("*.hlo"))


@pytest.mark.parametrize("name", VALID)
def test_check_accepts(name):
    from click.testing import CliRunner

    from hlo_cli.cli import main
    r = CliRunner().invoke(main, ["check", str(DIR / f"{name}.hlo")])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output


@pytest.mark.parametrize("name", BAD_IDS)
def test_check_refuses_bad_groups(name):
    from click.testing import CliRunner

    from hlo_cli import parse_file
    from hlo_cli.cli import main
    path = ERRORS / f"{name}.hlo"
    r = CliRunner().invoke(main, ["check", str(path)])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    root = parse_file(str(path)).entry_computation.root
    assert f"{path.name}:" in r.output and f"%{root}:" in r.output, r.output


def _devices():
    return pytest.importorskip("hlo_cli.devices.collectives", reason="the collectives land during the session")


@pytest.mark.parametrize("name", VALID)
def test_library(name):
    _devices()
    from hlo_cli import parse_file
    from hlo_cli.topology import grid_of
    from hlo_cli.devices import run_devices
    from hlo_cli.devices.values import Stacked, leaves
    c = case(name)
    module = parse_file(str(DIR / f"{name}.hlo"))
    grid = grid_of(module)
    assert (grid.replicas, grid.partitions) == header_grid((DIR / f"{name}.hlo").read_text())
    result = run_devices(module, [Stacked(a) for a in c.inputs], grid)
    assert result.devices == tuple(range(grid.count))
    assert_leaves(leaves(result.per_device()), c.expected, name)


def _npz_inputs(module_path: Path, inputs: list, path: Path):
    from hlo_cli import parse_file
    params = parse_file(str(module_path)).entry_computation.parameters
    np.savez(path, **{p.name: a for p, a in zip(params, inputs)})


@pytest.mark.parametrize("name", VALID)
def test_cli(name, tmp_path):
    _devices()
    from click.testing import CliRunner

    from hlo_cli.cli import main
    c = case(name)
    module = DIR / f"{name}.hlo"
    _npz_inputs(module, c.inputs, tmp_path / "in.npz")
    out = tmp_path / "out.npz"
    r = CliRunner().invoke(main, ["run", str(module), "--per-device", "--inputs", str(tmp_path / "in.npz"),
                                  "--output", str(out)])
    assert r.exit_code == 0, r.output
    with np.load(out) as z:
        got = [z[f"out{k}"] for k in range(len(z.files))]
    assert_leaves(got, c.expected, name)


# (module, devices that reached the collective, devices that did not, what those were doing)
MISMATCH_FACTS = [
    ("mismatch_conditional", [0], [1, 2, 3], "keep_branch"),
    ("mismatch_different_collectives", [0, 1], [2, 3], "high_branch"),
    ("mismatch_while", [1, 2, 3], [0], "while"),
]


def _names(text: str, ids: list[int]) -> bool:
    """`text` names exactly these devices somewhere, as a range (1-3) or a list (1, 2, 3 / 1,2,3)."""
    forms = {", ".join(map(str, ids)), ",".join(map(str, ids))}
    if len(ids) > 1 and ids == list(range(ids[0], ids[-1] + 1)):
        forms.add(f"{ids[0]}-{ids[-1]}")
    return any(re.search(rf"devices? {{?{re.escape(f)}(?![\d,-])", text) for f in forms)


def test_every_mismatch_has_its_facts():
    assert sorted(f[0] for f in MISMATCH_FACTS) == MISMATCHED


@pytest.mark.parametrize("name, reached, missing, doing", MISMATCH_FACTS)
def test_mismatched_collective_is_a_located_error(name, reached, missing, doing, tmp_path):
    """Devices that do not all reach a collective: exit 1 at once, naming the all-reduce (with its
    file:line:col), the devices that reached it, those that did not and what they did instead
    (never a hang)."""
    _devices()
    from click.testing import CliRunner

    from hlo_cli.cli import main
    module = ERRORS / f"{name}.hlo"
    np.savez(tmp_path / "in.npz", x=distinct(4, (2,)))
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["run", str(module), "--per-device", "--inputs", str(tmp_path / "in.npz")])
    elapsed = time.monotonic() - t0
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output
    text = r.output
    assert re.search(rf"{re.escape(name)}\.hlo:\d+:\d+: error: summed", text), text
    assert _names(text, reached) and _names(text, missing), text
    assert doing in text, text
    assert elapsed < 60                                   # a generous bound: a hang would never return


@pytest.mark.parametrize("name, reached, missing, doing", MISMATCH_FACTS)
def test_mismatched_collective_library_error(name, reached, missing, doing):
    _devices()
    from hlo_cli import parse_file
    from hlo_cli.topology import grid_of
    from hlo_cli.devices import run_devices
    from hlo_cli.devices.values import Stacked
    from hlo_cli.errors import HloEvalError
    module = parse_file(str(ERRORS / f"{name}.hlo"))
    with pytest.raises(HloEvalError) as e:
        run_devices(module, [Stacked(distinct(4, (2,)))], grid_of(module))
    msg = str(e.value)
    assert msg.startswith("summed:") and _names(msg, reached) and _names(msg, missing) and doing in msg, msg


@pytest.mark.parametrize("name", BAD_IDS)
def test_run_refuses_bad_groups(name, tmp_path):
    from click.testing import CliRunner

    from hlo_cli.cli import main
    path = ERRORS / f"{name}.hlo"
    r, p = header_grid(path.read_text())
    np.savez(tmp_path / "in.npz", x=distinct(r * p, (2,)))
    res = CliRunner().invoke(main, ["run", str(path), "--per-device", "--inputs", str(tmp_path / "in.npz")])
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    assert f"{path.name}:" in res.output


def _xla_results(out_dir: Path) -> dict:
    """Run this file as a subprocess on 8 XLA CPU host devices (the flag must be set before jax is
    imported); its summary, with the directory of its result files under '_dir'."""
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    out = subprocess.run([sys.executable, __file__, "--xla", str(out_dir)], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return dict(json.loads((out_dir / "summary.json").read_text()), _dir=out_dir)


def test_expectations_match_xla_cpu(tmp_path_factory):
    """The NumPy expectations against XLA CPU running the same module text on 8 host devices, and
    XLA refusing every bad replica-group module."""
    pytest.importorskip("jax")
    pytest.importorskip("jaxlib._hlo")
    res = _xla_results(tmp_path_factory.mktemp("xla"))
    for name in CASES:
        c = case(name)
        if c.xla:
            assert res.get(name) == "ok", (name, res.get(name))
        elif res.get(name) != "ok":
            continue                                # XLA CPU cannot run it (see the case's note)
        with np.load(res["_dir"] / f"{name}.npz") as z:
            got = [z[f"arr_{k}"] for k in range(len(z.files))]
        keep = c.xla_leaves if c.xla_leaves is not None else range(len(c.expected))
        assert_leaves([got[k] for k in keep], [c.expected[k] for k in keep], f"{name} (XLA CPU)")
    for name in BAD_IDS:
        assert res[f"{name}.hlo"].startswith("refused"), (name, res[f"{name}.hlo"])


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "--xla":
    _xla_main(sys.argv[2])
