"""The newest XLA's texts and protos (JAX 0.11.2's XLA): compare's `order=`, topk's `is_stable`, the
compare order and the convolution field of its HloInstructionProto.

XLA decides where it can: `order=TOTAL` / `order=PARTIAL` must compute what XLA CPU computed for
`type=TOTALORDER` / `type=FLOAT` (the goldens of tests/programs/elementwise, made by XLA); JAX 0.10.2
parses neither `order=` nor WEAK, so the weak order is pinned by its law (C++'s std::weak_order on
IEEE floats: the total order on operands with -0 made +0 and every NaN made the NaN of its sign)
and a few values.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import given, settings, strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden import load_golden  # noqa: E402

from hlo_cli.cli import main  # noqa: E402
from hlo_cli.errors import HloError, HloInputError  # noqa: E402
from hlo_cli.checker import check_module  # noqa: E402
from hlo_cli.interpreter import run  # noqa: E402
from hlo_cli.interpreter.values import leaves  # noqa: E402
from hlo_cli.ir.printer import format_module  # noqa: E402
from hlo_cli.parser import parse  # noqa: E402
from hlo_cli.sources import read_modules  # noqa: E402
from hlo_cli.sources.proto import read_proto_modules  # noqa: E402
from hlo_cli.sources.proto_schema import messages  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ELEMENTWISE = ROOT / "tests" / "programs" / "elementwise"
DIRECTIONS = ("EQ", "NE", "LT", "LE", "GT", "GE")


def _compare_program(et: str, n: int, attr: str) -> str:
    lines = [f"  {d.lower()} = pred[{n}] compare(x, y), direction={d}{attr}" for d in DIRECTIONS]
    ret = ", ".join(f"pred[{n}]" for _ in DIRECTIONS)
    return ("HloModule cmp\n\nENTRY main {\n"
            f"  x = {et}[{n}] parameter(0)\n  y = {et}[{n}] parameter(1)\n" + "\n".join(lines)
            + f"\n  ROOT r = ({ret}) tuple({', '.join(d.lower() for d in DIRECTIONS)})\n}}\n")


def _run(text: str, *args):
    m = parse(text, "t.hlo")
    errs = [d for d in check_module(m) if d.severity == "error"]
    assert not errs, errs
    out = run(m, *args)
    return [np.asarray(v) for v in (leaves(out) if isinstance(out, tuple) else [out])]


# ----------------------------------------------------------------------------- order= against XLA

_GOLDENS = sorted(p for p in ELEMENTWISE.glob("compare.*.hlo")
                  if re.search(r"\.(totalorder|float)\.hlo$", p.name))


@pytest.mark.parametrize("path", _GOLDENS, ids=lambda p: p.name)
def test_order_spelling_computes_what_xla_computed_for_the_type_spelling(path):
    text = path.read_text()
    ours = text.replace("type=TOTALORDER", "order=TOTAL").replace("type=FLOAT", "order=PARTIAL")
    assert ours != text and "type=" not in ours
    args, want = load_golden(path, parse(text, str(path)))
    got = _run(ours, *args)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, w, err_msg=f"{path.name} out{k}")


def test_order_on_integers_is_their_only_order():
    x = np.array([-3, 0, 5, 2**31 - 1, -2**31], np.int32)
    y = np.array([5, 0, -3, -2**31, 2**31 - 1], np.int32)
    plain = _run(_compare_program("s32", 5, ""), x, y)
    for order in ("TOTAL", "PARTIAL", "WEAK"):
        assert all((a == b).all() for a, b in zip(_run(_compare_program("s32", 5, f", order={order}"), x, y), plain))


# ----------------------------------------------------------------------------- WEAK

def _canonical(x: np.ndarray) -> np.ndarray:
    """-0 -> +0 and every NaN -> the quiet NaN of its sign: the weak order is the total order of these."""
    out = np.where(x == 0, np.zeros_like(x), x)
    nan = np.array(np.nan, x.dtype)
    negative = np.where(np.isnan(x), x.view(np.uint8 if x.itemsize == 1 else
                                              {2: np.uint16, 4: np.uint32, 8: np.uint64}[x.itemsize])
                        >> (8 * x.itemsize - 1), 0).astype(bool)
    return np.where(np.isnan(x), np.where(negative, -nan, nan), out).astype(x.dtype)


_SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e-40, -1e-40, 3.5], np.float64)


@pytest.mark.parametrize("dt", [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn],
                         ids=lambda d: np.dtype(d).name)
def test_weak_order_is_the_total_order_of_canonical_operands(dt):
    v = _SPECIALS.astype(dt)
    v[1] = -np.abs(v[0])                                # a NaN with its sign bit set
    x, y = (a.ravel() for a in np.meshgrid(v, v, indexing="ij"))
    et = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
          "float8_e4m3fn": "f8e4m3fn"}[np.dtype(dt).name]
    weak = _run(_compare_program(et, x.size, ", order=WEAK"), x, y)
    total = _run(_compare_program(et, x.size, ", order=TOTAL"), _canonical(x), _canonical(y))
    for d, a, b in zip(DIRECTIONS, weak, total):
        np.testing.assert_array_equal(a, b, err_msg=d)


def test_weak_order_values():
    nan = np.float32(np.nan)
    x = np.array([-0.0, nan, nan, np.inf, 1.0, -nan, -nan], np.float32)
    y = np.array([0.0, -nan, 1.0, nan, nan, -np.inf, -nan], np.float32)
    eq, ne, lt, le, gt, ge = _run(_compare_program("f32", 7, ", order=WEAK"), x, y)
    assert eq.tolist() == [True, False, False, False, False, False, True]   # -0 == +0; NaNs of one sign
    assert gt.tolist() == [False, True, True, False, False, False, False]   # +NaN above all, -NaN below
    assert lt.tolist() == [False, False, False, True, True, True, False]
    assert (ne == ~eq).all() and (ge == ~lt).all() and (le == ~gt).all()   # a weak order has inverses


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(width=32, allow_nan=True), min_size=1, max_size=12))
def test_sort_by_a_weak_comparator_sorts_canonical_values_stably(values):
    x = np.array(values, np.float32)
    text = ("HloModule s\n\ncmp {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ia = s32[] parameter(2)\n  ib = s32[] parameter(3)\n"
            "  ROOT lt = pred[] compare(a, b), direction=LT, order=WEAK\n}\n\n"
            f"ENTRY main {{\n  x = f32[{x.size}] parameter(0)\n"
            f"  i = s32[{x.size}] iota(), iota_dimension=0\n"
            f"  ROOT s = (f32[{x.size}], s32[{x.size}]) sort(x, i), dimensions={{0}}, is_stable=true, to_apply=cmp\n}}\n")
    got, perm = _run(text, x)
    c = _canonical(x)
    nan = np.isnan(c)
    group = np.where(nan, np.where(c.view(np.uint32) >> 31 == 1, 0, 2), 1)
    want = np.lexsort((np.where(nan, 0.0, c.astype(np.float64)), group))   # -NaNs, numbers, +NaNs
    np.testing.assert_array_equal(perm, want)
    np.testing.assert_array_equal(got.view(np.uint32), x[want].view(np.uint32))


# ----------------------------------------------------------------------------- checker and printer

@pytest.mark.parametrize("text,fragment", [
    ("x = c64[2] parameter(0)\n  ROOT r = pred[2] compare(x, x), direction=EQ, order=TOTAL", "be PARTIAL for c64"),
    ("x = f32[2] parameter(0)\n  ROOT r = pred[2] compare(x, x), direction=EQ, type=FLOAT, order=TOTAL",
     "agree with type=FLOAT"),
])
def test_checker_refuses_an_order_that_means_nothing(text, fragment):
    m = parse(f"HloModule m\n\nENTRY main {{\n  {text}\n}}\n", "t.hlo")
    errs = [d for d in check_module(m) if d.severity == "error"]
    assert errs and fragment in errs[0].message, errs


def test_unknown_order_is_a_syntax_error_with_a_location():
    with pytest.raises(HloError) as e:
        parse("HloModule m\n\nENTRY main {\n  x = f32[2] parameter(0)\n"
              "  ROOT r = pred[2] compare(x, x), direction=EQ, order=STRONG\n}\n", "t.hlo")
    assert e.value.diagnostics[0].line == 5 and "STRONG" in e.value.format() and "TOTAL, PARTIAL, WEAK" in str(e.value)


def test_order_and_is_stable_print_as_xla_prints_them():
    text = ("HloModule m\n\nENTRY main {\n  x = f32[8]{0} parameter(0)\n"
            "  c = pred[8]{0} compare(x, x), direction=LT, order=TOTAL\n"
            "  ROOT t = (f32[2]{0}, s32[2]{0}) topk(x), k=2, largest=true, is_stable=true\n}\n")
    out = format_module(parse(text, "t.hlo"))
    assert "compare(%x, %x), direction=LT, order=TOTAL" in out or "compare(x, x), direction=LT, order=TOTAL" in out
    assert "k=2, largest=true, is_stable=true" in out
    assert format_module(parse(out, "again.hlo")) == out


# ----------------------------------------------------------------------------- topk is_stable

@pytest.mark.parametrize("largest", [True, False])
def test_stable_topk_takes_ties_in_index_order(largest):
    x = np.array([[1.0, 3.0, 3.0, -0.0, 0.0, 3.0, 1.0, 1.0]], np.float32)
    text = ("HloModule m\n\nENTRY main {\n  x = f32[1,8] parameter(0)\n"
            f"  ROOT t = (f32[1,5], s32[1,5]) topk(x), k=5, largest={'true' if largest else 'false'}, is_stable=true\n}}\n")
    vals, idx = _run(text, x)
    # ties keep index order; -0 is below +0 (XLA's total order)
    want = [1, 2, 5, 0, 6] if largest else [3, 4, 0, 6, 7]
    assert idx[0].tolist() == want
    np.testing.assert_array_equal(vals[0], x[0, want])


def test_jax_0_11_topk_text_runs_like_the_gpu():
    """The H200's sort/top-k case (JAX 0.11.2): order=TOTAL comparators, a stable topk, scans."""
    case = ROOT.parent / "shared" / "gpu" / "cases"
    if not (case / "sort_topk.pre.hlo").exists():
        pytest.skip("../shared/gpu is absent (the H200's dumps)")
    src = read_modules(str(case / "sort_topk.pre.hlo")).modules[0]
    m = parse(src.text, src.file)
    inputs = np.load(case / "sort_topk.inputs.npz")
    params = m.entry_computation.parameters
    args = [inputs[f"arg{k}"].astype(np.float32) if inputs[f"arg{k}"].dtype == np.float64 else inputs[f"arg{k}"]
            for k in range(len(params))]
    out = run(m, *args)
    got = list(leaves(out)) if isinstance(out, tuple) else [out]
    want = np.load(case / "sort_topk.expected.npz")
    for k, g in enumerate(got):
        np.testing.assert_allclose(np.asarray(g), want[f"out{k}"], rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------------- protos

PROTOS = ROOT / "samples" / "protos"


def _sort_proto():
    m = messages()["HloModuleProto"]()
    m.ParseFromString((PROTOS / "sort.hlo.pb").read_bytes())
    compare = next(i for c in m.computations for i in c.instructions if i.opcode == "compare")
    return m, compare


def _read(m, tmp_path):
    p = tmp_path / "m.hlo.pb"
    p.write_bytes(m.SerializeToString())
    return p, read_proto_modules(str(p)).modules[0].text


def test_proto_comparison_order_reads_as_order(tmp_path):
    m, compare = _sort_proto()
    compare.comparison_order = "PARTIAL"             # the f32 default: printed as nothing
    assert "order=" not in _read(m, tmp_path)[1]
    compare.comparison_order = "TOTAL"
    compare.comparison_type = "TOTALORDER"
    p, text = _read(m, tmp_path)
    assert "direction=LT, order=TOTAL" in text and "type=" not in text
    compare.comparison_order, compare.comparison_type = "WEAK", "FLOAT"     # the order decides
    assert "direction=LT, order=WEAK" in _read(m, tmp_path)[1]
    r = CliRunner().invoke(main, ["check", str(p)])
    assert r.exit_code == 0, r.output


def test_proto_unknown_comparison_order_is_refused(tmp_path):
    m, compare = _sort_proto()
    compare.comparison_order = "STRONG"
    p = tmp_path / "m.hlo.pb"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(HloInputError) as e:
        read_proto_modules(str(p))
    assert e.value.exit_code == 2 and "comparison order 'STRONG' unknown" in str(e.value)


def test_proto_convolution_field_101_empty_is_absent_and_set_is_refused(tmp_path):
    m = messages()["HloModuleProto"]()
    m.ParseFromString((PROTOS / "convolution.hlo.pb").read_bytes())
    conv = next(i for c in m.computations for i in c.instructions if i.opcode == "convolution")
    conv.MergeFromString(b"\xaa\x06\x00")             # field 101, length-delimited, empty
    p = tmp_path / "m.hlo.pb"
    p.write_bytes(m.SerializeToString())
    assert "convolution(" in read_proto_modules(str(p)).modules[0].text
    conv.convolution_field_101 = b"\x08\x02"
    p.write_bytes(m.SerializeToString())
    with pytest.raises(HloInputError) as e:
        read_proto_modules(str(p))
    assert e.value.exit_code == 2 and "field 101" in str(e.value)
    r = CliRunner().invoke(main, ["check", str(p)])
    assert r.exit_code == 2 and "field 101" in r.stderr and "Traceback" not in r.output


def test_proto_stable_topk_reads_as_is_stable(tmp_path):
    from hlo_cli.tools.xla_reference import parse_with_xla
    text = ("HloModule m\n\nENTRY main {\n  x = f32[8]{0} parameter(0)\n"
            "  ROOT t = (f32[3]{0}, s32[3]{0}) topk(x), k=3, largest=true\n}\n")
    m = messages()["HloModuleProto"]()
    m.ParseFromString(parse_with_xla(text).as_serialized_hlo_module_proto())   # XLA's own proto
    topk = next(i for c in m.computations for i in c.instructions if i.opcode == "topk")
    assert "is_stable" not in _read(m, tmp_path)[1]
    topk.is_stable = True
    p, out = _read(m, tmp_path)
    assert "k=3, largest=true, is_stable=true" in out
    x = np.array([1, 5, 5, 2, 5, 0, -1, 3], np.float32)
    vals, idx = run(parse(out, str(p)), x)
    assert np.asarray(idx).tolist() == [1, 2, 4]


# ----------------------------------------------------------------------------- what JAX writes

def _jax_programs():
    import jax
    import jax.numpy as jnp
    x = jnp.linspace(-2, 2, 128, dtype=jnp.float32).reshape(8, 16)
    i = jnp.arange(16, dtype=jnp.int32)
    return {
        "sort": (lambda a: jnp.sort(a, axis=-1), (x,)),
        "argsort": (lambda a: jnp.argsort(a, axis=-1), (x,)),
        "top_k": (lambda a: jax.lax.top_k(a, 3), (x,)),
        "cumsum": (lambda a: jnp.cumsum(a, axis=0), (x,)),
        "nan_where": (lambda a: jnp.where(a < 0.5, a, jnp.nan), (x,)),
        "scan": (lambda a: jax.lax.scan(lambda c, r: (c + r, c * r), jnp.zeros(16), a)[1], (x,)),
        "conv": (lambda a: jax.lax.conv(a[None, None], jnp.ones((1, 1, 3, 3)), (1, 1), "SAME"), (x,)),
        "dot_bf16": (lambda a: a.astype(jnp.bfloat16) @ a.T.astype(jnp.bfloat16), (x,)),
        "scatter": (lambda a, j: a.at[:, j % 16].add(1.0), (x, i)),
        "cholesky": (lambda a: jnp.linalg.cholesky(a.T @ a + jnp.eye(16)), (x,)),
        "rng": (lambda a: jax.random.normal(jax.random.key(0), a.shape) + a, (x,)),
        "argmax": (lambda a: jnp.argmax(a, axis=1), (x,)),
    }


@pytest.mark.slow
def test_every_text_and_proto_jax_writes_reads_and_checks_clean(tmp_path):
    """JAX's lowered text, XLA CPU's optimized text and the lowered module's proto, for a range of
    programs (the newest JAX on PyPI: 0.10.2 when this was written; the H200's JAX 0.11.2 texts are
    test_gpu_dump_files')."""
    import jax
    failures = []
    for name, (f, args) in _jax_programs().items():
        lowered = jax.jit(f).lower(*args)
        files = {"pre.hlo": lowered.as_text(dialect="hlo"), "post.hlo": lowered.compile().as_text(),
                 "pre.hlo.pb": lowered.compiler_ir("hlo").as_serialized_hlo_module_proto()}
        for suffix, data in files.items():
            p = tmp_path / f"{name}.{suffix}"
            (p.write_bytes if isinstance(data, bytes) else p.write_text)(data)
            src = read_modules(str(p)).modules[0]
            errs = [d for d in check_module(parse(src.text, src.file), src.text) if d.severity == "error"]
            if errs:
                failures.append(f"{p.name}: {errs[0].message}")
    assert not failures, failures
