"""hlo check against a module's devices (replica_count x num_partitions, or --replicas/--partitions):
replica groups (C130-C133), source-target pairs (C134), collectives' per-device shapes (C135),
shardings (C136), and what XLA's verifier lets pass but does not fit the devices (W206).

What XLA decides, from its source and measured with jaxlib 0.10.2 on XLA CPU host devices:
- ShapeVerifier's CheckReplicaGroups: ids 0..n-1 once each, no empty group, n = the count of the
  mode, equal sizes but for all-reduce; it skips the count check when the count is 1 ("not set").
- With a count of 1 in the module config the runtime fails on groups naming more: an all-to-all
  with channel_id on 2 replicas x 1 partition ends in "RET_CHECK failure
  (collective_ops_utils.cc:515) partition_id < partition_count"; a collective-permute with channel_id
  on 4 replicas x 1 partition aborts the process (std::out_of_range).  Given as num_partitions, both
  run (and give the results hlo run gives).
- HloSharding::Validate: tile rank = shape rank (subgroup dimensions apart), each device once, a
  tuple sharding has one element per leaf; devices below num_partitions and all of them used only
  when the module is SPMD-partitioned (the text does not say: the count is a warning).
"""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.checker import check_module
from hlo_cli.checker.devices import parse_pairs
from hlo_cli.checker.verify import CODES
from hlo_cli.cli import main
from hlo_cli.parser import parse

ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT sum = f32[] add(a, b)\n}\n\n"


def module(body: str, header: str = "", params: str = "  p = f32[8] parameter(0)\n") -> str:
    return f"HloModule m{header}\n\n{ADD}ENTRY e {{\n{params}{body}}}\n"


def findings(text: str, **devices):
    return check_module(parse(text, "t.hlo"), text, **devices)


def codes(text: str, **devices) -> list[str]:
    return sorted(d.code for d in findings(text, **devices) if d.code.startswith(("C13", "W206", "W207")))


def one(text: str, code: str, **devices):
    hits = [d for d in findings(text, **devices) if d.code == code]
    assert len(hits) == 1, [(d.code, d.message) for d in findings(text, **devices)]
    return hits[0]


# ----------------------------------------------------------------------------- valid modules

VALID = [
    # every group mode on 2 replicas x 4 partitions
    ("  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1}}, to_apply=add\n", ", replica_count=2, num_partitions=4"),
    ("  ROOT r = f32[8] all-reduce(p), replica_groups={}, to_apply=add\n", ", replica_count=2, num_partitions=4"),
    ("  ROOT r = f32[8] all-reduce(p), channel_id=1, replica_groups={{0},{1}}, to_apply=add\n",
     ", replica_count=2, num_partitions=4"),
    ("  ROOT r = f32[8] all-reduce(p), channel_id=1, replica_groups=[2,4]<=[8], use_global_device_ids=true, "
     "to_apply=add\n", ", replica_count=2, num_partitions=4"),
    ("  ROOT r = f32[32] all-gather(p), channel_id=1, replica_groups=[2,4]<=[4,2]T(1,0), dimensions={0}, "
     "use_global_device_ids=true\n", ", replica_count=2, num_partitions=4"),
    # cross-replica-and-partition: a group of 1 replica spans the 4 partitions
    ("  ROOT r = f32[32] all-gather(p), channel_id=1, replica_groups={{0},{1}}, dimensions={0}\n",
     ", replica_count=2, num_partitions=4"),
    ("  ROOT r = f32[2] reduce-scatter(p), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}, "
     "use_global_device_ids=true, to_apply=add\n", ", num_partitions=4"),
    ("  ROOT r = f32[8] all-to-all(p), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={0}\n",
     ", num_partitions=4"),
    ("  ROOT r = f32[8] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,3},{3,0}}\n",
     ", num_partitions=4"),
    ("  ROOT r = f32[8] collective-permute(p), source_target_pairs={{0,1}}\n", ", replica_count=2"),
    ("  ROOT r = f32[8] collective-broadcast(p), channel_id=1, replica_groups={{0,1},{2,3}}\n", ", num_partitions=4"),
    # all-reduce may have groups of different sizes
    ("  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1,2},{3}}, to_apply=add\n", ", replica_count=4"),
    # shardings that fit the shape and the devices
    ("  ROOT r = f32[8] copy(p), sharding={devices=[4]<=[4]}\n", ", num_partitions=4"),
    ("  ROOT r = f32[8] copy(p), sharding={devices=[2,2]0,1,2,3 last_tile_dim_replicate}\n", ", num_partitions=4"),
    ("  ROOT r = (f32[8], f32[8]) tuple(p, p), sharding={{devices=[4]<=[4]}, {replicated}}\n", ", num_partitions=4"),
    ("  ROOT r = f32[8] copy(p), sharding={maximal device=3}\n", ", num_partitions=4"),
]


