"""Strings from a proto never change the module it is read as (hlo_cli/sources/proto_ir.py).

A module proto's strings (names, metadata, frontend attributes, statistics, backend_config, a custom
call's target, execution threads, mesh axis names, origins, stack frames...) are held by the IR and
written into the text the IR printer prints for it.  Each is escaped, or refused when text cannot hold it (exit 2 naming
the field): a crafted string never adds, removes or renames instructions, and never makes a valid
proto fail with an error located in text hlo wrote itself.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hlo_cli.cli import main
from hlo_cli.errors import HloInputError
from hlo_cli.parser import parse
from hlo_cli.sources.proto import _module_of, _module_source, decode
from hlo_cli.sources.proto_schema import messages

from .proto_compare import first_difference

ROOT = Path(__file__).resolve().parents[2]
PROTOS = ROOT / "samples" / "protos"
BASES = ("sort.hlo.pb", "async.hlo.pb", "mesh_groups.hlo.pb", "convolution.hlo.pb",
         "jit_f.cpu_after_optimizations.hlo.pb")


def _base(name: str):
    kind, msg = decode((PROTOS / name).read_bytes(), name)
    m = messages()["HloModuleProto"]()
    m.CopyFrom(_module_of(kind, msg))
    return m


def _structure(m) -> list:
    """(computation name, instruction names in order) of each computation of a proto."""
    return sorted((c.name, sorted(i.name for i in c.instructions)) for c in m.computations)


def _check(m):
    """The proto is refused (HloInputError, exit 2, naming the file), or its text parses to a
    module whose computations hold exactly the proto's instructions."""
    try:
        src = _module_source(m, "fuzz.pb").modules[0]
    except HloInputError as e:
        assert e.exit_code == 2 and "fuzz.pb" in str(e)
        return "refused"
    module = parse(src.text, "fuzz.pb")     # a syntax error here is the bug
    assert first_difference(module, src.module) is None     # the printed text reads back as the IR
    got = {c.name: sorted(i.name for i in c.instructions) for c in module.computations}
    want = {c.name: sorted(i.name for i in c.instructions) for c in m.computations}
    for name, insts in got.items():
        assert want.get(name) == insts, (name, insts, want.get(name))
    # every computation the proto holds is printed, except async wrappers printed as sugar
    missing = set(want) - set(got)
    for name in missing:
        comp = next(c for c in m.computations if c.name == name)
        assert all(i.opcode == "parameter" or i.id == comp.root_id for i in comp.instructions), name
    return "printed"


# ----------------------------------------------------------------------------- the reproducers

def test_a_crafted_scheduling_name_adds_no_instruction(tmp_path):
    m = _base("sort.hlo.pb")
    m.computations[-1].instructions[0].metadata.scheduling_name = \
        'x"}\n  %evil = f32[] constant(1), metadata={op_name="'
    assert _check(m) == "printed"
    p = tmp_path / "sched.pb"
    p.write_bytes(m.SerializeToString())
    r = CliRunner().invoke(main, ["check", str(p)])
    assert r.exit_code == 0 and "5 instructions" in r.output, r.output


@pytest.mark.parametrize("edit", ["name", "key", "value", "stat", "config", "target", "axis"])
def test_quotes_and_newlines_in_strings_do_not_break_the_text(edit):
    nasty = 'a"b\nc}\'d{'
    m = _base("async.hlo.pb" if edit == "target" else "mesh_groups.hlo.pb" if edit == "axis" else "sort.hlo.pb")
    inst = m.computations[-1].instructions[0]
    if edit == "name":
        inst.metadata.op_name = nasty
    elif edit == "key":
        inst.frontend_attributes.map[nasty] = "v"
    elif edit == "value":
        inst.frontend_attributes.map["k"] = nasty
    elif edit == "stat":
        s = inst.statistics_viz.statistics.add()
        s.stat_name, s.stat_val = nasty, 1.0
    elif edit == "config":
        inst.backend_config = b'{"a": "}\n%x = f32[] constant(1)"}'
    elif edit == "target":
        cc = next(i for c in m.computations for i in c.instructions if i.opcode == "custom-call")
        cc.custom_call_target = nasty
    elif edit == "axis":
        found = False
        for c in m.computations:
            for i in c.instructions:
                if i.HasField("mesh_axes_replica_group_list"):
                    i.mesh_axes_replica_group_list.mesh.axes[0].name = nasty
                    found = True
        assert found
    assert _check(m) in ("printed", "refused")


# ----------------------------------------------------------------------------- the property

_ALPHABET = st.sampled_from(list('"\'\\{}[]()<>,=%:;/*#-._ \n\r\t\x00\x7faZ09é\u2028\U0001f600') +
                            ["ROOT", "ENTRY", "metadata=", "->", "<=", "//", "/*", "*/", "}\n  %e = f32[] constant(1)"])
TEXT = st.one_of(st.text(), st.lists(_ALPHABET, max_size=12).map("".join))
BYTES = st.one_of(st.binary(), TEXT.map(lambda s: s.encode("utf-8")))


def _inst(m, k):
    insts = [i for c in m.computations for i in c.instructions]
    return insts[k % len(insts)]


def _comp(m, k):
    return m.computations[k % len(m.computations)]


def _md(m, k, field, v):
    setattr(_inst(m, k).metadata, field, v)


def _fa(m, k, key, v):
    _inst(m, k).frontend_attributes.map[key] = v


def _stat(m, k, v):
    s = _inst(m, k).statistics_viz.statistics.add()
    s.stat_name, s.stat_val = v, 2.5


