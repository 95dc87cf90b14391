"""Hostile input, second campaign (issue 21): memory bombs declared in a few bytes, declared sizes
expanded before they are bounded, files that are not files, exit codes of every exit path.

Each reproducer is made by the test itself (a few bytes to a few KB) and run in a child process under
a memory limit (RLIMIT_AS) and a timeout: a regression ends as a failed assertion, never as a machine
out of memory.  Every case asserts the exit code, a fragment of the message and that no traceback
appears.
"""
from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hlo_cli.ir.literal import ZERO_ELEMENT_BRACES, Literal, brace_count, format_literal, parse_literal
from hlo_cli.ir.shape import Shape
from hlo_cli.sources.proto_schema import messages

ROOT = Path(__file__).resolve().parent.parent
GB = 1 << 30


def hlo(*args, mem=2 * GB, timeout=120, stdin=None, stdout=subprocess.PIPE, env=None):
    """`hlo ARGS` in a child limited to `mem` bytes of address space; (rc, stdout, stderr)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    code = "import sys; from hlo_cli.cli import main; sys.exit(main())"
    e = dict(os.environ, PYTHONPATH=str(ROOT), HLO_CACHE_DIR="off", **(env or {}))
    r = subprocess.run([sys.executable, "-c", code, *map(str, args)], stdin=stdin, stdout=stdout,
                       stderr=subprocess.PIPE, timeout=timeout, preexec_fn=limit, env=e)
    out = r.stdout.decode("utf-8", "replace") if r.stdout is not None else ""
    err = r.stderr.decode("utf-8", "replace")
    assert "Traceback" not in err and "internal error" not in err, err
    return r.returncode, out, err


def _constant_proto(dims, path: Path) -> Path:
    M = messages()["HloModuleProto"]
    m = M()
    m.name = "z"
    c = m.computations.add()
    c.name, c.id, c.root_id = "main", 1, 1
    i = c.instructions.add()
    i.name, i.opcode, i.id = "c", "constant", 1
    i.shape.element_type = 11
    i.shape.dimensions.extend(dims)
    i.literal.shape.CopyFrom(i.shape)
    m.entry_computation_name = "main"
    path.write_bytes(m.SerializeToString())
    return path


# ----------------------------------------------------------------------------- 2. zero-element arrays

def test_brace_count_is_computed_not_written():
    assert brace_count([2, 3]) == 2 + 4 and brace_count([4]) == 2
    assert brace_count([2**30, 0]) == 2 + 2 * 2**30
    assert brace_count([3, 0, 2**40]) == 2 + 6


def test_a_zero_element_array_elided_is_exact():
    lit = parse_literal("{...}", Shape.array("f32", [2**30, 0]))
    assert not lit.elided and lit.value.shape == (2**30, 0)
    assert parse_literal("{...}", Shape.array("f32", [3, 2])).elided       # values unknown: elided


def test_a_zero_element_array_prints_compactly_when_large():
    big = Shape.array("f32", [2**30, 0])
    assert format_literal(Literal(big, np.zeros((2**30, 0), np.float32))) == "{...}"
    small = Shape.array("f32", [3, 0])        # as XLA prints it
    assert format_literal(Literal(small, np.zeros((3, 0), np.float32))) == "{ {}, {}, {} }"
    edge = ZERO_ELEMENT_BRACES // 2 - 1
    assert format_literal(Literal(Shape.array("f32", [edge, 0]), np.zeros((edge, 0), np.float32))) != "{...}"


@pytest.mark.slow
@pytest.mark.parametrize("rows", [2**30, 2**29])
def test_a_95_byte_proto_of_a_zero_element_constant(tmp_path, rows):
    p = _constant_proto([rows, 0], tmp_path / "z.pb")
    assert p.stat().st_size < 100
    rc, out, err = hlo("check", p, mem=GB)
    assert rc == 0 and "ok" in out, err
    rc, out, err = hlo("run", p, "-o", tmp_path / "o.npz", mem=GB)
    assert rc == 0, err
    assert np.load(tmp_path / "o.npz")["out0"].shape == (rows, 0)
    rc, out, err = hlo("fmt", p, mem=GB)
    assert rc == 0 and f"f32[{rows},0]{{1,0}} constant({{...}})" in out


def test_a_text_declaring_2_30_rows_with_a_few_thousand_is_a_located_error(tmp_path):
    p = tmp_path / "z.hlo"
    p.write_text("HloModule t\nENTRY e {\n  ROOT c = f32[1073741824,0] constant({" + "{}, " * 40000 +
                 "{}})\n}\n")
    rc, out, err = hlo("check", p, mem=GB)
    assert rc == 1 and "z.hlo:3:" in err and "expects 1073741824 elements" in err, err


# ----------------------------------------------------------------------------- 3. declared device counts

_ADD = "add {\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] add(a, b)\n}\n"


def _all_reduce(tmp_path, groups: str, header: str = ", replica_count=2") -> Path:
    p = tmp_path / "ar.hlo"
    p.write_text(f"HloModule t{header}\n{_ADD}ENTRY e {{\n  p = f32[4] parameter(0)\n"
                 f"  ROOT r = f32[4] all-reduce(p), replica_groups={groups}, to_apply=add\n}}\n")
    return p


@pytest.mark.slow
@pytest.mark.parametrize("groups", ["[1000000000,2]<=[2000000000]", "[100000000,2]<=[200000000]"])
def test_iota_groups_beyond_any_machine_are_a_located_error(tmp_path, groups):
    p = _all_reduce(tmp_path, groups)
    for cmd in (["check"], ["run", "--random-inputs"]):
        rc, out, err = hlo(*cmd, p, mem=GB)
        assert rc == 1 and "ar.hlo:9:" in err and "more than hlo handles" in err, err


def test_iota_groups_are_checked_against_the_device_count_before_they_are_expanded(tmp_path, monkeypatch):
    from hlo_cli.ir import attributes
    from hlo_cli.parser import parse
    from hlo_cli.checker import check_module
    p = _all_reduce(tmp_path, "[500000,2]<=[1000000]")
    module = parse(p.read_text(), str(p))
    monkeypatch.setattr(attributes.IotaReplicaGroups, "groups", lambda self: pytest.fail("expanded"))
    diags = check_module(module, p.read_text())
    assert any("must name all 2 replicas, got 1000000 ids" in d.message for d in diags)


def test_a_huge_output_sharding_is_a_usage_error(tmp_path):
    p = _all_reduce(tmp_path, "{}")
    rc, out, err = hlo("run", p, "--random-inputs", "--output-global", "--output-sharding",
                       "{devices=[1000000000,2]<=[2000000000]}", mem=GB)
    assert rc == 2 and "--output-sharding" in err and "more than hlo handles" in err, err


@pytest.mark.parametrize("header, line, fragment", [
    ("", "ROOT r = f32[4] parameter(0), sharding={devices=[1000000000,2]<=[2000000000]}", "more than hlo handles"),
    (", replica_count=1000000000", "p = f32[4] parameter(0)\n  ROOT r = f32[4] collective-broadcast(p), "
     "replica_groups={{0,1}}", "got none naming 2, 3, 4, 5, 6, 7, 8, 9 and 999999990 more")],
    ids=["sharding-iota", "broadcast-billion-replicas"])
def test_declared_device_counts_are_located_errors_not_expansions(tmp_path, header, line, fragment):
    p = tmp_path / "s.hlo"
    p.write_text(f"HloModule t{header}\nENTRY e {{\n  {line}\n}}\n")
    rc, out, err = hlo("check", p, mem=GB)
    assert rc == 1 and "s.hlo:" in err and fragment in err, err


# ----------------------------------------------------------------------------- 4. large binary files

def _zeros(path: Path, size: int = GB) -> Path:
    with open(path, "wb") as f:          # sparse: no disk used
        f.truncate(size)
    return path


@pytest.mark.parametrize("name", ["big.hlo", "big.pb", "big.pbtxt", "big.txt"])
def test_a_gigabyte_of_zeros_is_refused_from_its_first_block(tmp_path, name):
    p = _zeros(tmp_path / name)
    rc, out, err = hlo("check", p, mem=GB // 2 + GB // 4)
    assert rc == 2 and str(p) in err and ("binary" in err or "not an XLA module proto" in err), err


def test_a_gigabyte_of_zeros_on_standard_input_is_refused(tmp_path):
    p = _zeros(tmp_path / "big.bin")
    with open(p, "rb") as f:
        rc, out, err = hlo("check", "-", stdin=f, mem=GB // 2 + GB // 4)
    assert rc == 2 and "binary input" in err, err


@pytest.mark.parametrize("option", ["--inputs", "--expect"])
def test_a_gigabyte_of_zeros_as_an_array_file_is_refused(tmp_path, option):
    m = tmp_path / "m.hlo"
    m.write_text("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n")
    p = _zeros(tmp_path / "big.npz")
    extra = ["--random-inputs"] if option == "--expect" else []
    rc, out, err = hlo("run", m, option, p, *extra, mem=GB // 2 + GB // 4)
    assert rc == 2 and option in err, err


def test_plausible_binary_proto():
    from hlo_cli.sources.proto import plausible_binary_proto
    data = (ROOT / "samples" / "protos" / "sort.hlo.pb").read_bytes()
    assert plausible_binary_proto(data, len(data)) and plausible_binary_proto(data[:10], len(data))
    assert not plausible_binary_proto(b"\0" * 100, 100)
    assert not plausible_binary_proto(b"\x0a\xff\x01", 3)         # a length past the end of the file
    assert not plausible_binary_proto(b"\x0b", 1)                  # wire type 3 (a group)


# ----------------------------------------------------------------------------- 5. every input option

_SMALL = "HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}\n"


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "deep", "binary", "not-utf8", "directory"])
def test_graph_overlay_refuses_what_every_input_option_refuses(tmp_path, kind):
    m = tmp_path / "m.hlo"
    m.write_text(_SMALL)
    if kind == "dev-zero":
        ov = Path("/dev/zero")
    elif kind == "fifo":
        ov = tmp_path / "fifo.json"
        os.mkfifo(ov)                       # no writer: opening it must not block
    elif kind == "deep":
        ov = tmp_path / "deep.json"
        ov.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "binary":
        ov = _zeros(tmp_path / "zeros.json")
    elif kind == "not-utf8":
        ov = tmp_path / "latin.json"
        ov.write_bytes(b'{"a": "\xe9"}')
    else:
        ov = tmp_path / "dir"
        ov.mkdir()
    rc, out, err = hlo("graph", m, "--overlay", ov, "-o", tmp_path / "g.dot", mem=GB, timeout=60)
    assert rc == 2 and "--overlay" in err, err
    assert not (tmp_path / "g.dot").exists()


# ----------------------------------------------------------------------------- 6. exit codes

_COMMANDS = [["fmt"], ["check"], ["info"], ["run", "--random-inputs"], ["graph", "-o", "-"],
             ["diff", "--random-inputs", "{m}"], ["run", "--random-inputs", "--format", "json"]]


def _cmd(cmd, m):
    return [c.replace("{m}", str(m)) for c in cmd] + [str(m)]


@pytest.mark.parametrize("cmd", _COMMANDS, ids=lambda c: " ".join(c))
def test_a_full_disk_on_standard_output_is_exit_2(tmp_path, cmd):
    m = tmp_path / "m.hlo"
    m.write_text(_SMALL)
    with open("/dev/full", "w") as full:
        rc, out, err = hlo(*_cmd(cmd, m), stdout=full)
    assert rc == 2 and "cannot write the output: No space left on device" in err, err


@pytest.mark.parametrize("cmd", _COMMANDS, ids=lambda c: " ".join(c))
def test_a_closed_pipe_on_standard_output_is_exit_2(tmp_path, cmd):
    m = tmp_path / "m.hlo"
    m.write_text(_SMALL)
    r, w = os.pipe()
    os.close(r)                       # the reader is gone before anything is written
    try:
        rc, out, err = hlo(*_cmd(cmd, m), stdout=w)
    finally:
        os.close(w)
    assert rc == 2, err
    assert "Exception ignored" not in err, err


@pytest.mark.slow
def test_a_rank_65_parameter_with_random_inputs_is_a_located_error(tmp_path):
    m = tmp_path / "r.hlo"
    m.write_text("HloModule m\nENTRY e {\n  ROOT p = f32[" + ",".join(["1"] * 65) + "] parameter(0)\n}\n")
    for extra in ([], ["--replicas", "2"]):
        rc, out, err = hlo("run", "--random-inputs", *extra, m)
        assert rc == 1 and "r.hlo:3:8: error: p: parameter: hlo run holds arrays of at most 64" in err, err


@pytest.mark.slow
def test_a_rank_1000_literal_is_a_located_error(tmp_path):
    m = tmp_path / "r.hlo"
    m.write_text("HloModule m\nENTRY e {\n  ROOT c = f32[" + ",".join(["1"] * 1000) + "] constant(" +
                 "{" * 1000 + "1" + "}" * 1000 + ")\n}\n")
    for cmd in (["check"], ["fmt"], ["run", "--random-inputs"]):
        rc, out, err = hlo(*cmd, m)
        assert rc == 1 and "r.hlo:3:" in err and "a literal of 1000 dimensions" in err, err
    p = tmp_path / "r.pb"
    _constant_proto([1] * 1000, p)
    rc, out, err = hlo("check", p)
    assert rc == 2 and "a literal of 1000 dimensions" in err, err


@pytest.mark.parametrize("config", ['{[}', '{"a":[}', '{]}', '{"a":{[}}', '"{"', '"{\\"a\\":[}"', '{"a": "}"}'])
def test_an_unbalanced_backend_config_is_never_an_internal_error(tmp_path, config):
    from click.testing import CliRunner
    from hlo_cli.cli import main
    m = tmp_path / "bc.hlo"
    m.write_text("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] custom-call(p), "
                 f"custom_call_target=\"foo\", backend_config={config}\n}}\n")
    for cmd in (["check"], ["fmt"], ["info"], ["graph", "-o", "-"], ["run", "--random-inputs"]):
        r = CliRunner().invoke(main, cmd + [str(m)])
        assert r.exit_code in (0, 1, 2, 7), (cmd, r.output)     # 7: a target hlo cannot run
        assert "internal error" not in r.output and "Traceback" not in r.output


# ----------------------------------------------------------------------------- 8. signals during --output

_KILL_MID_WRITE = """
import os, signal, sys
import hlo_cli.pipeline.io as io
real = io._create_excl
SIG = getattr(signal, sys.argv[1])

