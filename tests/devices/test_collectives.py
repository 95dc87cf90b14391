"""Collective semantics across devices (hlo_cli/devices/collectives.py).

Three layers:
- unit tests with expectations computed by hand (values chosen so that the order of a reduction,
  the precision it accumulates in, NaN and signed-zero handling show in the result);
- hypothesis laws (all-gather then reduce-scatter of integers, a permutation then its inverse,
  all-to-all twice);
- live differential tests against XLA CPU (slow; JAX in a subprocess with 8 host devices): hand-
  written modules compiled with num_replicas / num_partitions, and shard_map programs of every
  collective JAX has, compared bit for bit with run_collective's results.
"""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hlo_cli import parse
from hlo_cli.devices.collectives import OutsideSubset, route_send_recv, run_collective
from hlo_cli.topology.grid import DeviceGrid
from hlo_cli.errors import HloEvalError
from hlo_cli.interpreter.evaluator import EvalContext

BF16 = ml_dtypes.bfloat16


def collective(text: str, per_device: list[list], R: int, P: int = 1, devices=None, name=None):
    """run_collective on the module's root (or instruction `name`), operands given per device;
    returns one result per device (a tuple where the result is one)."""
    m = parse(text)
    inst = m.entry_computation.root_instruction if name is None else m.entry_computation.by_name[name]
    ec = EvalContext(m)
    devices = tuple(range(R * P)) if devices is None else tuple(devices)
    ops = []
    for k in range(len(per_device[0])):
        ops.append(_stack([per_device[i][k] for i in range(len(devices))]))
    out = run_collective(inst, ops, devices, DeviceGrid(R, P), ec.apply, module=m)
    return [_at(out, i) for i in range(len(devices))]


def _stack(vals):
    if isinstance(vals[0], tuple):
        return tuple(_stack([v[j] for v in vals]) for j in range(len(vals[0])))
    return np.stack([np.asarray(v) for v in vals])


def _at(v, i):
    return tuple(_at(e, i) for e in v) if isinstance(v, tuple) else v[i]


def bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind in "fcV" and a.dtype.itemsize in (1, 2, 4, 8) else a


def same(a, b) -> bool:
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(bits(a), bits(b))


def all_reduce(dt: str, n: int, red: str = "add", groups: str = "{}", size: int = 1) -> str:
    return (f"HloModule m, replica_count={n}\n"
            f"r {{ a = {dt}[] parameter(0)  b = {dt}[] parameter(1)  ROOT s = {dt}[] {red}(a, b) }}\n"
            f"ENTRY e {{ p = {dt}[{size}] parameter(0)\n"
            f"  ROOT r = {dt}[{size}] all-reduce(p), replica_groups={groups}, to_apply=r }}\n")


def reduce_values(dt, vals, red="add", groups="{}"):
    n = len(vals)
    out = collective(all_reduce(dt, n, red, groups), [[np.asarray([v], dtype=DT[dt])] for v in vals], n)
    return out


DT = {"f32": np.float32, "f16": np.float16, "bf16": BF16, "f64": np.float64, "s8": np.int8, "s32": np.int32,
      "u32": np.uint32, "pred": np.bool_, "c64": np.complex64, "s4": ml_dtypes.int4,
      "f8e4m3fn": ml_dtypes.float8_e4m3fn}


# ============================================================================ all-reduce arithmetic

def test_sum_folds_in_rank_order_from_zero():
    # 1e8 + 1 loses the 1; only the sequential order 0,1,2,3 leaves 1.0 (tree and reverse give 0)
    out = reduce_values("f32", [1e8, 1, -1e8, 1])
    assert all(same(o, np.float32([1.0])) for o in out)
    # the rank order is the order of the group as written
    out = reduce_values("f32", [1e8, 1, -1e8, 1], groups="{{3,1,2,0}}")
    assert same(out[0], np.float32([0.0]))


def test_sum_of_negative_zeros_is_positive_zero_and_subnormals_flush():
    out = reduce_values("f32", [-0.0] * 4)
    assert same(out[0], np.float32([0.0]))
    assert same(reduce_values("f32", [1e-40] * 4)[0], np.float32([0.0]))


def test_bf16_sums_in_f32_and_rounds_once():
    # per-step bf16 rounding would give 0 (256 + 1 rounds back to 256)
    assert same(reduce_values("bf16", [256, 1, 1, -256])[0], np.array([2], BF16))


def test_f16_rounds_after_every_step():
    # f32 accumulation would give 2; f16 steps lose each 1 (2048 + 1 ties to 2048)
    assert same(reduce_values("f16", [2048, 1, 1, -2048])[0], np.float16([0]))


@pytest.mark.parametrize("red, vals, want", [
    ("maximum", [np.nan, 1, 2, 3], 3.0),
    ("maximum", [1, 2, 3, np.nan], 3.0),
    ("minimum", [1, np.nan, 2, 3], 1.0),
    ("maximum", [np.nan] * 4, -np.inf),          # a NaN is never taken; the start value stays
    ("minimum", [np.nan] * 4, np.inf),
    ("maximum", [0.0, -0.0, 0.0, -0.0], 0.0),   # of equal values the first in rank order stays
    ("maximum", [-0.0, 0.0, -0.0, 0.0], -0.0),
    ("minimum", [-0.0, 0.0, -0.0, 0.0], -0.0),
    ("minimum", [0.0, -0.0, 0.0, -0.0], 0.0),
])
def test_max_min_are_std_max_min(red, vals, want):
    """All measured on XLA CPU (see the module docstring of collectives.py)."""
    assert same(reduce_values("f32", vals, red)[0], np.float32([want]))


