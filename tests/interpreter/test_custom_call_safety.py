"""Foreign calls cannot crash the process: every LAPACK/BLAS custom call with operands or results
that do not fit what the routine touches is a located error (exit 1), never a signal.

The cases run in a subprocess (a heap overflow inside LAPACK would otherwise take pytest down):
for every FFI routine and type, a valid call is mutated one operand or result at a time (a
dimension shrunk to 1, a dimension dropped, another element type, an operand missing), plus the
cases of the issue (gtsv with dl f32[1] for d f32[4096], geqp3 with jpvt s32[1] for 512 columns,
trsm with a f32[1,1]) and random shapes from a seeded generator.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hlo_cli.errors import HloEvalError
from hlo_cli.interpreter import run
from hlo_cli.interpreter.ops import custom_call as cc

pytestmark = pytest.mark.skipif(cc.lapack() is None, reason="needs NumPy's bundled OpenBLAS")

ET = {"s": "f32", "d": "f64", "c": "c64", "z": "c128"}
REAL = {"s": "f32", "d": "f64", "c": "f32", "z": "f64"}
CPLX = {"s": "c64", "d": "c128", "c": "c64", "z": "c128"}


def _lay(r):
    if r < 2:
        return "{" + ",".join(map(str, range(r - 1, -1, -1))) + "}"
    return "{" + ",".join(map(str, [r - 2, r - 1] + list(range(r - 3, -1, -1)))) + "}"


def _sh(t, dims):
    return f"{t}[{','.join(map(str, dims))}]" + (_lay(len(dims)) if dims else "")


def signature(routine, p, B, m, n):
    """(target, operands, results, backend_config) of a valid FFI call; p the type letter."""
    T, R, C = ET[p], REAL[p], CPLX[p]
    k = min(m, n)
    name = routine
    if p in "cz":
        name = {"orgqr": "ungqr", "syevd": "heevd", "sytrd": "hetrd"}.get(routine, routine)
    tgt = f"lapack_{p}{name}_ffi"
    I = "s32"
    if routine == "potrf":
        return tgt, [(T, B + (n, n))], [(T, B + (n, n)), (I, B)], "uplo = 76 : ui8"
    if routine == "trsm":
        return tgt, [(T, B + (m, m)), (T, B + (m, n))], [(T, B + (m, n))], \
            "diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8"
    if routine == "getrf":
        return tgt, [(T, B + (m, n))], [(T, B + (m, n)), (I, B + (k,)), (I, B)], ""
    if routine == "geqrf":
        return tgt, [(T, B + (m, n))], [(T, B + (m, n)), (T, B + (k,))], ""
    if routine == "geqp3":
        return tgt, [(T, B + (m, n)), (I, B + (n,))], [(T, B + (m, n)), (I, B + (n,)), (T, B + (k,))], ""
    if routine == "orgqr":
        m, n = max(m, n), min(m, n)
        return tgt, [(T, B + (m, n)), (T, B + (n,))], [(T, B + (m, n))], ""
    if routine == "syevd":
        return tgt, [(T, B + (n, n))], [(T, B + (n, n)), (R, B + (n,)), (I, B)], "mode = 86 : ui8, uplo = 76 : ui8"
    if routine in ("gesdd", "gesvd"):
        return tgt, [(T, B + (m, n))], [(T, B + (m, n)), (R, B + (k,)), (T, B + (m, m)), (T, B + (n, n)), (I, B)], \
            "mode = 65 : ui8"
    if routine == "geev":
        vals = [(T, B + (n,))] if p in "cz" else [(T, B + (n,)), (T, B + (n,))]
        return tgt, [(T, B + (n, n))], vals + [(C, B + (n, n)), (C, B + (n, n)), (I, B)], \
            "compute_left = 86 : ui8, compute_right = 86 : ui8"
    if routine == "gees":
        vals = [(T, B + (n,))] if p in "cz" else [(T, B + (n,)), (T, B + (n,))]
        return tgt, [(T, B + (n, n))], [(T, B + (n, n)), (T, B + (n, n))] + vals + [(I, B), (I, B)], \
            "mode = 86 : ui8, sort = 78 : ui8"
    if routine == "gehrd":
        return tgt, [(T, B + (n, n))], [(T, B + (n, n)), (T, B + (max(n - 1, 0),)), (I, B)], \
            f"high = {n} : i32, low = 1 : i32"
    if routine == "sytrd":
        n1 = max(n - 1, 0)
        return tgt, [(T, B + (n, n))], [(T, B + (n, n)), (R, B + (n,)), (R, B + (n1,)), (T, B + (n1,)), (I, B)], \
            "uplo = 76 : ui8"
    if routine == "gtsv":
        return tgt, [(T, B + (n,))] * 3 + [(T, B + (n, 2))], [(T, B + (n,))] * 3 + [(T, B + (n, 2)), (I, B)], ""
    if routine == "ormqr":
        if p in "cz":
            tgt = f"lapack_{p}unmqr_ffi"
        return tgt, [(T, B + (m, k)), (T, B + (k,)), (T, B + (m, n))], [(T, B + (m, n))], \
            "left = true, transpose = false"
    raise AssertionError(routine)


ROUTINES = ["potrf", "trsm", "getrf", "geqrf", "geqp3", "orgqr", "syevd", "gesdd", "gesvd", "geev", "gees",
            "gehrd", "sytrd", "gtsv", "ormqr"]


def module(tgt, ops, res, attrs, olc=True):
    params = "\n".join(f"  p{i} = {_sh(t, d)} parameter({i})" for i, (t, d) in enumerate(ops))
    rs = ", ".join(_sh(t, d) for t, d in res)
    rs = f"({rs})" if len(res) > 1 else rs
    lc = ", operand_layout_constraints={" + ", ".join(_sh(t, d) for t, d in ops) + "}" if olc else ""
    return (f"HloModule m\n\nENTRY main {{\n{params}\n  ROOT c = {rs} custom-call("
            f"{', '.join(f'p{i}' for i in range(len(ops)))}), custom_call_target=\"{tgt}\"{lc}, "
            f"api_version=API_VERSION_TYPED_FFI, backend_config={{{attrs}}}\n}}\n")


def _mutations(entries):
    """(still valid?, the entries with one changed): last dim 1, a dim dropped or added, another type."""
    for i, (t, d) in enumerate(entries):
        if d:
            if d[-1] != 1:      # may still be valid (e.g. one reflector for orgqr)
                yield None, entries[:i] + [(t, d[:-1] + (1,))] + entries[i + 1:]
            yield False, entries[:i] + [(t, d[:-1])] + entries[i + 1:]
            yield False, entries[:i] + [(t, d + (3,))] + entries[i + 1:]
        other = "f64" if t != "f64" else "f32"
        yield False, entries[:i] + [(other, d)] + entries[i + 1:]


def cases():
    rng = np.random.default_rng(2024)
    out = []
    for routine in ROUTINES:
        for p in "sdcz":
            B = (2,) if p in "sc" else ()
            m, n = (5, 3) if routine not in ("potrf", "syevd", "geev", "gees", "gehrd", "sytrd", "trsm") else (4, 4)
            tgt, ops, res, attrs = signature(routine, p, B, m, n)
            out.append((module(tgt, ops, res, attrs), True))
            out.append((module(tgt, ops, res, attrs, olc=False), True))
            for valid, o2 in _mutations(ops):
                out.append((module(tgt, o2, res, attrs), valid))
            for valid, r2 in _mutations(res):
                out.append((module(tgt, ops, r2, attrs), valid))
            if len(ops) > 1:
                out.append((module(tgt, ops[:-1], res, attrs), False))
            out.append((module(tgt, [], res, attrs), False))
            out.append((module(tgt, ops + ops[:1], res, attrs), False))
        # empty batches and empty matrices run (and LAPACK never sees a zero workspace)
        for p in "sc":
            for B, m, n in [((0,), 3, 3), ((2,), 0, 0), ((0,), 0, 2), ((), 0, 3), ((), 3, 0)]:
                tgt, ops, res, attrs = signature(routine, p, B, m, n)
                out.append((module(tgt, ops, res, attrs), True))
        # random sizes, then one operand shrunk or grown at random
        for _ in range(6):
            p = "sdcz"[rng.integers(4)]
            B = tuple(int(x) for x in rng.integers(1, 3, rng.integers(0, 2)))
            m, n = (int(x) for x in rng.integers(0, 7, 2))
            tgt, ops, res, attrs = signature(routine, p, B, m, n)
            out.append((module(tgt, ops, res, attrs), None))
            i = int(rng.integers(len(ops)))
            t, d = ops[i]
            if d:
                j = int(rng.integers(len(d)))
                d = d[:j] + (int(rng.integers(0, 9)),) + d[j + 1:]
            out.append((module(tgt, ops[:i] + [(t, d)] + ops[i + 1:], res, attrs), None))
    # legacy targets: sizes passed as scalars must match the arrays
    for tgt, scal, arrs, res in LEGACY:
        out.append((legacy_module(tgt, scal, arrs, res), True))
        out.append((legacy_module(tgt, [], arrs[-1:], res), False))
        out.append((legacy_module(tgt, scal[:1], [], res), False))
        for i in range(len(scal)):
            t, v = scal[i]
            bad = scal[:i] + [(t, v + (1000 if t == "s32" else 1))] + scal[i + 1:]
            out.append((legacy_module(tgt, bad, arrs, res), None))
        for valid, a2 in _mutations(arrs):
            out.append((legacy_module(tgt, scal, a2, res), False if valid is False else None))
    # the cases
    out.append((module("lapack_sgtsv_ffi", [("f32", (1,)), ("f32", (4096,)), ("f32", (4096,)), ("f32", (4096, 1))],
                       [("f32", (1,)), ("f32", (4096,)), ("f32", (4096,)), ("f32", (4096, 1)), ("s32", ())], ""), False))
    out.append((module("lapack_sgeqp3_ffi", [("f32", (512, 512)), ("s32", (1,))],
                       [("f32", (512, 512)), ("s32", (1,)), ("f32", (512,))], ""), False))
    out.append((module("lapack_strsm_ffi", [("f32", (1, 1)), ("f32", (300, 200))], [("f32", (300, 200))],
                       "diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8"), False))
    return out


# (target, leading scalars (type, value), arrays, results) of valid legacy calls
LEGACY = [
    ("lapack_spotrf", [("s32", 1), ("s32", 2), ("s32", 4)], [("f32", (2, 4, 4))], [("f32", (2, 4, 4)), ("s32", (2,))]),
    ("lapack_dgetrf", [("s32", 1), ("s32", 5), ("s32", 3)], [("f64", (5, 3))],
     [("f64", (5, 3)), ("s32", (3,)), ("s32", ())]),
    ("lapack_sgeqrf", [("s32", 1), ("s32", 5), ("s32", 3), ("s32", 96)], [("f32", (5, 3))],
     [("f32", (5, 3)), ("f32", (3,)), ("s32", ()), ("f32", (96,))]),
    ("lapack_sorgqr", [("s32", 1), ("s32", 5), ("s32", 3), ("s32", 3), ("s32", 96)], [("f32", (5, 3)), ("f32", (3,))],
     [("f32", (5, 3)), ("s32", ()), ("f32", (96,))]),
    ("lapack_ssyevd", [("s32", 1), ("s32", 1), ("s32", 4)], [("f32", (4, 4))],
     [("f32", (4, 4)), ("f32", (4,)), ("s32", ()), ("f32", (57,)), ("s32", (23,))]),
    ("lapack_sgesdd", [("s32", 0), ("s32", 1), ("s32", 1), ("s32", 5), ("s32", 3), ("s32", 200)], [("f32", (5, 3))],
     [("f32", (5, 3)), ("f32", (3,)), ("f32", (5, 3)), ("f32", (3, 3)), ("s32", ()), ("s32", (24,)), ("f32", (200,))]),
    ("lapack_sgeev", [("s32", 1), ("s32", 3), ("u8", 86), ("u8", 86)], [("f32", (3, 3))],
     [("f32", (3, 3))] * 3 + [("f32", (3,)), ("f32", (3,)), ("c64", (3, 3)), ("c64", (3, 3)), ("s32", ())]),
    ("blas_strsm", [("s32", 1), ("s32", 0), ("s32", 1), ("s32", 0), ("s32", 3), ("s32", 4), ("s32", 2), ("f32", 2)],
     [("f32", (2, 3, 3)), ("f32", (2, 3, 4))], [("f32", (2, 3, 4))]),
]


def legacy_module(tgt, scalars, arrays, results):
    lines = [f"  k{i} = {t}[] constant({v})" for i, (t, v) in enumerate(scalars)]
    lines += [f"  p{i} = {_sh(t, d)} parameter({i})" for i, (t, d) in enumerate(arrays)]
    names = [f"k{i}" for i in range(len(scalars))] + [f"p{i}" for i in range(len(arrays))]
    rs = ", ".join(_sh(t, d) for t, d in results)
    rs = f"({rs})" if len(results) > 1 else rs
    lc = ", ".join([f"{t}[]" for t, _ in scalars] + [_sh(t, d) for t, d in arrays])
    body = "\n".join(lines)
    return (f"HloModule m\n\nENTRY main {{\n{body}\n  ROOT c = {rs} custom-call({', '.join(names)}), "
            f"custom_call_target=\"{tgt}\", operand_layout_constraints={{{lc}}}\n}}\n")


RUNNER = textwrap.dedent("""
    import json, sys
    import numpy as np
    from hlo_cli.errors import HloError
    from hlo_cli.interpreter import run
    from hlo_cli.parser import parse
    cases = json.load(open(sys.argv[1]))
    rng = np.random.default_rng(0)
    for k, (text, _) in enumerate(cases):
        print("CASE", k, flush=True)
        try:
            mod = parse(text)
            args = []
            for p in mod.entry_computation.parameters:
                from hlo_cli.interpreter.values import np_dtype
                dt = np_dtype(p.shape)
                a = rng.standard_normal(p.shape.dims) + 4 * (np.eye(*p.shape.dims[-2:]) if len(p.shape.dims) >= 2 else 0)
                if dt.kind == "c":
                    a = a + 1j * rng.standard_normal(p.shape.dims)
                if dt.kind == "i":
                    a = np.ones(p.shape.dims)
                args.append(np.asarray(a).astype(dt))
            run(mod, *args)
            print("RESULT", k, json.dumps(["ok", ""]), flush=True)
        except HloError as e:
            d = e.diagnostics[0] if e.diagnostics else None
            where = f"{d.line}:{d.column}" if d is not None else ""
            msg = d.message if d is not None else str(e)
            print("RESULT", k, json.dumps(["error", where + " " + msg]), flush=True)
    print("DONE", flush=True)