@pytest.mark.parametrize("body, header", VALID)
def test_valid_multi_device_modules_have_no_device_findings(body, header):
    assert codes(module(body, header)) == []


def test_every_new_code_is_documented():
    for code in ("C130", "C131", "C132", "C133", "C134", "C135", "C136", "W206", "W207"):
        assert code in CODES


# ----------------------------------------------------------------------------- invalid: one row per class

INVALID = [
    # C130: a malformed group
    ("empty-group", "  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1},{}}, to_apply=add\n", ", replica_count=2",
     "C130", "replica groups must not be empty"),
    ("id-twice", "  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1},{1,2}}, to_apply=add\n", ", replica_count=4",
     "C130", "appear in one replica group only once, got 1 repeated"),
    ("id-negative", "  ROOT r = f32[8] all-reduce(p), replica_groups={{0,-1}}, to_apply=add\n", ", replica_count=2",
     "C130", "replica ids must be in [0, 2), got -1"),
    ("id-gap", "  ROOT r = f32[8] all-reduce(p), replica_groups={{0,2}}, to_apply=add\n", ", replica_count=2",
     "C130", "replica ids must be in [0, 2), got 2"),
    # C131: the groups do not name the module's ids
    ("too-few-replicas", "  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1}}, to_apply=add\n",
     ", replica_count=4", "C131", "replica_groups must name all 4 replicas, got 2 ids"),
    ("too-few-partitions", "  ROOT r = f32[8] all-to-all(p), channel_id=1, replica_groups={{0,1}}, dimensions={0}\n",
     ", num_partitions=4", "C131", "must name all 4 partitions, got 2 ids"),
    ("too-few-devices", "  ROOT r = f32[8] all-reduce(p), channel_id=1, replica_groups={{0,1},{2,3}}, "
     "use_global_device_ids=true, to_apply=add\n", ", replica_count=2, num_partitions=4", "C131",
     "must name all 8 devices (replicas x partitions), got 4 ids"),
    # a declared count of 1 that XLA's verifier skips and its runtime fails on
    ("partition-ids-of-one-partition", "  ROOT r = f32[8] all-to-all(p), channel_id=1, replica_groups={{0,1}}, "
     "dimensions={0}\n", ", replica_count=2, num_partitions=1", "C131",
     "the ids of the 1 partition the module has, got 2 partitions"),
    ("broadcast-missing-device", "  ROOT r = f32[8] collective-broadcast(p), channel_id=1, replica_groups={{0,1}}\n",
     ", num_partitions=4", "C131", "must name every one of the 4 partitions (XLA's runtime fails for one no group "
     "names), got none naming 2, 3"),
    # C132
    ("uneven", "  ROOT r = f32[24] all-gather(p), replica_groups={{0,1,2},{3}}, dimensions={0}\n", ", replica_count=4",
     "C132", "replica groups must all have the same size, got sizes 3,1"),
    # C133
    ("global-ids-without-channel", "  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1}}, "
     "use_global_device_ids=true, to_apply=add\n", ", replica_count=2", "C133",
     "use_global_device_ids=true must come with a channel_id"),
    ("flattened-without-groups", "  ROOT r = f32[8] all-reduce(p), channel_id=1, replica_groups={}, "
     "use_global_device_ids=true, to_apply=add\n", ", replica_count=2", "C133",
     "replica_groups must be given with use_global_device_ids=true"),
    # C134
    ("permute-target-twice", "  ROOT r = f32[8] collective-permute(p), source_target_pairs={{0,1},{2,1}}\n",
     ", replica_count=4", "C134", "the target ids of source_target_pairs must appear once, got 1 repeated"),
    ("permute-out-of-range", "  ROOT r = f32[8] collective-permute(p), channel_id=1, source_target_pairs={{0,4}}\n",
     ", num_partitions=4", "C134", "must be in [0, 4), got 4 (the module has 4 partitions)"),
    ("permute-partitions-of-one-partition", "  ROOT r = f32[8] collective-permute(p), channel_id=1, "
     "source_target_pairs={{0,1},{1,0}}\n", ", replica_count=2, num_partitions=1", "C134",
     "the ids of source_target_pairs must be in [0, 1) (the 1 partition the module has), got 1"),
    # C135: per-device shapes against the group size (known from the device count for empty groups)
    ("gather-empty-groups", "  ROOT r = f32[16] all-gather(p), replica_groups={}, dimensions={0}\n",
     ", replica_count=4", "C135", "result dimension 0 must be 8 x 4 = 32"),
    ("scatter-divides", "  ROOT r = f32[2] reduce-scatter(p), replica_groups={}, dimensions={0}, to_apply=add\n",
     ", replica_count=3", "C135", "dimension 0 of operand 0 must be divisible by the shard count 3, got 8"),
    ("all-to-all-split", "  ROOT r = f32[8] all-to-all(p), replica_groups={}, dimensions={0}\n", ", replica_count=3",
     "C135", "split dimension 0 must be divisible by the split count 3, got 8"),
    # C136: shardings
    ("sharding-rank", "  ROOT r = f32[8] copy(p), sharding={devices=[2,2]<=[4]}\n", ", num_partitions=4", "C136",
     "must tile as many dimensions as the shape has (1 for f32[8]), got 2"),
    ("sharding-device-twice", "  ROOT r = f32[8] copy(p), sharding={devices=[2]1,1}\n", "", "C136",
     "must name each device once, got device 1 twice"),
    ("sharding-device-range", "  ROOT r = f32[8] copy(p), sharding={devices=[4]0,1,2,7}\n", ", num_partitions=4",
     "C136", "must name devices below 4 (num_partitions), got device 7"),
    ("maximal-device-range", "  ROOT r = f32[8] copy(p), sharding={maximal device=5}\n", ", num_partitions=4",
     "C136", "must name devices below 4 (num_partitions), got device 5"),
    ("tuple-sharding-leaves", "  ROOT r = (f32[8], f32[8]) tuple(p, p), sharding={{replicated}}\n", "", "C136",
     "must have one sharding per leaf of (f32[8], f32[8]) (2), got 1"),
    ("tuple-sharding-on-array", "  ROOT r = f32[8] copy(p), sharding={{replicated}, {replicated}}\n", "", "C136",
     "must not be a tuple sharding for the array shape f32[8]"),
]


