"""hlo_cli/devices/inputs.py: user arrays placed on the devices of a grid.

A global array is split by its parameter's sharding (each device's tile, zero padded past the
end), an array every device holds is kept once (Uniform), --per-device stacks are taken as they
are, and anything else is an HloInputError naming the parameter, the shapes it accepts and the
shape given.  --random-inputs draws the global values a single-device run of the unpartitioned
program would draw, then splits them.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hlo_cli
from hlo_cli.topology.grid import DeviceGrid
from hlo_cli.devices.inputs import distribute, expected_shape, random_global_inputs, values_are_global
from hlo_cli.devices.values import Stacked, Uniform
from hlo_cli.errors import HloInputError
from hlo_cli.interpreter.inputs import random_inputs
from hlo_cli.interpreter.values import TOKEN


def _module(params: str, header: str = ", is_scheduled=true, num_partitions=2", root: str | None = None):
    """A per-device module (scheduled: XLA's partitioned output) whose entry takes PARAMS (lines
    `name = shape parameter(N), ...`) and returns the first parameter (or ROOT)."""
    lines = [ln.strip() for ln in params.strip().splitlines()]
    first = lines[0].split("=")[0].strip()
    body = "\n  ".join(lines + [root or f"ROOT r = {_shape_of(lines[0])} copy({first})"])
    return hlo_cli.parse(f"HloModule m{header}\n\nENTRY e {{\n  {body}\n}}\n")


def _shape_of(line: str) -> str:
    return line.split("=", 1)[1].split("parameter")[0].strip()


G2 = DeviceGrid(1, 2)


def test_a_tiled_parameter_takes_its_global_array_split_by_the_sharding():
    m = _module("a = f32[2,3] parameter(0), sharding={devices=[2,1]<=[2]}")
    g = np.arange(12, dtype=np.float32).reshape(4, 3)
    [v] = distribute(m, [g], G2)
    assert isinstance(v, Stacked)
    assert v.value.shape == (2, 2, 3)
    np.testing.assert_array_equal(v.value[0], g[:2])
    np.testing.assert_array_equal(v.value[1], g[2:])


def test_an_uneven_global_array_is_padded_with_zeros_on_the_last_device():
    # XLA's per-device shape is ceil(dim / tiles): a global f32[3,3] on 2 devices is f32[2,3] each
    m = _module("a = f32[2,3] parameter(0), sharding={devices=[2,1]<=[2]}")
    g = np.arange(1, 10, dtype=np.float32).reshape(3, 3)
    [v] = distribute(m, [g], G2)
    np.testing.assert_array_equal(v.value[0], g[:2])
    np.testing.assert_array_equal(v.value[1], [[7, 8, 9], [0, 0, 0]])


def test_the_tile_order_follows_the_tile_assignment():
    m = _module("a = s32[2] parameter(0), sharding={devices=[2]1,0}")
    [v] = distribute(m, [np.array([10, 11, 20, 21], np.int32)], G2)
    np.testing.assert_array_equal(v.value, [[20, 21], [10, 11]])


def test_replicas_share_the_tiles_of_their_partition():
    # device = replica * partitions + partition: devices 0 and 2 are partition 0
    m = _module("a = f32[1] parameter(0), sharding={devices=[2]<=[2]}", ", replica_count=2, num_partitions=2")
    [v] = distribute(m, [np.array([5, 6], np.float32)], DeviceGrid(2, 2))
    np.testing.assert_array_equal(v.value[:, 0], [5, 6, 5, 6])


def test_a_partially_replicated_parameter_splits_only_along_its_tiled_dimension():
    m = _module("a = f32[2,2] parameter(0), sharding={devices=[2,1,2]<=[4] last_tile_dim_replicate}",
                ", is_scheduled=true, num_partitions=4")
    g = np.arange(8, dtype=np.float32).reshape(4, 2)
    [v] = distribute(m, [g], DeviceGrid(1, 4))
    for d, rows in enumerate([g[:2], g[:2], g[2:], g[2:]]):
        np.testing.assert_array_equal(v.value[d], rows)


@pytest.mark.parametrize("sharding", ["", ", sharding={replicated}", ", sharding={maximal device=1}",
                                      ", sharding={devices=[1,1,2]<=[2] last_tile_dim_replicate}"])
def test_an_unsplit_parameter_takes_one_array_for_every_device(sharding):
    m = _module(f"a = f32[2,3] parameter(0){sharding}")
    x = np.ones((2, 3), np.float32)
    [v] = distribute(m, [x], G2)
    assert isinstance(v, Uniform)
    assert v.value is x


def test_per_device_takes_stacked_values_whatever_the_sharding():
    m = _module("a = f32[2] parameter(0), sharding={replicated}\nb = f32[1] parameter(1), sharding={devices=[2]<=[2]}")
    a = np.array([[1, 2], [3, 4]], np.float32)
    b = np.array([[7], [8]], np.float32)
    va, vb = distribute(m, [a, b], G2, per_device=True)
    assert isinstance(va, Stacked) and isinstance(vb, Stacked)
    np.testing.assert_array_equal(va.value, a)
    np.testing.assert_array_equal(vb.value, b)


def test_an_array_of_the_device_count_times_the_parameter_is_taken_as_per_device_with_a_note():
    m = _module("a = f32[3] parameter(0)", ", replica_count=2")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    notes: list = []
    [v] = distribute(m, [x], DeviceGrid(2, 1), notes=notes)
    assert isinstance(v, Stacked)
    np.testing.assert_array_equal(v.value, x)
    assert notes == ["parameter 0 'a': f32[2,3] taken as one value per device (2 devices x f32[3], "
                     "in device-id order)"]


def test_a_module_before_partitioning_takes_global_values_once():
    # no device count in the header: the values are global, the sharding is an annotation
    m = _module("a = f32[4,3] parameter(0), sharding={devices=[2,1]<=[2]}", header="")
    assert values_are_global(m)
    g = np.zeros((4, 3), np.float32)
    [v] = distribute(m, [g], G2)
    assert isinstance(v, Uniform) and v.value is g
    with pytest.raises(HloInputError, match=r"expected the global array, f32\[4,3\].*got f32\[2,3\]"):
        distribute(m, [np.zeros((2, 3), np.float32)], G2)


def test_a_split_parameter_refuses_its_per_device_shape_saying_what_it_accepts():
    m = _module("a = f32[2,3] parameter(0), sharding={devices=[2,1]<=[2]}")
    with pytest.raises(HloInputError) as e:
        distribute(m, [np.zeros((2, 3), np.float32)], G2)
    msg = str(e.value)
    assert msg.startswith("parameter 0 'a': sharding={devices=[2,1]<=[2]} splits it across devices")
    assert "f32[3..4,3] (each device's tile f32[2,3])" in msg        # the global shapes, padding included
    assert "--per-device one value per device, f32[2,2,3]" in msg
    assert msg.endswith("got f32[2,3] (that is the per-device shape; give the global array, or pass --per-device)")


@pytest.mark.parametrize("dims", [(5, 3), (4, 2), (4,), (3, 2, 3)])
def test_a_split_parameter_refuses_other_shapes(dims):
    m = _module("a = f32[2,3] parameter(0), sharding={devices=[2,1]<=[2]}")
    with pytest.raises(HloInputError, match=r"parameter 0 'a'.*got f32\[" + ",".join(map(str, dims)) + r"\]$"):
        distribute(m, [np.zeros(dims, np.float32)], G2)


def test_per_device_refuses_a_stack_of_another_device_count():
    m = _module("a = f32[2] parameter(0)")
    with pytest.raises(HloInputError, match=r"--per-device expects one value per device stacked on a leading "
                                            r"axis: f32\[2,2\] \(2 devices x f32\[2\]\), got f32\[3,2\]"):
        distribute(m, [np.zeros((3, 2), np.float32)], G2, per_device=True)


def test_types_are_converted_as_for_a_single_device_with_a_note():
    m = _module("a = f32[1] parameter(0), sharding={devices=[2]<=[2]}")
    notes: list = []
    [v] = distribute(m, [np.array([0.1, 2.0])], G2, notes=notes)
    assert v.value.dtype == np.float32
    np.testing.assert_array_equal(v.value[:, 0], np.array([0.1, 2.0], np.float32))
    assert any("float64 values rounded to float32" in n for n in notes)
    with pytest.raises(HloInputError, match="expected s32"):
        distribute(_module("a = s32[1] parameter(0), sharding={devices=[2]<=[2]}"), [np.array([0.5, 1.5])], G2)


def test_a_token_parameter_is_uniform():
    m = _module("a = f32[1] parameter(0)\nt = token[] parameter(1)")
    _, t = distribute(m, [np.zeros(1, np.float32), None], G2)
    assert isinstance(t, Uniform) and t.value is TOKEN


def test_expected_shape_is_what_a_file_header_is_checked_against():
    m = _module("a = f32[2,3] parameter(0), sharding={devices=[2,1]<=[2]}")
    assert expected_shape(m, 0, (4, 3), G2, False).dims == (4, 3)
    assert expected_shape(m, 0, (2, 2, 3), G2, True).dims == (2, 2, 3)
    with pytest.raises(HloInputError, match="from x.npy"):
        expected_shape(m, 0, (2, 3), G2, False, what="parameter 0 'a' (from x.npy)")


# ----------------------------------------------------------------------------- random inputs

PARTITIONED = """
  a = f32[2,3] parameter(0), sharding={devices=[2,1]<=[2]}
  b = s32[3] parameter(1), sharding={replicated}
  c = pred[2] parameter(2), sharding={devices=[2]<=[2]}
