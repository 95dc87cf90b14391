"""What no module may do to hlo, whatever it asks for: tuple shapes nested too deep for hlo's walks,
arrays of more dimensions than NumPy holds, and results larger than the machine's memory.

- Tuple shapes nest at most MAX_SHAPE_DEPTH (100) deep; deeper ones (written, in a signature or an
  attribute, or inferred) are located errors in check, fmt and run, never a recursion error; a
  module at the limit checks, formats, runs and goes through the parse cache.
- XLA has no rank limit (it runs a rank-70 module); check accepts such a module with a warning,
  and run refuses it before starting, at the instruction, instead of failing inside NumPy.
- Out of memory is exit code 4 (HloResourceError) naming the instruction, its result size and the
  failed allocation, in text and in --format json; a result larger than the machine fails at once.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

from hlo_cli.cli import main
from hlo_cli.errors import ExitCode, HloResourceError
from hlo_cli.interpreter.memory import result_bytes
from hlo_cli.ir.shape import MAX_SHAPE_DEPTH, Shape, parse_shape_text, shape_depth


def nested(depth: int, leaf: str = "f32[]") -> str:
    return "(" * depth + leaf + ")" * depth


@pytest.fixture()
def cli(monkeypatch, tmp_path):
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))

    def _run(command, text, *args, name="m.hlo"):
        path = tmp_path / name
        path.write_text(text)
        result = CliRunner().invoke(main, [command, *args, str(path)], catch_exceptions=False)
        for stream in (result.output, result.stdout, result.stderr):
            assert "Traceback" not in stream and "internal error" not in stream, stream
        return result
    return _run


# ----------------------------------------------------------------------------- tuple nesting

@pytest.mark.parametrize("command, depth", [(c, d) for c in ("check", "fmt", "run") for d in (MAX_SHAPE_DEPTH + 1, 400)]
                         + [("check", 100_000)])
def test_a_declared_shape_nested_too_deep_is_a_located_error(cli, command, depth):
    text = f"HloModule m\nENTRY e {{\n  ROOT p = {nested(depth)} parameter(0)\n}}\n"
    r = cli(command, text, *(["--random-inputs"] if command == "run" else []))
    assert r.exit_code == ExitCode.FAILURE, r.output
    assert f"m.hlo:3:12: error: the shape nests tuples {depth} deep; hlo handles at most {MAX_SHAPE_DEPTH} " \
           "levels" in r.stderr, r.stderr


def _chain(depth: int, back: bool = True) -> str:
    """t{k} = tuple(t{k-1}) without written shapes up to `depth`, then get-tuple-elements back."""
    lines = ["HloModule chain", "ENTRY e {", "  t0 = f32[] parameter(0)"]
    lines += [f"  t{k} = tuple(t{k - 1})" for k in range(1, depth + 1)]
    g = f"t{depth}"
    if back:
        for k in range(depth):
            lines.append(f"  g{k} = get-tuple-element({g}), index=0")
            g = f"g{k}"
    lines += [f"  ROOT r = tuple({g}, t{depth - 1})", "}"]
    return "\n".join(lines) + "\n"


def test_shapes_at_the_limit_work_everywhere(cli, tmp_path):
    text = _chain(MAX_SHAPE_DEPTH)
    for _ in range(2):                      # the second check is served by the parse cache
        r = cli("check", text)
        assert r.exit_code == 0, r.output
    r = cli("fmt", text)
    assert r.exit_code == 0 and nested(MAX_SHAPE_DEPTH) in r.stdout.replace("{}", "")
    r = cli("run", text, "--random-inputs", "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["status"] == "ok"


def test_an_inferred_shape_nested_too_deep_is_a_located_error(cli):
    text = _chain(MAX_SHAPE_DEPTH + 1, back=False)
    r = cli("check", text)
    assert r.exit_code == ExitCode.FAILURE
    line = 3 + MAX_SHAPE_DEPTH + 1                  # t101 = tuple(t100)
    assert f"m.hlo:{line}:" in r.stderr
    assert f"tuple: the result's tuples must nest at most {MAX_SHAPE_DEPTH} deep" in r.stderr, r.stderr


def test_a_signature_nested_too_deep_is_a_located_error(cli):
    text = f"HloModule m\nENTRY e (p: {nested(400)}) -> f32[] {{\n  ROOT p = f32[] parameter(0)\n}}\n"
    for command in ("check", "fmt"):
        r = cli(command, text)
        assert r.exit_code == ExitCode.FAILURE
        assert "m.hlo:2:7: error: the shape nests tuples 400 deep" in r.stderr, r.stderr


def test_an_entry_layout_nested_too_deep_is_a_located_error(cli):
    """(The parser stops attribute values nested more than 256 brackets deep; below that, the checker.)"""
    text = (f"HloModule m, entry_computation_layout={{({nested(200)})->f32[]}}\n"
            "ENTRY e {\n  p = f32[] parameter(0)\n  ROOT n = f32[] negate(p)\n}\n")
    for command, extra in (("check", ()), ("run", ("--random-inputs",))):
        r = cli(command, text, *extra)
        assert r.exit_code == ExitCode.FAILURE
        assert "m.hlo:1:14: error: entry_computation_layout: a shape nests tuples 200 deep" in r.stderr, r.stderr


def test_an_attribute_shape_text_stops_at_the_limit():
    with pytest.raises(ValueError, match=f"more than {MAX_SHAPE_DEPTH} deep"):
        parse_shape_text(nested(100_000))
    assert shape_depth(parse_shape_text(nested(MAX_SHAPE_DEPTH))) == MAX_SHAPE_DEPTH


def _shapes():
    arrays = st.sampled_from(["f32[]", "s32[2]", "pred[3,1]", "token[]"]).map(parse_shape_text)
    return st.recursive(arrays, lambda kids: st.one_of(
        st.lists(kids, max_size=3).map(Shape.tuple_of),
        kids.map(lambda s: Shape("buffer", tuple_shapes=(s,)))), max_leaves=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(_shapes(), max_size=4))
def test_depth_of_a_tuple_is_one_more_than_its_deepest_element(elems):
    assert shape_depth(Shape.tuple_of(elems)) == 1 + max(map(shape_depth, elems), default=0)


@settings(max_examples=60, deadline=None)
@given(_shapes())
def test_leaves_are_depth_first(shape):
    """The leaves of a shape are its non-tuple shapes, depth-first: in the order its text lists them."""
    def reference(s):
        return [x for c in s.tuple_shapes for x in reference(c)] if s.tuple_shapes is not None else [s]
    assert list(shape.leaves()) == reference(shape)


def test_leaves_of_a_very_deep_shape_need_no_recursion():
    s = Shape.array("f32", (2,))
    for _ in range(50_000):
        s = Shape.tuple_of([s])
    assert [leaf.dims for leaf in s.leaves()] == [(2,)]
    assert shape_depth(s) == 50_000


# ----------------------------------------------------------------------------- rank

RANK70 = """HloModule r
ENTRY e {
  c = f32[] constant(3)
  b = f32[%(d)s] broadcast(c), dimensions={}
  n = f32[%(d)s] negate(b)
  ROOT r = f32[1] reshape(n)
}
""" % {"d": ",".join(["1"] * 70)}


def test_rank_above_numpys_limit_is_a_warning_in_check_and_refused_by_run(cli):
    r = cli("check", RANK70)
    assert r.exit_code == 0
    assert "m.hlo:4:7: warning: %b: broadcast: the result has 70 dimensions; XLA has no limit, but hlo run " \
           "holds arrays of at most 64" in r.stderr, r.stderr
    r = cli("run", RANK70)
    assert r.exit_code == ExitCode.FAILURE
    assert "m.hlo:4:3: error: b: broadcast: hlo run holds arrays of at most 64 dimensions (NumPy's limit), " \
           "got 70" in r.stderr, r.stderr


def test_xla_runs_rank_70():
    """The fact behind the warning: XLA has no rank limit."""
    pytest.importorskip("jaxlib")
    from hlo_cli.tools.xla_reference import run_with_xla
    assert run_with_xla(RANK70, [])[0].tolist() == [-3.0]


# ----------------------------------------------------------------------------- memory

HUGE = """HloModule huge
ENTRY e {
  c = f32[] constant(1)
  b = f32[2000000000000] broadcast(c), dimensions={}
  ROOT n = f32[2000000000000] negate(b)
}
"""


def test_a_result_larger_than_the_machine_fails_at_once_with_exit_4(cli):
    r = cli("run", HUGE)
    assert r.exit_code == ExitCode.OUT_OF_MEMORY == 4
    assert "m.hlo:4:3: error: b: broadcast: out of memory: its result f32[2000000000000] needs " \
           "8,000,000,000,000 bytes (7.28 TiB), more than this machine can ever hold" in r.stderr, r.stderr
    r = cli("run", HUGE, "--format", "json")
    assert r.exit_code == 4
    doc = json.loads(r.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 4
    d = doc["diagnostics"][0]
    assert (d["line"], d["column"], d["instruction"], d["code"]) == (4, 3, "b", "R013")


def test_result_bytes():
    def b(text):
        return result_bytes(parse_shape_text(text))
    assert b("f32[2,3]") == 24
    assert b("(f32[2], s8[3], token[])") == 11
    assert b("pred[5]") == 5
    assert b("f32[<=4]") == 16                  # a bounded dimension at its bound
    assert b("f32[?]") is None


_ALLOCATION_FAILS = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    from hlo_cli.errors import HloResourceError
    from hlo_cli.interpreter import memory
    from hlo_cli.interpreter.evaluator import run_module
    from hlo_cli.parser import parse
    memory.memory_limit = lambda: None         # as on a machine large enough for the result
    # "folded": the broadcast of a constant is evaluated while the computation is prepared
    first = "c = f32[] constant(1)" if sys.argv[1] == "folded" else "p = f32[] parameter(0)"
    text = '''HloModule m
    ENTRY e {
      %s
      b = f32[500000000] broadcast(%s), dimensions={}
      ROOT n = f32[500000000] negate(b)
    }
    ''' % (first, first[0])
    args = [] if sys.argv[1] == "folded" else [np.array(1, np.float32)]
    module = parse(text, "m.hlo")
    with open("/proc/self/status") as f:
        mapped = [int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize")][0]
    resource.setrlimit(resource.RLIMIT_AS, (mapped + (1 << 30), resource.RLIM_INFINITY))
    try:
        run_module(module, args, compiled=sys.argv[1] != "generic")
    except HloResourceError as e:
        d = e.diagnostics[0]
        print(json.dumps([e.exit_code, e.instruction, e.result_bytes, e.requested_bytes, d.line, d.code, str(e)]))
""")


