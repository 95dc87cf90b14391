"""Probes of NumPy's and the processor's behaviour kept on disk (kernels.remembered): measured
once per setup (NumPy build and dispatch, processor flags, Python, hlo's sources), read back by
later processes, measured in each process with the cache off; a damaged file is a miss."""
from __future__ import annotations

import json

import numpy as np
import pytest

from hlo_cli.interpreter import kernels


@pytest.fixture
def fresh(monkeypatch, tmp_path):
    """An empty cache directory and no probes read in this process yet."""
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(kernels, "_REMEMBERED", {})
    return tmp_path


def _counting(answer):
    calls = []

    def probe(*args):
        calls.append(args)
        return answer
    return probe, calls


def test_a_probe_is_measured_once_and_read_back(fresh, monkeypatch):
    probe, calls = _counting(True)
    assert kernels.remembered("test.probe(x)", probe, 1, 2) is True
    assert kernels.remembered("test.probe(x)", probe, 1, 2) is True
    assert calls == [(1, 2)]
    monkeypatch.setattr(kernels, "_REMEMBERED", {})         # a later process
    assert kernels.remembered("test.probe(x)", probe, 1, 2) is True
    assert calls == [(1, 2)]
    other, other_calls = _counting(False)
    assert kernels.remembered("test.other", other) is False   # another name: its own answer
    assert other_calls == [()]
    (path,) = (fresh / "probes").glob("*.json")
    assert json.loads(path.read_text()) == {"test.probe(x)": True, "test.other": False}


def test_the_cache_off_measures_in_each_process(monkeypatch):
    monkeypatch.setenv("HLO_CACHE_DIR", "off")
    monkeypatch.setattr(kernels, "_REMEMBERED", {})
    probe, calls = _counting(False)
    assert kernels.remembered("test.off", probe) is False
    monkeypatch.setattr(kernels, "_REMEMBERED", {})
    assert kernels.remembered("test.off", probe) is False
    assert len(calls) == 2


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"test.bad": "yes"}', ""])
def test_a_damaged_file_is_a_miss(fresh, monkeypatch, content):
    probe, calls = _counting(True)
    kernels.remembered("test.seed", probe)
    (path,) = (fresh / "probes").glob("*.json")
    path.write_text(content)
    monkeypatch.setattr(kernels, "_REMEMBERED", {})
    assert kernels.remembered("test.bad", probe) is True
    assert len(calls) == 2
    assert json.loads(path.read_text())["test.bad"] is True


def test_another_setup_has_another_file(fresh, monkeypatch):
    probe, calls = _counting(True)
    kernels.remembered("test.setup", probe)
    monkeypatch.setattr(kernels, "_REMEMBERED", {})
    monkeypatch.setattr(np, "__version__", np.__version__ + ".other")
    kernels.remembered("test.setup", probe)
    monkeypatch.setattr(kernels, "_REMEMBERED", {})
    monkeypatch.setenv("NPY_DISABLE_CPU_FEATURES", "AVX512F")
    kernels.remembered("test.setup", probe)
    assert len(calls) == 3 and len(list((fresh / "probes").glob("*.json"))) == 3


def test_the_nan_probes_go_through_the_store(fresh, monkeypatch):
    """The answers the rules use are the ones measured (kernels.probed keys them by probe,
    function and dtype)."""
    table: dict = {}
    got = kernels.probed(table, kernels._probe_keeps_nan, np.maximum, np.float32)
    assert got == kernels._probe_keeps_nan(np.maximum, np.dtype(np.float32))
    (path,) = (fresh / "probes").glob("*.json")
    assert list(json.loads(path.read_text()).values()) == [got]
    lam = lambda a, b: np.maximum(a, b)                     # noqa: E731 -- no NumPy name: not kept
    kernels.probed(table, kernels._probe_keeps_nan, lam, np.float32)
    assert len(json.loads(path.read_text())) == 1