"""


def test_random_inputs_are_global_draws_split_so_replicated_parameters_agree():
    m = _module(PARTITIONED)
    a, b, c = random_global_inputs(m, G2, seed=3)
    assert isinstance(b, Uniform)                       # replicated: the same on every device
    # the same draws as a single-device run of the global program
    glob = hlo_cli.parse("HloModule g\n\nENTRY e {\n  a = f32[4,3] parameter(0)\n  b = s32[3] parameter(1)\n"
                         "  c = pred[4] parameter(2)\n  ROOT r = f32[4,3] copy(a)\n}\n")
    ga, gb, gc = random_inputs(glob.entry_computation.parameters, 3)
    np.testing.assert_array_equal(a.value.reshape(4, 3), ga)
    np.testing.assert_array_equal(b.value, gb)
    np.testing.assert_array_equal(c.value.reshape(4), gc)


def test_random_inputs_of_a_tuple_parameter_split_each_leaf_by_its_sharding():
    m = _module("p = (f32[2], f32[2]) parameter(0), sharding={{devices=[2]<=[2]}, {replicated}}",
                root="ROOT r = f32[2] get-tuple-element(p), index=1")
    [v] = random_global_inputs(m, G2, seed=0)
    assert isinstance(v, Stacked)
    split, repl = v.value
    assert split.shape == (2, 2) and repl.shape == (2, 2)
    assert not np.array_equal(split[0], split[1])
    np.testing.assert_array_equal(repl[0], repl[1])


# ----------------------------------------------------------------------------- a law

@settings(max_examples=60, deadline=None)
@given(tiles=st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=3),
       extra=st.lists(st.integers(0, 3), min_size=3, max_size=3), data=st.data())
def test_the_tiles_of_a_global_array_reassemble_it(tiles, extra, data):
    """Every element of the global array is on the device whose tile covers it, at its offset."""
    count = int(np.prod(tiles))
    local = [data.draw(st.integers(1, 3)) for _ in tiles]
    gdims = tuple(max(1, lo * t - e) if t > 1 else lo for lo, t, e in zip(local, tiles, extra))
    gdims = tuple(g if -(-g // t) == lo else lo * t for g, lo, t in zip(gdims, local, tiles))
    sh = "{devices=[" + ",".join(map(str, tiles)) + f"]<=[{count}]}}" if count > 1 else "{replicated}"
    shape = "f32[" + ",".join(map(str, local)) + "]"
    m = _module(f"a = {shape} parameter(0), sharding={sh}", f", is_scheduled=true, num_partitions={count}")
    g = np.arange(1, 1 + int(np.prod(gdims)), dtype=np.float32).reshape(gdims)
    [v] = distribute(m, [g], DeviceGrid(1, count))
    stacked = v.value if isinstance(v, Stacked) else np.broadcast_to(v.value, (count,) + v.value.shape)
    seen = np.zeros(gdims, bool)
    for d in range(count):
        coord = np.unravel_index(d, tiles)
        lo = [min(c * n, gd) for c, n, gd in zip(coord, local, gdims)]     # a tile past the end is all padding
        hi = [min(a + n, gd) for a, n, gd in zip(lo, local, gdims)]
        part = g[tuple(slice(a, b) for a, b in zip(lo, hi))]
        tile = stacked[d][tuple(slice(0, b - a) for a, b in zip(lo, hi))]
        np.testing.assert_array_equal(tile, part)
        pad = stacked[d].copy()
        pad[tuple(slice(0, b - a) for a, b in zip(lo, hi))] = 0
        assert not pad.any()                       # past the end: zeros
        seen[tuple(slice(a, b) for a, b in zip(lo, hi))] = True
    assert seen.all()