def test_integer_and_pred_reductions():
    assert same(reduce_values("s8", [100] * 4)[0], np.int8([-112]))                 # wraps
    assert same(reduce_values("s32", [-5, -6, -7, -8], "maximum")[0], np.int32([-5]))
    assert same(reduce_values("u32", [5, 6, 7, 8], "minimum")[0], np.uint32([5]))
    assert same(reduce_values("pred", [False, True, False, False])[0], np.array([True]))       # add = or
    assert same(reduce_values("pred", [True, False, True, True], "and")[0], np.array([False]))
    assert same(reduce_values("pred", [True, False, True, True], "multiply")[0], np.array([False]))
    assert same(reduce_values("pred", [False, True, False, False], "or")[0], np.array([True]))


def test_other_reducers_fold_from_the_first_contribution():
    # subtract: ((x0 - x1) - x2) - x3 in rank order
    assert same(reduce_values("f32", [10, 1, 2, 3], "subtract")[0], np.float32([4]))
    assert same(reduce_values("f32", [10, 1, 2, 3], "subtract", "{{3,2,1,0}}")[0], np.float32([-10]))
    # and on integers (XLA CPU refuses it; a plain fold here)
    assert same(reduce_values("s32", [7, 6, 12, 15], "and")[0], np.int32([4]))


def test_complex_max_is_an_error():
    with pytest.raises(HloEvalError, match="complex"):
        reduce_values("c64", [1, 2], "maximum")


def test_groups_of_different_sizes_and_tuples():
    text = ("HloModule m, replica_count=4\n"
            "r { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n"
            "ENTRY e { p = f32[3] parameter(0)  q = s32[2] parameter(1)\n"
            "  ROOT r = (f32[3], s32[2]) all-reduce(p, q), replica_groups={{0},{1,2,3}}, to_apply=r }\n")
    out = collective(text, [[np.full(3, d + 1, np.float32), np.full(2, 10 * d, np.int32)] for d in range(4)], 4)
    assert same(out[0][0], np.full(3, 1, np.float32)) and same(out[0][1], np.zeros(2, np.int32))
    for d in (1, 2, 3):
        assert same(out[d][0], np.full(3, 9, np.float32)) and same(out[d][1], np.full(2, 60, np.int32))


def test_all_reduce_start_has_the_all_reduce_result():
    text = ("HloModule m, replica_count=2\n"
            "r { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n"
            "ENTRY e { p = f32[2] parameter(0)\n"
            "  s = f32[2] all-reduce-start(p), replica_groups={}, to_apply=r\n  ROOT d = f32[2] all-reduce-done(s) }\n")
    out = collective(text, [[np.float32([1, 2])], [np.float32([3, 4])]], 2, name="s")
    assert same(out[1], np.float32([4, 6]))


# ============================================================================ data movement

def test_all_gather_order_operands_and_start_form():
    text = ("HloModule m, replica_count=4\nENTRY e { p = s32[2,1] parameter(0)  q = f32[1,1] parameter(1)\n"
            "  ROOT r = (s32[2,4], f32[1,4]) all-gather(p, q), dimensions={1}, replica_groups={{2,0,1,3}} }\n")
    out = collective(text, [[np.array([[d], [-d]], np.int32), np.float32([[d]])] for d in range(4)], 4)
    assert same(out[3][0], np.array([[2, 0, 1, 3], [-2, 0, -1, -3]], np.int32))
    assert same(out[1][1], np.float32([[2, 0, 1, 3]]))
    text = ("HloModule m, replica_count=2\nENTRY e { p = s32[1] parameter(0)\n"
            "  s = (s32[1], s32[2]) all-gather-start(p), dimensions={0}, replica_groups={}\n"
            "  ROOT d = s32[2] all-gather-done(s) }\n")
    out = collective(text, [[np.array([5], np.int32)], [np.array([6], np.int32)]], 2, name="s")
    assert same(out[0][0], np.int32([5])) and same(out[0][1], np.int32([5, 6]))


def test_reduce_scatter_gives_rank_k_block_k():
    text = ("HloModule m, replica_count=4\n"
            "r { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n"
            "ENTRY e { p = f32[2,4] parameter(0)\n"
            "  ROOT r = f32[2,1] reduce-scatter(p), dimensions={1}, replica_groups={{0,2,1,3}}, to_apply=r }\n")
    x = [np.arange(8, dtype=np.float32).reshape(2, 4) * 10 ** d for d in range(4)]
    total = sum(x)
    out = collective(text, [[v] for v in x], 4)
    for rank, dev in enumerate((0, 2, 1, 3)):
        assert same(out[dev], total[:, rank:rank + 1])