@pytest.mark.parametrize("body, header, code, fragment", [c[1:] for c in INVALID], ids=[c[0] for c in INVALID])
def test_each_invalid_class_has_its_code_and_message(body, header, code, fragment):
    d = one(module(body, header), code)
    assert d.severity == "error" and fragment in d.message, d.message
    assert d.file == "t.hlo" and d.line > 0 and d.column > 0


def test_a_group_finding_points_at_the_replica_groups_attribute():
    text = module("  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1}}, to_apply=add\n", ", replica_count=4")
    d = one(text, "C131")
    line = text.splitlines()[d.line - 1]
    assert line[d.column - 1:].startswith("replica_groups={{0,1}}")
    assert d.source_line == line


@pytest.mark.parametrize("line, attr", [
    ("  ROOT r = f32[8] all-reduce(p), channel_id=1, replica_groups={}, use_global_device_ids=true, to_apply=add\n",
     "replica_groups={}"),
    ("  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1}}, use_global_device_ids=true, to_apply=add\n",
     "use_global_device_ids=true"),
])
def test_a_mode_finding_points_at_what_is_missing_its_partner(line, attr):
    text = module(line, ", replica_count=2")
    d = one(text, "C133")
    assert text.splitlines()[d.line - 1][d.column - 1:].startswith(attr)


