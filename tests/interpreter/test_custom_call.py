"""The custom-call rule and its target registry, checked against XLA-made goldens
(tests/programs/custom_call) plus unit tests.

What XLA CPU does, measured (jaxlib 0.10.2):
- the LAPACK FFI kernels (lapack_?{potrf,trsm,getrf,geqrf,geqp3,orgqr,ungqr,syevd,heevd,gesdd,
  gesvd,geev,gees,gehrd,sytrd,hetrd,gtsv}_ffi) are jaxlib's calls into the LAPACK SciPy ships
  (OpenBLAS); calling the same routines of NumPy's bundled OpenBLAS with jaxlib's arguments gives
  bit-identical results for every target and dtype here, including LAPACK's overwritten inputs
  and the partial factor of a failed potrf.  Only buffers XLA leaves uninitialized (gesdd's u/vt
  in mode 'N', geev's vl/vr when not requested) are left out of the goldens;
- the legacy targets (lapack_spotrf, blas_strsm, ...) are no longer registered in jaxlib 0.10.2, so
  they are checked against the FFI ones;
- TopK (f32 only on XLA CPU) ignores its comparator: TOTALORDER, largest first, ties by index;
- without NumPy's OpenBLAS (or with HLO_LAPACK=numpy) numpy.linalg is used: single precision is
  then computed in double and rounded, and eigenvector / singular-vector signs may differ from
  LAPACK's, so those are checked by invariants (reconstruction, orthogonality).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from golden import ROOT, check_program, programs  # noqa: E402

from hlo_cli.errors import HloEvalError  # noqa: E402
from hlo_cli.interpreter import run  # noqa: E402
from hlo_cli.interpreter.ops import custom_call as cc  # noqa: E402
from hlo_cli.interpreter.values import leaves  # noqa: E402

PROGRAMS = programs("custom_call")
HAVE_LAPACK = cc.lapack() is not None


def _have_xla():
    try:
        import jax  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.name)
def test_program(path):
    lapack_golden = path.name.startswith(("lapack_", "fft_linalg"))
    if lapack_golden and not HAVE_LAPACK:
        pytest.skip("bit-exact LAPACK goldens need NumPy's bundled OpenBLAS (see test_fallback_*)")
    try:
        check_program(path)
    except AssertionError:
        # OpenBLAS picks its kernels by CPU (AVX2, AVX-512, ...), so LAPACK's last bits depend on the
        # machine the goldens were made on: there, compare with this machine's XLA instead.
        if not (lapack_golden and _have_xla()):
            raise
        from golden import assert_same, compare_mode, load_golden

        from hlo_cli.parser import parse
        from hlo_cli.tools.xla_reference import run_with_xla
        text = path.read_text()
        module = parse(text, str(path))
        args, want = load_golden(path, module)
        live = run_with_xla(text, args)
        got = _leaves(run(module, *args))
        for k in range(len(want)):
            assert_same(got[k], live[k], compare_mode(text), f"{path.name} out{k} (this machine's XLA)")


def _leaves(v):
    return [np.asarray(x) for x in leaves(v)] if isinstance(v, tuple) else [np.asarray(v)]


# ---------------------------------------------------------------------------- registry

def test_parse_mlir_dict():
    assert cc.parse_mlir_dict("{uplo = 76 : ui8}") == {"uplo": 76}
    assert cc.parse_mlir_dict("{diag = 78 : ui8, side = 76 : ui8, trans_x = 84 : ui8, uplo = 76 : ui8}") == \
        {"diag": 78, "side": 76, "trans_x": 84, "uplo": 76}
    assert cc.parse_mlir_dict('{high = 4 : i32, low = -1 : i32, f = 1.5 : f32, b = true, s = "x, y"}') == \
        {"high": 4, "low": -1, "f": 1.5, "b": True, "s": "x, y"}
    assert cc.parse_mlir_dict("{}") == {}


def _module(target, operands, result, extra=""):
    params = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(operands))
    names = ", ".join(f"p{i}" for i in range(len(operands)))
    return (f"HloModule m\n\nENTRY main {{\n{params}\n  ROOT c = {result} custom-call({names}), "
            f'custom_call_target="{target}"{extra}\n}}\n')


def test_unknown_target_is_a_clear_error():
    text = _module("my_secret_kernel", ["f32[2]"], "f32[2]")
    with pytest.raises(HloEvalError) as e:
        run(text, np.zeros(2, np.float32))
    assert "my_secret_kernel" in str(e.value) and "hlo runs:" in str(e.value)
    assert "custom-call" in str(e.value)
    # the located diagnostic names the instruction once
    msg = e.value.diagnostics[0].message
    assert msg.startswith("c: custom-call target 'my_secret_kernel' is not one hlo knows") and "c: c:" not in msg


@pytest.mark.parametrize("name, what", [
    ("__cublas$someFutureKernel", "a cuBLAS kernel"),
    ("__cudnn$someFutureKernel", "a cuDNN kernel"),
    ("__gpu$xla.gpu.triton", "a Triton kernel"),
    ("te_fused_attn_forward", "Transformer Engine"),
    ("xla_builder.math.Polygamma", "builder library"),
    ("tpu_custom_call", "Mosaic TPU"),
    ("mosaic_gpu_v2", "Mosaic GPU"),
    ("xla_ffi_python_cpu_callback", "Python host callback"),
    ("cusparse_csr_matvec_ffi", "CUDA library"),
    ("__onednn$matmul", "oneDNN"),
    ("lapack_ssytrf_ffi", "LAPACK/BLAS kernel from jaxlib that hlo does not run"),
])
def test_unsupported_targets_say_what_they_are(name, what):
    text = _module(name, ["f32[2]"], "f32[2]")
    with pytest.raises(HloEvalError) as e:
        run(text, np.zeros(2, np.float32))
    msg = e.value.diagnostics[0].message
    assert f"c: custom-call target '{name}' is " in msg and what in msg and "which hlo cannot run" in msg
    assert "hlo runs: " in msg and "lapack_?<routine>_ffi" in msg and msg.count("c: ") == 1


def test_unsupported_target_exit_code_and_location(tmp_path):
    from click.testing import CliRunner

    from hlo_cli.cli import main
    f = tmp_path / "g.hlo"
    f.write_text(_module("__gpu$xla.gpu.triton", ["f32[2]"], "f32[2]"))
    r = CliRunner().invoke(main, ["run", str(f), "--random-inputs"], catch_exceptions=False)
    assert r.exit_code == 7, r.output            # hlo cannot run it (not "the module is wrong")
    assert "Traceback" not in r.output
    err = r.stderr if hasattr(r, "stderr") else r.output
    assert f"{f}:5:" in err and "Triton kernel" in err and "c: c:" not in err


def test_lookup_exact_name_then_family_pattern():
    assert cc.lookup("Sharding") is cc.cc_identity
    assert cc.lookup("lapack_spotrf_ffi") is cc.cc_potrf_ffi
    assert cc.lookup("lapack_zpotrf") is cc.cc_potrf_legacy           # not the _ffi family
    assert cc.lookup("lapack_cungqr_ffi") is cc.cc_orgqr_ffi
    assert cc.lookup("lapack_sungqr_ffi") is None                     # no real ungqr
    assert cc.lookup("lapack_spotrf_ffi_x") is None                   # whole-name match
    assert cc.lookup("lapack_zhetrd_ffi") is cc.cc_sytrd_ffi and cc.lookup("lapack_shetrd_ffi") is None


def test_registering_twice_fails():
    with pytest.raises(RuntimeError):
        cc.target("Sharding")(lambda inst, args, ec: None)


def test_backend_config_json_and_missing():
    text = _module("Sharding", ["f32[2]"], "f32[2]", ', backend_config="{\\"k\\": 1}"')
    assert np.array_equal(run(text, np.ones(2, np.float32)), np.ones(2, np.float32))


# ---------------------------------------------------------------------------- annotations, TopK

def test_spmd_shape_changes():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    same = _module("SPMDFullToShardShape", ["f32[4,6]"], "f32[4,6]")
    assert np.array_equal(run(same, x), x)
    tile = _module("SPMDFullToShardShape", ["f32[4,6]"], "f32[2,3]")
    assert np.array_equal(run(tile, x), x[:2, :3])
    assert np.array_equal(run(tile, x, partition_id=3), x[2:, 3:])
    back = _module("SPMDShardToFullShape", ["f32[2,3]"], "f32[4,6]")
    with pytest.raises(HloEvalError, match="other partitions"):
        run(back, x[:2, :3])


def test_topk_other_types_sort_with_the_comparator():
    # XLA CPU only runs f32 TopK; for other types we sort with the comparator (here: smallest first)
    text = """HloModule m