class Killing:
    def __init__(self, f):
        self.f = f
    def write(self, data):
        n = self.f.write(data)
        self.f.flush()
        os.kill(os.getpid(), SIG)
        return n
    def __getattr__(self, name):
        return getattr(self.f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()

io._create_excl = lambda path: Killing(real(path))
from hlo_cli.cli import main
sys.argv = ["hlo"] + sys.argv[2:]
sys.exit(main())
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
@pytest.mark.parametrize("cmd", [["run", "--random-inputs", "-o", "{out}.npz"], ["graph", "-o", "{out}.dot"],
                                 ["graph", "-o", "{out}.json"]], ids=lambda c: c[0] + c[-1][5:])
def test_a_signal_during_output_leaves_no_temporary_file(tmp_path, sig, cmd):
    import signal
    m = tmp_path / "m.hlo"
    m.write_text(_SMALL)
    out = tmp_path / "out" / "result"
    out.parent.mkdir()
    args = [c.replace("{out}", str(out)) for c in cmd] + [str(m)]
    r = subprocess.run([sys.executable, "-c", _KILL_MID_WRITE, sig, *args], capture_output=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(ROOT), HLO_CACHE_DIR="off"))
    assert r.returncode == 128 + getattr(signal, sig), r.stderr
    assert b"terminated" in r.stderr and b"Traceback" not in r.stderr
    assert list(out.parent.iterdir()) == [], list(out.parent.iterdir())