def test_all_to_all_array_and_tuple_forms():
    text = ("HloModule m, replica_count=4\nENTRY e { p = s32[2,4] parameter(0)\n"
            "  ROOT r = s32[2,4] all-to-all(p), dimensions={1}, replica_groups={{0,1,2,3}} }\n")
    x = [np.arange(8, dtype=np.int32).reshape(2, 4) + 100 * d for d in range(4)]
    out = collective(text, [[v] for v in x], 4)
    for k in range(4):           # receiver k: column k of every sender, in sender order
        assert same(out[k], np.stack([x[j][:, k] for j in range(4)], axis=1))
    text = ("HloModule m, replica_count=2\nENTRY e { p0 = s32[2] parameter(0)  p1 = s32[2] parameter(1)\n"
            "  ROOT r = (s32[2], s32[2]) all-to-all(p0, p1), replica_groups={{1,0}} }\n")
    ops = [[np.int32([10 * d, 0]), np.int32([10 * d + 1, 1])] for d in range(2)]
    out = collective(text, ops, 2)
    # rank k gets, as element j, operand k of rank j (ranks: device 1 is rank 0)
    assert same(out[1][0], np.int32([10, 0])) and same(out[1][1], np.int32([0, 0]))
    assert same(out[0][0], np.int32([11, 1])) and same(out[0][1], np.int32([1, 1]))


def test_collective_permute_zeros_combined_and_start():
    text = ("HloModule m, replica_count=4\nENTRY e { p = s32[2] parameter(0)  q = f32[1] parameter(1)\n"
            "  ROOT r = (s32[2], f32[1]) collective-permute(p, q), source_target_pairs={{0,1},{1,2},{3,0}} }\n")
    out = collective(text, [[np.int32([d, 7]), np.float32([d + .5])] for d in range(4)], 4)
    assert [o[0].tolist() for o in out] == [[3, 7], [0, 7], [1, 7], [0, 0]]
    assert [o[1].tolist() for o in out] == [[3.5], [0.5], [1.5], [0.0]]
    text = ("HloModule m, replica_count=2\nENTRY e { p = s32[2] parameter(0)\n"
            "  s = (s32[2], s32[2], u32[], u32[]) collective-permute-start(p), source_target_pairs={{0,1}}\n"
            "  ROOT d = s32[2] collective-permute-done(s) }\n")
    out = collective(text, [[np.int32([1, 2])], [np.int32([3, 4])]], 2, name="s")
    assert len(out[0]) == 4 and same(out[1][0], np.int32([3, 4])) and same(out[1][1], np.int32([1, 2]))
    assert same(out[0][1], np.int32([0, 0])) and same(out[0][2], np.uint32(0))


def test_collective_permute_cross_partition():
    text = ("HloModule m, replica_count=2, num_partitions=2\nENTRY e { p = s32[1] parameter(0)\n"
            "  ROOT r = s32[1] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}} }\n")
    out = collective(text, [[np.int32([d])] for d in range(4)], 2, 2)
    assert [int(o[0]) for o in out] == [1, 0, 3, 2]


def test_collective_permute_in_place():
    text = ("HloModule m, replica_count=2\nENTRY e {\n"
            "  input = f32[4] parameter(0)  output = f32[6] parameter(1)\n"
            "  i = s32[] parameter(2)  o = s32[] parameter(3)\n"
            "  io = (s32[]) tuple(i)  oo = (s32[]) tuple(o)\n"
            "  ROOT r = f32[6] collective-permute(input, output, io, oo), source_target_pairs={{0,1}}, "
            "slice_sizes={{2}} }\n")
    m = parse(text)
    inst = m.entry_computation.root_instruction
    D = 2
    ops = [np.stack([np.arange(4, dtype=np.float32) + 10 * d for d in range(D)]),
           np.full((D, 6), -1, np.float32),
           (np.array([1, 2], np.int32),),              # input offsets per device (device 0 reads at 1)
           (np.array([0, 3], np.int32),)]              # output offsets (device 1 writes at 3)
    out = run_collective(inst, ops, (0, 1), DeviceGrid(2, 1), EvalContext(m).apply, module=m)
    assert out[0].tolist() == [-1] * 6                                       # nothing reaches device 0
    assert out[1].tolist() == [-1, -1, -1, 1, 2, -1]


def test_collective_broadcast_first_of_group_and_zeros_elsewhere():
    text = ("HloModule m, replica_count=4\nENTRY e { p = s32[2] parameter(0)\n"
            "  ROOT r = s32[2] collective-broadcast(p), replica_groups={{1,0}} }\n")
    out = collective(text, [[np.int32([d, 7])] for d in range(4)], 4)
    assert [o.tolist() for o in out] == [[1, 7], [1, 7], [0, 0], [0, 0]]


RAGGED = ("HloModule m, replica_count=2\nENTRY e { i = s32[3] parameter(0)  o = s32[4] parameter(1)\n"
          "  io = s64[@N@] parameter(2)  ss = s64[@N@] parameter(3)\n"
          "  oo = s64[@N@] parameter(4)  rs = s64[@N@] parameter(5)\n"
          "  ROOT r = s32[4] ragged-all-to-all(i, o, io, ss, oo, rs), replica_groups={{0,1}} }\n")


def test_ragged_all_to_all_spec_example():
    """The example of XLA's operation semantics: offsets in the target's output, given by the sender."""
    ops = [[np.int32([1, 2, 2]), np.zeros(4, np.int32), np.int64([0, 1]), np.int64([1, 2]), np.int64([0, 0]),
            np.int64([1, 1])],
           [np.int32([3, 4, 0]), np.zeros(4, np.int32), np.int64([0, 1]), np.int64([1, 1]), np.int64([1, 2]),
            np.int64([2, 1])]]
    out = collective(RAGGED.replace("@N@", "2"), ops, 2)
    assert out[0].tolist() == [1, 3, 0, 0] and out[1].tolist() == [2, 2, 4, 0]