less {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ia = s32[] parameter(2)
  ib = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
ENTRY main {
  x = s32[2,5] parameter(0)
  ROOT t = (s32[2,2], s32[2,2]) custom-call(x), custom_call_target="TopK", called_computations={less}
}
"""
    x = np.array([[5, -1, 3, -1, 0], [2, 2, 2, 1, 9]], np.int32)
    v, i = run(text, x)
    assert v.tolist() == [[-1, -1], [1, 2]] and i.tolist() == [[1, 3], [3, 0]]


# ---------------------------------------------------------------------------- legacy targets

def _lay(shape):
    r = len(shape)
    if r < 2:
        return "{" + ",".join(map(str, range(r - 1, -1, -1))) + "}"
    return "{" + ",".join(map(str, [r - 2, r - 1] + list(range(r - 3, -1, -1)))) + "}"


def _sh(t, shape):
    return f"{t}[{','.join(map(str, shape))}]" + (_lay(shape) if shape else "")


def _legacy(target, scalars, arrays, results):
    """A module calling `target` with leading s32/u8 scalar constants and array parameters."""
    lines, names = [], []
    for k, (t, v) in enumerate(scalars):
        lines.append(f"  k{k} = {t}[] constant({v})")
        names.append(f"k{k}")
    for k, (t, shape) in enumerate(arrays):
        lines.append(f"  p{k} = {_sh(t, shape)} parameter({k})")
        names.append(f"p{k}")
    res = "(" + ", ".join(_sh(t, s) for t, s in results) + ")" if len(results) > 1 else _sh(*results[0])
    body = "\n".join(lines)
    olc = ", ".join([f"{t}[]" for t, _ in scalars] + [_sh(t, s) for t, s in arrays])
    return (f"HloModule m\n\nENTRY main {{\n{body}\n  ROOT c = {res} custom-call({', '.join(names)}), "
            f'custom_call_target="{target}", operand_layout_constraints={{{olc}}}\n}}\n')


def _ffi(target, arrays, results, attrs=""):
    params = "\n".join(f"  p{k} = {_sh(t, s)} parameter({k})" for k, (t, s) in enumerate(arrays))
    res = "(" + ", ".join(_sh(t, s) for t, s in results) + ")" if len(results) > 1 else _sh(*results[0])
    names = ", ".join(f"p{k}" for k in range(len(arrays)))
    olc = ", ".join(_sh(t, s) for t, s in arrays)
    return (f"HloModule m\n\nENTRY main {{\n{params}\n  ROOT c = {res} custom-call({names}), "
            f'custom_call_target="{target}", operand_layout_constraints={{{olc}}}, '
            f'api_version=API_VERSION_TYPED_FFI, backend_config={{{attrs}}}\n}}\n')


RNG = np.random.default_rng(7)


def _spd(b, n, dt=np.float32):
    m = RNG.standard_normal((b, n, n))
    return (m @ m.transpose(0, 2, 1) + n * np.eye(n)).astype(dt)


def _same(a, b):
    for x, y in zip(a, b):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y, equal_nan=True)


def test_legacy_potrf():
    a = _spd(2, 4)
    legacy = _legacy("lapack_spotrf", [("s32", 1), ("s32", 2), ("s32", 4)], [("f32", (2, 4, 4))],
                     [("f32", (2, 4, 4)), ("s32", (2,))])
    ffi = _ffi("lapack_spotrf_ffi", [("f32", (2, 4, 4))], [("f32", (2, 4, 4)), ("s32", (2,))], "uplo = 76 : ui8")
    _same(_leaves(run(legacy, a)), _leaves(run(ffi, a)))
    upper = _legacy("lapack_dpotrf", [("s32", 0), ("s32", 2), ("s32", 4)], [("f64", (2, 4, 4))],
                    [("f64", (2, 4, 4)), ("s32", (2,))])
    f, info = _leaves(run(upper, a.astype(np.float64)))
    u = np.triu(f)
    assert np.allclose(np.swapaxes(u, -1, -2) @ u, a, rtol=1e-5) and info.tolist() == [0, 0]


def test_legacy_blas_trsm():
    a = (RNG.standard_normal((2, 3, 3)) + 3 * np.eye(3)).astype(np.float32)
    b = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    legacy = _legacy("blas_strsm", [("s32", 1), ("s32", 0), ("s32", 1), ("s32", 0), ("s32", 3), ("s32", 4),
                                    ("s32", 2), ("f32", 2)],
                     [("f32", (2, 3, 3)), ("f32", (2, 3, 4))], [("f32", (2, 3, 4))])
    ffi = _ffi("lapack_strsm_ffi", [("f32", (2, 3, 3)), ("f32", (2, 3, 4))], [("f32", (2, 3, 4))],
               "diag = 78 : ui8, side = 76 : ui8, trans_x = 84 : ui8, uplo = 85 : ui8")
    x_legacy = run(legacy, a, b)
    x_ffi = run(ffi, a, 2 * b)                  # the legacy call carries alpha = 2
    assert np.allclose(x_legacy, x_ffi, rtol=1e-6, atol=1e-6)
    assert np.allclose(np.swapaxes(np.triu(a), -1, -2) @ x_legacy, 2 * b, rtol=1e-4, atol=1e-5)


def test_legacy_getrf_geqrf_orgqr():
    x = RNG.standard_normal((2, 5, 3)).astype(np.float32)
    lu_legacy = _legacy("lapack_sgetrf", [("s32", 2), ("s32", 5), ("s32", 3)], [("f32", (2, 5, 3))],
                        [("f32", (2, 5, 3)), ("s32", (2, 3)), ("s32", (2,))])
    lu_ffi = _ffi("lapack_sgetrf_ffi", [("f32", (2, 5, 3))], [("f32", (2, 5, 3)), ("s32", (2, 3)), ("s32", (2,))])
    _same(_leaves(run(lu_legacy, x)), _leaves(run(lu_ffi, x)))
    qr_legacy = _legacy("lapack_sgeqrf", [("s32", 2), ("s32", 5), ("s32", 3), ("s32", 96)], [("f32", (2, 5, 3))],
                        [("f32", (2, 5, 3)), ("f32", (2, 3)), ("s32", (2,)), ("f32", (96,))])
    qr_ffi = _ffi("lapack_sgeqrf_ffi", [("f32", (2, 5, 3))], [("f32", (2, 5, 3)), ("f32", (2, 3))])
    r, tau, info, work = _leaves(run(qr_legacy, x))
    _same([r, tau], _leaves(run(qr_ffi, x)))
    assert info.tolist() == [0, 0] and not work.any()
    q_legacy = _legacy("lapack_sorgqr", [("s32", 2), ("s32", 5), ("s32", 3), ("s32", 3), ("s32", 96)],
                       [("f32", (2, 5, 3)), ("f32", (2, 3))], [("f32", (2, 5, 3)), ("s32", (2,)), ("f32", (96,))])
    q_ffi = _ffi("lapack_sorgqr_ffi", [("f32", (2, 5, 3)), ("f32", (2, 3))], [("f32", (2, 5, 3))])
    q = _leaves(run(q_legacy, r, tau))[0]
    _same([q], _leaves(run(q_ffi, r, tau)))
    assert np.allclose(q @ np.triu(r[:, :3, :]), x, atol=1e-5)


def test_legacy_syevd_gesdd_geev():
    h = _spd(1, 4)[0]
    ev_legacy = _legacy("lapack_ssyevd", [("s32", 1), ("s32", 1), ("s32", 4)], [("f32", (4, 4))],
                        [("f32", (4, 4)), ("f32", (4,)), ("s32", ()), ("f32", (57,)), ("s32", (23,))])
    ev_ffi = _ffi("lapack_ssyevd_ffi", [("f32", (4, 4))], [("f32", (4, 4)), ("f32", (4,)), ("s32", ())],
                  "mode = 86 : ui8, uplo = 76 : ui8")
    _same(_leaves(run(ev_legacy, h))[:3], _leaves(run(ev_ffi, h)))
    a = RNG.standard_normal((5, 3)).astype(np.float32)
    sv_legacy = _legacy("lapack_sgesdd", [("s32", 0), ("s32", 1), ("s32", 1), ("s32", 5), ("s32", 3), ("s32", 200)],
                        [("f32", (5, 3))],
                        [("f32", (5, 3)), ("f32", (3,)), ("f32", (5, 3)), ("f32", (3, 3)), ("s32", ()),
                         ("s32", (24,)), ("f32", (200,))])
    sv_ffi = _ffi("lapack_sgesdd_ffi", [("f32", (5, 3))],
                  [("f32", (5, 3)), ("f32", (3,)), ("f32", (5, 3)), ("f32", (3, 3)), ("s32", ())], "mode = 83 : ui8")
    _same(_leaves(run(sv_legacy, a))[:5], _leaves(run(sv_ffi, a)))
    g = np.array([[0, -2, 1], [2, 0, 0], [0, 1, 3]], np.float32)
    ge_legacy = _legacy("lapack_sgeev", [("s32", 1), ("s32", 3), ("u8", 86), ("u8", 86)], [("f32", (3, 3))],
                        [("f32", (3, 3))] * 3 + [("f32", (3,)), ("f32", (3,)), ("c64", (3, 3)), ("c64", (3, 3)),
                                                  ("s32", ())])
    ge_ffi = _ffi("lapack_sgeev_ffi", [("f32", (3, 3))],
                  [("f32", (3,)), ("f32", (3,)), ("c64", (3, 3)), ("c64", (3, 3)), ("s32", ())],
                  "compute_left = 86 : ui8, compute_right = 86 : ui8")
    _same(_leaves(run(ge_legacy, g))[3:], _leaves(run(ge_ffi, g)))


# ---------------------------------------------------------------------------- numpy fallback

@pytest.fixture
def numpy_lapack(monkeypatch):
    monkeypatch.setenv("HLO_LAPACK", "numpy")
    cc.lapack.cache_clear()
    yield
    monkeypatch.undo()
    cc.lapack.cache_clear()


@pytest.mark.parametrize("dt", [np.float32, np.complex64, np.float64])
def test_fallback_invariants(numpy_lapack, dt):
    assert cc.lapack() is None
    tol = 1e-4 if dt in (np.float32, np.complex64) else 1e-10
    m = RNG.standard_normal((2, 4, 4)) + (1j * RNG.standard_normal((2, 4, 4)) if dt == np.complex64 else 0)
    spd = (m @ np.conj(np.swapaxes(m, -1, -2)) + 4 * np.eye(4)).astype(dt)
    ct = lambda x: np.conj(np.swapaxes(x, -1, -2))                       # noqa: E731
    # potrf: l l^H = a; the other triangle is untouched; info on failure
    f, info = cc.potrf(spd, True)
    assert np.allclose(np.tril(f) @ ct(np.tril(f)), spd, atol=tol * 10) and info.tolist() == [0, 0]
    assert np.array_equal(np.triu(f, 1), np.triu(spd, 1))
    bad = spd.copy()
    bad[1, 2, 2] = -50
    assert cc.potrf(bad, True)[1].tolist() == [0, 3]
    # trsm
    b = RNG.standard_normal((2, 4, 3)).astype(dt)
    x = cc.trsm(f, b, "L", "L", "C", "N")
    assert np.allclose(ct(np.tril(f)) @ x, b, atol=tol * 10)
    # getrf: P L U = a
    a = RNG.standard_normal((2, 4, 4)).astype(dt)
    lu, piv, info = cc.getrf(a)
    for k in range(2):
        l, u = np.tril(lu[k], -1) + np.eye(4), np.triu(lu[k])
        pa = a[k].copy()
        for i, p in enumerate(piv[k]):
            pa[[i, p - 1]] = pa[[p - 1, i]]
        assert np.allclose(l @ u, pa, atol=tol * 10)
    # geqrf + orgqr: q r = a, q^H q = I
    r, tau = cc.geqrf(a)
    q = cc.orgqr(r, tau)
    assert np.allclose(q @ np.triu(r), a, atol=tol * 10) and np.allclose(ct(q) @ q, np.eye(4), atol=tol * 10)
    # syevd: a v = v w, ascending
    v, w, info = cc.syevd(spd, "V", "L")
    assert np.allclose(spd @ v, v * w[..., None, :], atol=tol * 100) and np.all(np.diff(w) >= 0)
    # gesdd: u s vt = a, descending
    _, s, u, vt, info = cc.gesvd_family(a, "S", "gesdd")
    assert np.allclose((u * s[..., None, :]) @ vt, a, atol=tol * 10) and np.all(np.diff(s) <= 0)
    # ormqr: Q c from the reflectors, both sides, both ways
    c = RNG.standard_normal((2, 4, 3)).astype(dt)
    ct_q = ct(q)
    assert np.allclose(cc.ormqr(r, tau, c, True, False), q @ c, atol=tol * 10)
    assert np.allclose(cc.ormqr(r, tau, c, True, True), ct_q @ c, atol=tol * 10)
    d = RNG.standard_normal((2, 3, 4)).astype(dt)
    assert np.allclose(cc.ormqr(r, tau, d, False, True), d @ ct_q, atol=tol * 10)
    # geev: a vr = vr w
    outs = cc.geev(a, "V", "V")
    w = outs[0] + 1j * outs[1] if dt != np.complex64 else outs[0]
    vr = outs[-2]
    assert np.allclose(a @ vr, vr * w[..., None, :], atol=tol * 100)


def test_fallback_agrees_with_lapack_where_unique(monkeypatch):
    """Eigenvalues, singular values and |eigenvectors| do not depend on sign conventions."""
    if not HAVE_LAPACK:
        pytest.skip("needs NumPy's bundled OpenBLAS")
    m = RNG.standard_normal((5, 5))
    h = (m + m.T).astype(np.float32)
    v1, w1, _ = cc.syevd(h, "V", "L")
    _, s1, _, _, _ = cc.gesvd_family(m.astype(np.float32), "A", "gesdd")
    monkeypatch.setenv("HLO_LAPACK", "numpy")
    cc.lapack.cache_clear()
    try:
        v2, w2, _ = cc.syevd(h, "V", "L")
        _, s2, _, _, _ = cc.gesvd_family(m.astype(np.float32), "A", "gesdd")
    finally:
        monkeypatch.undo()
        cc.lapack.cache_clear()
    assert np.allclose(w1, w2, rtol=1e-5, atol=1e-5) and np.allclose(s1, s2, rtol=1e-5)
    assert np.allclose(np.abs(v1), np.abs(v2), atol=1e-4)


# ---------------------------------------------------------------------------- the JAX sample

def test_fft_linalg_sample_matches_xla():
    """samples/jax/fft_linalg.opt.hlo end to end (fusions, FFTs, dots and the LAPACK calls) against
    the outputs XLA produced.  The f32 dots feeding the factorizations are not bit-exact (see
    test_linalg), so this compares to a few ulps."""
    if not HAVE_LAPACK:
        pytest.skip("needs NumPy's bundled OpenBLAS for LAPACK's sign conventions")
    base = ROOT / "samples" / "jax"
    inp = np.load(base / "fft_linalg.inputs.npz")
    exp = np.load(base / "fft_linalg.expected.npz")
    args = [inp[f"arg{k}"] for k in range(len(inp.files))]
    # check_values=False: this is an end-to-end test of the values, not of other families' dtypes
    got = _leaves(run((base / "fft_linalg.opt.hlo").read_text(), *args, check_values=False))
    for k, g in enumerate(got):
        want = exp[f"out{k}"]
        scale = np.max(np.abs(want))
        assert np.allclose(g, want, rtol=0, atol=2e-6 * scale), f"out{k}"


# ---------------------------------------------------------------------------- messages

def test_no_evaluation_rule_names_its_instruction_itself():
    """The evaluator prefixes a rule's error with the instruction's name and location; a rule that
    also names it prints it twice (`i: i: infeed has no data`)."""
    import re
    ops = Path(cc.__file__).parent
    offenders = [f"{p.name}:{n}" for p in sorted(ops.glob("*.py"))
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if re.search(r'f"\{inst\.name\}: ', line)]
    assert not offenders, offenders


def test_infeed_error_names_the_instruction_once():
    text = """HloModule m

ENTRY main {
  t = token[] after-all()
  i = (f32[2], token[]) infeed(t)
  ROOT g = f32[2] get-tuple-element(i), index=0
}
"""
    with pytest.raises(HloEvalError) as e:
        run(text)
    d = e.value.diagnostics[0]
    assert d.message == "i: infeed has no data (the run was given no infeed values)" and (d.line, d.column) == (5, 3)


def test_topk_shapes_are_checked():
    text = _module("TopK", ["f32[2,3]"], "(f32[2,4], s32[2,4])")
    with pytest.raises(HloEvalError, match=r"TopK takes one array .* \(k <= 3"):
        run(text, np.zeros((2, 3), np.float32))
