"""The custom-call registry's table (interpreter/custom_call_targets.py): `hlo check`, `hlo info`
and `hlo run`'s pre-flight ask it whether a target runs without loading the handlers.  It lists
exactly what the registry registers, answers as the registry does, and a handler cannot be
registered without its entry."""
from __future__ import annotations

from pathlib import Path

import pytest

from hlo_cli.interpreter import custom_call_targets as table
from hlo_cli.interpreter.ops import custom_call as registry
from hlo_cli.ir.module import Instruction, frozen_map
from tests.imports_of import imported_by

ROOT = Path(__file__).resolve().parent.parent
GPU_CASES = ROOT.parent / "shared" / "gpu" / "cases"


def test_the_table_lists_what_the_registry_registers():
    assert table.NAMES == frozenset(registry.TARGETS)
    assert table.PATTERNS == tuple(p for p, _ in registry.PATTERNS)
    refusing = {n for n, fn in registry.TARGETS.items() if hasattr(fn, "refuses")}
    refusing |= {p for p, fn in registry.PATTERNS if hasattr(fn, "refuses")}
    assert table.REFUSING == frozenset(refusing)
    assert not table.SHARD_TARGETS & table.NAMES - {"SPMDFullToShardShape", "SPMDShardToFullShape"}


def _call(target: str) -> Instruction:
    return Instruction("c", "custom-call", None, attrs=frozen_map({"custom_call_target": target}))


_SOME = sorted(table.NAMES) + ["lapack_spotrf_ffi", "lapack_zgesdd", "cusolver_getrf_ffi", "hipsolver_syevd_ffi",
                                "cu_threefry2x32", "cublas_geqrf_batched", "lapack_qpotrf_ffi", "__cublas$gemmx",
                                "__triton", "tpu_custom_call", "xla_python_cpu_callback", "", "Sharding2",
                                "xla.sdy.GlobalToLocalShape"]


@pytest.mark.parametrize("name", _SOME)
def test_the_table_answers_as_the_registry(name):
    assert table.registered(name) == (registry.lookup(name) is not None)
    assert table.refusal(_call(name), registry.refusal) == registry.refusal(_call(name))


def test_a_handler_needs_its_entry():
    with pytest.raises(RuntimeError, match="custom_call_targets.py"):
        registry.target("__not_in_the_table$x")
    with pytest.raises(RuntimeError, match="custom_call_targets.py"):
        registry.target(pattern=r"not_in_the_table_\d+")


@pytest.mark.skipif(not GPU_CASES.is_dir(), reason="../shared/gpu is not beside the checkout")
def test_checking_a_gpu_dump_loads_no_handler():
    """`hlo check` of an H200 dump full of cuSOLVER and cuBLAS calls asks the table: neither NumPy
    nor the interpreter's rules are imported, and the findings are those the registry gives."""
    f = GPU_CASES / "linalg_f32.post.hlo"
    loaded, out = imported_by(["check", "--no-cache", str(f)],
                              ("numpy", "hlo_cli.interpreter.ops", "hlo_cli.devices.spmd"))
    assert loaded == []
    assert "ok (302 instructions checked" in out