""")


def test_foreign_calls_never_crash(tmp_path):
    cs = cases()
    f = tmp_path / "cases.json"
    f.write_text(json.dumps(cs))
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    p = subprocess.run([sys.executable, str(script), str(f)], capture_output=True, text=True, timeout=600)
    lines = p.stdout.splitlines()
    # LAPACK complains about bad arguments on stdout (XERBLA): none may reach it
    stray = [ln for ln in lines if not ln.startswith(("CASE", "RESULT", "DONE"))]
    assert not stray, stray[:5]
    last = [ln for ln in lines if ln.startswith("CASE")]
    assert p.returncode == 0 and lines and lines[-1] == "DONE", (
        f"the runner died (exit {p.returncode}) at {last[-1] if last else '?'}:\n"
        f"{cs[int(last[-1].split()[1])][0] if last else ''}\n{p.stderr[-3000:]}")
    results = {}
    for ln in lines:
        if ln.startswith("RESULT"):
            _, k, js = ln.split(" ", 2)
            results[int(k)] = json.loads(js)
    assert len(results) == len(cs)
    n_err = 0
    for k, (text, valid) in enumerate(cs):
        status, msg = results[k]
        if valid is True:
            assert status == "ok", f"case {k} should run:\n{text}\n{msg}"
        elif valid is False:
            assert status == "error", f"case {k} should be refused:\n{text}"
        if status == "error":
            n_err += 1
            # located at the custom-call (line 3 + number of parameters), naming it once and its target
            assert msg.split(" ", 1)[0].endswith(":3") or ":" in msg.split(" ", 1)[0], msg
            assert "c: c:" not in msg and ("custom-call" in msg or "custom_call" in msg), msg
    assert n_err > 100


def _run(text, *args):
    return run(text, *[np.asarray(a) for a in args])


def test_gtsv_short_diagonal_is_refused():
    text = module("lapack_sgtsv_ffi", [("f32", (1,)), ("f32", (4096,)), ("f32", (4096,)), ("f32", (4096, 1))],
                  [("f32", (1,)), ("f32", (4096,)), ("f32", (4096,)), ("f32", (4096, 1)), ("s32", ())], "")
    with pytest.raises(HloEvalError) as e:
        _run(text, np.ones(1, np.float32), np.ones(4096, np.float32), np.ones(4096, np.float32),
             np.ones((4096, 1), np.float32))
    msg = e.value.diagnostics[0].message
    assert msg == ("c: custom-call target 'lapack_sgtsv_ffi': operand 0 (dl) must be f32[4096], got f32[1]"), msg
    assert e.value.diagnostics[0].line == 8


def test_geqp3_short_jpvt_is_refused():
    text = module("lapack_sgeqp3_ffi", [("f32", (8, 512)), ("s32", (1,))],
                  [("f32", (8, 512)), ("s32", (1,)), ("f32", (8,))], "")
    with pytest.raises(HloEvalError, match=r"operand 1 \(jpvt\) must be s32\[512\], got s32\[1\]"):
        _run(text, np.ones((8, 512), np.float32), np.zeros(1, np.int32))


def test_trsm_small_a_is_refused():
    text = module("lapack_strsm_ffi", [("f32", (1, 1)), ("f32", (30, 20))], [("f32", (30, 20))],
                  "diag = 78 : ui8, side = 76 : ui8, trans_x = 78 : ui8, uplo = 76 : ui8")
    with pytest.raises(HloEvalError, match=r"operand 0 \(a\) must be f32\[30,30\], got f32\[1,1\]"):
        _run(text, np.ones((1, 1), np.float32), np.ones((30, 20), np.float32))


def test_wrong_element_type_is_refused():
    text = module("lapack_spotrf_ffi", [("f64", (3, 3))], [("f64", (3, 3)), ("s32", ())], "uplo = 76 : ui8")
    with pytest.raises(HloEvalError, match=r"operand 0 \(the matrix\) must be f32\[3,3\], got f64\[3,3\]"):
        _run(text, np.eye(3))


def test_result_shape_is_checked():
    text = module("lapack_sgetrf_ffi", [("f32", (4, 3))], [("f32", (4, 3)), ("s32", (4,)), ("s32", ())], "")
    with pytest.raises(HloEvalError, match=r"result 1 \(the pivots\) must be s32\[3\]"):
        _run(text, np.ones((4, 3), np.float32))


def test_orgqr_needs_m_ge_n_ge_k():
    text = module("lapack_sorgqr_ffi", [("f32", (3, 5)), ("f32", (3,))], [("f32", (3, 5))], "")
    with pytest.raises(HloEvalError, match=r"m >= n >= k"):
        _run(text, np.ones((3, 5), np.float32), np.ones(3, np.float32))


def test_legacy_size_operands_must_match_the_arrays():
    text = """HloModule m

