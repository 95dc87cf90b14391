"""`hlo run`: binding inputs, results, --output/--print/--format json, --expect, dumps and their
manifest, --check-finite, loop and elided-constant guards, the checker before running, exit codes,
and the Python API `hlo_cli.run`.

Every command runs through click's CliRunner with catch_exceptions=False; every result is checked
for its exit code (0 ok, 1 the module failed, 2 usage or unreadable input), a fragment of its
message, and the absence of a Python traceback.  The small modules live in tests/data/run/.
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

import hlo_cli
from hlo_cli.cli import main
from run_harness import hlo  # noqa: F401  (the fixture)
from hlo_cli.errors import HloEvalError, HloInputError

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "run"
SAMPLES = ROOT / "samples" / "jax"

RESULTS = DATA / "results.hlo"          # (x + y, (x > y, 7), token) of x, y: f32[2,3]
LOOP = DATA / "while_loop.hlo"          # v doubled 5 times in a while loop
FOREVER = DATA / "forever.hlo"          # a while loop whose condition is constant true
NONFINITE = DATA / "nonfinite.hlo"      # log(exp(max(x, -inf))) * max(...): log(0) = -inf in %l
ELIDED = DATA / "elided.hlo"            # x + constant({...})
CHECK_ERROR = DATA / "check_error.hlo"  # negate(f32[4] x) of an f32[3] x: a checker error
BF16 = DATA / "bf16.hlo"                # x * x + x in bf16
BF16_X = DATA / "bf16_x.npy"            # [1.5, -2, 0.25, 3] saved from ml_dtypes.bfloat16: |V2 records

X = np.arange(6, dtype=np.float32).reshape(2, 3)          # [[0, 1, 2], [3, 4, 5]]
Y = np.full((2, 3), 2.5, np.float32)


@pytest.fixture()
def xy(tmp_path):
    """x.npy and y.npy in tmp_path."""
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    return tmp_path / "x.npy", tmp_path / "y.npy"


def _line_of(path: Path, fragment: str) -> int:
    """1-based number of the line of `path` that contains `fragment`."""
    return _position_of(path, fragment)[0]


def _position_of(path: Path, fragment: str) -> tuple[int, int]:
    """1-based (line, column) of `fragment` in `path`."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if fragment in line:
            return n, line.index(fragment) + 1
    raise AssertionError(f"{fragment!r} not in {path}")


def _row(text: str, key: str, after: str | None = None) -> str:
    """The table row of `key` (out0, ...), in the table that follows the line containing `after`."""
    lines = text.splitlines()
    if after is not None:
        lines = lines[next(k for k, line in enumerate(lines) if after in line):]
    return next(line for line in lines if line.lstrip().startswith(key + " "))


def _load_out(path) -> dict:
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def _expected_results(x=X, y=Y):
    return [x + y, x > y, np.int32(7)]


def _assert_results_npz(path, x=X, y=Y):
    out = _load_out(path)
    assert sorted(out) == ["out0", "out1", "out2"]            # the token leaf is left out
    want = _expected_results(x, y)
    np.testing.assert_array_equal(out["out0"], want[0])
    assert out["out0"].dtype == np.float32
    np.testing.assert_array_equal(out["out1"], want[1])
    assert out["out1"].dtype == np.bool_
    assert out["out2"].shape == () and out["out2"].dtype == np.int32 and int(out["out2"]) == 7


# ============================================================================ binding inputs

