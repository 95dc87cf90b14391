"""Shardings -> per-device tiles and back (hlo_cli/devices/sharding.py).

Ground truth: tests/devices/data/shardings.json, generated from JAX/XLA on 8 simulated host devices
by this file (`python tests/devices/test_sharding.py --write`): for each case the lowered module
(its parameter carries both `sharding=` and Shardy's `xla.sdy.sharding`) and, per device, the index
slices of the global array that device holds (`addressable_shards[i].index`).  Cases with a
shard_map record the manual region's custom calls (Shardy and GSPMD forms) and each device's block.
The live test regenerates the cases and also compares with the devices' actual buffers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.topology import sharding as sh
from hlo_cli.topology.sharding import ShardingError
from hlo_cli.ir.attributes import IotaReplicaGroups, Sharding, TileAssignment
from hlo_cli.parser import parse

if __name__ == "__main__":  # pragma: no cover - run as a script to regenerate the golden file
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from run_harness import hlo  # noqa: E402,F401  (the fixture)

GOLDEN = Path(__file__).parent / "data" / "shardings.json"


# ----------------------------------------------------------------------------------------------
# generation (runs under JAX with 8 host devices, in a child process)
# ----------------------------------------------------------------------------------------------

def _specs():
    """(mesh shape, axis names, device order, array shape, partition spec) cases."""
    out = []
    iota8 = list(range(8))
    # (JAX numbers a jit's devices by their position in the mesh, so a permuted physical order
    # lowers to the same text: one order is enough; explicit device lists are tested by hand)
    for order in (iota8,):
        out += [
            ((8,), ("x",), order, (16, 3), ("x", None)),
            ((8,), ("x",), order, (3, 8), (None, "x")),
            ((2, 4), ("x", "y"), order, (8, 4), ("x", "y")),
            ((2, 4), ("x", "y"), order, (8, 4), ("y", "x")),
            ((2, 4), ("x", "y"), order, (8, 6), (("x", "y"), None)),
            ((2, 4), ("x", "y"), order, (8, 6), (("y", "x"), None)),
            ((2, 4), ("x", "y"), order, (4, 6), ("x", None)),
            ((2, 4), ("x", "y"), order, (4, 8), (None, "y")),
            ((2, 4), ("x", "y"), order, (4, 6), (None, None)),
            ((2, 2, 2), ("x", "y", "z"), order, (4, 2, 6), ("x", "y", "z")),
            ((2, 2, 2), ("x", "y", "z"), order, (4, 2, 6), (("x", "z"), None, "y")),
            ((2, 2, 2), ("x", "y", "z"), order, (4, 2, 6), (None, "z", None)),
            ((2, 2, 2), ("x", "y", "z"), order, (4, 6), ("y", None)),
            ((4, 2), ("a", "b"), order, (2, 16), (None, ("b", "a"))),
        ]
    out += [
        ((4,), ("x",), [0, 1, 2, 3], (8, 2), ("x", None)),
        ((2, 2), ("x", "y"), [2, 0, 3, 1], (4, 4), ("y", "x")),
        ((2,), ("x",), [5, 6], (6, 4), (None, "x")),
        ((8,), ("x",), iota8, (8,), ("x",)),
        ((2, 4), ("x", "y"), iota8, (), ()),
    ]
    return out


_MANUAL = [   # (mesh, names, array shape, in spec, manual axes or None for all)
    ((2, 4), ("x", "y"), (8, 4), ("x", "y"), None),
    ((2, 4), ("x", "y"), (8, 4), ("y", "x"), None),
    ((2, 4), ("x", "y"), (8, 4), ("x", None), ("x",)),
    ((2, 4), ("x", "y"), (8, 4), (None, "y"), ("y",)),
    ((2, 2, 2), ("x", "y", "z"), (4, 4), (("x", "z"), None), ("x", "z")),
]


_UNEVEN = [   # (devices, global shape, spec): JAX refuses uneven inputs, so a sharded intermediate
    (4, (5, 3), ("x", None)),
    (2, (5, 3), ("x", None)),
    (8, (7,), ("x",)),
    (4, (3, 10), (None, "x")),
]


def _generate() -> dict:  # pragma: no cover - runs under JAX in a child process
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    def idx(index, shape):
        return [[s.start or 0, shape[k] if s.stop is None else s.stop] for k, s in enumerate(index)]

    cases = []
    for mshape, names, order, shape, spec in _specs():
        devs = np.array([jax.devices()[d] for d in order]).reshape(mshape)
        mesh = Mesh(devs, names)
        ns = NamedSharding(mesh, P(*spec))
        x = jnp.arange(int(np.prod(shape)), dtype=jnp.float32).reshape(shape)
        text = jax.jit(lambda a: a * 2, in_shardings=ns).lower(x).as_text("hlo")
        xs = jax.device_put(x, ns)
        logical = {d.id: k for k, d in enumerate(mesh.devices.flat)}     # the HLO's device ids
        shards = {logical[s.device.id]: (idx(s.index, shape), np.asarray(s.data))
                  for s in xs.addressable_shards}
        cases.append({
            "name": f"{mshape}{names}{order}{shape}P{spec}",
            "module": text, "shape": list(shape),
            "devices": {str(d): shards[d][0] for d in sorted(shards)},
            "_data": {str(d): shards[d][1].tolist() for d in sorted(shards)},
        })
    manual = []
    for use_shardy in (True, False):
        jax.config.update("jax_use_shardy_partitioner", use_shardy)
        for mshape, names, shape, spec, axes in _MANUAL:
            mesh = Mesh(np.array(jax.devices()[:int(np.prod(mshape))]).reshape(mshape), names)
            x = jnp.arange(int(np.prod(shape)), dtype=jnp.float32).reshape(shape)
            kw = {} if axes is None else {"axis_names": set(axes)}
            f = jax.jit(jax.shard_map(lambda a: a + 1, mesh=mesh, in_specs=P(*spec), out_specs=P(*spec), **kw))
            text = f.lower(x).as_text("hlo")
            m = NamedSharding(mesh, P(*spec)).devices_indices_map(shape)
            manual.append({
                "name": f"{'sdy' if use_shardy else 'gspmd'}{mshape}{names}{shape}P{spec}manual{axes}",
                "module": text, "shape": list(shape),
                "devices": {str(k): idx(m[d], shape) for k, d in enumerate(mesh.devices.flat)},
            })
    runs = []
    for use_shardy in (True, False):
        jax.config.update("jax_use_shardy_partitioner", use_shardy)
        mesh = Mesh(np.array(jax.devices()).reshape(2, 4), ("x", "y"))

        def inner(b):
            return b * (1 + jax.lax.axis_index("y")) + jax.lax.psum(b, "y")

        def outer(a):       # a manual region over "y" inside one over "x"
            c = jax.shard_map(inner, in_specs=P(None, "y"), out_specs=P(None, "y"), axis_names={"y"})(a)
            return c + jax.lax.axis_index("x") * 100

        def flat(a):
            return a * (1 + jax.lax.axis_index("x")) - jax.lax.axis_index("y")
        x = np.arange(32, dtype=np.float32).reshape(8, 4)
        for name, f in [("nested", jax.shard_map(outer, mesh=mesh, in_specs=P("x"), out_specs=P("x"),
                                                 axis_names={"x"})),
                        ("yx", jax.shard_map(flat, mesh=mesh, in_specs=P("y", "x"), out_specs=P("y", "x")))]:
            j = jax.jit(f)
            runs.append({"name": f"{'sdy' if use_shardy else 'gspmd'}_{name}", "module": j.lower(x).as_text("hlo"),
                         "shape": list(x.shape), "want": np.asarray(j(x)).tolist()})
    jax.config.update("jax_use_shardy_partitioner", True)
    import re
    uneven = []
    for n, shape, spec in _UNEVEN:
        mesh = Mesh(np.array(jax.devices()[:n]), ("x",))
        target = NamedSharding(mesh, P(*spec))

        def f(a, shape=shape, target=target):
            b = a[tuple(slice(0, d) for d in shape)] * 2
            return jnp.sin(jax.lax.with_sharding_constraint(b, target))
        x = jnp.zeros(tuple(d + 3 for d in shape), jnp.float32)
        low = jax.jit(f, in_shardings=NamedSharding(mesh, P()), out_shardings=NamedSharding(mesh, P())).lower(x)
        compiled = low.compile().as_text()
        # the partitioned program gathers each device's tile of the constrained value: its shape
        # is the per-device shape XLA gives the tile
        operand = re.search(r"all-gather\((%?[\w.-]+)\)", compiled).group(1)
        local = re.search(re.escape(operand) + r" = f32\[([\d,]*)\]", compiled).group(1)
        uneven.append({"name": f"{n}{shape}P{spec}", "module": low.as_text("hlo"), "shape": list(shape),
                       "local": [int(d) for d in local.split(",") if d]})
    return {"jax": jax.__version__, "cases": cases, "manual": manual, "uneven": uneven, "runs": runs}


def _run_generator() -> dict:
    env = dict(os.environ)
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, __file__, "--emit"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _golden() -> dict:
    return json.loads(GOLDEN.read_text())


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------

def _param(module):
    return next(i for i in module.entry_computation.instructions if i.opcode == "parameter")


def _expected_tiles(x: np.ndarray, devices: dict, count: int, ldims) -> np.ndarray:
    out = np.zeros((count,) + tuple(ldims), x.dtype)
    for d, bounds in devices.items():
        piece = x[tuple(slice(a, b) for a, b in bounds)]
        out[(int(d),) + tuple(slice(0, s) for s in piece.shape)] = piece
    return out


def _without_sdy(module_text: str) -> str:
    """The module with its Shardy attributes dropped (so only `sharding=` is left)."""
    import re
    text = re.sub(r", frontend_attributes=\{xla\.sdy\.sharding=\"(?:[^\"\\]|\\.)*\"\}", "", module_text)
    return re.sub(r", frontend_attributes=\{xla\.sdy\.meshes=\{[^\n]*?\}\}(?=\n)", "", text)


def _only_sdy(module_text: str) -> str:
    """The module with `sharding=` dropped from the parameters (so only Shardy's text is left)."""
    import re
    return re.sub(r"(parameter\(\d+\)), sharding=\{[^}]*\}", r"\1", module_text)


# ----------------------------------------------------------------------------------------------
# golden cases (no JAX needed)
# ----------------------------------------------------------------------------------------------

GOLD = _golden() if GOLDEN.exists() else {"cases": [], "manual": []}


@pytest.mark.parametrize("case", GOLD["cases"], ids=lambda c: c["name"])
@pytest.mark.parametrize("form", ["both", "hlo", "sdy"])
def test_shard_matches_xla(case, form):
    text = {"both": case["module"], "hlo": _without_sdy(case["module"]),
            "sdy": _only_sdy(case["module"])}[form]
    m = parse(text)
    p = _param(m)
    s = sh.parameter_sharding(p, m)
    if form == "hlo":
        assert "xla.sdy" not in text
    if form == "sdy":
        assert p.attr("sharding") is None
    assert s is not None
    shape = tuple(case["shape"])
    x = np.asarray(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1)
    count = len(case["devices"])
    if form != "hlo" or s.kind != "replicated":      # replicated `sharding=` alone names no devices
        assert sh.module_devices(m) == (1, count)
    ldims = sh.local_dims(shape, s)
    got = sh.shard(x, s, ldims, count)
    want = _expected_tiles(x, case["devices"], count, ldims)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(sh.unshard(got, s, shape), x)
    # every device of a group gets the whole array back
    merged = sh.merge(got, s, shape)
    np.testing.assert_array_equal(merged, np.broadcast_to(x, (count,) + shape))


def test_golden_covers_the_forms():
    """The golden file holds iota, transposed-iota and explicit tile assignments, partial
    replication, and Shardy meshes with explicit device_ids."""
    texts = "\n".join(c["module"] for c in GOLD["cases"])
    assert "last_tile_dim_replicate" in texts
    assert "T(1,0)" in texts
    assert "sharding={replicated}" in texts
    assert len(GOLD["cases"]) >= 15
    assert len(GOLD["manual"]) >= 10
    assert len(GOLD["uneven"]) >= 4


def _manual_pair(m):
    insts = [i for c in m.computations for i in c.instructions if i.opcode == "custom-call"]
    a = next(i for i in insts if str(i.attr("custom_call_target")) in ("SPMDFullToShardShape",
                                                                        "xla.sdy.GlobalToLocalShape"))
    b = next(i for i in insts if str(i.attr("custom_call_target")) in ("SPMDShardToFullShape",
                                                                        "xla.sdy.LocalToGlobalShape"))
    return a, b


@pytest.mark.parametrize("case", GOLD.get("uneven", []), ids=lambda c: c["name"])
def test_uneven_tile_shape_is_xlas(case):
    """XLA's per-device shape of an unevenly cut value (measured in the partitioned program)."""
    m = parse(case["module"])
    inst = next(i for i in m.entry_computation.instructions
                if i.opcode == "custom-call" and str(i.attr("custom_call_target")) == "Sharding")
    s = sh.instruction_sharding(inst, m)
    shape = tuple(case["shape"])
    assert sh.local_dims(shape, s) == tuple(case["local"])
    x = np.arange(1, int(np.prod(shape)) + 1, dtype=np.float32).reshape(shape)
    n = sh.module_devices(m)[1]
    t = sh.shard(x, s, tuple(case["local"]), n)
    np.testing.assert_array_equal(sh.unshard(t, s, shape), x)
    assert t.sum() == x.sum()                       # every element once, padding zero


@pytest.mark.parametrize("case", GOLD.get("runs", []), ids=lambda c: c["name"])
def test_manual_regions_run_like_xla(case, hlo):
    """shard_map modules (a region inside a region, axes cut in mesh-transposed order) through
    `hlo run` give XLA's result: the split and the merge place every piece where XLA does."""
    Path("m.hlo").write_text(case["module"])
    np.save("x.npy", np.arange(int(np.prod(case["shape"])), dtype=np.float32).reshape(case["shape"]))
    r = hlo("run", "m.hlo", "-i", "x.npy", "-o", "out.npz")
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.load("out.npz")["out0"], np.asarray(case["want"], np.float32))


