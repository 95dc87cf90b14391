"""The device grid, collective groups and permute pairs (hlo_cli/devices/grid.py).

The expected groups are XLA's: measured on XLA CPU with 2 replicas x 4 partitions (an all-gather
of each device's id shows the group and its rank order) and written down here by hand; the live
check of the same facts is tests/devices/test_collectives.py::test_xla_group_modes.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from hlo_cli import parse
from hlo_cli.topology.grid import DeviceGrid, collective_groups, permute_pairs, send_recv_pairs
from hlo_cli.errors import HloEvalError


def inst(op_attrs: str, opcode: str = "all-gather", R: int = 2, P: int = 4, header: bool = True):
    """The root instruction of a tiny module running `opcode` with attributes `op_attrs`."""
    head = f", replica_count={R}, num_partitions={P}" if header else ""
    shapes = {"all-gather": "dimensions={0}, ", "reduce-scatter": "dimensions={0}, to_apply=add, ",
              "all-reduce": "to_apply=add, ", "all-to-all": "dimensions={0}, ",
              "collective-broadcast": "", "collective-permute": ""}
    text = (f"HloModule m{head}\n"
            "add { a = s32[] parameter(0)  b = s32[] parameter(1)  ROOT s = s32[] add(a, b) }\n"
            f"ENTRY e {{ p = s32[8] parameter(0)\n"
            f"  ROOT r = s32[8] {opcode}(p), {shapes[opcode]}{op_attrs} }}\n")
    return parse(text).entry_computation.root_instruction


G24 = DeviceGrid(2, 4)


def test_grid_numbering():
    g = DeviceGrid(3, 4)
    assert g.count == 12
    assert [g.device(r, p) for r in range(3) for p in range(4)] == list(range(12))
    assert [(g.replica_of(d), g.partition_of(d)) for d in (0, 5, 11)] == [(0, 0), (1, 1), (2, 3)]
    assert g.describe(5) == "device 5 (replica 1, partition 1)"
    assert DeviceGrid(4, 1).describe(2) == "device 2 (replica 2)"
    assert DeviceGrid(1, 4).describe(2) == "device 2 (partition 2)"
    with pytest.raises(ValueError):
        DeviceGrid(0, 2)


@pytest.mark.parametrize("attrs, groups", [
    # cross-replica: replica ids; each partition has its own copy of every group
    ("replica_groups={}", ((0, 4), (1, 5), (2, 6), (3, 7))),
    ("replica_groups={{1,0}}", ((4, 0), (5, 1), (6, 2), (7, 3))),
    # cross-replica-and-partition: replica ids, a group spans all partitions, replica-major
    ("channel_id=1, replica_groups={}", ((0, 1, 2, 3, 4, 5, 6, 7),)),
    ("channel_id=1, replica_groups={{1,0}}", ((4, 5, 6, 7, 0, 1, 2, 3),)),
    ("channel_id=1, replica_groups={{0},{1}}", ((0, 1, 2, 3), (4, 5, 6, 7))),
    # flattened ids, listed as written (the order is the rank order)
    ("channel_id=1, replica_groups={{0,5,2,7},{4,1,6,3}}, use_global_device_ids=true",
     ((0, 5, 2, 7), (4, 1, 6, 3))),
    ("channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), use_global_device_ids=true", ((0, 2, 4, 6), (1, 3, 5, 7))),
    ("channel_id=1, replica_groups=[4,2]<=[8], use_global_device_ids=true", ((0, 1), (2, 3), (4, 5), (6, 7))),
    ("channel_id=1, replica_groups=mesh['x'=2,'y'=4] {'y'}, use_global_device_ids=true",
     ((0, 1, 2, 3), (4, 5, 6, 7))),
    ("channel_id=1, replica_groups=mesh['x'=2,'y'=4] {'x'}, use_global_device_ids=true",
     ((0, 4), (1, 5), (2, 6), (3, 7))),
])
def test_all_gather_group_modes(attrs, groups):
    assert collective_groups(inst(attrs), G24) == groups


@pytest.mark.parametrize("opcode", ["all-to-all", "collective-permute", "collective-broadcast"])
def test_channel_means_cross_partition_for_ops_without_global_ids(opcode):
    attrs = "replica_groups={{2,0},{1,3}}" if opcode != "collective-permute" else "source_target_pairs={{0,1}}"
    if opcode == "collective-permute":
        assert permute_pairs(inst("channel_id=3, " + attrs, opcode), G24) == ((0, 1), (4, 5))
        assert permute_pairs(inst(attrs, opcode), DeviceGrid(2, 4)) == ((0, 4), (1, 5), (2, 6), (3, 7))
        return
    # partition ids within each replica
    assert collective_groups(inst("channel_id=3, " + attrs, opcode), G24) == ((2, 0), (6, 4), (1, 3), (5, 7))
    # use_global_device_ids is not read by these ops (XLA's GetCollectiveOpGroupMode)
    grid = DeviceGrid(4, 1)
    assert collective_groups(inst(attrs, opcode, R=4, P=1), grid) == ((2, 0), (1, 3))


def test_reduce_scatter_and_all_reduce_read_global_ids():
    a = "channel_id=1, replica_groups={{3,2,1,0},{7,6,5,4}}, use_global_device_ids=true"
    assert collective_groups(inst(a, "reduce-scatter"), G24) == ((3, 2, 1, 0), (7, 6, 5, 4))
    assert collective_groups(inst(a, "all-reduce"), G24) == ((3, 2, 1, 0), (7, 6, 5, 4))


def test_start_forms_share_their_ops_groups():
    text = ("HloModule m, replica_count=4\n"
            "add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n"
            "ENTRY e { p = f32[2] parameter(0)\n"
            "  s = f32[2] all-reduce-start(p), replica_groups={{1,0},{3,2}}, to_apply=add\n"
            "  ROOT d = f32[2] all-reduce-done(s) }\n")
    start = parse(text).entry_computation.by_name["s"]
    assert collective_groups(start, DeviceGrid(4, 1)) == ((1, 0), (3, 2))


def test_all_reduce_groups_may_differ_in_size():
    a = inst("replica_groups={{0},{1,2,3}}", "all-reduce", R=4, P=1)
    assert collective_groups(a, DeviceGrid(4, 1)) == ((0,), (1, 2, 3))


@pytest.mark.parametrize("attrs, opcode, grid, fragment", [
    ("replica_groups={{0,1,2}}", "all-gather", DeviceGrid(2, 1), "names replica 2, but the run has 2 replicas"),
    ("replica_groups={{0,1},{1,0}}", "all-gather", DeviceGrid(2, 1), "names replica 1 twice"),
    ("replica_groups={{0},{1,2,3}}", "all-gather", DeviceGrid(4, 1), "same size, got sizes 1,3"),
    ("replica_groups={{0,1}}", "all-gather", DeviceGrid(4, 1), "replica 2, 3 are in no replica group"),
    ("channel_id=1, replica_groups={{0,1}}", "all-to-all", DeviceGrid(1, 3), "partition 2 is in no replica group"),
    ("channel_id=1, replica_groups={{0,9}}, use_global_device_ids=true", "all-gather", G24,
     "names device 9, but the run has 8 devices"),
    ("replica_groups={{0,1}}, use_global_device_ids=true", "all-gather", DeviceGrid(2, 1), "needs a channel_id"),
    ("channel_id=1, replica_groups={}, use_global_device_ids=true", "all-gather", DeviceGrid(2, 1),
     "must list the devices"),
])
def test_group_errors(attrs, opcode, grid, fragment):
    i = inst(attrs, opcode, R=grid.replicas, P=grid.partitions, header=False)
    with pytest.raises(HloEvalError) as e:
        collective_groups(i, grid)
    assert fragment in str(e.value)
    assert e.value.diagnostics and e.value.diagnostics[0].instruction == "r"     # located


def test_collective_broadcast_may_leave_devices_out():
    i = inst("replica_groups={{1,0}}", "collective-broadcast", R=4, P=1, header=False)
    assert collective_groups(i, DeviceGrid(4, 1), allow_missing=True) == ((1, 0),)


def test_permute_pairs_errors():
    i = inst("source_target_pairs={{0,4}}", "collective-permute", R=4, P=1, header=False)
    with pytest.raises(HloEvalError, match="names replica 4, but the run has 4 replicas"):
        permute_pairs(i, DeviceGrid(4, 1))
    i = inst("channel_id=2, source_target_pairs={{0,4}}", "collective-permute", R=1, P=4, header=False)
    with pytest.raises(HloEvalError, match="partition 4.*with a channel_id the pairs are partition ids"):
        permute_pairs(i, DeviceGrid(1, 4))


def _send(attrs: str, frontend: str | None):
    fa = f', frontend_attributes={{_xla_send_recv_source_target_pairs="{frontend}"}}' if frontend else ""
    text = ("HloModule m\nENTRY e { p = f32[2] parameter(0)  t = token[] after-all()\n"
            f"  s = (f32[2], u32[], token[]) send(p, t), {attrs}{fa}\n"
            "  ROOT d = token[] send-done(s), " + attrs + " }\n")
    return parse(text).entry_computation.by_name["s"]


def test_send_recv_pairs():
    assert send_recv_pairs(_send("channel_id=1", "{{0,1},{1,2}}"), DeviceGrid(2, 3)) == \
        ((0, 1), (1, 2), (3, 4), (4, 5))                      # channel_id > 0: partition ids
    assert send_recv_pairs(_send("channel_id=0", "{{0,1}}"), DeviceGrid(2, 2)) == ((0, 2), (1, 3))
    assert send_recv_pairs(_send("channel_id=1", None), DeviceGrid(2, 2)) is None
    with pytest.raises(HloEvalError, match="must look like"):
        send_recv_pairs(_send("channel_id=1", "{0,1}"), DeviceGrid(1, 2))


@settings(max_examples=60, deadline=None)
@given(R=st.integers(1, 4), P=st.integers(1, 4), data=st.data())
def test_groups_partition_the_grid(R, P, data):
    """Law: whatever the mode, every device of the grid is in exactly one group, and groups of one
    collective have one size (for explicit uniform groups)."""
    grid = DeviceGrid(R, P)
    mode = data.draw(st.sampled_from(["cr", "crp", "flat", "cp"]))
    n = {"cr": R, "crp": R, "flat": R * P, "cp": P}[mode]
    ids = data.draw(st.permutations(range(n)))
    sizes = [d for d in range(1, n + 1) if n % d == 0]
    size = data.draw(st.sampled_from(sizes))
    groups = "{" + ",".join("{" + ",".join(map(str, ids[k:k + size])) + "}" for k in range(0, n, size)) + "}"
    attrs = {"cr": f"replica_groups={groups}", "crp": f"channel_id=1, replica_groups={groups}",
             "flat": f"channel_id=1, replica_groups={groups}, use_global_device_ids=true",
             "cp": f"channel_id=1, replica_groups={groups}"}[mode]
    opcode = "all-to-all" if mode == "cp" else "all-gather"
    got = collective_groups(inst(attrs, opcode, R=R, P=P, header=False), grid)
    flat = sorted(d for g in got for d in g)
    assert flat == list(range(grid.count))
    assert len({len(g) for g in got}) == 1


def test_which_collectives_read_use_global_device_ids():
    """Read off the opcode table (the ops whose row takes the attribute), as XLA's group mode reads it."""
    from hlo_cli.topology.grid import reads_global_ids
    assert {op for op in ("all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter",
                          "all-to-all", "collective-permute", "collective-broadcast", "add", "no-such-op")
            if reads_global_ids(op)} == {"all-reduce", "all-reduce-start", "all-gather", "all-gather-start",
                                         "reduce-scatter"}


def test_the_spmd_walk_asks_the_opcode_table():
    from hlo_cli.devices import spmd
    # exchanges run along the device axis; their -done halves only pass the value on
    assert "all-reduce" in spmd.COLLECTIVES and "collective-permute-start" in spmd.COLLECTIVES
    assert not spmd.COLLECTIVES & {"all-reduce-done", "all-gather-done", "collective-permute-done"}
    assert spmd.DEVICE_IDS == {"replica-id", "partition-id"}
    assert {"tuple", "get-tuple-element", "all-reduce-done"} <= spmd._STRUCTURAL
    assert {"add", "select", "convert", "copy"} <= spmd._ELEMENTWISE and "dot" not in spmd._ELEMENTWISE