def test_a_pair_finding_points_at_source_target_pairs():
    text = module("  ROOT r = f32[8] collective-permute(p), source_target_pairs={{0,1},{0,2}}\n", ", replica_count=4")
    d = one(text, "C134")
    assert text.splitlines()[d.line - 1][d.column - 1:].startswith("source_target_pairs=")


def test_a_sharding_finding_points_at_the_sharding():
    text = module("  ROOT r = f32[8] copy(p), sharding={devices=[2,2]<=[4]}\n", ", num_partitions=4")
    d = one(text, "C136")
    assert text.splitlines()[d.line - 1][d.column - 1:].startswith("sharding=")


# ----------------------------------------------------------------------------- warnings (stricter than XLA)

WARNINGS = [
    # no count in the header: XLA's default 1 lets any groups pass its verifier
    ("no-count-groups", "  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1,2,3}}, to_apply=add\n", "",
     "replica_groups name 4 replicas, but the module's header gives neither replica_count nor num_partitions"),
    ("no-count-pairs", "  ROOT r = f32[8] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}}\n",
     "", "give the device count (--partitions 2)"),
    # the header gives the other count only: XLA's module config holds this one (XLA's own tests set
    # it in code: ragged_all_to_all_e2e_test, collective_ops_e2e_test), its verifier reads 1 as unset
    ("partition-ids-of-replicas", "  ROOT r = f32[8] all-to-all(p), channel_id=1, replica_groups={{0,1}}, "
     "dimensions={0}\n", ", replica_count=2", "does not give num_partitions (XLA's module config does"),
    ("replica-ids-of-partitions", "  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1}}, to_apply=add\n",
     ", num_partitions=2", "does not give replica_count (XLA's module config does"),
    ("permute-partitions-of-replicas", "  ROOT r = f32[8] collective-permute(p), channel_id=1, "
     "source_target_pairs={{0,1},{1,0}}\n", ", replica_count=2", "give the device count (--partitions 2)"),
    ("all-gather-over-undeclared-partitions", "  ROOT r = f32[16] all-gather(p), channel_id=1, "
     "replica_groups={{0,1}}, dimensions={0}, use_global_device_ids=true\n", ", replica_count=1",
     "replica_groups name 2 devices"),
    # a tiled sharding on fewer devices than num_partitions (XLA rejects it only in SPMD mode)
    ("sharding-fewer-devices", "  ROOT r = f32[8] copy(p), sharding={devices=[2]<=[2]}\n", ", num_partitions=4",
     "should use all 4 devices (num_partitions), got 2"),
    ("broadcast-id-twice", "  ROOT r = f32[8] collective-broadcast(p), channel_id=1, replica_groups={{0,1},{1,0}}\n",
     ", num_partitions=2", "each id should be in one replica group only, got 0, 1 more than once"),
]


@pytest.mark.parametrize("body, header, fragment", [c[1:] for c in WARNINGS], ids=[c[0] for c in WARNINGS])
def test_what_xla_lets_pass_is_a_warning(body, header, fragment):
    text = module(body, header)
    d = one(text, "W206")
    assert d.severity == "warning" and fragment in d.message, d.message
    assert not [x for x in findings(text) if x.severity == "error"]
    assert not [x for x in check_module(parse(text, "t.hlo"), text, warnings=False) if x.code == "W206"]


SEND_RECV = """HloModule m{header}

ENTRY e {{
  p = f32[4] parameter(0)
  tok = token[] after-all()
  s = (f32[4], u32[], token[]) send(p, tok), channel_id=1, frontend_attributes={{_xla_send_recv_source_target_pairs="{pairs}"}}
  sd = token[] send-done(s), channel_id=1
  r = (f32[4], u32[], token[]) recv(tok), channel_id=2, frontend_attributes={{_xla_send_recv_source_target_pairs="{pairs}"}}
  rd = (f32[4], token[]) recv-done(r), channel_id=2
  ROOT g = f32[4] get-tuple-element(rd), index=0
}}
"""