@pytest.mark.parametrize("case", GOLD["manual"], ids=lambda c: c["name"])
def test_manual_region_matches_shard_map(case):
    m = parse(case["module"])
    enter, leave = _manual_pair(m)
    shape = tuple(case["shape"])
    x = np.asarray(np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 3)
    count = 8
    s_in = sh.manual_split(enter, m)
    ldims = tuple(enter.shape.dims)
    assert sh.local_dims(shape, s_in) == ldims
    stacked = np.broadcast_to(x, (count,) + shape)
    local = sh.split(stacked, s_in, ldims)
    np.testing.assert_array_equal(local, _expected_tiles(x, case["devices"], count, ldims))
    s_out = sh.manual_merge(leave, m)
    back = sh.merge(local + 1, s_out, shape)
    np.testing.assert_array_equal(back, np.broadcast_to(x + 1, (count,) + shape))
    np.testing.assert_array_equal(sh.unshard(local, s_out, shape), x)


# ----------------------------------------------------------------------------------------------
# live differential test (JAX, 8 host devices)
# ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_live_against_jax():
    pytest.importorskip("jax")
    fresh = _run_generator()
    assert [c["name"] for c in fresh["cases"]] == [c["name"] for c in GOLD["cases"]]
    for c, g in zip(fresh["cases"], GOLD["cases"]):
        assert c["devices"] == g["devices"], c["name"]
        m = parse(c["module"])
        s = sh.parameter_sharding(_param(m), m)
        shape = tuple(c["shape"])
        x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        got = sh.shard(x, s, sh.local_dims(shape, s), 8 if len(c["devices"]) > 2 or shape == () else
                       sh.module_devices(m)[1])
        for d, data in c["_data"].items():
            np.testing.assert_array_equal(got[int(d)], np.asarray(data, np.float32), err_msg=c["name"])
    assert [c["devices"] for c in fresh["manual"]] == [c["devices"] for c in GOLD["manual"]]
    assert [(c["shape"], c["local"]) for c in fresh["uneven"]] == [(c["shape"], c["local"]) for c in GOLD["uneven"]]
    assert [c["want"] for c in fresh["runs"]] == [c["want"] for c in GOLD["runs"]]


