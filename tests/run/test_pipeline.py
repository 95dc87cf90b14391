"""The run pipeline as a Python user meets it (hlo_cli.pipeline): a sample run through a RunRequest
gives its values; errors are typed and located, and classify_error gives the exit code `hlo run`
ends with; a comparison that fails and a non-finite value are results with their exit codes."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hlo_cli.errors import ExitCode, HloError, HloInputError, HloMemoryLimitError, HloShapeError, HloUnsupportedError
from hlo_cli.pipeline import DumpOptions, RunHooks, RunRequest, RunResult, classify_error, error_document, run

ROOT = Path(__file__).resolve().parents[2]
JAX = ROOT / "samples" / "jax"


def _expected(name: str) -> list[np.ndarray]:
    with np.load(JAX / f"{name}.expected.npz") as z:
        return [z[f"out{k}"] for k in range(len(z.files))]


@pytest.mark.parametrize("name", ["mlp_train_step", "cond_switch"])
def test_a_sample_gives_its_values(name):
    r = run(RunRequest(str(JAX / f"{name}.hlo"), inputs_npz=str(JAX / f"{name}.inputs.npz"),
                       expect=str(JAX / f"{name}.expected.npz")))
    assert r.status == "ok" and r.exit_code == ExitCode.OK and r.mismatch["ok"]
    want = _expected(name)
    assert len(r.leaves) == len(want)
    for (got, shape), w in zip(r.leaves, want):
        assert got.shape == tuple(shape.dims)
        np.testing.assert_allclose(got.astype(np.float64), w.astype(np.float64), rtol=1e-3, atol=1e-3)
    assert r.module_name and r.info["module_sha256"] and r.info["inputs"]
    assert {"parse_s", "check_s", "inputs_s", "execute_s", "write_s"} <= set(r.timings)


def test_arrays_given_directly_give_the_same_bits_as_files():
    name = "mlp_train_step"
    from_files = run(RunRequest(str(JAX / f"{name}.hlo"), inputs_npz=str(JAX / f"{name}.inputs.npz")))
    with np.load(JAX / f"{name}.inputs.npz") as z:
        params = from_files.module.entry_computation.parameters
        arrays = [z[p.name] if p.name in z.files else z[f"arg{p.parameter_number}"] for p in params]
    direct = run(RunRequest(str(JAX / f"{name}.hlo"), arguments=arrays))
    for (a, _), (b, _) in zip(from_files.leaves, direct.leaves):
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_hooks_hear_the_phases_and_notes():
    class Recorder(RunHooks):
        def __init__(self):
            self.phases, self.ended = [], 0

        def phase(self, text):
            self.phases.append(text)

        def executed(self):
            self.ended += 1

    h = Recorder()
    run(RunRequest(str(JAX / "rng.hlo"), random_inputs=True, seed=3), hooks=h)
    assert h.phases[0] == "parsing rng.hlo"
    assert any(p.startswith("checking ") for p in h.phases) and "reading inputs" in h.phases
    assert h.phases[-1].startswith("preparing ") and h.ended == 1


def test_random_inputs_are_deterministic_by_seed():
    a = run(RunRequest(str(JAX / "rng.hlo"), random_inputs=True, seed=7))
    b = run(RunRequest(str(JAX / "rng.hlo"), random_inputs=True, seed=7))
    assert all(x.tobytes() == y.tobytes() for (x, _), (y, _) in zip(a.leaves, b.leaves))
    assert a.info["seed"] == 7


def test_a_checker_error_is_located_and_classified(tmp_path):
    f = tmp_path / "bad.hlo"
    f.write_text("HloModule bad\n\nENTRY main {\n  p = f32[2] parameter(0)\n  ROOT r = f32[3] negate(p)\n}\n")
    result = RunResult(str(f))
    with pytest.raises(HloShapeError) as info:
        run(RunRequest(str(f), random_inputs=True), result=result)
    e = info.value
    located = [d for d in e.diagnostics if d.line is not None]
    assert located and located[0].file == str(f) and located[0].line == 5 and located[0].column
    code, message = classify_error(e)
    assert code == ExitCode.FAILURE and "found by the checker" in message
    doc = error_document(result, code, message, e)       # what `hlo run --format json` writes
    assert doc["module"] == "bad" and doc["status"] == "error" and doc["exit_code"] == 1
    assert doc["module_sha256"] and any(d["line"] == 5 for d in doc["diagnostics"])


def test_missing_inputs_are_a_usage_error_naming_the_parameters():
    with pytest.raises(HloInputError) as info:
        run(RunRequest(str(JAX / "mlp_train_step.hlo")))
    assert classify_error(info.value)[0] == ExitCode.USAGE
    assert "pass --input/--inputs, or --random-inputs" in str(info.value)


def test_the_memory_budget_refuses_before_any_input_is_read(tmp_path):
    with pytest.raises(HloMemoryLimitError) as info:
        run(RunRequest(str(JAX / "mlp_train_step.hlo"), inputs=(str(tmp_path / "never-read.npy"),),
                       memory_limit=16))
    assert classify_error(info.value)[0] == ExitCode.MEMORY_LIMIT


def test_an_unknown_custom_call_is_exit_7_before_running(tmp_path):
    f = tmp_path / "cc.hlo"
    f.write_text('HloModule cc\n\nENTRY main {\n  p = f32[4] parameter(0)\n'
                 '  ROOT r = f32[4] custom-call(p), custom_call_target="no_such_kernel_anywhere"\n}\n')
    with pytest.raises(HloUnsupportedError) as info:
        run(RunRequest(str(f), random_inputs=True))
    assert classify_error(info.value)[0] == ExitCode.UNSUPPORTED
    assert info.value.uses and info.value.uses[0].target == "no_such_kernel_anywhere"


def test_a_failed_comparison_is_a_result_with_exit_1(tmp_path):
    want = [w + 1 for w in _expected("cond_switch")]
    ref = tmp_path / "wrong.npz"
    np.savez(ref, **{f"out{k}": w for k, w in enumerate(want)})
    r = run(RunRequest(str(JAX / "cond_switch.hlo"), inputs_npz=str(JAX / "cond_switch.inputs.npz"),
                       expect=str(ref)))
    assert r.status == "mismatch" and r.failed and r.exit_code == ExitCode.FAILURE
    assert not r.mismatch["ok"] and r.mismatch["rows"][0]["status"] != "ok"


def test_a_nonfinite_value_is_reported_with_its_instruction(tmp_path):
    f = tmp_path / "nan.hlo"
    f.write_text("HloModule nonfinite\n\nENTRY main {\n  p = f32[3] parameter(0)\n  z = f32[3] subtract(p, p)\n"
                 "  ROOT q = f32[3] divide(z, z)\n}\n")
    np.save(tmp_path / "x.npy", np.arange(3, dtype=np.float32))
    r = run(RunRequest(str(f), inputs=(str(tmp_path / "x.npy"),), check_finite=True))
    assert r.status == "non-finite" and r.exit_code == ExitCode.FAILURE
    assert r.non_finite["instruction"] == "q" and r.non_finite["line"] == 6


def test_outputs_and_dumps_are_written(tmp_path):
    out, dump = tmp_path / "out.npz", tmp_path / "dump"
    r = run(RunRequest(str(JAX / "cond_switch.hlo"), inputs_npz=str(JAX / "cond_switch.inputs.npz"),
                       output=str(out), dump=DumpOptions(str(dump), summary=True)))
    with np.load(out) as z:
        assert [z[f"out{k}"].tobytes() for k in range(len(z.files))] == [v.tobytes() for v, _ in r.leaves]
    assert (dump / "manifest.json").is_file() and r.dumper.entries
    with pytest.raises(HloError):              # never overwritten without force
        run(RunRequest(str(JAX / "cond_switch.hlo"), inputs_npz=str(JAX / "cond_switch.inputs.npz"),
                       output=str(out)))