@pytest.mark.parametrize("pairs, header, fragment", [
    ("{{0,1},{1,2},{2,3}}", ", num_partitions=4", None),
    ("{{0,1},{1,2},{2,5}}", ", num_partitions=4", "target ids of _xla_send_recv_source_target_pairs should be in "
                                                  "[0, 4) (the 4 partitions of the module), got 5"),
    ("{{0,1},{2,1}}", ", num_partitions=4", "each target should appear once"),
    ("{{0,1,2}}", ", num_partitions=4", "should list {source,target} pairs"),
    ("{{0,1}}", "", "names partitions up to 1, but the module's header gives neither"),
])
def test_send_recv_pairs(pairs, header, fragment):
    ws = [d for d in findings(SEND_RECV.format(header=header, pairs=pairs)) if d.code == "W206"]
    if fragment is None:
        assert ws == []
    else:
        assert len(ws) == 2 and all(fragment in d.message for d in ws), [d.message for d in ws]


def test_parse_pairs():
    assert parse_pairs("{{0,1},{1,2}}") == [(0, 1), (1, 2)]
    assert parse_pairs(" { {3, 0} } ") == [(3, 0)]
    assert parse_pairs("{}") == []
    assert parse_pairs("0,1") is None and parse_pairs("{{0,x}}") is None and parse_pairs("{{0,1} junk}") is None


# ----------------------------------------------------------------------------- the device count from outside

GATHER = module("  ROOT r = f32[32] all-gather(p), replica_groups={}, dimensions={0}\n")


def test_replicas_option_gives_empty_groups_their_size():
    assert codes(GATHER) == []                  # no count: the shard count is read off the declared shape
    assert codes(GATHER, replicas=4) == []
    d = one(GATHER, "C135", replicas=2)
    assert "result dimension 0 must be 8 x 2 = 16" in d.message


def test_partitions_option_overrides_the_header():
    text = module("  ROOT r = f32[8] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,2},{2,0}}\n",
                  ", num_partitions=4")
    assert codes(text) == []
    assert "must be in [0, 2), got 2 (the module has 2 partitions)" in one(text, "C134", partitions=2).message


def test_counts_from_the_shardy_mesh():
    """A module before partitioning gives no count in its header; its Shardy mesh tells how many
    devices hlo run simulates (grid_of).  XLA's verifier checks nothing without a count, so groups
    that do not fit the mesh are a warning, not an error."""
    mesh = ', frontend_attributes={xla.sdy.meshes={mesh = #sdy.mesh<["x"=2, "y"=2]>}}'
    ok = module("  ROOT r = f32[8] all-reduce(p), channel_id=1, replica_groups={{0,1},{2,3}}, "
                "use_global_device_ids=true, to_apply=add\n", mesh)
    assert codes(ok) == []
    bad = ok.replace("{{0,1},{2,3}}", "{{0,1}}")
    d = one(bad, "W206")
    assert "replica_groups name 2 devices, but the module's mesh has 4" in d.message
    assert not [x for x in findings(bad) if x.severity == "error"]


def _cli(*args):
    return CliRunner().invoke(main, ["check", "--no-cache", *args])


def test_cli_options_and_exit_codes(tmp_path):
    f = tmp_path / "g.hlo"
    f.write_text(GATHER)
    assert _cli(str(f)).exit_code == 0
    assert _cli("--replicas", "4", str(f)).exit_code == 0
    r = _cli("--replicas", "2", str(f))
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "g.hlo:11:" in r.output and "8 x 2 = 16" in r.output
    r = _cli("--replicas", "2", "--format", "json", str(f))
    doc = json.loads(r.stdout)
    assert [d["code"] for d in doc["files"][0]["diagnostics"]] == ["C135"]
    for bad in ("0", "x", "-3"):
        r = _cli("--replicas", bad, str(f))
        assert r.exit_code == 2 and "Traceback" not in r.output
    r = _cli("--partitions", "0", str(f))
    assert r.exit_code == 2


# ----------------------------------------------------------------------------- laws