def test_positional_inputs(hlo, xy):
    r = hlo("run", RESULTS, "--input", xy[0], "--input", xy[1], "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    _assert_results_npz("out.npz")


def test_named_inputs_in_any_order(hlo, xy):
    r = hlo("run", RESULTS, "--input", f"y={xy[1]}", "--input", f"x={xy[0]}", "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    _assert_results_npz("out.npz")


def test_positional_then_named(hlo, xy):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", f"y={xy[1]}", "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    _assert_results_npz("out.npz")


def test_named_by_position_argN(hlo, xy):
    r = hlo("run", RESULTS, "-i", f"arg1={xy[1]}", "-i", f"arg0={xy[0]}", "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    _assert_results_npz("out.npz")


@pytest.mark.parametrize("keys", [("x", "y"), ("arg0", "arg1"), ("y", "arg0")], ids=str)
def test_inputs_npz(hlo, tmp_path, keys):
    # ("y", "arg0") binds y by name and x by position: arg0 is parameter 0
    values = {"x": X, "y": Y, "arg0": X, "arg1": Y}
    np.savez(tmp_path / "args.npz", **{k: values[k] for k in keys})
    r = hlo("run", RESULTS, "--inputs", "args.npz", "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    _assert_results_npz("out.npz")


def test_inputs_npz_completed_by_input(hlo, tmp_path, xy):
    np.savez(tmp_path / "args.npz", x=X)
    r = hlo("run", RESULTS, "--inputs", "args.npz", "-i", f"y={xy[1]}", "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    _assert_results_npz("out.npz")


def test_inputs_of_a_jax_sample_by_file(hlo):
    """The per-argument .npy files of a sample bind in order (JAX's parameter names end in .N)."""
    case = "mlp_train_step"
    args = sorted(SAMPLES.glob(f"{case}.arg*.npy"), key=lambda p: int(p.name.split(".arg")[1][:-4]))
    r = hlo("run", SAMPLES / f"{case}.hlo", *[a for p in args for a in ("-i", p)],
            "--expect", SAMPLES / f"{case}.expected.npz")
    assert r.exit_code == 0, r.stderr + r.stdout
    assert "results match the reference" in r.stdout


JAX_NAMES = """HloModule names

ENTRY main {
  x.1 = f32[2] parameter(0)
  w.3 = f32[2] parameter(1)
  w.7 = f32[2] parameter(2)
  a = f32[2] add(x.1, w.3)
  ROOT b = f32[2] add(a, w.7)
}
"""


def test_name_without_jax_suffix(hlo, tmp_path):
    (tmp_path / "names.hlo").write_text(JAX_NAMES)
    for n, v in (("x", 1), ("w3", 10), ("w7", 100)):
        np.save(tmp_path / f"{n}.npy", np.full(2, v, np.float32))
    r = hlo("run", "names.hlo", "-i", "x=x.npy", "-i", "w.3=w3.npy", "-i", "w.7=w7.npy", "-o", "o.npy")
    assert r.exit_code == 0, r.stderr
    np.testing.assert_array_equal(np.load("o.npy"), [111, 111])
    r = hlo("run", "names.hlo", "-i", "x=x.npy", "-i", "w=w3.npy", "-i", "w.7=w7.npy")
    assert r.exit_code == 2
    assert "'w' is ambiguous" in r.stderr and "'w.3'" in r.stderr and "'w.7'" in r.stderr


def _save(tmp_path, name, arr):
    np.save(tmp_path / name, arr)
    return str(tmp_path / name)


@pytest.mark.parametrize("make_args,fragments", [
    # missing: names the parameter and its shape
    (lambda t: ["-i", _save(t, "x.npy", X)], ["missing input for parameter 1 'y' (f32[2,3])"]),
    (lambda t: ["-i", f"y={_save(t, 'y.npy', Y)}"], ["missing input for parameter 0 'x' (f32[2,3])"]),
    # nothing at all: the signature and the ways to give inputs
    (lambda t: [], ["takes 2 parameters", "x: f32[2,3]", "y: f32[2,3]", "--random-inputs"]),
    # extra
    (lambda t: ["-i", _save(t, "x.npy", X), "-i", _save(t, "y.npy", Y), "-i", _save(t, "z.npy", Y)],
     ["3 inputs given", "takes 2 parameters", "x: f32[2,3], y: f32[2,3]"]),
    (lambda t: ["-i", _save(t, "x.npy", X), "-i", _save(t, "y.npy", Y), "-i", f"z={_save(t, 'z.npy', Y)}"],
     ["input 'z' names no parameter", "x: f32[2,3], y: f32[2,3]"]),
    (lambda t: ["-i", _save(t, "x.npy", X), "-i", f"arg5={_save(t, 'y.npy', Y)}"],
     ["'arg5'", "only 2 parameters"]),
    # mis-shaped: parameter, file, expected shape, what was given
    (lambda t: ["-i", _save(t, "x.npy", X), "-i", _save(t, "bad.npy", Y.T)],
     ["parameter 1 'y'", "bad.npy", "expected shape f32[2,3]", "float32[3, 2]"]),
    (lambda t: ["-i", _save(t, "x.npy", X), "-i", _save(t, "bad.npy", np.float32(1))],
     ["parameter 1 'y'", "expected shape f32[2,3]", "float32[]"]),
    # mis-typed
    (lambda t: ["-i", _save(t, "bad.npy", X.astype(np.int32)), "-i", _save(t, "y.npy", Y)],
     ["parameter 0 'x'", "bad.npy", "expected f32[2,3] (float32)", "int32[2, 3]"]),
    (lambda t: ["-i", _save(t, "x.npy", X), "-i", _save(t, "bad.npy", Y.astype(np.complex128) / 3)],
     ["parameter 1 'y'", "expected f32[2,3] (float32)", "complex128[2, 3]"]),
    (lambda t: ["-i", _save(t, "x.npy", X), "-i", _save(t, "bad.npy", Y.astype(ml_dtypes.bfloat16))],
     ["parameter 1 'y'", "f32[2,3]", "raw records of 2 bytes"]),
    # given twice
    (lambda t: ["-i", _save(t, "x.npy", X), "-i", f"x={_save(t, 'x2.npy', X)}", "-i", _save(t, "y.npy", Y)],
     ["must come before"]),
    (lambda t: ["-i", _save(t, "x.npy", X), "-i", f"arg0={_save(t, 'x2.npy', X)}", "-i", f"y={_save(t, 'y.npy', Y)}"],
     ["parameter 0 'x' is given twice"]),
    (lambda t: ["-i", f"x={_save(t, 'x.npy', X)}", "-i", f"x={_save(t, 'x2.npy', X)}"], ["'x' is given twice"]),
    # random inputs are all or nothing
    (lambda t: ["--random-inputs", "-i", _save(t, "x.npy", X)], ["--random-inputs cannot be combined"]),
    # unreadable files
    (lambda t: ["-i", str(t / "nope.npy"), "-i", _save(t, "y.npy", Y)], ["no such file", "nope.npy"]),
    (lambda t: ["-i", str(t), "-i", _save(t, "y.npy", Y)], ["is a directory"]),
    (lambda t: ["-i", "x=", "-i", _save(t, "y.npy", Y)], ["no file given"]),
    (lambda t: [(t / "junk.npy").write_bytes(b"not numpy") and "-i", str(t / "junk.npy")],
     ["cannot read", "junk.npy", ".npy array"]),
    (lambda t: [np.savez(t / "a.npz", x=X) or "-i", str(t / "a.npz")], ["a.npz", "--inputs"]),
    (lambda t: ["--inputs", _save(t, "x.npy", X)], ["x.npy", "not an .npz archive"]),
    (lambda t: ["--inputs", str(t / "none.npz")], ["no such file", "none.npz"]),
    (lambda t: [np.save(t / "obj.npy", np.array([{"a": 1}], dtype=object)) or "-i", str(t / "obj.npy"),
                "-i", _save(t, "y.npy", Y)], ["cannot read", "obj.npy"]),
], ids=["missing-y", "missing-x", "none", "extra-positional", "extra-named", "argN-out-of-range",
        "transposed", "scalar", "int-for-f32", "c128-for-f32", "raw-V2-for-f32", "positional-after-named",
        "argN-and-position", "same-name-twice", "random-and-input", "no-file", "directory", "empty-path",
        "garbage-npy", "npz-as-input", "npy-as-inputs", "no-npz", "pickled-object"])
def test_binding_errors(hlo, tmp_path, make_args, fragments):
    r = hlo("run", RESULTS, *make_args(tmp_path), "-o", "out.npz")
    assert r.exit_code == 2, (r.exit_code, r.stdout, r.stderr)
    for f in fragments:
        assert f in r.stderr, (f, r.stderr)
    assert r.stdout == ""
    assert not Path("out.npz").exists()


def test_python_lists_and_lossless_casts(tmp_path, hlo):
    """A float64 input whose values are exactly f32 values is taken (not a lossy cast)."""
    np.save(tmp_path / "x64.npy", X.astype(np.float64))
    np.save(tmp_path / "y.npy", Y)
    r = hlo("run", RESULTS, "-i", "x64.npy", "-i", "y.npy", "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    _assert_results_npz("out.npz")


def test_big_endian_input(tmp_path, hlo):
    np.save(tmp_path / "xbe.npy", X.astype(">f4"))
    np.save(tmp_path / "y.npy", Y)
    r = hlo("run", RESULTS, "-i", "xbe.npy", "-i", "y.npy", "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    _assert_results_npz("out.npz")


# ============================================================================ bfloat16 as |V2 records

def test_bf16_records_in_and_out(hlo):
    assert np.load(BF16_X).dtype == np.dtype("V2")          # what np.load makes of ml_dtypes arrays
    r = hlo("run", BF16, "-i", BF16_X, "-o", "out.npy", "--print")
    assert r.exit_code == 0, r.stderr
    out = np.load("out.npy")
    assert out.dtype == np.dtype("V2")                      # written the same way, readable by NumPy
    np.testing.assert_array_equal(out.view(ml_dtypes.bfloat16).astype(np.float32), [3.75, 2, 0.3125, 12])
    assert "out0 = bf16[4] {3.75, 2, 0.3125, 12}" in r.stdout


def test_bf16_records_by_name_and_npz(hlo, tmp_path):
    np.savez(tmp_path / "a.npz", x=np.load(BF16_X))
    r = hlo("run", BF16, "--inputs", "a.npz", "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    out = _load_out("out.npz")["out0"]
    assert out.dtype == np.dtype("V2")
    r = hlo("run", BF16, "-i", f"x={BF16_X}", "--expect", "out.npz", "--rtol", "0", "--atol", "0")
    assert r.exit_code == 0, r.stderr
    assert "results match the reference" in r.stdout


def test_bf16_from_f32_is_refused(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.array([1.5, -2, 0.25, 3], np.float32))
    r = hlo("run", BF16, "-i", "x.npy")
    assert r.exit_code == 2
    assert "parameter 0 'x'" in r.stderr and "expected bf16[4] (bfloat16)" in r.stderr and "float32[4]" in r.stderr


# ============================================================================ random inputs

def test_random_inputs_are_deterministic(hlo):
    for name, seed in (("a.npz", 3), ("b.npz", 3), ("c.npz", 4)):
        r = hlo("run", RESULTS, "--random-inputs", "--seed", seed, "-o", name)
        assert r.exit_code == 0, r.stderr
    a, b, c = (_load_out(n) for n in ("a.npz", "b.npz", "c.npz"))
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["out0"], c["out0"])
    assert np.isfinite(a["out0"]).all()


def test_random_inputs_on_a_sample(hlo):
    r = hlo("run", SAMPLES / "mlp_train_step.opt.hlo", "--random-inputs", "--format", "json")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [x["hlo_shape"] for x in doc["results"]] == ["f32[]", "f32[32]", "f32[4]", "f32[8,32]", "f32[32,4]"]


# ============================================================================ results

def test_summary_on_stdout(hlo, xy):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1])
    assert r.exit_code == 0, r.stderr
    out = r.stdout
    assert "results of results" in out
    row0 = _row(out, "out0")
    for frag in ("f32[2,3]", "2.5", "7.5", "5", "[2.5, 3.5, 4.5, 5.5, 6.5, ...]"):
        assert frag in row0, (frag, row0)
    row1 = _row(out, "out1")
    assert "pred[2,3]" in row1 and "[false, false, false, true, true, ...]" in row1
    row2 = _row(out, "out2")
    assert "s32[]" in row2 and "[7]" in row2
    assert r.stderr == ""                               # no progress display when not a terminal


def test_summary_counts_nan_and_inf(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.array([np.nan, 1, np.inf, -np.inf], np.float32))
    (tmp_path / "id.hlo").write_text("HloModule id\n\nENTRY main {\n  ROOT x = f32[4] parameter(0)\n}\n")
    r = hlo("run", "id.hlo", "-i", "x.npy", "--format", "json")
    assert r.exit_code == 0, r.stderr
    s = json.loads(r.stdout)["results"][0]
    assert (s["nan"], s["inf"], s["min"], s["max"]) == (1, 2, 1.0, 1.0)
    r = hlo("run", "id.hlo", "-i", "x.npy")
    row = _row(r.stdout, "out0")
    assert re.search(r"│\s+1\s+│\s+2\s+│", row), row      # nan 1, inf 2
    assert "[nan, 1, inf, -inf]" in row


def test_output_npz_depth_first_leaves(hlo, xy):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--output", "out.npz")
    assert r.exit_code == 0, r.stderr
    _assert_results_npz("out.npz")


def test_output_npy_for_an_array_result(hlo):
    np.save("x.npy", np.array([1, 2, 3], np.float32))
    r = hlo("run", LOOP, "-i", "x.npy", "--output", "out.npy")
    assert r.exit_code == 0, r.stderr
    np.testing.assert_array_equal(np.load("out.npy"), [32, 64, 96])


def test_output_npy_for_a_tuple_result_is_refused_before_running(hlo, xy):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--output", "out.npy")
    assert r.exit_code == 2
    assert "tuple" in r.stderr and ".npz" in r.stderr
    assert not Path("out.npy").exists() and r.stdout == ""


def test_output_needs_npz_or_npy(hlo, xy):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--output", "out.txt")
    assert r.exit_code == 2 and ".npz" in r.stderr
    assert not Path("out.txt").exists()


def test_output_refuses_to_overwrite_without_force(hlo, xy):
    Path("out.npz").write_bytes(b"precious")
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--output", "out.npz")
    assert r.exit_code == 2
    assert "exists" in r.stderr and "--force" in r.stderr
    assert Path("out.npz").read_bytes() == b"precious"
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--output", "out.npz", "--force")
    assert r.exit_code == 0, r.stderr
    _assert_results_npz("out.npz")


@pytest.mark.parametrize("which", ["input", "inputs", "expect"])
def test_output_never_replaces_an_input_even_with_force(hlo, tmp_path, which):
    np.save(tmp_path / "x.npy", X)
    np.save(tmp_path / "y.npy", Y)
    np.savez(tmp_path / "args.npz", x=X, y=Y)
    np.savez(tmp_path / "ref.npz", out0=X + Y, out1=X > Y, out2=np.int32(7))
    module, target, args = {
        "input": (BF16, "x.npy", ["-i", "x.npy"]),                     # an .npy input and .npy output
        "inputs": (RESULTS, "args.npz", ["--inputs", "args.npz"]),
        "expect": (RESULTS, "ref.npz", ["--inputs", "args.npz", "--expect", "ref.npz"]),
    }[which]
    if which == "input":
        np.save(tmp_path / "x.npy", np.load(BF16_X))
    before = (tmp_path / target).read_bytes()
    r = hlo("run", module, *args, "-o", target, "--force")
    assert r.exit_code == 2
    assert "is an input" in r.stderr
    assert (tmp_path / target).read_bytes() == before


def test_output_into_a_missing_directory(hlo, xy):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "-o", "no/such/dir/out.npz")
    assert r.exit_code == 2 and "does not exist" in r.stderr


def test_print_literal_format(hlo, xy):
    """--print writes each result as XLA's Literal::ToString does: from rank 2 on, one row per line."""
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--print")
    assert r.exit_code == 0, r.stderr
    printed = r.stdout[r.stdout.index("out0 = "):]
    assert printed == (
        "out0 = f32[2,3] {\n"
        "  { 2.5, 3.5, 4.5 },\n"
        "  { 5.5, 6.5, 7.5 }\n"
        "}\n"
        "out1 = pred[2,3] {\n"                       # XLA prints pred arrays as 0/1
        "  { 0, 0, 0 },\n"
        "  { 1, 1, 1 }\n"
        "}\n"
        "out2 = s32[] 7\n")


def test_print_shows_every_value(hlo, tmp_path):
    (tmp_path / "iota.hlo").write_text("HloModule iota\n\nENTRY main {\n  ROOT i = s32[40] iota(), "
                                       "iota_dimension=0\n}\n")
    r = hlo("run", "iota.hlo", "--print")
    assert r.exit_code == 0, r.stderr
    assert "out0 = s32[40] {" + ", ".join(str(i) for i in range(40)) + "}" in r.stdout


def test_format_json(hlo, xy):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--format", "json", "--print", "-o", "out.npz")
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["module"] == "results" and doc["status"] == "ok" and doc["exit_code"] == 0
    assert doc["output"] == "out.npz"
    r0, r1, r2 = doc["results"]
    assert (r0["key"], r0["hlo_shape"], r0["shape"], r0["dtype"]) == ("out0", "f32[2,3]", [2, 3], "float32")
    assert (r0["min"], r0["max"], r0["mean"], r0["nan"], r0["inf"]) == (2.5, 7.5, 5.0, 0, 0)
    assert r0["literal"] == "f32[2,3] { { 2.5, 3.5, 4.5 }, { 5.5, 6.5, 7.5 } }"
    assert (r1["dtype"], r1["true"]) == ("bool", 3)
    assert (r2["min"], r2["max"], r2["literal"]) == (7, 7, "s32[] 7")


def test_format_json_reports_errors_on_stdout(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.ones(3, np.float32))
    r = hlo("run", CHECK_ERROR, "-i", "x.npy", "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 1
    d = doc["diagnostics"][0]
    assert (Path(d["file"]).name, d["line"], d["column"]) == ("check_error.hlo", _line_of(CHECK_ERROR, "negate"), 26)
    r = hlo("run", RESULTS, "--format", "json")
    assert r.exit_code == 2
    doc = json.loads(r.stdout)
    assert doc["status"] == "error" and doc["exit_code"] == 2 and "--random-inputs" in doc["message"]


# ============================================================================ --expect

def _ref(tmp_path, **arrays):
    np.savez(tmp_path / "ref.npz", **arrays)
    return "ref.npz"


def test_expect_match(hlo, tmp_path, xy):
    _ref(tmp_path, out0=X + Y + 5e-4, out1=X > Y, out2=np.int32(7))      # within the default 1e-3
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--expect", "ref.npz")
    assert r.exit_code == 0, r.stderr
    assert "results match the reference" in r.stdout
    assert "comparison with the reference (rtol=0.001, atol=0.001)" in r.stdout


def test_expect_mismatch_table_and_exit_1(hlo, tmp_path, xy):
    want = X + Y
    want[1, 2] += 0.5
    _ref(tmp_path, out0=want, out1=X > Y, out2=np.int32(8))
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--expect", "ref.npz")
    assert r.exit_code == 1
    assert "2 results differ from the reference" in r.stderr
    row0 = _row(r.stdout, "out0", after="comparison with the reference")
    assert "mismatch" in row0 and "1/6" in row0 and "0.5" in row0 and "[1, 2]: 7.5 vs 8" in row0
    row1 = _row(r.stdout, "out1", after="comparison with the reference")
    assert " ok " in row1
    row2 = _row(r.stdout, "out2", after="comparison with the reference")
    assert "mismatch" in row2 and "[]: 7 vs 8" in row2


def test_expect_tolerances(hlo, tmp_path, xy):
    _ref(tmp_path, out0=(X + Y) * (1 + 1e-2), out1=X > Y, out2=np.int32(7))
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--expect", "ref.npz")
    assert r.exit_code == 1
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--expect", "ref.npz", "--rtol", "2e-2")
    assert r.exit_code == 0, r.stdout
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--expect", "ref.npz", "--rtol", "0", "--atol", "0.1")
    assert r.exit_code == 0, r.stdout
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--expect", "ref.npz", "--rtol", "-1")
    assert r.exit_code == 2


def test_expect_infinities_compare_equal(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.array([1, -200, 2, 3], np.float32))
    # log(exp(x)) * x: exp(-200) underflows to 0 in f32, log(0) = -inf, -inf * -200 = +inf
    _ref(tmp_path, out0=np.array([1, np.inf, 4, 9], np.float32))
    r = hlo("run", NONFINITE, "-i", "x.npy", "--expect", "ref.npz")
    assert r.exit_code == 0, r.stdout + r.stderr


def test_expect_nan_equals_nan(hlo, tmp_path):
    x = np.array([np.nan, 1, np.inf, -0.0], np.float32)
    np.save(tmp_path / "x.npy", x)
    (tmp_path / "id.hlo").write_text("HloModule id\n\nENTRY main {\n  ROOT x = f32[4] parameter(0)\n}\n")
    _ref(tmp_path, out0=x)
    r = hlo("run", "id.hlo", "-i", "x.npy", "--expect", "ref.npz", "--rtol", "0", "--atol", "0")
    assert r.exit_code == 0, r.stdout
    _ref(tmp_path, out0=np.array([1, 1, np.inf, 0], np.float32))
    r = hlo("run", "id.hlo", "-i", "x.npy", "--expect", "ref.npz")
    assert r.exit_code == 1 and "[0]: nan vs 1" in r.stdout


@pytest.mark.parametrize("ref,fragment", [
    (dict(out0=X + Y, out1=X > Y), "missing in the reference"),
    (dict(out0=X + Y, out1=X > Y, out2=np.int32(7), out3=X), "not among the results"),
    (dict(out0=(X + Y).T, out1=X > Y, out2=np.int32(7)), "shape [2, 3] vs the reference's [3, 2]"),
])
def test_expect_structure_mismatch(hlo, tmp_path, xy, ref, fragment):
    _ref(tmp_path, **ref)
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--expect", "ref.npz")
    assert r.exit_code == 1
    assert fragment in r.stdout


def test_expect_npy_for_a_single_result(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.array([1, 2, 3], np.float32))
    np.save(tmp_path / "ref.npy", np.array([32, 64, 96], np.float32))
    r = hlo("run", LOOP, "-i", "x.npy", "--expect", "ref.npy", "--rtol", "0", "--atol", "0")
    assert r.exit_code == 0, r.stdout


def test_expect_unreadable_reference(hlo, xy):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--expect", "missing.npz")
    assert r.exit_code == 2 and "missing.npz" in r.stderr


def test_expect_json(hlo, tmp_path, xy):
    _ref(tmp_path, out0=X + Y + 1, out1=X > Y, out2=np.int32(7))
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--expect", "ref.npz", "--format", "json")
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert doc["status"] == "mismatch" and doc["exit_code"] == 1
    rows = {row["key"]: row for row in doc["expect"]["rows"]}
    assert rows["out0"]["status"] == "mismatch" and rows["out0"]["mismatched"] == 6
    assert rows["out0"]["max_abs_diff"] == pytest.approx(1.0)
    assert rows["out1"]["status"] == "ok" and rows["out2"]["status"] == "ok"
    assert doc["expect"]["ok"] is False and doc["expect"]["rtol"] == 1e-3


@pytest.mark.parametrize("suffix", [".hlo", ".opt.hlo"])
def test_expect_on_a_jax_sample(hlo, suffix):
    case = "mlp_train_step"
    r = hlo("run", SAMPLES / f"{case}{suffix}", "--inputs", SAMPLES / f"{case}.inputs.npz",
            "--expect", SAMPLES / f"{case}.expected.npz", "--rtol", "1e-5", "--atol", "1e-6")
    assert r.exit_code == 0, r.stdout + r.stderr
    assert "results match the reference" in r.stdout


# ============================================================================ dumps

def _manifest(d) -> dict:
    return json.loads((Path(d) / "manifest.json").read_text())


def test_dump_while_loop_order_counters_and_values(hlo):
    np.save("x.npy", np.array([1, 2, 3], np.float32))
    r = hlo("run", LOOP, "-i", "x.npy", "--dump-dir", "dump")
    assert r.exit_code == 0, r.stderr
    m = _manifest("dump")
    assert m["module"] == "while_loop" and m["status"] == "ok"
    entries = m["instructions"]
    assert [e["order"] for e in entries] == list(range(1, len(entries) + 1))
    by = {}
    for e in entries:
        by.setdefault((e["computation"], e["instruction"]), []).append(e)
    # the condition runs 6 times, the body 5 times, the entry's instructions once
    assert [e["execution"] for e in by[("cond", "lt")]] == [1, 2, 3, 4, 5, 6]
    assert [e["execution"] for e in by[("body", "v1")]] == [1, 2, 3, 4, 5]
    assert [e["execution"] for e in by[("main", "w")]] == [1]
    # execution order: cond 1, body 1, cond 2, ..., then the while itself, then the root
    seq = [(e["computation"], e["instruction"]) for e in entries]
    assert seq.index(("cond", "lt")) < seq.index(("body", "v1")) < seq.index(("main", "w")) < seq.index(("main", "r"))
    assert seq[-1] == ("main", "r")
    # values: v1 at its k-th execution is x * 2^k; each file holds what the manifest says
    for k, e in enumerate(by[("body", "v1")], 1):
        assert e["opcode"] == "multiply" and e["shape"] == "f32[3]"
        (f,) = e["files"]
        np.testing.assert_array_equal(np.load(Path("dump") / f), np.array([1, 2, 3], np.float32) * 2 ** k)
        assert e["stats"][0]["max"] == 3 * 2 ** k and e["stats"][0]["nan"] == 0
        assert e["source"] == "loop.py:7" and e["op_name"] == "jit(f)/while/body/mul"
        assert e["location"].endswith(f"while_loop.hlo:{_line_of(LOOP, 'v1 = ')}:3")
    # a tuple value: one file per leaf
    (w,) = by[("main", "w")]
    assert len(w["files"]) == 2 and len(w["stats"]) == 2
    assert int(np.load(Path("dump") / w["files"][0])) == 5
    files = {f for e in entries for f in e["files"]}
    assert files == {p.name for p in Path("dump").glob("*.npy")}


def test_dump_sample_resolves_stack_frames(hlo):
    sample = SAMPLES / "mlp_train_step.opt.hlo"
    r = hlo("run", sample, "--inputs", SAMPLES / "mlp_train_step.inputs.npz", "--dump-dir", "d",
            "--dump-filter", "^dot_general")
    assert r.exit_code == 0, r.stderr
    entries = _manifest("d")["instructions"]
    assert entries and all(e["instruction"].startswith("dot_general") for e in entries)
    e = next(e for e in entries if e["instruction"] == "dot_general.2")
    # dot_general.2 has stack_frame_id=8 -> FileLocations 8: scripts/gen_samples.py line 112
    assert e["source"] == "scripts/gen_samples.py:112"
    assert e["op_name"] == "jit(train_step)/jvp()/dot_general"
    assert e["stack"][0] == "scripts/gen_samples.py:112 (_mlp_train_step.<locals>.train_step.<locals>.loss_fn)"
    assert e["computation"].startswith("fused_computation")           # inside a fusion
    line, col = _position_of(sample, "%dot_general.2 = ")
    assert e["location"] == f"{sample}:{line}:{col}"
    assert all(re.fullmatch(r"[\w.\-]+\.npy", f) for x in entries for f in x["files"])


def test_dump_filter_by_opcode(hlo):
    np.save("x.npy", np.array([1, 2, 3], np.float32))
    r = hlo("run", LOOP, "-i", "x.npy", "--dump-dir", "d", "--dump-filter", "^(multiply|compare)$")
    assert r.exit_code == 0, r.stderr
    entries = _manifest("d")["instructions"]
    assert {e["opcode"] for e in entries} == {"multiply", "compare"}
    assert len(entries) == 5 + 6
    assert [e["order"] for e in entries] == list(range(1, 12))


def test_dump_summary_writes_no_arrays(hlo):
    np.save("x.npy", np.array([1, 2, 3], np.float32))
    r = hlo("run", LOOP, "-i", "x.npy", "--dump-dir", "d", "--dump-summary")
    assert r.exit_code == 0, r.stderr
    m = _manifest("d")
    assert m["summary_only"] is True
    assert not list(Path("d").glob("*.npy"))
    e = [e for e in m["instructions"] if e["instruction"] == "v1"][-1]
    assert e["stats"][0]["max"] == 96 and "files" not in e


def test_dump_refuses_a_foreign_non_empty_directory(hlo):
    np.save("x.npy", np.array([1, 2, 3], np.float32))
    Path("mine").mkdir()
    (Path("mine") / "notes.txt").write_text("keep me")
    r = hlo("run", LOOP, "-i", "x.npy", "--dump-dir", "mine")
    assert r.exit_code == 2
    assert "not empty" in r.stderr and "--dump-force" in r.stderr
    assert sorted(p.name for p in Path("mine").iterdir()) == ["notes.txt"]
    r = hlo("run", LOOP, "-i", "x.npy", "--dump-dir", "mine", "--dump-force")
    assert r.exit_code == 0, r.stderr
    assert (Path("mine") / "notes.txt").read_text() == "keep me"
    assert (Path("mine") / "manifest.json").exists()


def test_dump_force_never_replaces_files(hlo):
    np.save("x.npy", np.array([1, 2, 3], np.float32))
    Path("d").mkdir()
    (Path("d") / "manifest.json").write_text("theirs")
    r = hlo("run", LOOP, "-i", "x.npy", "--dump-dir", "d", "--dump-force")
    assert r.exit_code == 2 and "manifest.json" in r.stderr
    assert (Path("d") / "manifest.json").read_text() == "theirs"


def test_dump_dir_is_a_file(hlo):
    np.save("x.npy", np.array([1, 2, 3], np.float32))
    Path("f").write_text("x")
    r = hlo("run", LOOP, "-i", "x.npy", "--dump-dir", "f")
    assert r.exit_code == 2 and "not a directory" in r.stderr


def test_dump_again_replaces_its_own_dump(hlo):
    np.save("x.npy", np.array([1, 2, 3], np.float32))
    assert hlo("run", LOOP, "-i", "x.npy", "--dump-dir", "d").exit_code == 0
    first = {p.name for p in Path("d").glob("*.npy")}
    (Path("d") / "mine.txt").write_text("keep")
    r = hlo("run", LOOP, "-i", "x.npy", "--dump-dir", "d", "--dump-filter", "^r$")
    assert r.exit_code == 0, r.stderr
    now = {p.name for p in Path("d").glob("*.npy")}
    assert len(first) > 1 and len(now) == 1 and now == {e["files"][0] for e in _manifest("d")["instructions"]}
    assert (Path("d") / "mine.txt").read_text() == "keep"


def test_dump_never_deletes_an_input(hlo):
    np.save("x.npy", np.array([1, 2, 3], np.float32))
    assert hlo("run", LOOP, "-i", "x.npy", "--dump-dir", "d", "--dump-filter", "^v1$").exit_code == 0
    dumped = Path("d") / _manifest("d")["instructions"][0]["files"][0]
    before = dumped.read_bytes()
    r = hlo("run", LOOP, "-i", dumped, "--dump-dir", "d")
    assert r.exit_code == 2 and "input" in r.stderr
    assert dumped.read_bytes() == before


def test_dump_manifest_written_when_the_run_fails(hlo):
    r = hlo("run", FOREVER, "--max-iterations", "3", "--dump-dir", "d")
    assert r.exit_code == 1
    m = _manifest("d")
    assert m["status"] == "error"
    assert [e["execution"] for e in m["instructions"] if e["instruction"] == "i"] == [1, 2, 3]


@pytest.mark.parametrize("flag", [["--dump-filter", "x"], ["--dump-summary"], ["--dump-force"]])
def test_dump_options_need_dump_dir(hlo, xy, flag):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], *flag)
    assert r.exit_code == 2 and "--dump-dir" in r.stderr


def test_dump_filter_bad_regex(hlo, xy):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--dump-dir", "d", "--dump-filter", "(")
    assert r.exit_code == 2 and "regular expression" in r.stderr
    assert not Path("d").exists()


# ============================================================================ --check-finite

def test_check_finite_names_the_instruction_and_source(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.array([1, -200, 2, 3], np.float32))
    r = hlo("run", NONFINITE, "-i", "x.npy", "--check-finite", "-o", "out.npy")
    assert r.exit_code == 1
    err = r.stderr
    line = _line_of(NONFINITE, "%l = ")
    # the first instruction that made an Inf from finite operands: %l = log(%f), not the -inf
    # constant, not the exp that underflowed to 0, not the multiply that follows
    assert f"nonfinite.hlo:{line}:3: error: l: log produced a non-finite value (1 Inf, first at [1] = -inf)" in err
    assert "%l = f32[4]{0} log(%f)" in err and "^" in err             # the HLO line with a caret
    assert "source: model.py:42  (jit(loss)/log)" in err              # through StackFrames 3 -> line 42
    assert "operand f: float32[4] min=0" in err and "(at [1]: 0)" in err
    assert "ninf" not in err and "exponential" not in err
    assert not Path("out.npy").exists()


def test_check_finite_in_a_loop_body_gives_the_execution(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.array([1, 1e38, 3], np.float32))
    r = hlo("run", LOOP, "-i", "x.npy", "--check-finite", "--format", "json")
    assert r.exit_code == 1
    rep = json.loads(r.stdout)["non_finite"]
    # 1e38 * 2 = 2e38 is finite; * 2 again overflows f32: the body's 2nd multiply
    assert (rep["computation"], rep["instruction"], rep["opcode"], rep["execution"]) == ("body", "v1", "multiply", 2)
    assert rep["source"] == "loop.py:7" and rep["first_index"] == [1] and rep["first_value"] == "inf"
    assert rep["line"] == _line_of(LOOP, "v1 = ")
    assert rep["operands"][0]["operand"] == "v" and rep["operands"][0]["stats"][0]["max"] == float(np.float32(2e38))
    assert "execution 2" in r.stderr


def test_check_finite_passes_clean_runs(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.array([1, -2, 2, 3], np.float32))
    r = hlo("run", NONFINITE, "-i", "x.npy", "--check-finite")
    assert r.exit_code == 0, r.stderr


def test_check_finite_allows_infinite_constants_and_masks(hlo):
    """The attention sample masks with -inf constants and max-reduces from -inf: nothing new."""
    r = hlo("run", SAMPLES / "attention.opt.hlo", "--inputs", SAMPLES / "attention.inputs.npz", "--check-finite")
    assert r.exit_code == 0, r.stderr


FILL = """HloModule fill

// jnp.take(mode="fill") style: a called computation replaces rows it cannot gather by a NaN
// constant.  The NaN comes from a constant, inside the callee: neither is a finding, nor is the call.
take {
  p = f32[3] parameter(0)
  ok = pred[3] parameter(1)
  fill = f32[] constant(nan)
  b = f32[3] broadcast(fill), dimensions={}
  ROOT s = f32[3] select(ok, p, b)
}

ENTRY main {
  x = f32[3] parameter(0)
  zero = f32[] constant(0)
  z = f32[3] broadcast(zero), dimensions={}
  ok = pred[3] compare(x, z), direction=GE
  c = f32[3] call(x, ok), to_apply=take
  ROOT r = f32[3] sqrt(c)
}
"""


def test_check_finite_judges_called_computations_inside(hlo, tmp_path):
    (tmp_path / "fill.hlo").write_text(FILL)
    np.save(tmp_path / "x.npy", np.array([1, -1, 4], np.float32))
    r = hlo("run", "fill.hlo", "-i", "x.npy", "--check-finite", "--print")
    assert r.exit_code == 0, r.stderr
    assert "out0 = f32[3] {1, nan, 2}" in r.stdout
    # a NaN made inside the callee is reported there, with the callee's name
    (tmp_path / "fill2.hlo").write_text(FILL.replace("ROOT s = f32[3] select(ok, p, b)",
                                                     "s0 = f32[3] select(ok, p, b)\n  ROOT s = f32[3] log(p)"))
    r = hlo("run", "fill2.hlo", "-i", "x.npy", "--check-finite", "--format", "json")
    assert r.exit_code == 1
    rep = json.loads(r.stdout)["non_finite"]
    assert (rep["computation"], rep["instruction"], rep["first_index"]) == ("take", "s", [1])


def test_check_finite_notes_non_finite_inputs(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.array([[np.nan, 1, 2], [3, 4, 5]], np.float32))
    np.save(tmp_path / "y.npy", Y)
    r = hlo("run", RESULTS, "-i", "x.npy", "-i", "y.npy", "--check-finite")
    assert r.exit_code == 0, r.stderr
    assert "note: input parameter 0 'x' holds non-finite values" in r.stderr


# ============================================================================ guards

def test_max_iterations_stops_a_runaway_loop(hlo):
    r = hlo("run", FOREVER, "--max-iterations", "50")
    assert r.exit_code == 1
    assert "50 iterations" in r.stderr and "--max-iterations" in r.stderr
    assert f"forever.hlo:{_line_of(FOREVER, 'ROOT w =')}" in r.stderr


def test_max_iterations_allows_that_many(hlo):
    np.save("x.npy", np.array([1, 2, 3], np.float32))
    assert hlo("run", LOOP, "-i", "x.npy", "--max-iterations", "5").exit_code == 0
    r = hlo("run", LOOP, "-i", "x.npy", "--max-iterations", "4")
    assert r.exit_code == 1 and "4 iterations" in r.stderr
    assert hlo("run", LOOP, "-i", "x.npy", "--max-iterations", "-1").exit_code == 2


def test_elided_constants_are_refused(hlo):
    np.save("x.npy", np.arange(16, dtype=np.float32))
    r = hlo("run", ELIDED, "-i", "x.npy", "-o", "out.npy")
    assert r.exit_code == 1
    assert f"elided.hlo:{_line_of(ELIDED, 'constant({...})')}:3: error: c:" in r.stderr
    assert "--allow-elided-constants=zeros|random" in r.stderr
    assert not Path("out.npy").exists()


def test_elided_constants_zeros_and_random(hlo):
    x = np.arange(16, dtype=np.float32)
    np.save("x.npy", x)
    r = hlo("run", ELIDED, "-i", "x.npy", "--allow-elided-constants", "zeros", "-o", "z.npy")
    assert r.exit_code == 0, r.stderr
    np.testing.assert_array_equal(np.load("z.npy"), x)
    for name, seed in (("r1.npy", 1), ("r2.npy", 1), ("r3.npy", 2)):
        r = hlo("run", ELIDED, "-i", "x.npy", "--allow-elided-constants=random", "--seed", seed, "-o", name)
        assert r.exit_code == 0, r.stderr
    r1, r2, r3 = (np.load(n) for n in ("r1.npy", "r2.npy", "r3.npy"))
    assert np.array_equal(r1, r2) and not np.array_equal(r1, r3) and not np.array_equal(r1, x)


# ============================================================================ the checker first

def test_check_errors_stop_the_run(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.array([1, 2, 3], np.float32))
    r = hlo("run", CHECK_ERROR, "-i", "x.npy", "-o", "out.npy")
    assert r.exit_code == 1
    line = _line_of(CHECK_ERROR, "negate")
    assert f"check_error.hlo:{line}:26: error: %n: negate:" in r.stderr
    assert "ROOT n = f32[3] negate(f32[4] x)" in r.stderr
    assert "--no-check" in r.stderr
    assert not Path("out.npy").exists() and r.stdout == ""


def test_no_check_runs_anyway(hlo, tmp_path):
    np.save(tmp_path / "x.npy", np.array([1, 2, 3], np.float32))
    r = hlo("run", CHECK_ERROR, "-i", "x.npy", "-o", "out.npy", "--no-check")
    assert r.exit_code == 0, r.stderr
    np.testing.assert_array_equal(np.load("out.npy"), [-1, -2, -3])


# ============================================================================ exit codes

def test_unreadable_module_is_2(hlo, tmp_path):
    r = hlo("run", tmp_path / "nope.hlo", "--random-inputs")
    assert r.exit_code == 2
    r = hlo("run", tmp_path, "--random-inputs")
    assert r.exit_code == 2


def test_syntax_error_is_1(hlo, tmp_path):
    (tmp_path / "bad.hlo").write_text("HloModule bad\n\nENTRY main {\n  ROOT x = f32[ parameter(0)\n}\n")
    r = hlo("run", "bad.hlo", "--random-inputs")
    assert r.exit_code == 1
    assert "bad.hlo:4:" in r.stderr


def test_module_from_stdin(hlo):
    r = hlo("run", "-", "--random-inputs", "--format", "json", input=LOOP.read_text())
    assert r.exit_code == 0, r.stderr
    assert json.loads(r.stdout)["module"] == "while_loop"


def test_bad_option_is_2(hlo, xy):
    r = hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "--format", "yaml")
    assert r.exit_code == 2


def test_help_mentions_exit_codes(hlo):
    r = hlo("run", "--help")
    assert r.exit_code == 0 and "Exit codes" in r.stdout and "--check-finite" in r.stdout


# ============================================================================ progress display, --max-memory
# (the display itself: tests/test_progress.py; --profile: tests/test_profile.py)

def test_help_documents_progress_profile_and_max_memory(hlo):
    out = " ".join(hlo("run", "--help").stdout.split())
    for fragment in ("--no-progress", "instruction k of N", "--profile", "where the time went",
                     "--max-memory", "none: no check", "5 the estimated memory"):
        assert fragment in out, fragment


BIG = """HloModule big
ENTRY main {
  x = f32[1024,1024] parameter(0)
  y = f32[1024,1024] add(x, x)
  ROOT z = f32[1024,1024] multiply(y, x)
}
"""


def test_max_memory_refuses_before_reading_inputs(hlo, tmp_path):
    (tmp_path / "big.hlo").write_text(BIG)
    # the input file does not even exist: the refusal comes before any input is read
    from hlo_cli.interpreter.memory import estimate
    total = estimate(hlo_cli.parse(BIG)).total              # (the estimate's own tests say what it is)
    assert total > 3 * 4 * 1024 * 1024
    r = hlo("run", "big.hlo", "-i", "missing.npy", "--max-memory", "1MB")
    assert r.exit_code == 5
    assert f"estimated {total:,} bytes" in r.stderr and "1,000,000 bytes" in r.stderr
    assert "--max-memory none" in r.stderr and r.stdout == ""
    doc = json.loads(hlo("run", "big.hlo", "-i", "missing.npy", "--max-memory", "1MB", "--format", "json").stdout)
    assert doc["exit_code"] == 5 and doc["status"] == "error"
    assert doc["memory"]["limit_bytes"] == 1_000_000 and doc["memory"]["total_bytes"] == total
    assert doc["memory"]["estimate"]["parameters_bytes"] == 4 * 1024 * 1024


@pytest.mark.parametrize("limit", ["none", "1GiB", "auto"])
def test_max_memory_lets_runs_within_it_through(hlo, tmp_path, limit):
    (tmp_path / "big.hlo").write_text(BIG)
    r = hlo("run", "big.hlo", "--random-inputs", "--max-memory", limit, "--format", "json")
    assert r.exit_code == 0
    assert "memory_check_s" in json.loads(r.stdout)["timings"]


@pytest.mark.parametrize("bad", ["12XB", "-5MB", "", "lots"])
def test_max_memory_bad_size_is_a_usage_error(hlo, tmp_path, bad):
    (tmp_path / "big.hlo").write_text(BIG)
    r = hlo("run", "big.hlo", "--random-inputs", "--max-memory", bad)
    assert r.exit_code == 2 and "--max-memory" in r.stderr and "is not a" in r.stderr


def test_max_memory_counts_every_device(hlo, tmp_path):
    from hlo_cli.interpreter.memory import estimate
    text = BIG.replace("HloModule big", "HloModule big, replica_count=4")
    one, four = (estimate(hlo_cli.parse(text), devices=n).total for n in (1, 4))
    assert four > 2 * one
    limit = str((one + four) // 2)
    (tmp_path / "big.hlo").write_text(text)
    r = hlo("run", "big.hlo", "--random-inputs", "--max-memory", limit)
    assert r.exit_code == 5 and "estimated" in r.stderr
    assert hlo("run", "big.hlo", "--random-inputs", "--max-memory", limit, "--replicas", "1").exit_code == 0


# ============================================================================ the Python API

def test_python_api_runs_text_and_modules():
    text = RESULTS.read_text()
    out = hlo_cli.run(text, X, Y)
    assert isinstance(out, tuple) and len(out) == 3
    np.testing.assert_array_equal(out[0], X + Y)
    np.testing.assert_array_equal(out[1][0], X > Y)
    assert int(out[1][1]) == 7
    module = hlo_cli.parse(text)
    out2 = hlo_cli.run(module, X.tolist(), Y)             # lists are taken where no value changes
    np.testing.assert_array_equal(out2[0], X + Y)
    out3 = hlo_cli.run(module, inputs={"y": Y, "x": X})
    np.testing.assert_array_equal(out3[0], X + Y)


def test_python_api_hook_sees_every_instruction():
    events = []
    x = np.array([1, 2, 3], np.float32)
    out = hlo_cli.run(LOOP.read_text(), x, hook=lambda ev: events.append(
        (ev.computation.name, ev.instruction.name, ev.count, np.array(ev.value, copy=True)
         if isinstance(ev.value, np.ndarray) else ev.value, len(ev.operands))))
    np.testing.assert_array_equal(out, x * 32)
    v1 = [e for e in events if e[:2] == ("body", "v1")]
    assert [e[2] for e in v1] == [1, 2, 3, 4, 5]
    for k, e in enumerate(v1, 1):
        np.testing.assert_array_equal(e[3], x * 2 ** k)
        assert e[4] == 2
    assert [e[2] for e in events if e[:2] == ("cond", "lt")] == [1, 2, 3, 4, 5, 6]
    assert events[-1][:2] == ("main", "r")


def test_python_api_options_and_errors():
    with pytest.raises(HloEvalError, match="iterations"):
        hlo_cli.run(FOREVER.read_text(), max_iterations=10)
    with pytest.raises(HloEvalError, match="elided"):
        hlo_cli.run(ELIDED.read_text(), np.zeros(16, np.float32))
    out = hlo_cli.run(ELIDED.read_text(), np.ones(16, np.float32), elided_constants="zeros")
    np.testing.assert_array_equal(out, np.ones(16, np.float32))
    with pytest.raises(HloInputError, match=r"parameter 1 'y'.*expected shape f32\[2,3\]"):
        hlo_cli.run(RESULTS.read_text(), X, Y.T)
    with pytest.raises(HloInputError, match="missing input for parameter 1 'y'"):
        hlo_cli.run(RESULTS.read_text(), X)
    bf = np.load(BF16_X)                                   # raw |V2 records are taken as bf16
    out = hlo_cli.run(BF16.read_text(), bf)
    assert out.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), [3.75, 2, 0.3125, 12])


def test_no_leftover_temporary_files(hlo, xy):
    assert hlo("run", RESULTS, "-i", xy[0], "-i", xy[1], "-o", "out.npz", "--dump-dir", "d").exit_code == 0
    leftovers = [p for p in Path(".").rglob("*") if p.name.endswith(".tmp")]
    assert leftovers == []
    assert os.listdir("d")


def test_expect_reads_a_reference_within_a_dynamic_bound(tmp_path):
    # a result of f32[<=12] holding 6 elements at run time is compared with a 6-element reference;
    # one past the bound, or of another rank, stays unread and is reported as a shape mismatch
    from hlo_cli.pipeline.compare import compare, load_reference
    from hlo_cli.pipeline.io import ArrayHeader
    ref = tmp_path / "ref.npz"
    np.savez(ref, out0=np.arange(6, dtype=np.float32), out1=np.zeros(13, np.float32),
             out2=np.zeros((2, 3), np.float32))
    got = load_reference(str(ref), [((12,), (True,)), ((12,), (True,)), ((12,), (True,))])
    assert isinstance(got["out0"], np.ndarray) and got["out0"].shape == (6,)
    assert isinstance(got["out1"], ArrayHeader) and isinstance(got["out2"], ArrayHeader)
    res = compare([np.arange(6, dtype=np.float32), np.zeros(12, np.float32), np.zeros(6, np.float32)],
                  got, 0.0, 0.0)
    assert [r["status"] for r in res["rows"]][0] == "ok"
    assert "shape" in res["rows"][1]["status"] and "shape" in res["rows"][2]["status"]