def test_ragged_all_to_all_several_updates_and_bounds():
    text = RAGGED.replace("@N@", "2,2")
    # two updates per peer: device 0 sends rows 0 and 2 to itself (output rows 3 and 0), nothing to 1
    ops = [[np.int32([5, 6, 7]), np.full(4, -1, np.int32), np.int64([[0, 2], [0, 0]]), np.int64([[1, 1], [0, 0]]),
            np.int64([[3, 0], [0, 0]]), np.int64([[1, 1], [0, 0]])],
           [np.int32([8, 9, 0]), np.full(4, -1, np.int32), np.int64([[0, 0], [1, 0]]), np.int64([[0, 0], [2, 0]]),
            np.int64([[0, 0], [1, 0]]), np.int64([[0, 0], [2, 0]])]]
    out = collective(text, ops, 2)
    assert out[0].tolist() == [7, -1, -1, 5] and out[1].tolist() == [-1, 9, 0, -1]
    ops[1][3] = np.int64([[0, 0], [4, 0]])
    with pytest.raises(HloEvalError, match="out of range"):
        collective(text, ops, 2)


def test_replica_and_partition_ids():
    m = parse("HloModule m\nENTRY e { ROOT r = u32[] partition-id() }\n")
    pid = m.entry_computation.root_instruction
    out = run_collective(pid, [], (0, 1, 2, 3, 4, 5), DeviceGrid(2, 3), None, module=m)
    assert out.dtype == np.uint32 and out.tolist() == [0, 1, 2, 0, 1, 2]
    rid = parse("HloModule m\nENTRY e { ROOT r = u32[] replica-id() }\n").entry_computation.root_instruction
    assert run_collective(rid, [], (4, 5), DeviceGrid(2, 3), None).tolist() == [1, 1]


# ============================================================================ subsets and send/recv

def test_group_leaving_the_running_subset():
    text = all_reduce("f32", 4, groups="{{0,1},{2,3}}")
    # devices 2 and 3 alone: their group is complete
    out = collective(text, [[np.float32([1])], [np.float32([2])]], 4, devices=(2, 3))
    assert same(out[0], np.float32([3]))
    with pytest.raises(OutsideSubset) as e:
        collective(text, [[np.float32([1])], [np.float32([2])]], 4, devices=(1, 2))
    assert e.value.missing == (0,) and e.value.group == (0, 1) and e.value.instruction.name == "r"
    text = ("HloModule m, replica_count=4\nENTRY e { p = s32[1] parameter(0)\n"
            "  ROOT r = s32[1] collective-permute(p), source_target_pairs={{0,3}} }\n")
    with pytest.raises(OutsideSubset) as e:
        collective(text, [[np.int32([1])], [np.int32([2])]], 4, devices=(0, 1))
    assert e.value.missing == (3,)


def _send_recv(pairs: str | None):
    fa = f', frontend_attributes={{_xla_send_recv_source_target_pairs="{pairs}"}}' if pairs else ""
    text = ("HloModule m, num_partitions=4\nENTRY e { p = f32[2] parameter(0)  t = token[] after-all()\n"
            f"  s = (f32[2], u32[], token[]) send(p, t), channel_id=1{fa}\n"
            f"  r = (f32[2], u32[], token[]) recv(t), channel_id=1{fa}\n"
            "  sd = token[] send-done(s), channel_id=1\n  rd = (f32[2], token[]) recv-done(r), channel_id=1\n"
            "  ROOT g = f32[2] get-tuple-element(rd), index=0 }\n")
    c = parse(text).entry_computation
    return c.by_name["s"], c.by_name["r"]


def test_route_send_recv():
    s, r = _send_recv("{{0,1},{1,2},{2,3}}")
    x = np.arange(8, dtype=np.float32).reshape(4, 2)
    out = route_send_recv(s, r, x, (0, 1, 2, 3), DeviceGrid(1, 4))
    assert out.tolist() == [[0, 0], [0, 1], [2, 3], [4, 5]]
    s, r = _send_recv(None)
    assert route_send_recv(s, r, x[:1], (0,), DeviceGrid(1, 1)).tolist() == [[0, 1]]
    with pytest.raises(HloEvalError, match="_xla_send_recv_source_target_pairs"):
        route_send_recv(s, r, x, (0, 1, 2, 3), DeviceGrid(1, 4))


# ============================================================================ laws