@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.randoms(use_true_random=False), st.booleans())
def test_any_equal_partition_of_the_devices_is_valid_and_losing_an_id_is_not(size, groups, rnd, channel):
    """Law: groups that split 0..n-1 into equal parts pass in every mode's id space; dropping an id
    (when there are two or more) or naming one twice is an error."""
    n = size * groups
    ids = list(range(n))
    rnd.shuffle(ids)
    parts = [ids[k * size:(k + 1) * size] for k in range(groups)]
    text_groups = "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in parts) + "}"
    if channel:      # flattened ids over 1 replica x n partitions
        line = (f"  ROOT r = f32[8] all-reduce(p), channel_id=1, replica_groups={text_groups}, "
                "use_global_device_ids=true, to_apply=add\n")
        header = f", num_partitions={n}"
    else:
        line = f"  ROOT r = f32[8] all-reduce(p), replica_groups={text_groups}, to_apply=add\n"
        header = f", replica_count={n}"
    assert codes(module(line, header)) == []
    if size >= 2:
        dropped = "{" + ",".join("{" + ",".join(map(str, g)) + "}" for g in [parts[0][1:]] + parts[1:]) + "}"
        got = codes(module(line.replace(text_groups, dropped), header))
        assert got and set(got) <= {"C130", "C131", "C132"}, got
    if n >= 2:
        twice = text_groups.replace("}", f",{parts[0][0]}}}", 1)
        got = codes(module(line.replace(text_groups, twice), header))
        assert got and set(got) <= {"C130", "C131"}, got


# ----------------------------------------------------------------------------- Shardy

MESH = 'HloModule m, frontend_attributes={{xla.sdy.meshes={{mesh = #sdy.mesh<{mesh}>}}}}\n\nENTRY e {{\n{body}}}\n'


def _sdy_param(n: int, dims: str) -> str:
    return (f'  p{n} = f32[8] parameter({n}), frontend_attributes={{xla.sdy.sharding="#sdy.sharding_per_value'
            f'<[<@mesh, [{dims}]>]>"}}\n')


def test_shardy_shardings_read_and_fit_the_shape():
    ok = MESH.format(mesh='["x"=4]', body=_sdy_param(0, '{\\"x\\"}') + "  ROOT n = f32[8] negate(p0)\n")
    assert codes(ok) == []
    unknown_axis = MESH.format(mesh='["x"=4]', body=_sdy_param(0, '{\\"z\\"}') + "  ROOT n = f32[8] negate(p0)\n")
    d = one(unknown_axis, "W207")
    assert 'names axis "z", which its mesh ["x"=4] does not have' in d.message
    assert unknown_axis.splitlines()[d.line - 1][d.column - 1:].startswith("frontend_attributes=")
    rank = MESH.format(mesh='["x"=4]', body=_sdy_param(0, '{\\"x\\"}, {}') + "  ROOT n = f32[8] negate(p0)\n")
    assert "must tile as many dimensions as the shape has (1 for f32[8]), got 2" in one(rank, "W207").message
    assert not [x for x in findings(rank) if x.severity == "error"]


def test_a_malformed_mesh_is_located_in_the_header():
    text = MESH.format(mesh='["x"=]', body="  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n")
    d = one(text, "W207")
    assert d.severity == "warning" and d.line == 1 and text.splitlines()[0][d.column - 1:].startswith("xla.sdy.meshes")
    assert "expected an integer" in d.message


def test_hlo_run_checks_against_the_devices_it_runs_on(tmp_path):
    """hlo run's check before running uses its --replicas/--partitions, so a what-if device count
    that the module's collectives do not fit is a located checker error, not a failure mid-run."""
    f = tmp_path / "g.hlo"
    f.write_text("HloModule m, replica_count=2\n\nENTRY e {\n  p = f32[8] parameter(0)\n"
                 "  ROOT g = f32[16] all-gather(p), replica_groups={}, dimensions={0}\n}\n")
    ok = CliRunner().invoke(main, ["run", "--no-cache", "--random-inputs", str(f)])
    assert ok.exit_code == 0, ok.output
    r = CliRunner().invoke(main, ["run", "--no-cache", "--random-inputs", "--replicas", "4", str(f)])
    assert r.exit_code == 1 and "Traceback" not in r.output
    assert "g.hlo:5:12" in r.output and "8 x 4 = 32" in r.output and "found by the checker" in r.output


# ----------------------------------------------------------------------------- XLA decides (live, slow)