@pytest.mark.parametrize("mode, inst, line", [("compiled", "n", 5), ("generic", "n", 5), ("folded", "b", 4)])
def test_an_allocation_that_fails_during_the_run_is_exit_4(mode, inst, line):
    """With the address space limited to 1 GB more than is mapped, a 2 GB result cannot be
    allocated: the compiled steps, the generic loop and constant folding report it at the instruction."""
    if not sys.platform.startswith("linux"):
        pytest.skip("RLIMIT_AS and /proc are Linux's")
    p = subprocess.run([sys.executable, "-c", _ALLOCATION_FAILS, mode], capture_output=True, text=True,
                       timeout=300, env={"HLO_THREADS": "1", "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout.strip().splitlines()[-1])
    assert got[:6] == [4, inst, 2_000_000_000, 2_000_000_000, line, "R013"]
    assert f"{inst}: {'negate' if inst == 'n' else 'broadcast'}: out of memory: its result f32[500000000] needs " \
           "2,000,000,000 bytes (1.86 GiB), NumPy could not allocate 2,000,000,000 bytes" in got[6]


def test_resource_error_is_its_own_class():
    e = HloResourceError("x", instruction="n", requested_bytes=8, result_bytes=8)
    assert e.exit_code == ExitCode.OUT_OF_MEMORY and (e.instruction, e.requested_bytes) == ("n", 8)