@settings(max_examples=40, deadline=None)
@given(n=st.sampled_from([1, 2, 4]), rows=st.integers(1, 3), seed=st.integers(0, 2 ** 31 - 1))
def test_all_gather_then_reduce_scatter_is_n_times_the_operand(n, rows, seed):
    x = np.random.default_rng(seed).integers(-1000, 1000, size=(n, rows, 2)).astype(np.int32)
    ag = ("HloModule m, replica_count={n}\nENTRY e {{ p = s32[{r},2] parameter(0)\n"
          "  ROOT g = s32[{nr},2] all-gather(p), dimensions={{0}}, replica_groups={{}} }}\n"
          ).format(n=n, r=rows, nr=n * rows)
    rs = ("HloModule m, replica_count={n}\n"
          "add {{ a = s32[] parameter(0)  b = s32[] parameter(1)  ROOT s = s32[] add(a, b) }}\n"
          "ENTRY e {{ p = s32[{nr},2] parameter(0)\n"
          "  ROOT g = s32[{r},2] reduce-scatter(p), dimensions={{0}}, replica_groups={{}}, to_apply=add }}\n"
          ).format(n=n, r=rows, nr=n * rows)
    gathered = collective(ag, [[v] for v in x], n)
    back = collective(rs, [[v] for v in gathered], n)
    for d in range(n):
        assert same(back[d], (x[d] * n).astype(np.int32))


@settings(max_examples=40, deadline=None)
@given(perm=st.permutations(range(6)))
def test_permute_then_inverse_is_identity(perm):
    pairs = ",".join(f"{{{s},{t}}}" for s, t in enumerate(perm))
    inv = ",".join(f"{{{t},{s}}}" for s, t in enumerate(perm))
    text = ("HloModule m, replica_count=6\nENTRY e {{ p = f32[2] parameter(0)\n"
            "  ROOT r = f32[2] collective-permute(p), source_target_pairs={{{pairs}}} }}\n")
    x = [[np.float32([d, -d])] for d in range(6)]
    there = collective(text.format(pairs=pairs), x, 6)
    back = collective(text.format(pairs=inv), [[v] for v in there], 6)
    assert all(same(b, v[0]) for b, v in zip(back, x))


@settings(max_examples=30, deadline=None)
@given(dim=st.integers(0, 1), groups=st.sampled_from(["{}", "{{3,1,0,2}}", "{{0,1},{2,3}}", "{{2,0},{3,1}}"]),
       seed=st.integers(0, 1000))
def test_all_to_all_twice_is_identity(dim, groups, seed):
    n = 2 if "},{" in groups else 4
    shape = [4, 4]
    text = ("HloModule m, replica_count=4\nENTRY e {{ p = s32[4,4] parameter(0)\n"
            "  ROOT r = s32[4,4] all-to-all(p), dimensions={{{d}}}, replica_groups={g} }}\n").format(d=dim, g=groups)
    x = np.random.default_rng(seed).integers(0, 100, size=[4] + shape).astype(np.int32)
    once = collective(text, [[v] for v in x], 4)
    twice = collective(text, [[v] for v in once], 4)
    assert n in (2, 4) and all(same(a, b) for a, b in zip(twice, x))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2 ** 31 - 1), n=st.sampled_from([2, 3, 4, 8]))
def test_integer_sum_is_the_wrapped_total(seed, n):
    x = np.random.default_rng(seed).integers(-2 ** 31, 2 ** 31, size=(n, 5)).astype(np.int32)
    out = collective(all_reduce("s32", n, size=5), [[v] for v in x], n)
    want = x.astype(np.int64).sum(0).astype(np.int32)        # two's complement wrap
    assert all(same(o, want) for o in out)


# ============================================================================ XLA itself (slow)

