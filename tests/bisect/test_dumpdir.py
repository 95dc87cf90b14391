"""XLA dump directories read into modules and stages (hlo_cli/sources/dumpdir.py): a real pass dump
XLA CPU wrote for a small JAX step (samples/dumps/passes, made by samples/dumps/make_pass_dump.py),
and names XLA writes in other settings (timestamps, a name left out, protos, two compilations of one
name) on small files made here."""
from __future__ import annotations

from pathlib import Path

import pytest

from hlo_cli.errors import HloInputError
from hlo_cli.sources.dumpdir import (AFTER, BEFORE, DURING, FILE, PASS, is_dump_dir, read_dump_dir,
                                     stages_from_files)

ROOT = Path(__file__).resolve().parents[2]
PASSES = ROOT / "samples" / "dumps" / "passes"

TINY = """HloModule {name}, entry_computation_layout={{(f32[2]{{0}})->f32[2]{{0}}}}

ENTRY main {{
  x = f32[2]{{0}} parameter(0)
  c = f32[2]{{0}} constant({{{value}, 1}})
  ROOT r = f32[2]{{0}} add(x, c)
}}
"""


def test_modules_of_a_real_pass_dump():
    dd = read_dump_dir(PASSES)
    assert [(m.key, m.name) for m in dd.modules] == [("module_0000", "jit_convert_element_type"),
                                                      ("module_0008", "jit_step")]
    m = dd.module("jit_step")
    assert len(m.stages) == 47 and m.pass_stages == 45
    assert m.stages[0].kind == BEFORE and m.stages[-1].kind == AFTER
    assert m.stages[-1].word == "cpu_after_optimizations"
    numbers = [s.number for s in m.stages[1:-1]]
    assert numbers == list(range(45))                      # pass order is XLA's step counter
    assert [s.index for s in m.stages] == list(range(47))
    cse = m.stages[27]
    assert (cse.kind, cse.number, cse.pipeline, cse.pass_name, cse.next_pass) == \
        (PASS, 26, "HLO_passes_through_layout_assignment", "cse", "cse_barrier_expander")
    during = m.stages[39]
    assert (during.kind, during.pass_name, during.step) == (DURING, "copy-insertion",
                                                           "after_adding_copies_to_resolve_interference")
    # a pass run again and again: its occurrences are counted
    algsimp = [s for s in m.stages if s.pass_name == "algsimp"]
    assert [(s.number, s.occurrence, s.occurrences) for s in algsimp] == [(8, 1, 5), (13, 2, 5), (16, 3, 5),
                                                                          (19, 4, 5), (22, 5, 5)]
    small = dd.module("jit_convert_element_type")
    assert [s.kind for s in small.stages] == [BEFORE, AFTER] and small.pass_stages == 0


def test_files_that_are_not_stages_are_left_out():
    dd = read_dump_dir(PASSES)
    ignored = {Path(f.path).name for f in dd.ignored}
    assert ignored == {"module_0008.jit_step.add_tanh_fusion_kernel_module.ir-no-opt.ll",
                       "module_0008.jit_step.cpu_after_optimizations-buffer-assignment.txt",
                       "module_0008.jit_step.cpu_after_optimizations-memory-usage-report.txt",
                       "module_0008.jit_step.debug_options"}
    assert all(s.path.endswith(".txt") for m in dd.modules for s in m.stages)


@pytest.mark.parametrize("which, number, note", [
    ("fusion", 35, False), ("cse", 26, False), ("26", 26, False), ("0026", 26, False), ("after_cse", 26, False),
    ("algsimp#1", 8, False), ("algsimp#3", 16, False), ("algsimp#last", 22, False),
    ("simplification:algsimp#2", 13, False), ("HLO_passes_through_layout_assignment:cse", 26, False),
    ("after_removing_unnecessary_copies", 39, False), ("copy-insertion:after_removing_unnecessary_copies", 39, False),
    ("module_0008.jit_step.0031.hlo_normalization.after_reshape-decomposer.before_reduce-decomposer.txt", 31, False),
])
def test_choosing_a_stage(which, number, note):
    sel = read_dump_dir(PASSES).select("jit_step", which)
    assert sel.stage.number == number
    assert (sel.note is not None) == note