def _origin(m, k, v):
    i = _inst(m, k)
    e = i.original_value.elements.add()
    sp = i.shape
    while sp.element_type == 13 and len(sp.tuple_shapes):
        e.shape_index.append(0)
        sp = sp.tuple_shapes[0]
    e.original_array.instruction_name = v


def _mesh_axis(m, k, v):
    for c in m.computations:
        for i in c.instructions:
            if i.HasField("mesh_axes_replica_group_list"):
                axes = i.mesh_axes_replica_group_list.mesh.axes
                axes[k % len(axes)].name = v
                return


def _stack(m, k, v):
    sf = m.stack_frame_index
    (sf.file_names if k % 2 else sf.function_names).append(v)


def _payload(m, k, v):
    m.payloads.append(v)
    _inst(m, k).metadata.metadata_payload.id = len(m.payloads) - 1


class _Collides(Exception):
    """A new name equal to one the module holds (names are unique: not this test's subject)."""


def _rename_inst(m, k, v):
    names = {i.name for c in m.computations for i in c.instructions}
    if v in names:
        raise _Collides
    _inst(m, k).name = v


def _rename_comp(m, k, v):
    c = _comp(m, k)
    names = {x.name for x in m.computations}
    if v in names:
        raise _Collides
    if m.entry_computation_name == c.name:
        m.entry_computation_name = v
    c.name = v


def _set(attr):
    def edit(m, k, v):
        setattr(_inst(m, k), attr, v)
    return edit


EDITS = {
    "module.name": (TEXT, lambda m, k, v: setattr(m, "name", v)),
    "computation.name": (TEXT, _rename_comp),
    "computation.execution_thread": (TEXT, lambda m, k, v: setattr(_comp(m, k), "execution_thread", v)),
    "instruction.name": (TEXT, _rename_inst),
    "metadata.op_type": (TEXT, lambda m, k, v: _md(m, k, "op_type", v)),
    "metadata.op_name": (TEXT, lambda m, k, v: _md(m, k, "op_name", v)),
    "metadata.source_file": (TEXT, lambda m, k, v: _md(m, k, "source_file", v)),
    "metadata.deduplicated_name": (TEXT, lambda m, k, v: _md(m, k, "deduplicated_name", v)),
    "metadata.scheduling_name": (TEXT, lambda m, k, v: _md(m, k, "scheduling_name", v)),
    "metadata.metadata_payload": (BYTES, _payload),
    "frontend_attributes.key": (TEXT, lambda m, k, v: _fa(m, k, v, "x")),
    "frontend_attributes.value": (TEXT, lambda m, k, v: _fa(m, k, "k", v)),
    "module.frontend_attributes": (TEXT, lambda m, k, v: m.frontend_attributes.map.__setitem__(v, v)),
    "statistics.stat_name": (TEXT, _stat),
    "backend_config": (BYTES, _set("backend_config")),
    "custom_call_target": (TEXT, _set("custom_call_target")),
    "async_execution_thread": (TEXT, _set("async_execution_thread")),
    "infeed_config": (BYTES, _set("infeed_config")),
    "outfeed_config": (BYTES, _set("outfeed_config")),
    "fusion_kind": (TEXT, _set("fusion_kind")),
    "comparison_direction": (TEXT, _set("comparison_direction")),
    "comparison_type": (TEXT, _set("comparison_type")),
    "original_value.instruction_name": (TEXT, _origin),
    "mesh.axis.name": (TEXT, _mesh_axis),
    "stack_frames.names": (TEXT, _stack),
}


@st.composite
def fuzzed_protos(draw):
    m = _base(draw(st.sampled_from(BASES)))
    fields = draw(st.lists(st.sampled_from(sorted(EDITS)), min_size=1, max_size=4))
    for f in fields:
        strategy, edit = EDITS[f]
        try:
            edit(m, draw(st.integers(0, 10_000)), draw(strategy))
        except _Collides:
            assume(False)
    return m


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fuzzed_protos())
def test_printed_module_has_exactly_the_protos_instructions(m):
    _check(m)


@pytest.mark.parametrize("field", sorted(EDITS))
def test_every_string_field_alone(field):
    """Each field with the worst strings of the alphabet, one at a time (a fixed, fast sweep)."""
    strategy, edit = EDITS[field]
    for base in BASES:
        for bad in ('"', "\\", "}", "{", "\n", "a b", "'", "a=b", ",", "%x", "x\"}\n  %e = f32[] constant(1)", "",
                    "\x00", "é", "x\u00b9", "0", "->", "/*", "//", "ROOT", "ENTRY", "f32", '{"a":' * 10 + "1" + "}" * 10, '{"a": "\n}"}', "{}"):
            m = _base(base)
            value = bad.encode() if strategy is BYTES else bad
            try:
                edit(m, 1, value)
            except _Collides:
                continue
            _check(m)


def test_a_recovery_module_with_a_quote_is_refused_not_misread():
    m = _base("sort.hlo.pb")
    e = m.original_value_recovery_table.entries.add()
    e.old_original_array.instruction_name = "a"
    e.new_original_array.instruction_name = "b"
    e.recovery_module.CopyFrom(_base("sort.hlo.pb"))
    assert _check(m) == "printed"
    e.recovery_module.computations[-1].instructions[0].metadata.op_name = '"\n}\nENTRY %e () -> f32[] {'
    with pytest.raises(HloInputError, match="recovery module"):
        _module_source(m, "fuzz.pb")