# ----------------------------------------------------------------------------- 7. graph memory and time

def test_explorer_json_reads_the_whole_module_once_not_once_per_subgraph(monkeypatch):
    from hlo_cli.explorer import to_explorer_json
    from hlo_cli.graph import build_graph
    from hlo_cli.graph import model
    from hlo_cli.parser import parse
    comps = "".join(f"add{k} {{\n a = f32[] parameter(0)\n b = f32[] parameter(1)\n ROOT s = f32[] "
                    f"{op}(a, b)\n}}\n" for k, op in enumerate(["add", "maximum", "minimum", "multiply"]))
    body = "".join(f"  r{k} = f32[] reduce(p, z), dimensions={{0}}, to_apply=add{k}\n" for k in range(4))
    m = parse(f"HloModule m\n{comps}ENTRY e {{\n  p = f32[8] parameter(0)\n  z = f32[] constant(0)\n{body}"
              "  ROOT t = (f32[], f32[], f32[], f32[]) tuple(r0, r1, r2, r3)\n}\n")
    g = build_graph(m)
    calls = []
    real = model.node_ids
    monkeypatch.setattr(model, "node_ids", lambda module: calls.append(1) or real(module))
    doc = to_explorer_json(g, [], m)
    assert len(doc["graphs"]) == 5          # the entry and one subgraph per distinct reducer
    assert len(calls) <= 1


