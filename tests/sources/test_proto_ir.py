"""Protos decoded straight into the IR (hlo_cli/sources/proto_ir.py) against the way they were read
before (the proto printed as HLO text by the old printer, tests/sources/proto_text_old.py, that text parsed): for every module proto of
the repository (and XLA's GPU dumps in ../shared/gpu where they are at hand) the direct module is the
same IR, prints the same text with ir/printer, sits at the lines and columns of that text, and gives
the same `hlo check` diagnostics; snapshots (and an XLA GPU dump, with seeded inputs) run to the same bits.

Fields no file holds (statistics, result accuracy, origins, shardings of every form, domains, a custom
call's literal, sparsity, the origin recovery table) are set on sample protos and compared the same way.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from hlo_cli.errors import HloError
from hlo_cli.ir.printer import format_module
from hlo_cli.parser import parse
from hlo_cli.sources.proto import PROTO_SUFFIXES, read_module_proto, read_proto_modules
from hlo_cli.sources.proto_ir import located_text, module_ir
from hlo_cli.sources.proto_shape import ProtoError
from .proto_compare import first_difference
from .proto_text_old import module_text

ROOT = Path(__file__).resolve().parents[2]
SHARED_GPU = ROOT.parent / "shared" / "gpu"


def _protos() -> list[Path]:
    found = []
    for base in (ROOT / "tests", ROOT / "samples", SHARED_GPU):
        if base.is_dir():
            found += [p for p in sorted(base.rglob("*")) if p.suffix in PROTO_SUFFIXES and p.is_file()]
    return found


def _old_text(path: Path) -> str | None:
    """The text proto files were read through before: the proto printed as HLO text by the old
    printer (proto_text_old.py, test only); None when the file holds no module (a config, autotune results, a
    malformed proto: pinned elsewhere)."""
    try:
        mp, _, config = read_module_proto(str(path))
        return module_text(mp, config=config)
    except (HloError, ProtoError):
        return None


def _old_way(path: Path):
    """The module as proto files were read before: the old printer's text, parsed."""
    text = _old_text(path)
    return None if text is None else parse(text, path.name)


def _new_way(path: Path):
    """(module, text) as the loading path reads a proto now: decoded straight into the IR."""
    src = read_proto_modules(str(path)).modules[0]
    return src.module, src.text


def _params():
    """Every proto file that holds a module (configs, autotune results and malformed protos are
    pinned by tests/sources/test_proto*.py)."""
    out = []
    for p in _protos():
        if _old_text(p) is None:
            continue
        label = str(p.relative_to(ROOT.parent if p.is_relative_to(SHARED_GPU) else ROOT))
        out.append(pytest.param(p, id=label))
    return out


def test_the_comparison_covers_the_module_protos_at_hand():
    assert len(_params()) >= (60 if SHARED_GPU.is_dir() else 25)


@pytest.mark.parametrize("path", _params())
def test_direct_module_prints_and_sits_as_the_old_one(path):
    old = _old_way(path)
    new, text = _new_way(path)
    assert first_difference(old, new) is None
    assert text == format_module(old)
    again = parse(text, new.source)
    for ca, cb in zip(again.computations, new.computations):
        assert (ca.name, ca.loc.line, ca.loc.column) == (cb.name, cb.loc.line, cb.loc.column)
        assert [(i.name, i.loc.line, i.loc.column) for i in ca.instructions] == \
               [(i.name, i.loc.line, i.loc.column) for i in cb.instructions]


@pytest.mark.parametrize("path", [p for p in _params() if "shared" in p.id or "gpu" in p.id or "protos/" in p.id])
def test_direct_module_checks_as_the_old_one(path):
    from hlo_cli.checker.verify import check_module
    old = _old_way(path)
    new, text = _new_way(path)
    reread = parse(text, new.source)          # the old module, read back from the one printed text
    want = [(d.code, d.severity, d.message, d.line, d.column) for d in check_module(reread, text)]
    got = [(d.code, d.severity, d.message, d.line, d.column) for d in check_module(new, text)]
    assert got == want
    old_text = _old_text(path)
    assert [w[:3] for w in got] == [(d.code, d.severity, d.message) for d in check_module(old, old_text)]