_XLA_SCRIPT = textwrap.dedent(r'''
    import os, pickle, sys
    os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
    os.environ["JAX_PLATFORMS"] = "cpu"
    import numpy as np
    import jax
    jax.config.update("jax_enable_x64", True)
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    def run_hlo(text, per_device, R, Pn):
        from hlo_cli.tools.xla_reference import run_on_devices
        n = R * Pn
        stacked = [np.stack([np.asarray(per_device[d][k]) for d in range(n)]) for k in range(len(per_device[0]))]
        outs = run_on_devices(text, stacked, R, Pn)
        return [[o[d] for o in outs] for d in range(n)]

    def shard_map_case(name, mesh_shape, fn, in_spec, out_spec, x):
        try:
            from jax import shard_map
        except ImportError:
            from jax.experimental.shard_map import shard_map
        mesh = Mesh(np.array(jax.devices()[:8]).reshape(mesh_shape), ("x", "y")[: len(mesh_shape)])
        f = jax.jit(shard_map(fn, mesh=mesh, in_specs=in_spec, out_specs=out_spec))
        text = f.lower(x).compile().as_text()
        xin = jax.device_put(x, NamedSharding(mesh, in_spec))
        out = f(xin)
        ins = [np.asarray(s.data) for s in sorted(xin.addressable_shards, key=lambda s: s.device.id)]
        outs = [np.asarray(s.data) for s in sorted(out.addressable_shards, key=lambda s: s.device.id)]
        return text, ins, outs

    def shard_map_cases():
        from jax import lax
        import jax.numpy as jnp
        rng = np.random.default_rng(0)
        wide = (rng.standard_normal((16, 8)) * 10.0 ** rng.integers(-3, 4, (16, 8))).astype(np.float32)
        ints = rng.integers(-100, 100, (16, 8)).astype(np.int32)
        cases = {
            "psum_y": ((2, 4), lambda a: lax.psum(a, "y"), P(("x", "y")), P(("x", "y")), wide),
            "psum_xy": ((2, 4), lambda a: lax.psum(a, ("x", "y")), P(("x", "y")), P(("x", "y")), wide),
            "psum_x_bf16": ((2, 4), lambda a: lax.psum(a, "x"), P(("x", "y")), P(("x", "y")),
                            wide.astype(jnp.bfloat16)),
            "pmax_x": ((2, 4), lambda a: lax.pmax(a, "x"), P(("x", "y")), P(("x", "y")), wide),
            "pmin_y_int": ((2, 4), lambda a: lax.pmin(a, "y"), P(("x", "y")), P(("x", "y")), ints),
            "psum_scatter_y": ((2, 4), lambda a: lax.psum_scatter(a, "y", scatter_dimension=1, tiled=True),
                               P(("x", "y")), P(("x", "y")), wide),
            "all_gather_y": ((2, 4), lambda a: lax.all_gather(a, "y", axis=1, tiled=True), P(("x", "y")),
                             P(("x", "y")), ints),
            "all_to_all_y": ((2, 4), lambda a: lax.all_to_all(a, "y", 1, 1, tiled=True), P(("x", "y")),
                             P(("x", "y")), ints),
            "ppermute_y": ((2, 4), lambda a: lax.ppermute(a, "y", [(0, 1), (1, 2), (2, 0)]), P(("x", "y")),
                           P(("x", "y")), wide),
            "ppermute_x": ((2, 4), lambda a: lax.ppermute(a, "x", [(0, 1), (1, 0)]), P(("x", "y")),
                           P(("x", "y")), ints),
            "axis_index": ((2, 4), lambda a: a + lax.axis_index("y") * 100 + lax.axis_index("x") * 1000,
                           P(("x", "y")), P(("x", "y")), ints),
            "psum_1d": ((8,), lambda a: lax.psum(a, "x"), P("x"), P("x"), wide),
        }
        return {k: shard_map_case(k, *v) for k, v in cases.items()}

    cases = pickle.load(open(sys.argv[1], "rb"))
    result = {"hlo": {}, "shard_map": {}}
    for key, (text, per_device, R, Pn) in cases.items():
        try:
            result["hlo"][key] = run_hlo(text, per_device, R, Pn)
        except Exception as e:  # a module XLA CPU refuses: report it, the test decides
            result["hlo"][key] = "error: " + str(e).splitlines()[0]
    result["shard_map"] = shard_map_cases()
    pickle.dump(result, open(sys.argv[2], "wb"))
''')


def _wide(rng, n, size, dt):
    return [(rng.standard_normal(size) * 10.0 ** rng.integers(-3, 4, size)).astype(dt) for _ in range(n)]


def _xla_cases():
    rng = np.random.default_rng(11)
    cases = {}
    for n in (4, 8):
        for dt in ("f32", "f64", "f16", "bf16"):
            cases[f"sum_{dt}_{n}"] = (all_reduce(dt, n, size=64), [[v] for v in _wide(rng, n, 64, DT[dt])], n, 1)
    # columns: NaNs among numbers, signed zeros both ways, all NaN, a subnormal maximum / minimum
    vals = [np.float32([np.nan, 1, 0.0, -0.0, np.nan, -1, 1]), np.float32([2, np.nan, -0.0, 0.0, np.nan, -2, 2]),
            np.float32([-1, 3, 0.0, -0.0, np.nan, 1e-40, -1e-40]), np.float32([1e-40, -3, -0.0, -0.0, np.nan, -3, 3])]
    for red in ("maximum", "minimum", "add", "multiply"):
        cases[f"{red}_specials"] = (all_reduce("f32", 4, red, size=7), [[v] for v in vals], 4, 1)
    cases["sum_order_3120"] = (all_reduce("f32", 4, groups="{{3,1,2,0}}", size=64),
                               [[v] for v in _wide(rng, 4, 64, np.float32)], 4, 1)
    cases["sum_uneven"] = (all_reduce("f32", 4, groups="{{0},{1,2,3}}", size=64),
                           [[v] for v in _wide(rng, 4, 64, np.float32)], 4, 1)
    cases["sum_s8"] = (all_reduce("s8", 4, size=8),
                       [[rng.integers(-128, 128, 8).astype(np.int8)] for _ in range(4)], 4, 1)
    for red in ("or", "and"):
        cases[f"{red}_pred"] = (all_reduce("pred", 4, red, size=8),
                                [[rng.integers(0, 2, 8).astype(bool)] for _ in range(4)], 4, 1)
    c = [(rng.standard_normal(8) + 1j * rng.standard_normal(8)).astype(np.complex64) * 1e3 ** k for k in range(4)]
    cases["mul_c64"] = (all_reduce("c64", 4, "multiply", size=8), [[v] for v in c], 4, 1)
    ids = [[np.array([d], np.int32)] for d in range(8)]
    for key, attrs, k in [("ag_cr", "replica_groups={}", 2), ("ag_cr_order", "replica_groups={{1,0}}", 2),
                          ("ag_crp", "channel_id=1, replica_groups={}", 8),
                          ("ag_crp_order", "channel_id=1, replica_groups={{1,0}}", 8),
                          ("ag_flat", "channel_id=1, replica_groups={{0,5,2,7},{4,1,6,3}}, "
                                      "use_global_device_ids=true", 4),
                          ("ag_iota", "channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), "
                                      "use_global_device_ids=true", 4)]:
        cases[key] = ("HloModule m, replica_count=2, num_partitions=4\nENTRY e { p = s32[1] parameter(0)\n"
                      f"  ROOT r = s32[{k}] all-gather(p), dimensions={{0}}, {attrs} }}\n", ids, 2, 4)
    cases["a2a_cp"] = ("HloModule m, replica_count=2, num_partitions=4\nENTRY e { p = s32[4,2] parameter(0)\n"
                       "  ROOT r = s32[4,2] all-to-all(p), channel_id=1, dimensions={0}, "
                       "replica_groups={{3,0},{1,2}} }\n",
                       [[np.arange(8, dtype=np.int32).reshape(4, 2) + 100 * d] for d in range(8)], 2, 4)
    cases["a2a_tuple"] = ("HloModule m, replica_count=4\nENTRY e { p0 = s32[2] parameter(0)  p1 = s32[2] parameter(1)\n"
                          "  ROOT r = (s32[2], s32[2]) all-to-all(p0, p1), replica_groups={{2,0},{3,1}} }\n",
                          [[np.int32([10 * d, 1]), np.int32([10 * d + 1, 2])] for d in range(4)], 4, 1)
    cases["rs_bf16"] = ("HloModule m, replica_count=4\n"
                        "r { a = bf16[] parameter(0)  b = bf16[] parameter(1)  ROOT s = bf16[] add(a, b) }\n"
                        "ENTRY e { p = bf16[256] parameter(0)\n"
                        "  ROOT r = bf16[64] reduce-scatter(p), dimensions={0}, replica_groups={{1,3,0,2}}, "
                        "to_apply=r }\n",
                        [[v] for v in _wide(rng, 4, 256, BF16)], 4, 1)
    cases["rs_f16_cp"] = ("HloModule m, replica_count=2, num_partitions=4\n"
                          "r { a = f16[] parameter(0)  b = f16[] parameter(1)  ROOT s = f16[] add(a, b) }\n"
                          "ENTRY e { p = f16[4,16] parameter(0)\n"
                          "  ROOT r = f16[4,2] reduce-scatter(p), channel_id=1, dimensions={1}, "
                          "replica_groups={{1,0}}, to_apply=r }\n",
                          [[v.reshape(4, 16)] for v in _wide(rng, 8, 64, np.float16)], 2, 4)
    cases["cp_cr"] = ("HloModule m, replica_count=2, num_partitions=4\nENTRY e { p = s32[1] parameter(0)\n"
                      "  ROOT r = s32[1] collective-permute(p), source_target_pairs={{0,1}} }\n", ids, 2, 4)
    cases["cp_cp"] = ("HloModule m, replica_count=2, num_partitions=4\nENTRY e { p = s32[1] parameter(0)\n"
                      "  ROOT r = s32[1] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{3,2}} }\n",
                      ids, 2, 4)
    return cases