# ----------------------------------------------------------------------------------------------
# Shardy text, named shardings, meshes
# ----------------------------------------------------------------------------------------------

def _mod(meshes: str = '{mesh = #sdy.mesh<["x"=2, "y"=4]>}', body: str = "ROOT p = f32[8,4] parameter(0)"):
    meshes = meshes.replace('"', '\\"')
    return parse(f'HloModule m, frontend_attributes={{xla.sdy.meshes="{meshes}"}}\nENTRY e {{ {body} }}')


def _devices_of(s: Sharding) -> np.ndarray:
    return sh._tile_devices(s.tile_assignment)


def test_sdy_basic_and_axis_order():
    m = _mod()
    s = sh.sdy_sharding('#sdy.sharding<@mesh, [{"x", "y"}, {}]>', m)
    assert s.tile_assignment.dims == (8, 1) and not s.last_tile_dim_replicate
    assert _devices_of(s).ravel().tolist() == list(range(8))
    s = sh.sdy_sharding('#sdy.sharding<@mesh, [{"y", "x"}, {}]>', m)
    assert _devices_of(s).ravel().tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    s = sh.sdy_sharding('#sdy.sharding<@mesh, [{"y"}, {?}]>', m)
    assert s.tile_assignment.dims == (4, 1, 2) and s.last_tile_dim_replicate
    assert _devices_of(s).tolist() == [[[0, 4]], [[1, 5]], [[2, 6]], [[3, 7]]]