def test_an_ambiguous_pass_name_lists_its_stages():
    with pytest.raises(HloInputError) as e:
        read_dump_dir(PASSES).select("jit_step", "algsimp")
    msg = str(e.value)
    assert "--stage algsimp: 5 stages of module_0008 jit_step match; choose one" in msg
    assert [ln.split()[0] for ln in msg.splitlines()[1:]] == [f"algsimp#{k}" for k in range(1, 6)]
    assert "0016 simplification: after algsimp" in msg and e.value.diagnostics[0].code == "E084"


def test_before_and_after_optimizations():
    m = read_dump_dir(PASSES).module("8")
    assert m.stage("before_optimizations").stage.index == 0
    assert m.stage("after_optimizations").stage.path.endswith("jit_step.cpu_after_optimizations.txt")
    assert m.stage("cpu_after_optimizations").stage.index == 46


@pytest.mark.parametrize("which, fragment", [
    ("nope", "no stage of this name"), ("algsimp#9", "algsimp occurs 5 times"), ("99", "no stage number 99"),
    ("simplification:cse", "no stage of this name"), ("", "empty"),
])
def test_unknown_stages_list_the_choices(which, fragment):
    with pytest.raises(HloInputError) as e:
        read_dump_dir(PASSES).select("jit_step", which)
    msg = str(e.value)
    assert fragment in msg
    assert "algsimp#2" in msg and "0044 HLO_passes_after_scheduling: start" in msg
    assert e.value.diagnostics[0].code == "E084"


@pytest.mark.parametrize("which", ["jit_step", "8", "0008", "module_0008", "module_0008.jit_step"])
def test_choosing_a_module(which):
    assert read_dump_dir(PASSES).module(which).name == "jit_step"


def test_a_module_must_be_chosen_among_several():
    dd = read_dump_dir(PASSES)
    for which, fragment in ((None, "holds 2 modules"), ("jit_nope", "no module of this name"),
                            ("12", "no module of this name or number")):
        with pytest.raises(HloInputError) as e:
            dd.module(which)
        assert fragment in str(e.value) and "jit_convert_element_type" in str(e.value)


def _write(d: Path, name: str, module="m", value=2):
    (d / name).write_text(TINY.format(name=module, value=value))


def test_names_xla_writes_in_other_settings(tmp_path):
    d = tmp_path
    # --xla_dump_include_timestamp: a timestamp before module_NNNN
    _write(d, "1700000000123.module_0001.jit_a.before_optimizations.txt", "jit_a")
    _write(d, "1700000000123.module_0001.jit_a.0000.pipe.after_pipeline-start.before_p1.txt", "jit_a")
    # a name too long for a file name is left out; a name with dots; protos next to texts
    _write(d, "module_0002.0000.pipe.after_pipeline-start.before_p1.txt")
    _write(d, "module_0002.0001.pipe.after_p1.before_pipeline-end.txt")
    _write(d, "module_0003.a.b.1.before_optimizations.txt", "a.b.1")
    _write(d, "module_0003.a.b.1.0000.pipe.after_p1.before_p2.txt", "a.b.1")
    (d / "module_0003.a.b.1.0000.pipe.after_p1.before_p2.hlo.pb").write_bytes(b"\x0a\x01x")
    _write(d, "module_0003.a.b.1.sm_8.0_gpu_after_optimizations.txt", "a.b.1")
    _write(d, "module_0003.a.b.1.sm_8.0_gpu_after_optimizations-buffer-assignment.txt", "a.b.1")
    _write(d, "module_0005.jit_r.gfx90a_gpu_after_optimizations.txt", "jit_r")
    # the same name compiled twice
    _write(d, "module_0004.jit_a.before_optimizations.txt", "jit_a")
    (d / "module_0004.jit_a.snapshot.0.pb").write_bytes(b"")
    (d / "README").write_text("not a dump")
    dd = read_dump_dir(d)
    keys = [(m.key, m.name, len(m.stages)) for m in dd.modules]
    assert keys == [("module_0002", None, 2), ("module_0003", "a.b.1", 3), ("module_0004", "jit_a", 1),
                    ("module_0005", "jit_r", 1), ("1700000000123.module_0001", "jit_a", 2)]
    assert dd.module("jit_r").stage("after_optimizations").stage.word == "gfx90a_gpu_after_optimizations"
    m3 = dd.module("a.b.1")
    assert [s.kind for s in m3.stages] == [BEFORE, PASS, AFTER]
    assert m3.stages[1].files[0].endswith(".txt") and m3.stages[1].files[1].endswith(".hlo.pb")
    assert (m3.stages[1].pipeline, m3.stages[1].pass_name, m3.stages[1].next_pass) == ("pipe", "p1", "p2")
    assert m3.stage("sm_8.0_gpu_after_optimizations").stage.kind == AFTER
    assert m3.stage("after_optimizations").stage.word == "sm_8.0_gpu_after_optimizations"
    with pytest.raises(HloInputError, match="2 modules have this name"):
        dd.module("jit_a")
    assert dd.module("4").key == "module_0004"
    assert dd.module("1700000000123.module_0001").stages[1].pass_name == "pipeline-start"
    reasons = {Path(f.path).name: f.reason for f in dd.ignored}
    assert "HloSnapshot" in reasons["module_0004.jit_a.snapshot.0.pb"]
    assert "README" in reasons
    assert "module_0003.a.b.1.sm_8.0_gpu_after_optimizations-buffer-assignment.txt" in reasons