# ----------------------------------------------------------------------------- fields no file above holds

PROTOS = ROOT / "samples" / "protos"


def _message(name: str):
    from hlo_cli.sources.proto_schema import messages
    mp, _, _ = read_module_proto(str(PROTOS / name))
    m = messages()["HloModuleProto"]()
    m.CopyFrom(mp)
    return m


def _both_ways(m):
    old = parse(module_text(m), "x.pb")
    new, text = located_text(module_ir(m, "x.pb"))
    assert first_difference(old, new) is None
    assert text == format_module(old)
    return new


def _instruction(m, opcode: str):
    return next(i for c in m.computations for i in c.instructions if i.opcode == opcode)


def test_statistics_result_accuracy_and_origin_decode_as_their_text_parses():
    m = _message("sort.hlo.pb")
    i = _instruction(m, "sort")
    i.statistics_viz.stat_index_to_visualize = 1
    for name, val in (("stat-0", 0.5), ("stat-1", 2.0), ("s.x", 1e-7)):
        st = i.statistics_viz.statistics.add()
        st.stat_name, st.stat_val = name, val
    i.original_value.elements.add().original_array.instruction_name = 'a "quoted" name'
    p = _instruction(m, "parameter")
    p.original_value.is_synthetic_call = True
    new = _both_ways(m)
    assert "visualizing_index=1" in str(next(x for c in new.computations for x in c.instructions
                                             if x.opcode == "sort").attrs["statistics"])


@pytest.mark.parametrize("tolerance", [False, True])
def test_result_accuracy_decodes_as_its_text_parses(tolerance):
    m = _message("jit_f.cpu_after_optimizations.hlo.pb")
    i = next((x for c in m.computations for x in c.instructions if x.opcode in ("exponential", "tanh", "log")),
             None)
    assert i is not None, "the sample holds a unary op that takes result_accuracy"
    if tolerance:
        i.result_accuracy.tolerance.atol, i.result_accuracy.tolerance.rtol = 0.5, 0.0
        i.result_accuracy.tolerance.ulps = 1
    else:
        i.result_accuracy.mode = 1
    _both_ways(m)


def test_a_tuple_shaped_origin_decodes_as_its_text_parses():
    m = _message("while_loop_opt.hlo.pb")
    i = next(x for c in m.computations for x in c.instructions if x.shape.element_type == 13)
    e = i.original_value.elements.add()
    e.shape_index.append(0)
    e.original_array.instruction_name = "x"
    e.original_array.shape_index.extend([1, 2])
    _both_ways(m)


def _classic(sp):
    sp.type = 3
    sp.tile_assignment_dimensions.extend([2, 1])
    sp.tile_assignment_devices.extend([1, 0])


def _classic_md(sp):
    _classic(sp)
    md = sp.metadata.add()
    md.op_name, md.op_type, md.source_line = "a/b", "t", 7


def _classic_two_md(sp):
    _classic_md(sp)
    sp.metadata.add().op_name = 'x "y"'
    sp.metadata.add()


def _iota(sp):
    sp.type = 3
    sp.tile_assignment_dimensions.extend([2, 2])
    sp.iota_reshape_dims.extend([2, 2])
    sp.iota_transpose_perm.extend([1, 0])
    sp.replicate_on_last_tile_dim = True


def _subgroups(sp):
    sp.type = 3
    sp.tile_assignment_dimensions.extend([1, 2, 2])
    sp.iota_reshape_dims.extend([4])
    sp.iota_transpose_perm.extend([0])
    sp.last_tile_dims.extend([4, 0])


def _maximal_shard_as(sp):
    sp.type = 1
    sp.tile_assignment_devices.append(1)
    sp.is_shard_group, sp.shard_group_id = True, 3