def test_sdy_open_priority_replicated_unreduced():
    m = _mod()
    a = sh.sdy_sharding('#sdy.sharding<@mesh, [{"x", ?}p1, {?}], replicated={"y"}>', m)
    b = sh.sdy_sharding('#sdy.sharding<@mesh, [{"x"}, {}]>', m)
    assert a == b
    c = sh.sdy_sharding('#sdy.sharding<@mesh, [{}, {"y"}], unreduced={"x"}>', m)
    assert c.tile_assignment.dims == (1, 4, 2)
    assert sh.sdy_sharding('#sdy.sharding<@mesh, [{}, {}]>', m).kind == "replicated"
    assert sh.sdy_sharding('#sdy.sharding<@mesh, []>', m).kind == "replicated"


def test_sdy_sub_axes():
    m = _mod('{mesh = #sdy.mesh<["x"=4, "y"=2]>}')
    # "x":(1)2 is the major half of x: x coordinate // 2
    s = sh.sdy_sharding('#sdy.sharding<@mesh, [{"x":(1)2}, {"x":(2)2}]>', m)
    a = _devices_of(s)
    assert a.shape == (2, 2, 2)
    for dev in range(8):
        xc = dev // 2
        assert dev in a[xc // 2, xc % 2].tolist()
    with pytest.raises(ShardingError, match="twice"):
        sh.sdy_sharding('#sdy.sharding<@mesh, [{"x":(1)2}, {"x"}]>', m)
    with pytest.raises(ShardingError, match="does not fit"):
        sh.sdy_sharding('#sdy.sharding<@mesh, [{"x":(2)4}, {}]>', m)


def test_sdy_device_ids_maximal_inline_and_per_value():
    meshes = ('{mesh = #sdy.mesh<["x"=2, "y"=2], device_ids=[3, 2, 1, 0]>, '
              'maximal_mesh_1 = #sdy.mesh<[], device_ids=[1]>}')
    m = _mod(meshes)
    s = sh.sdy_sharding('#sdy.sharding<@mesh, [{"x"}, {"y"}]>', m)
    assert _devices_of(s).tolist() == [[3, 2], [1, 0]]
    assert sh.sdy_sharding('#sdy.sharding<@maximal_mesh_1, [{}, {}]>', m) == Sharding("maximal", device=1)
    inline = sh.sdy_sharding('#sdy.sharding<mesh<["a"=2]>, [{}, {"a"}]>', m)
    assert inline.tile_assignment.dims == (1, 2)
    t = sh.sdy_sharding('#sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>, <@mesh, []>]>', m)
    assert t.kind == "tuple" and t.elements[1].kind == "replicated"
    one = sh.sdy_sharding('#sdy.sharding_per_value<[<@mesh, [{"x"}, {}]>]>', m)
    assert one.kind == "tiled"
    assert sh.module_devices(m) == (1, 4)


@pytest.mark.parametrize("text,fragment", [
    ('#sdy.sharding<@nomesh, [{}]>', "names mesh @nomesh"),
    ('#sdy.sharding<@mesh, [{"q"}, {}]>', 'axis "q"'),
    ('#sdy.sharding<@mesh, [{"x"} {}]>', "expected"),
    ('#sdy.sharding<@mesh, [{"x"}, {}]', "expected '>'"),
    ('#sdy.sharding<@mesh, [{"x"}, {}], bogus={"y"}>', "expected replicated= or unreduced="),
    ('sharding<@mesh, []>', "#sdy.sharding"),
    ('#sdy.sharding<@mesh, [{"x"}, {}]> extra', "the end"),
    ('#sdy.sharding<@mesh, [{"x"}, {}]> %', "got '%'"),
])
def test_sdy_errors(text, fragment):
    with pytest.raises(ShardingError, match=None) as e:
        sh.sdy_sharding(text, _mod())
    assert fragment in str(e.value)


def test_mlir_escaped_quotes():
    m = parse('HloModule m, frontend_attributes={xla.sdy.meshes="{mesh = #sdy.mesh<[\\\\22x\\\\22=2]>}"}\n'
              'ENTRY e { ROOT p = f32[4] parameter(0) }')
    assert sh.sdy_meshes(m) == {"mesh": sh.Mesh((("x", 2),))}
    s = sh.sdy_sharding('#sdy.sharding<@mesh, [{\\22x\\22}]>', m)
    assert s.tile_assignment.dims == (2,)


def test_bad_meshes_are_errors():
    with pytest.raises(ShardingError, match="twice"):
        sh.sdy_meshes(_mod('{mesh = #sdy.mesh<["x"=2, "x"=2]>}'))
    with pytest.raises(ShardingError, match="permutation"):
        sh.sdy_meshes(_mod('{mesh = #sdy.mesh<["x"=2], device_ids=[0, 2]>}'))


def test_manual_axes_text():
    assert sh.manual_axes('#sdy<manual_axes{"x", "y"}>') == ("x", "y")
    assert sh.manual_axes('#sdy<manual_axes{}>') == ()


@pytest.mark.parametrize("text,want_dims,want_devices", [
    ("{mesh['a'=2,'b'=4], [{'a'}, {'b'}]}", (2, 4), list(range(8))),
    ("{mesh['a'=2,'b'=4], [{'b'}, {}]}", (4, 1, 2), [0, 4, 1, 5, 2, 6, 3, 7]),
    ("{mesh['x'=2,'y'=2], device_ids=(0,2,1,3), [{'x'}, {}]}", (2, 1, 2), [0, 2, 1, 3]),
    ("{mesh['x'=2,'y'=2], device_ids=([2,2]T(1,0)), [{'x'}, {'y'}]}", (2, 2), [0, 2, 1, 3]),
    ("{mesh['a'=2,'b'=4], [{'a'}, {}], replicated={'b'}}", (2, 1, 4), list(range(8))),
    ("{mesh['a'=2,'b'=4], [{'0'}, {}], metadata={op_name=\"x\"}}", (2, 1, 4), list(range(8))),
    # manual and unreduced axes: subgroup dimensions after the data, XLA's order
    ("{mesh['a'=2,'b'=2,'c'=2], [{'c'}, {}], manual={'a'}, unreduced={'b'}}", (2, 1, 2, 2),
     [0, 2, 4, 6, 1, 3, 5, 7]),
])
def test_named_shardings(text, want_dims, want_devices):
    m = parse(f"HloModule m\nENTRY e {{ ROOT p = f32[8,4] parameter(0), sharding={text} }}")
    s = sh.parameter_sharding(_param(m), m)
    assert s.tile_assignment.dims == want_dims
    assert _devices_of(s).ravel().tolist() == want_devices
    assert sh.module_devices(m) == (1, len(want_devices))
    if "manual=" in text:
        assert s.last_tile_dims == ("manual", "unreduced")


def test_named_sample_reads_whole():
    """samples/syntax/attr_sharding_named.hlo: every named form XLA's parser takes (the comma
    after the mesh is optional there)."""
    path = Path(__file__).resolve().parents[2] / "samples" / "syntax" / "attr_sharding_named.hlo"
    m = parse(path.read_text())
    got = {i.name: sh.instruction_sharding(i, m) for i in m.entry_computation.instructions}
    assert str(got["j"]) == str(got["a"]) == "{devices=[2,4]0,1,2,3,4,5,6,7}"
    assert str(got["h"]) == "{devices=[2,1,2,2]0,1,4,5,2,3,6,7 last_tile_dims={unreduced, replicated}}"
    assert str(got["i"]) == "{devices=[1,1,2,4]0,1,2,3,4,5,6,7 last_tile_dims={manual, replicated}}"
    assert got["k"] == Sharding("maximal", device=3)
    assert sh.module_devices(m) == (1, 8)


def test_named_simple_kinds():
    for text, kind in [("{maximal_mesh[device_id=5]}", "maximal"), ("{mesh['a'=2], replicated}", "replicated"),
                       ("{mesh['a'=2], manual}", "manual"), ("{mesh[], replicated}", "replicated"),
                       ("{mesh['a'=2], unreduced}", "unreduced")]:
        m = parse(f"HloModule m\nENTRY e {{ ROOT p = f32[4] parameter(0), sharding={text} }}")
        assert sh.parameter_sharding(_param(m), m).kind == kind


def test_parameter_without_sharding_and_module_devices():
    m = parse("HloModule m\nENTRY e { ROOT p = f32[4] parameter(0) }")
    assert sh.parameter_sharding(_param(m), m) is None
    assert sh.module_devices(m) == (1, 1)
    m = parse("HloModule m, replica_count=2, num_partitions=4\nENTRY e { ROOT p = f32[4] parameter(0) }")
    assert sh.module_devices(m) == (2, 4)
    m = parse("HloModule m\nENTRY e { ROOT p = f32[4] parameter(0), sharding={maximal device=5} }")
    assert sh.module_devices(m) == (1, 6)
    m = parse("HloModule m\nENTRY e { ROOT p = f32[4,2] parameter(0), sharding={devices=[2,1,2]<=[4] "
              "last_tile_dim_replicate} }")
    assert sh.module_devices(m) == (1, 4)


def test_bad_sdy_on_an_instruction_is_located():
    m = _mod(body='ROOT p = f32[8,4] parameter(0), frontend_attributes={xla.sdy.sharding='
                  '"#sdy.sharding<@nope, [{}, {}]>"}')
    with pytest.raises(ShardingError) as e:
        sh.parameter_sharding(_param(m), m)
    assert e.value.diagnostics and e.value.diagnostics[0].line == 2
    assert "p: " in str(e.value) and "@nope" in str(e.value)


# ----------------------------------------------------------------------------------------------
# tiles: XLA's uneven tiles, subgroups, maximal, manual, replicas
# ----------------------------------------------------------------------------------------------

def _tiled(dims, devices=None, ltdr=False, ltd=()):
    n = int(np.prod(dims))
    ta = (TileAssignment(tuple(dims), devices=tuple(devices)) if devices is not None else
          TileAssignment(tuple(dims), iota=IotaReplicaGroups(tuple(dims), (n,), ())))
    return Sharding("tiled", tile_assignment=ta, last_tile_dim_replicate=ltdr, last_tile_dims=tuple(ltd))


def test_uneven_tiles_follow_xla_offsets():
    # XLA TileOffsetForDevice / TileLimitForDevice: tile size ceil(5/4)=2, offsets min(i*2, 5)
    s = _tiled([4, 1])
    x = np.arange(15, dtype=np.int32).reshape(5, 3) + 1
    assert sh.local_dims((5, 3), s) == (2, 3)
    t = sh.shard(x, s, (2, 3), 4)
    np.testing.assert_array_equal(t[0], x[0:2])
    np.testing.assert_array_equal(t[1], x[2:4])
    np.testing.assert_array_equal(t[2], np.concatenate([x[4:5], np.zeros((1, 3), np.int32)]))
    np.testing.assert_array_equal(t[3], np.zeros((2, 3), np.int32))       # wholly past the end
    np.testing.assert_array_equal(sh.unshard(t, s, (5, 3)), x)
    # [5,3] over 2 devices: tiles of 3 rows, the second one padded
    t2 = sh.shard(x, _tiled([2, 1]), (3, 3), 2)
    np.testing.assert_array_equal(t2[1], np.concatenate([x[3:5], np.zeros((1, 3), np.int32)]))


def test_shard_defaults_to_the_shardings_devices():
    x = np.arange(8.0).reshape(4, 2)
    np.testing.assert_array_equal(sh.shard(x, _tiled([2, 1])), x.reshape(2, 2, 2))
    np.testing.assert_array_equal(sh.shard(x, None), x[None])


def test_shard_wrong_local_dims_is_an_error():
    with pytest.raises(ShardingError, match=r"per-device shape \[2, 3\], not \[3, 3\]"):
        sh.shard(np.zeros((5, 3)), _tiled([4, 1]), (3, 3), 4)


def test_rank_and_device_count_errors():
    with pytest.raises(ShardingError, match="cuts 2 dimensions but the array has 1"):
        sh.shard(np.zeros(4), _tiled([2, 2]), None, 4)
    with pytest.raises(ShardingError, match="names 4 devices but the run has 3 partitions"):
        sh.shard(np.zeros((4, 4)), _tiled([2, 2]), None, 3, partitions=3)
    with pytest.raises(ShardingError, match="each of the devices"):
        sh.layout(_tiled([2, 2], [0, 1, 1, 3]), 2)
    with pytest.raises(ShardingError, match="tuple"):
        sh.layout(Sharding("tuple", elements=(Sharding("replicated"),)), 1)


def test_replicas_repeat_partitions():
    # 2 replicas x 2 partitions: device d is partition d % 2
    s = _tiled([2])
    x = np.arange(4.0)
    t = sh.shard(x, s, (2,), 4)
    np.testing.assert_array_equal(t, [[0, 1], [2, 3], [0, 1], [2, 3]])
    merged = sh.merge(t * np.array([[1], [1], [10], [10]]), s, (4,))
    np.testing.assert_array_equal(merged[0], x)
    np.testing.assert_array_equal(merged[3], x * 10)


def test_replicated_maximal_manual():
    x = np.arange(6.0).reshape(2, 3)
    for s in (None, Sharding("replicated"), Sharding("maximal", device=2), Sharding("manual")):
        t = sh.shard(x, s, None, 4)
        assert t.shape == (4, 2, 3)
        np.testing.assert_array_equal(t, np.broadcast_to(x, t.shape))
    per = np.stack([x + k for k in range(4)])
    np.testing.assert_array_equal(sh.unshard(per, Sharding("maximal", device=2), (2, 3)), x + 2)
    np.testing.assert_array_equal(sh.merge(per, Sharding("maximal", device=2), (2, 3)),
                                  np.broadcast_to(x + 2, (4, 2, 3)))
    np.testing.assert_array_equal(sh.merge(per, Sharding("manual"), (2, 3)), per)
    np.testing.assert_array_equal(sh.merge(per, Sharding("replicated"), (2, 3)), per)


def test_merge_within_manual_subgroups():
    # data dim cut in 2, last dim a manual subgroup of 2: devices (0,1) and (2,3)? tile assignment
    # [2,2]<=[4]: tile 0 -> devices 0 (group 0), 1 (group 1); tile 1 -> 2 (group 0), 3 (group 1)
    s = _tiled([2, 2], ltd=("manual",))
    local = np.array([[0, 1], [10, 11], [2, 3], [12, 13]], np.float32)
    merged = sh.merge(local, s, (4,))
    np.testing.assert_array_equal(merged[0], [0, 1, 2, 3])
    np.testing.assert_array_equal(merged[2], [0, 1, 2, 3])
    np.testing.assert_array_equal(merged[1], [10, 11, 12, 13])
    np.testing.assert_array_equal(merged[3], [10, 11, 12, 13])
    # each device cuts its own value
    own = np.stack([np.arange(4.0) + 100 * d for d in range(4)])
    np.testing.assert_array_equal(sh.split(own, s, (2,)), [[0, 1], [100, 101], [202, 203], [302, 303]])


def test_merge_on_a_subset_of_devices():
    s = _tiled([2, 2], ltd=("manual",))
    local = np.array([[0, 1], [2, 3]], np.float32)          # devices 0 and 2: group 0
    merged = sh.merge(local, s, (4,), devices=(0, 2))
    np.testing.assert_array_equal(merged, [[0, 1, 2, 3], [0, 1, 2, 3]])
    with pytest.raises(ShardingError, match=r"needs tiles from devices \[2\]"):
        sh.merge(local, s, (4,), devices=(0, 1))


def test_leaf_shardings():
    from hlo_cli.ir.shape import Shape  # noqa: F401
    m = parse("HloModule m\nENTRY e { ROOT p = (f32[2], (s32[3], f32[4])) parameter(0), "
              "sharding={{replicated}, {maximal device=0}, {devices=[2]0,1}} }")
    p = _param(m)
    leaves = sh.leaf_shardings(sh.parameter_sharding(p, m), p.shape)
    assert [x.kind for x in leaves] == ["replicated", "maximal", "tiled"]
    assert sh.leaf_shardings(Sharding("replicated"), p.shape) == [Sharding("replicated")] * 3
    with pytest.raises(ShardingError, match="2 elements for a shape with 3 leaves"):
        sh.leaf_shardings(Sharding("tuple", elements=(Sharding("replicated"),) * 2), p.shape)


def test_manual_split_merge_need_the_right_custom_call():
    m = parse("HloModule m\nENTRY e {\n  p = f32[8] parameter(0)\n"
              "  ROOT c = f32[4] custom-call(p), custom_call_target=\"SPMDFullToShardShape\", sharding={manual}\n}")
    c = m.entry_computation.instructions[-1]
    with pytest.raises(ShardingError, match="operand p has no sharding") as e:
        sh.manual_split(c, m)
    assert e.value.diagnostics[0].line == 4
    with pytest.raises(ShardingError, match="manual_merge: expected a custom-call"):
        sh.manual_merge(c, m)


# ----------------------------------------------------------------------------------------------
# laws
# ----------------------------------------------------------------------------------------------

@st.composite
def _tilings(draw):
    rank = draw(st.integers(0, 3))
    dims = [draw(st.integers(0, 7)) for _ in range(rank)]
    tiles = [draw(st.integers(1, 4)) for _ in range(rank)]
    rep = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["none", "replicate", "manual", "both"]))
    sub = {"none": [], "replicate": [rep], "manual": [rep], "both": [rep, 2]}[kind]
    ta_dims = tiles + sub
    n = int(np.prod(ta_dims))
    perm = draw(st.permutations(list(range(n))))
    ltdr = kind == "replicate"
    ltd = {"manual": ("manual",), "both": ("manual", "replicated")}.get(kind, ())
    if n == 1:
        return dims, Sharding("replicated")
    return dims, _tiled(ta_dims, perm, ltdr, ltd)


