"""Custom calls XLA CPU runs itself: SliceToDynamic, PadToStatic, SetBound (emitter), Qr and
ProductOfElementaryHouseholderReflectors (QrExpander), Eigh (EighExpander).  Qr's and Eigh's
goldens are tests/programs/custom_call/qr.hlo and eigh.hlo; SliceToDynamic is compared with XLA live (XLA CPU only runs
it as the root: any use of the dynamic value makes XLA insert a PadToStatic, which its runtime
does not implement)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hlo_cli.errors import HloEvalError
from hlo_cli.interpreter import run

S2D = """HloModule m

ENTRY main {
  a = f32[4,5] parameter(0)
  rows = s32[] parameter(1)
  cols = s32[] parameter(2)
  ROOT d = f32[<=4,<=5] custom-call(a, rows, cols), custom_call_target="SliceToDynamic"
}
"""


def _xla():
    try:
        from hlo_cli.tools.xla_reference import run_with_xla
        return run_with_xla
    except ImportError:                      # pragma: no cover
        return None


@pytest.mark.parametrize("rows, cols", [(3, 2), (4, 5), (0, 3), (2, 5), (1, 1)])
def test_slice_to_dynamic_is_the_box(rows, cols):
    a = np.arange(20, dtype=np.float32).reshape(4, 5) - 7
    got = run(S2D, a, np.int32(rows), np.int32(cols))
    np.testing.assert_array_equal(got, a[:rows, :cols])
    xla = _xla()
    if xla is not None:
        # XLA CPU's dynamic result: the box packed row-major at the start of the bound's buffer
        want = xla(S2D, [a, np.int32(rows), np.int32(cols)])[0].reshape(-1)[:rows * cols]
        np.testing.assert_array_equal(got.reshape(-1), want)


@pytest.mark.parametrize("rows, cols", [(5, 1), (-1, 2), (2, 6)])
def test_slice_to_dynamic_sizes_past_the_bound_are_refused(rows, cols):
    with pytest.raises(HloEvalError, match=r"SliceToDynamic size -?\d+ for dimension \d is outside") as e:
        run(S2D, np.zeros((4, 5), np.float32), np.int32(rows), np.int32(cols))
    assert e.value.diagnostics[0].message.startswith("d: SliceToDynamic") and e.value.diagnostics[0].line == 7


def test_pad_to_static_round_trip_and_set_bound():
    text = """HloModule m

ENTRY main {
  a = s32[3,4] parameter(0)
  n = s32[] parameter(1)
  b = s32[3,4] custom-call(a), custom_call_target="SetBound", literal=s32[] 4
  four = s32[] constant(4)
  d = s32[<=3,<=4] custom-call(b, n, four), custom_call_target="SliceToDynamic"
  ROOT p = (s32[3,4], s32[], s32[]) custom-call(d), custom_call_target="PadToStatic"
}
"""
    a = np.arange(12, dtype=np.int32).reshape(3, 4) + 1
    data, r, c = run(text, a, np.int32(2))
    assert data.tolist() == [[1, 2, 3, 4], [5, 6, 7, 8], [0, 0, 0, 0]] and int(r) == 2 and int(c) == 4


def test_qr_operand_checks():
    bad = """HloModule m

ENTRY main {
  a = f32[3,5] parameter(0)
  t = f32[3] parameter(1)
  ROOT q = f32[3,5] custom-call(a, t), custom_call_target="ProductOfElementaryHouseholderReflectors"
}
"""
    with pytest.raises(HloEvalError, match="needs m >= n"):
        run(bad, np.zeros((3, 5), np.float32), np.zeros(3, np.float32))
    ints = """HloModule m

ENTRY main {
  a = s32[3,3] parameter(0)
  ROOT q = (s32[3,3], s32[3]) custom-call(a), custom_call_target="Qr"
}
"""
    with pytest.raises(HloEvalError, match="Qr takes f32, f64, c64 or c128"):
        run(ints, np.zeros((3, 3), np.int32))


def _random(dt, shape, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape)
    if np.dtype(dt).kind == "c":
        a = a + 1j * rng.standard_normal(shape)
    return a.astype(dt)


def _qr_module(et, b, m, n):
    k = min(m, n)
    s = ",".join(map(str, b + (m, n)))
    t = ",".join(map(str, b + (k,)))
    q = ",".join(map(str, b + (m, k)))
    text = f"""HloModule m