@pytest.fixture(scope="module")
def xla(tmp_path_factory):
    pytest.importorskip("jax")
    tmp = tmp_path_factory.mktemp("xla_collectives")
    cases = _xla_cases()
    (tmp / "run.py").write_text(_XLA_SCRIPT)
    with open(tmp / "cases.pkl", "wb") as f:
        pickle.dump(cases, f)
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    r = subprocess.run([sys.executable, str(tmp / "run.py"), str(tmp / "cases.pkl"), str(tmp / "out.pkl")],
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    with open(tmp / "out.pkl", "rb") as f:
        out = pickle.load(f)
    return cases, out


def _hlo_case_names():
    return sorted(_xla_cases())


@pytest.mark.slow
@pytest.mark.parametrize("key", _hlo_case_names())
def test_xla_hand_written(xla, key):
    """run_collective against XLA CPU on the same module and per-device operands, bit for bit."""
    cases, out = xla
    text, per_device, R, P = cases[key]
    want = out["hlo"][key]
    assert not isinstance(want, str), want
    got = collective(text, per_device, R, P)
    for d in range(R * P):
        g = list(got[d]) if isinstance(got[d], tuple) else [got[d]]
        assert len(g) == len(want[d])
        for a, b in zip(g, want[d]):
            assert same(a, b), (key, d, a, b)


def _run_straight_line(text: str, per_device_inputs: list[np.ndarray]):
    """The entry computation of a partitioned module run on every device: collectives through
    run_collective, every other instruction by its single-device rule device by device (enough for
    the straight-line programs shard_map gives for one collective)."""
    from hlo_cli.interpreter.registry import EVAL_RULES
    m = parse(text)
    P = int(m.attrs.get("num_partitions", 1) or 1)
    R = int(m.attrs.get("replica_count", 1) or 1)
    grid = DeviceGrid(R, P)
    devices = tuple(range(grid.count))
    ec = EvalContext(m)
    collective_ops = {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                      "replica-id", "partition-id", "all-reduce-start", "all-gather-start",
                      "collective-permute-start", "collective-broadcast"}
    vals: dict[str, object] = {}
    for inst in m.entry_computation.instructions:
        args = [vals[o] for o in inst.operands]
        if inst.opcode == "parameter":
            vals[inst.name] = np.stack(per_device_inputs)
        elif inst.opcode in collective_ops:
            vals[inst.name] = run_collective(inst, args, devices, grid, ec.apply, module=m)
        else:
            vals[inst.name] = _stack([EVAL_RULES[inst.opcode](inst, [_at(a, d) for a in args], ec)
                                      for d in devices])
    return m, vals[m.entry_computation.root_instruction.name]


SHARD_MAP = ["psum_y", "psum_xy", "psum_x_bf16", "pmax_x", "pmin_y_int", "psum_scatter_y", "all_gather_y",
             "all_to_all_y", "ppermute_y", "ppermute_x", "axis_index", "psum_1d"]


@pytest.mark.slow
@pytest.mark.parametrize("name", SHARD_MAP)
def test_xla_shard_map(xla, name):
    """JAX's shard_map collectives: the compiled per-device module, run with run_collective on each
    device's shard of the input, gives XLA CPU's per-device results bit for bit."""
    _, out = xla
    text, ins, outs = out["shard_map"][name]
    m, got = _run_straight_line(text, ins)
    ops = {i.opcode for i in m.entry_computation.instructions}
    assert ops & {"all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute",
                  "partition-id", "replica-id"}, sorted(ops)
    for d, want in enumerate(outs):
        assert same(got[d], want), (name, d, got[d], want)


def test_exact_arithmetic_without_the_module_argument():
    """The module comes from the context `apply` is bound to (how LocalDevices calls it)."""
    text = all_reduce("bf16", 4)
    m = parse(text)
    x = np.array([[256], [1], [1], [-256]], BF16)
    out = run_collective(m.entry_computation.root_instruction, [x], (0, 1, 2, 3), DeviceGrid(4, 1),
                         EvalContext(m).apply)
    assert same(out, np.full((4, 1), 2, BF16))


def test_four_bit_integers_and_f8():
    """Types XLA CPU's collectives lack: int4 wraps like any integer; f8 sums in f32 and rounds
    once, like bf16 (the choice documented in collectives.py)."""
    assert same(reduce_values("s4", [1, 3, 2, 7])[0], np.array([-3], ml_dtypes.int4))
    assert same(reduce_values("s4", [1, 3, 2, -7], "minimum")[0], np.array([-7], ml_dtypes.int4))
    # e4m3fn has 3 mantissa bits: 16 + 1 + 1 rounds to 16 per step, but 18 -> 18 at once
    assert same(reduce_values("f8e4m3fn", [16, 1, 1, 0])[0], np.array([18], ml_dtypes.float8_e4m3fn))


def test_collective_permute_in_place_tuple_of_buffers_two_slices():
    """The form of XLA's parser test (two rings at once: each device sends two slices and receives
    two): a pair uses its source's k-th input offsets and its target's l-th output offsets, k and l
    counting the source's and the target's earlier pairs; slice_sizes lists buffer by buffer."""
    text = ("HloModule m, replica_count=4\nENTRY e {\n"
            "  a = s32[2,2] parameter(0)  b = s32[2,2] parameter(1)\n"
            "  c = s32[2,2] parameter(2)  d = s32[4,2] parameter(3)\n"
            "  z = s32[] constant(0)  one = s32[] constant(1)  two = s32[] constant(2)\n"
            "  o00 = (s32[], s32[]) tuple(z, z)  o10 = (s32[], s32[]) tuple(one, z)\n"
            "  o20 = (s32[], s32[]) tuple(two, z)\n"
            "  in0 = ((s32[], s32[]), (s32[], s32[])) tuple(o00, o10)\n"
            "  in1 = ((s32[], s32[]), (s32[], s32[])) tuple(o00, o00)\n"
            "  out1 = ((s32[], s32[]), (s32[], s32[])) tuple(o00, o20)\n"
            "  ins = (((s32[], s32[]), (s32[], s32[])), ((s32[], s32[]), (s32[], s32[]))) tuple(in0, in1)\n"
            "  outs = (((s32[], s32[]), (s32[], s32[])), ((s32[], s32[]), (s32[], s32[]))) tuple(in0, out1)\n"
            "  src = (s32[2,2], s32[2,2]) tuple(a, b)  dst = (s32[2,2], s32[4,2]) tuple(c, d)\n"
            "  ROOT r = (s32[2,2], s32[4,2]) collective-permute(src, dst, ins, outs), "
            "source_target_pairs={{0,1},{1,2},{2,3},{3,0},{0,3},{3,2},{2,1},{1,0}}, "
            "slice_sizes={{1,2},{1,2},{2,2},{2,2}} }\n")
    m = parse(text)
    D = 4
    a = np.arange(D * 4, dtype=np.int32).reshape(D, 2, 2)
    b = 100 + a
    c = np.full((D, 2, 2), -1, np.int32)
    d = np.full((D, 4, 2), -1, np.int32)

    def off(*vals):
        return tuple(np.full(D, v, np.int32) for v in vals)
    ins = ((off(0, 0), off(1, 0)), (off(0, 0), off(0, 0)))
    outs = ((off(0, 0), off(1, 0)), (off(0, 0), off(2, 0)))
    inst = m.entry_computation.root_instruction
    r0, r1 = run_collective(inst, [(a, b), (c, d), ins, outs], (0, 1, 2, 3), DeviceGrid(4, 1), EvalContext(m).apply)
    for t in range(D):
        fwd, bwd = (t - 1) % D, (t + 1) % D
        assert r0[t].tolist() == [a[fwd][0].tolist(), a[bwd][1].tolist()]
        assert r1[t].tolist() == b[fwd].tolist() + b[bwd].tolist()