def test_a_tensorflow_name_with_dots_left_out_of_long_file_names(tmp_path):
    """TensorFlow's module names end in '.NN'; where the file name would pass 255 characters XLA
    leaves the name out, so one module's files come with and without it."""
    name = "a_inference_f_53__XlaMustCompile_true_config_proto_13561319589895757934_executor_type_1116031815.29"
    _write(tmp_path, f"module_0007.{name}.before_optimizations.txt", name)
    _write(tmp_path, f"module_0007.{name}.0000.pipe.after_pipeline-start.before_p1.txt", name)
    _write(tmp_path, "module_0007.0001.HLO_passes_through_layout_assignment.after_p1.before_p2.txt", name)
    _write(tmp_path, f"module_0007.{name}.cpu_after_optimizations.txt", name)
    (m,) = read_dump_dir(tmp_path).modules
    assert m.name == name and [s.kind for s in m.stages] == [BEFORE, PASS, PASS, AFTER]
    assert [s.number for s in m.stages[1:3]] == [0, 1] and m.stages[2].pass_name == "p1"
    assert read_dump_dir(tmp_path).module(name) is not None


def test_directories_without_dumps(tmp_path):
    with pytest.raises(HloInputError, match="the directory is empty"):
        read_dump_dir(tmp_path)
    (tmp_path / "a.hlo").write_text(TINY.format(name="m", value=1))
    assert not is_dump_dir(tmp_path)
    with pytest.raises(HloInputError, match="no XLA module dump here"):
        read_dump_dir(tmp_path)
    sub = tmp_path / "dumps"
    sub.mkdir()
    _write(sub, "module_0001.m.before_optimizations.txt")
    with pytest.raises(HloInputError, match=f"this subdirectory holds dumps: {sub}"):
        read_dump_dir(tmp_path)
    with pytest.raises(HloInputError, match="no such directory"):
        read_dump_dir(tmp_path / "missing")
    with pytest.raises(HloInputError, match="not a directory"):
        read_dump_dir(tmp_path / "a.hlo")
    assert is_dump_dir(PASSES)


def test_a_list_of_files(tmp_path):
    names = ["first.hlo", "module_0001.m.0003.pipe.after_p1.before_p2.txt", "last.hlo"]
    for k, n in enumerate(names):
        _write(tmp_path, n, value=k)
    m = stages_from_files([str(tmp_path / n) for n in names])
    assert [s.kind for s in m.stages] == [FILE, PASS, FILE]
    assert m.stages[1].pass_name == "p1" and m.stages[0].label == "first.hlo"
    assert m.stage("p1").stage.index == 1 and m.stage("2").stage.index == 2
    with pytest.raises(HloInputError, match="no such file"):
        stages_from_files([str(tmp_path / "missing.hlo")])