@settings(max_examples=100, deadline=None)
@given(_tilings(), st.integers(1, 3))
def test_unshard_inverts_shard(case, replicas):
    dims, s = case
    x = np.arange(int(np.prod(dims)), dtype=np.int64).reshape(dims) + 1
    n = sh.layout(s, len(dims)).partitions
    count = n * replicas
    t = sh.shard(x, s, sh.local_dims(dims, s), count, partitions=n)
    assert t.shape == (count,) + sh.local_dims(dims, s)
    np.testing.assert_array_equal(sh.unshard(t, s, dims, partitions=n), x)
    np.testing.assert_array_equal(sh.merge(t, s, dims, partitions=n), np.broadcast_to(x, (count,) + tuple(dims)))
    # shard of a global value == split of the value every device holds
    np.testing.assert_array_equal(sh.split(np.broadcast_to(x, (count,) + tuple(dims)), s, None,
                                           partitions=n), t)
    # each element appears in exactly the tiles that cover it; padding is zero
    assert t.sum() == x.sum() * (count // max(1, int(np.prod(sh.layout(s, len(dims)).tiles))))


@st.composite
def _mesh_shardings(draw):
    """A random mesh (axes split into sub-axis pieces), a random assignment of pieces to data
    dimensions, and the tile assignment XLA's V3ToV2Sharding builds for it: the mesh's devices
    reshaped to the pieces (major to minor), transposed to [pieces of dim 0, of dim 1, ...,
    unused pieces in mesh order], reshaped to [tiles..., replicated]."""
    naxes = draw(st.integers(1, 3))
    axes, pieces = [], []                          # pieces: (axis name, pre, size)
    for a in range(naxes):
        parts = draw(st.lists(st.sampled_from([2, 3]), min_size=1, max_size=2))
        name = "xyz"[a]
        axes.append((name, int(np.prod(parts))))
        pre = 1
        for k in parts:
            pieces.append((name, pre, k, len(parts) > 1))
            pre *= k
    n = int(np.prod([s for _, s in axes]))
    rank = draw(st.integers(1, 3))
    owner = [draw(st.integers(-1, rank - 1)) for _ in pieces]     # -1: not used
    order = draw(st.permutations(list(range(len(pieces)))))
    dims = [[j for j in order if owner[j] == i] for i in range(rank)]
    ids = draw(st.one_of(st.none(), st.permutations(list(range(n)))))
    unused = [j for j in range(len(pieces)) if owner[j] == -1]
    perm = [j for d in dims for j in d] + unused
    dev = np.asarray(ids if ids is not None else range(n)).reshape([p[2] for p in pieces]).transpose(perm)
    tiles = [int(np.prod([pieces[j][2] for j in d])) for d in dims]
    rep = int(np.prod([pieces[j][2] for j in unused]))

    def ref(j):
        name, pre, k, sub = pieces[j]
        return f'"{name}":({pre}){k}' if sub else f'"{name}"'

    mesh = "[" + ", ".join(f'"{a}"={s}' for a, s in axes) + "]"
    if ids is not None and list(ids) != list(range(n)):
        mesh += ", device_ids=[" + ", ".join(map(str, ids)) + "]"
    text = "#sdy.sharding<@mesh, [" + ", ".join("{" + ", ".join(ref(j) for j in d) + "}" for d in dims) + "]>"
    want = dev.reshape(tiles + ([rep] if rep > 1 else []))
    return mesh, text, want, rank


@settings(max_examples=100, deadline=None)
@given(_mesh_shardings())
def test_sdy_tile_assignment_is_xlas(case):
    mesh, text, want, rank = case
    m = _mod("{mesh = #sdy.mesh<" + mesh + ">}")
    s = sh.sdy_sharding(text, m)
    if want.size == 1 or all(t == 1 for t in want.shape[:rank]):
        assert s.kind == "replicated"
        return
    assert s.last_tile_dim_replicate == (want.ndim > rank)
    np.testing.assert_array_equal(_devices_of(s), want)
    # the named form of XLA reads the same
    named = "{mesh[" + mesh.split("]")[0][1:].replace('"', "'") + "]"
    if "device_ids" in mesh:
        named += ", device_ids=(" + mesh.split("device_ids=[")[1].rstrip("]") + ")"
    named += ", " + text[len("#sdy.sharding<@mesh, "):-1].replace('"', "'") + "}"
    np.testing.assert_array_equal(_devices_of(sh.named_sharding(named)), want)


if __name__ == "__main__":  # pragma: no cover
    if "--emit" in sys.argv:
        json.dump(_generate(), sys.stdout)
    elif "--write" in sys.argv:
        data = _run_generator()
        for c in data["cases"]:
            del c["_data"]
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(json.dumps(data, indent=1) + "\n")
        print(f"wrote {GOLDEN}: {len(data['cases'])} cases, {len(data['manual'])} manual regions")


def test_one_tile_sharding_with_a_partition_count():
    """A replicated value on a run of 8 devices in 4 partitions: every device holds the whole
    array, and it reassembles from any of them."""
    x = np.arange(6.0).reshape(2, 3)
    st = sh.shard(x, Sharding("replicated"), count=8, partitions=4)
    assert st.shape == (8, 2, 3) and all((st[k] == x).all() for k in range(8))
    assert (sh.unshard(st, Sharding("replicated"), (2, 3), partitions=4) == x).all()