def test_graph_json_is_written_whole(tmp_path):
    from click.testing import CliRunner
    import json
    from hlo_cli.cli import main
    src = ROOT / "samples" / "protos" / "resnet_tiny.hlo.pb"
    r = CliRunner().invoke(main, ["graph", str(src), "-o", str(tmp_path / "g.json")])
    assert r.exit_code == 0, r.output
    doc = json.loads((tmp_path / "g.json").read_text())
    assert doc["graphs"] and doc["graphs"][0]["nodes"]
    r = CliRunner().invoke(main, ["graph", str(src), "--format", "explorer", "-o", "-"])
    assert json.loads(r.stdout) == doc


# ----------------------------------------------------------------------------- found by the campaign

@pytest.mark.parametrize("cmd", [["info"], ["graph", "-o", "-"], ["check"]], ids=lambda c: c[0])
def test_a_long_quoted_string_costs_memory_in_proportion(tmp_path, cmd):
    """A 5 MB op_name took 900 MB in info and graph: the metadata's string pattern kept a
    backtracking state per character."""
    p = tmp_path / "long.hlo"
    p.write_text("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0), metadata={op_name=\"" + "x" * (5 << 20) +
                 "\", op_type=\"t\"}\n}\n")
    rc, out, err = hlo(*cmd, p, mem=GB // 2 + GB // 4)
    assert rc == 0, err


@pytest.mark.parametrize("option", ["--expect", "--inputs", "--input", "--overlay", "MODULE"])
def test_a_symlink_loop_is_unreadable_input_for_every_option(tmp_path, option):
    from click.testing import CliRunner
    from hlo_cli.cli import main
    m = tmp_path / "m.hlo"
    m.write_text(_SMALL)
    loop = tmp_path / "loop.npz"
    loop.symlink_to(loop)
    args = {"--expect": ["run", str(m), "--random-inputs", "--expect", str(loop)],
            "--inputs": ["run", str(m), "--inputs", str(loop)],
            "--input": ["run", str(m), "--input", str(loop)],
            "--overlay": ["graph", str(m), "-o", "-", "--overlay", str(loop)],
            "MODULE": ["check", str(loop)]}[option]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 2 and "symbolic links" in r.output, r.output