_XLA_RUNNER = r'''
import json, sys
import numpy as np
from hlo_cli.tools.xla_reference import run_on_devices

results = []
for text, replicas, partitions in json.load(sys.stdin):
    n = replicas * partitions
    try:
        run_on_devices(text, [np.zeros((n, 8), np.float32)], replicas, partitions)
        results.append("ok")
    except Exception as e:
        results.append("error: " + str(e).splitlines()[0][:300])
print(json.dumps(results))
'''


def _xla_runs(cases) -> list[str]:
    """What XLA CPU does with each (text, replicas, partitions): "ok", "error: ...", or "abort: ..."
    (the end of its stderr) when the process dies (one subprocess runs them in order; JAX needs its host devices set
    before it is imported)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
    r = subprocess.run([sys.executable, "-c", _XLA_RUNNER], input=json.dumps(cases), env=env,
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        return ["abort: " + r.stderr[-300:]] * len(cases)
    return json.loads(r.stdout.strip().splitlines()[-1])


LIVE = [
    # (body, header, replicas, partitions): channel_id collectives name partitions
    ("  ROOT r = f32[8] all-to-all(p), channel_id=1, replica_groups={{0,1}}, dimensions={0}\n",
     ", replica_count=2", 2, 1),
    ("  ROOT r = f32[8] all-to-all(p), channel_id=1, replica_groups={{0,1}}, dimensions={0}\n",
     ", num_partitions=2", 1, 2),
    ("  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1}}, to_apply=add\n", ", num_partitions=2", 1, 2),
    ("  ROOT r = f32[8] all-reduce(p), replica_groups={{0,1}}, to_apply=add\n", ", replica_count=2", 2, 1),
    ("  ROOT r = f32[8] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}}\n",
     ", num_partitions=2", 1, 2),
]


def _warned_counts(text: str, r: int, p: int) -> tuple[int, int] | None:
    """The device counts a W206 finding asks a run for (--replicas N / --partitions N), or None."""
    import re
    for d in findings(text):
        if d.code == "W206":
            m = re.search(r"--(replicas|partitions) (\d+)\)", d.message)
            if m:
                return (int(m.group(2)), p) if m.group(1) == "replicas" else (r, int(m.group(2)))
    return None


@pytest.mark.slow
def test_the_checker_errs_exactly_where_xla_cpu_fails():
    """An error where XLA CPU fails with the counts the module declares; where the header leaves a
    count out (XLA's module config holds it: its own tests set it in code), a warning naming the
    count, with which XLA CPU runs the module."""
    pytest.importorskip("jax")
    cases = [(module(body, header), r, p) for body, header, r, p in LIVE]
    warned = [_warned_counts(text, r, p) for text, r, p in cases]
    got = _xla_runs(cases + [(text, *w) for (text, _, _), w in zip(cases, warned) if w is not None])
    again = iter(got[len(cases):])
    for (text, r, p), xla_says, w in zip(cases, got, warned):
        errs = [d.code for d in findings(text) if d.severity == "error"]
        if w is None:
            assert (xla_says == "ok") == (not errs), (text, xla_says, errs)
        else:
            assert not errs and xla_says != "ok", (text, xla_says, errs)
            assert next(again) == "ok", (text, w)
    # XLA's verifier skips a count of 1; its runtime stops at the participating devices
    assert "partition_id < partition_count" in got[0] and "replica_id < replica_count" in got[2]
    assert warned[0] == (2, 2) and warned[2] == (2, 2)


@pytest.mark.slow
def test_a_permute_naming_partitions_of_replicas_aborts_xla_cpu():
    pytest.importorskip("jax")
    text = module("  ROOT r = f32[8] collective-permute(p), channel_id=1, source_target_pairs={{0,1},{1,0}}\n",
                  ", replica_count=2")
    [got] = _xla_runs([(text, 2, 1)])
    # the process aborts (std::out_of_range, or "terminate called recursively" when several of its
    # threads throw at once: both seen on this machine) with the counts the header gives; the header
    # leaves num_partitions to the module config, so the checker warns and names the count a run needs
    assert got.startswith("abort"), got
    assert [d.code for d in findings(text) if d.severity == "error"] == []
    assert _warned_counts(text, 2, 1) == (2, 2)
    declared = text.replace(", replica_count=2", ", replica_count=2, num_partitions=1")
    assert [d.code for d in findings(declared) if d.severity == "error"] == ["C134"]