def _tuple(sp):
    sp.type = 2
    sp.tuple_shardings.add().type = 0
    _classic_md(sp.tuple_shardings.add())
    sp.tuple_shardings.add().type = 4


def _mesh(ns, sizes=(("x", 2), ("y", 4))):
    for name, size in sizes:
        ax = ns.mesh.axes.add()
        ax.name, ax.size = name, size


def _named_dims(sp):
    ns = sp.named_sharding
    _mesh(ns)
    d = ns.dim_shardings.add()
    d.axes.add().mesh_axis_index = 1
    d.is_closed = True
    d2 = ns.dim_shardings.add()
    ref = d2.axes.add()
    ref.mesh_axis_index = 1
    ref.sub_axis_info.pre_size, ref.sub_axis_info.size = 2, 2
    ns.replicated_axes.add().mesh_axis_index = 0
    ns.metadata.add().op_name = "m"


def _named_replicated(sp):
    ns = sp.named_sharding
    _mesh(ns)
    ns.mesh.iota_transform.reshape_dims.extend([2, 4])
    ns.mesh.iota_transform.transpose_perm.extend([1, 0])
    ns.unreduced_axes.add().mesh_axis_index = 1


def _named_manual(sp):
    ns = sp.named_sharding
    _mesh(ns, (("x", 2),))
    ns.mesh.device_ids.extend([1, 0])
    ns.manual_axes.add().mesh_axis_index = 0
    ns.metadata.add().op_type = "t"
    ns.metadata.add()


def _named_maximal(sp):
    sp.named_sharding.mesh.device_ids.append(3)


@pytest.mark.parametrize("fill", [_classic, _classic_md, _classic_two_md, _iota, _subgroups, _maximal_shard_as,
                                  _tuple, _named_dims, _named_replicated, _named_manual, _named_maximal],
                         ids=lambda f: f.__name__.strip("_"))
def test_shardings_decode_as_their_text_parses(fill):
    m = _message("sort.hlo.pb")
    i = _instruction(m, "sort")
    if fill is _tuple:
        i = next(x for c in m.computations for x in c.instructions if x.opcode == "parameter")
        leaf = type(i.shape)()
        leaf.CopyFrom(i.shape)
        i.shape.Clear()
        i.shape.element_type = 13
        for _ in range(3):
            i.shape.tuple_shapes.add().CopyFrom(leaf)
        fill(i.sharding)
    else:
        fill(i.sharding)
    _both_ways(m)


def test_a_domain_decodes_as_its_text_parses():
    m = _message("sort.hlo.pb")
    i = _instruction(m, "sort")
    i.opcode = "domain"
    del i.called_computation_ids[:]
    del i.dimensions[:]
    _classic_md(i.domain_entry_sharding)
    i.domain_exit_sharding.type = 1
    i.domain_exit_sharding.tile_assignment_devices.append(0)
    _both_ways(m)


@pytest.mark.parametrize("tuple_", [False, True])
def test_a_custom_calls_literal_decodes_as_its_text_parses(tuple_):
    from hlo_cli.sources.proto_literal import literal_from_numpy
    import numpy as np
    m = _message("sort.hlo.pb")
    i = _instruction(m, "sort")
    i.opcode = "custom-call"
    i.custom_call_target = "t"
    i.custom_call_api_version = 1
    del i.called_computation_ids[:]
    del i.dimensions[:]
    if tuple_:
        value = (np.array([1.5, -np.inf], np.float32), np.array([True, False]),
                 (np.int32(3), np.array([1, 2, 3, 4], np.int64)), np.complex64(1 + 2j))
    else:
        # (integers of rank 1: the parser does not read back a custom call's literal of floats
        # `f32[2]{0} {1.5, 2}` nor of rank 2, so the old way has no module to compare with)
        value = np.array([1, -2, 3, 4], np.int32)
    i.literal.ParseFromString(literal_from_numpy(value).SerializeToString())
    _both_ways(m)