ENTRY main {
  lower = s32[] constant(1)
  batch = s32[] constant(1)
  n = s32[] constant(4096)
  a = f32[4,4]{0,1} parameter(0)
  ROOT c = (f32[4,4]{0,1}, s32[]) custom-call(lower, batch, n, a), custom_call_target="lapack_spotrf"
}
"""
    with pytest.raises(HloEvalError, match=r"size operand 2 \(n\) is 4096, but the arrays it describes have n = 4"):
        _run(text, np.eye(4, dtype=np.float32))


def test_layouts_are_read_as_xla_cpu_reads_them():
    """Without operand_layout_constraints XLA CPU gives the operand the row-major layout and the
    kernel reads it column-major: it factors the transpose (measured on jaxlib 0.10.2).  With a
    constraint of {1,0} likewise; the result is written column-major into its declared layout."""
    a = np.array([[4, 1, 2], [7, 5, 3], [8, 9, 6]], np.float32)
    base = ("HloModule m\n\nENTRY main {{\n  a = f32[3,3]{{0,1}} parameter(0)\n  ROOT c = (f32[3,3]{res}, s32[]) "
            "custom-call(a), custom_call_target=\"lapack_spotrf_ffi\"{olc}, api_version=API_VERSION_TYPED_FFI, "
            "backend_config={{uplo = 76 : ui8}}\n}}\n")
    col = _run(base.format(res="{0,1}", olc=", operand_layout_constraints={f32[3,3]{0,1}}"), a)
    assert col[0].tolist() == [[2.0, 1.0, 2.0], [3.5, -7.25, 3.0], [4.0, 9.0, 6.0]] and int(col[1]) == 2
    # XLA CPU's values for the other three combinations
    row = _run(base.format(res="{1,0}", olc=""), a)
    np.testing.assert_array_equal(row[0], np.array(
        [[2.0, 0.5, 1.0], [7.0, 2.1794495582580566, 1.1470786333084106], [8.0, 9.0, 1.9194297790527344]], np.float32))
    assert int(row[1]) == 0
    mixed = _run(base.format(res="{0,1}", olc=", operand_layout_constraints={f32[3,3]{1,0}}"), a)
    np.testing.assert_array_equal(mixed[0], np.array(
        [[2.0, 7.0, 8.0], [0.5, 2.1794495582580566, 9.0], [1.0, 1.1470786333084106, 1.9194297790527344]], np.float32))
    mixed2 = _run(base.format(res="{1,0}", olc=", operand_layout_constraints={f32[3,3]{0,1}}"), a)
    assert mixed2[0].tolist() == [[2.0, 3.5, 4.0], [1.0, -7.25, 9.0], [2.0, 3.0, 6.0]] and int(mixed2[1]) == 2


@pytest.mark.parametrize("attrs, msg", [
    ("compute_left = 87 : ui8, compute_right = 86 : ui8", "compute_left must be one of 'V', 'N'"),
    ("compute_left = 86 : ui8, compute_right = 0 : ui8", "compute_right must be one of 'V', 'N'"),
])
def test_option_letters_are_checked_before_lapack_sees_them(attrs, msg):
    text = module("lapack_sgeev_ffi", [("f32", (3, 3))],
                  [("f32", (3,)), ("f32", (3,)), ("c64", (3, 3)), ("c64", (3, 3)), ("s32", ())], attrs)
    with pytest.raises(HloEvalError, match=msg):
        _run(text, np.eye(3, dtype=np.float32))