ENTRY main {{
  a = {et}[{s}] parameter(0)
  ROOT qr = ({et}[{s}], {et}[{t}]) custom-call(a), custom_call_target="Qr"
}}
"""
    prod = f"""HloModule m

ENTRY main {{
  a = {et}[{",".join(map(str, b + (m, k)))}] parameter(0)
  t = {et}[{t}] parameter(1)
  ROOT q = {et}[{q}] custom-call(a, t), custom_call_target="ProductOfElementaryHouseholderReflectors"
}}
"""
    return text, prod


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([("f64", np.float64), ("c128", np.complex128)]), st.integers(0, 2),
       st.integers(0, 7), st.integers(0, 7), st.integers(0, 2**31 - 1))
def test_qr_is_a_householder_factorization(et_dt, nb, m, n, seed):
    """Q R = A, Q^H Q = I, R upper triangular, |tau| in [0, 2], for any shape (m < n too)."""
    et, dt = et_dt
    b = (nb,) if nb else ()
    a = _random(dt, b + (m, n), seed)
    text, prod = _qr_module(et, b, m, n)
    r, tau = run(text, a)
    k = min(m, n)
    q = run(prod, np.ascontiguousarray(r[..., :, :k]), tau)
    upper = np.triu(r)[..., :k, :]
    np.testing.assert_allclose(q @ upper, a, atol=1e-10)
    eye = np.broadcast_to(np.eye(k), b + (k, k))
    np.testing.assert_allclose(np.conj(np.swapaxes(q, -1, -2)) @ q, eye, atol=1e-10)
    assert np.all(np.abs(tau) <= 2 + 1e-12)


def _eigh_module(et, rt, b, n, config):
    s = ",".join(map(str, b + (n, n)))
    w = ",".join(map(str, b + (n,)))
    return f"""HloModule m

ENTRY main {{
  a = {et}[{s}] parameter(0)
  ROOT e = ({et}[{s}], {rt}[{w}]) custom-call(a), custom_call_target="Eigh", backend_config="{config}"
}}
"""


@pytest.mark.parametrize("config", ["", "1,1,100", "1,1,x,0.1", "1,1,100,0.1,5"])
def test_eigh_backend_config_is_checked(config):
    with pytest.raises(HloEvalError, match="Eigh's backend_config must be"):
        run(_eigh_module("f32", "f32", (), 3, config), np.eye(3, dtype=np.float32))


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([("f64", "f64", np.float64), ("c128", "f64", np.complex128)]), st.integers(0, 2),
       st.integers(0, 9), st.booleans(), st.integers(0, 2**31 - 1))
def test_eigh_is_an_eigendecomposition(types, nb, n, lower, seed):
    """A V = V diag(w) for the Hermitian matrix of the chosen triangle, V unitary, w ascending."""
    et, rt, dt = types
    b = (nb,) if nb else ()
    a = _random(dt, b + (n, n), seed)
    v, w = run(_eigh_module(et, rt, b, n, f"{int(lower)},1,100,1e-12"), a)
    tri = np.tril(a) if lower else np.triu(a)
    h = tri + np.conj(np.swapaxes(tri, -1, -2)) - np.real(np.diagonal(a, 0, -2, -1))[..., None] * np.eye(n)
    if n > 1:
        # XLA drops off-diagonal entries below 0.1 * f32 epsilon of the diagonal (for f64 too)
        scale = max(1.0, float(np.max(np.abs(h), initial=0)))
        np.testing.assert_allclose(h @ v, v * w[..., None, :], atol=1e-7 * scale * n)
        np.testing.assert_allclose(np.conj(np.swapaxes(v, -1, -2)) @ v, np.broadcast_to(np.eye(n), b + (n, n)),
                                   atol=1e-10)
        assert np.all(np.diff(w, axis=-1) >= 0)
    else:
        assert np.all(v == 1) and np.array_equal(w, np.real(np.diagonal(a, 0, -2, -1)))