def test_a_convolutions_sparsity_decodes_as_its_text_parses():
    m = _message("convolution.hlo.pb")
    i = _instruction(m, "convolution")
    for side, dim in (("lhs", 1), ("rhs", 0)):
        t = getattr(i.sparsity_config, side)
        t.num_non_zero, t.block_size, t.dimension, t.stride = 2, 4, dim, 2
    _both_ways(m)


def test_an_attribute_its_opcode_does_not_take_is_refused_naming_it():
    m = _message("jit_f.cpu_after_optimizations.hlo.pb")
    i = _instruction(m, "dot")
    i.sparsity_config.lhs.num_non_zero = 2
    with pytest.raises(ProtoError, match="unexpected attribute 'sparsity_config' for dot"):
        module_ir(m, "x.pb")


def test_the_origin_recovery_table_holds_its_module_as_the_ir_prints_it():
    m = _message("sort.hlo.pb")
    base = _message("sort.hlo.pb")
    e = m.original_value_recovery_table.entries.add()
    e.old_original_array.instruction_name, e.new_original_array.instruction_name = "a", "b"
    e.new_original_array.shape_index.extend([0, 1])
    e2 = m.original_value_recovery_table.entries.add()
    e2.old_original_array.instruction_name, e2.new_original_array.instruction_name = "c", "d"
    e2.recovery_module.CopyFrom(base)
    old = parse(module_text(m), "x.pb")
    new, text = located_text(module_ir(m, "x.pb"))
    got, want = new.attrs["origin_recovery_table"].text, old.attrs["origin_recovery_table"].text
    head = '{{"a"}:{"b" {0,1}} {"c"}:{"d"},"'
    assert got.startswith(head) and want.startswith(head)
    inner = got[len(head):got.rindex('"')]
    import textwrap
    assert first_difference(parse(textwrap.dedent(inner), "r"), parse(textwrap.dedent(want[len(head):want.rindex('"')]), "r")) is None
    assert first_difference(parse(text, "x.pb"), new) is None
    assert text == format_module(new)


# ----------------------------------------------------------------------------- the same bits

_SNAPSHOTS = ["samples/protos/jit_f.snapshot.pb", "samples/snapshots/loop.snapshot.pb",
              "samples/snapshots/narrow.snapshot.pb", "samples/snapshots/mlp.snapshot.pb",
              "tests/acceptance/data/nan_conv/module_0008.jit_f.snapshot.496375750.pb"]


@pytest.mark.parametrize("name", _SNAPSHOTS)
def test_a_snapshot_runs_to_the_same_bits_both_ways(name):
    import numpy as np

    import hlo_cli
    from hlo_cli.sources.proto import read_snapshot
    path = ROOT / name
    snap = read_snapshot(str(path))
    new = snap.source.module
    old = _old_way(path)
    assert first_difference(old, new) is None
    got = hlo_cli.run(new, *snap.arguments)
    want = hlo_cli.run(old, *snap.arguments)
    got = got if isinstance(got, (tuple, list)) else (got,)
    want = want if isinstance(want, (tuple, list)) else (want,)
    assert [np.asarray(g).tobytes() for g in got] == [np.asarray(w).tobytes() for w in want]


def test_a_gpu_dump_runs_to_the_same_bits_both_ways():
    # XLA GPU's MLP training step before its optimizations (a module proto without inputs: seeded ones)
    import numpy as np

    import hlo_cli
    path = ROOT / "samples/gpu/dumps/dir/module_87993.jit_dump_mlp_step_highest.before_optimizations.hlo.pb"
    new, _ = _new_way(path)
    old = _old_way(path)
    rng = np.random.default_rng(0)
    params = new.entry_computation.parameters
    assert all(p.shape.element_type == "f32" for p in params)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in params]
    got, want = hlo_cli.run(new, *args), hlo_cli.run(old, *args)
    assert [np.asarray(g).tobytes() for g in got] == [np.asarray(w).tobytes() for w in want]
