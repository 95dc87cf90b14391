"""XLA GPU dump directories as XLA writes them (hlo_cli/sources/dumpdir.py): every kind of file XLA GPU
writes is known, platform words (sm_9.0a_gpu_, gfx942_gpu_, cpu_, ...) never split a module's name,
the stages XLA dumps by name (after_spmd_partitioner, before_config_assignment) are offered in pass
order, module lookup does not depend on the hash seed, and a module's config.pbtxt gives its .hlo.pb
stages the config the proto lacks.

Goldens: samples/gpu/dumps/dir, two modules of a real --xla_dump_to directory XLA GPU wrote on an H200
(JAX 0.11.2; ../shared/gpu/dumps holds the whole of it, and ../shared/gpu/passes a pass dump: tested
too when present)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from run_harness import hlo  # noqa: F401  (the fixture: the CLI, never a traceback)

from hlo_cli.sources.dumpdir import (AFTER, BEFORE, NAMED, classify, config_beside, dump_file_kind,
                                     read_dump_dir)

ROOT = Path(__file__).resolve().parents[2]
DIR = ROOT / "samples" / "gpu" / "dumps" / "dir"
MLP, CONV = "jit_dump_mlp_step_highest", "jit_dump_convnet_step"
SHARED = ROOT.parent / "shared" / "gpu"
if not SHARED.is_dir():
    SHARED = Path("/work/shared/gpu")

TINY = """HloModule {name}, entry_computation_layout={{(f32[2]{{0}})->f32[2]{{0}}}}

ENTRY main {{
  x = f32[2]{{0}} parameter(0)
  c = f32[2]{{0}} constant({{{value}, 1}})
  ROOT r = f32[2]{{0}} add(x, c)
}}
"""


def _write(d: Path, name: str, module="jit_f", value=2):
    (d / name).write_text(TINY.format(name=module, value=value))


# ----------------------------------------------------------------------------- the real directory

def test_the_modules_and_stages_of_a_real_gpu_dump():
    dd = read_dump_dir(DIR)
    assert [(m.key, m.name) for m in dd.modules] == [("module_87993", MLP), ("module_541803", CONV)]
    for m in dd.modules:
        assert [s.label for s in m.stages] == ["before_optimizations", "after_spmd_partitioner",
                                               "before_config_assignment", "sm_9.0a_gpu_after_optimizations"]
        assert [s.kind for s in m.stages] == [BEFORE, NAMED, NAMED, AFTER]
        assert [s.selector for s in m.stages] == ["before_optimizations", "after_spmd_partitioner",
                                                  "before_config_assignment", "after_optimizations"]
        assert all(s.path.endswith(".txt") for s in m.stages)
    m = dd.module(MLP)
    assert m.stages[0].files[1].endswith(".before_optimizations.hlo.pb")
    for which in ("sm_9.0a_gpu_after_optimizations", "after_optimizations", "after_spmd_partitioner",
                  "before_config_assignment"):
        assert dd.select(MLP, which).stage.path == dd.module(MLP).stage(which).stage.path
    assert dd.select(CONV, "sm_9.0a_gpu_after_optimizations").stage.path.endswith(
        "jit_dump_convnet_step.sm_9.0a_gpu_after_optimizations.txt")
    assert "SPMD partitioning" in m.stage("after_spmd_partitioner").stage.pass_description


def test_every_other_file_is_known_and_none_is_a_module():
    dd = read_dump_dir(DIR)
    kinds = {Path(f.path).name.split(".", 2)[-1]: dump_file_kind(Path(f.path).name) for f in dd.ignored}
    assert {k: v[0] for k, v in kinds.items()} == {
        "config.pbtxt": "config", "autotune_results.pbtxt": "config", "gpu_target_config.pbtxt": "config",
        "debug_options": "config", "thunk_metadata.txt": "report", "thunk_sequence.txt": "report",
        "thunk_sequence_after_thunk_passes.txt": "report",
        "sm_9.0a_gpu_after_optimizations-buffer-assignment.txt": "report",
        "sm_9.0a_gpu_after_optimizations-buffer-assignment-values.txt": "report",
        "sm_9.0a_gpu_after_optimizations-live-range.txt": "report",
        "sm_9.0a_gpu_after_optimizations-memory-usage-report.txt": "report",
        "sm_9.0a_gpu_after_optimizations-memory-usage-report.pb": "report"}


@pytest.mark.parametrize("tail, kind", [
    ("jit_f.sm_9.0a_gpu_after_optimizations-buffer-assignment.txt", "report"),
    ("jit_f.cpu_after_optimizations-memory-usage-report.pb.gz", "report"),
    ("jit_f.thunk_sequence_after_thunk_passes.txt", "report"), ("jit_f.thunk_metadata.pb", "report"),
    ("jit_f.priority_fusion_dump.txt", "report"), ("jit_f.buffer_debug_log.pb", "report"),
    ("jit_f.config.pbtxt", "config"), ("jit_f.autotune_results.pbtxt", "config"),
    ("jit_f.gpu_target_config.pbtxt", "config"), ("jit_f.debug_options", "config"),
    ("metadata.textproto", "config"), ("jit_f.ir-no-opt.ll", "compiler output"),
    ("jit_f.fusion.1.ir-with-opt.ll", "compiler output"), ("jit_f.ptx", "compiler output"),
    ("jit_f.1.ptx", "compiler output"), ("jit_f.spv", "compiler output"),
    ("jit_f.obj-file.o", "compiler output"), ("jit_f.gemm_fusion_dot.ttir.txt", "compiler output"),
    ("jit_f.gemm_fusion_dot.before_validation.ttir.txt", "compiler output"),
    ("jit_f.loop_fusion.mlir-passes.log", "compiler output"), ("jit_f.cudnn_fusion_f.json", "compiler output"),
    ("jit_f.sm_9.0a_gpu_after_optimizations.dot", "graph"), ("jit_f.before_optimizations.html", "graph"),
    ("jit_f.gemm_fusion_dot.hlo", "module"), ("jit_f.autotuner_3.fusion.before.txt", "module"),
    ("jit_f.triton_fusion_numerics_verifier_failed_12.hlo", "module"),
    ("jit_f.sm_9.0a_gpu_after_optimizations.hlo.pb.gz", "compressed module"),
])
def test_the_files_xla_writes_beside_the_stages(tail, kind):
    got = dump_file_kind(f"module_0042.{tail}")
    assert got is not None and got[0] == kind, got
    assert classify(f"module_0042.{tail}")[0] == kind


@pytest.mark.parametrize("name", ["module_0042.jit_f.execution_0000.hlo_snapshot.pb",
                                  "1700000000.module_0042.jit_f.execution_0003.hlo_snapshot.pb",
                                  "module_0042.jit_f.snapshot.0.pb",
                                  "module_0042.jit_f.execution_0000.hlo_unoptimized_snapshot.pb"])
def test_snapshots_are_not_stages(name):
    assert dump_file_kind(name)[0] == "snapshot"


def test_pjrt_compile_inputs_are_known():
    assert dump_file_kind("module.mlir", f"module_87993.{MLP}")[0] == "compile input"
    assert dump_file_kind("topology.textproto", "module_1325.jit_mlp_step")[0] == "compile input"
    assert dump_file_kind("module.mlir", "elsewhere") is None


# ----------------------------------------------------------------------------- names

@pytest.mark.parametrize("word", ["sm_8.0_gpu_after_optimizations", "sm_9.0a_gpu_after_optimizations",
                                  "sm_10.0f_gpu_after_optimizations", "sm_12.1_gpu_after_optimizations",
                                  "gfx942_gpu_after_optimizations", "gfx90a_gpu_after_optimizations",
                                  "gfx1100_gpu_after_optimizations", "_gpu_after_optimizations",
                                  "cpu_after_optimizations", "tpu_after_optimizations", "after_optimizations"])
@pytest.mark.parametrize("with_before", [True, False])
def test_a_platform_word_never_splits_the_module_name(tmp_path, word, with_before):
    if with_before:
        _write(tmp_path, "module_0007.jit_step.before_optimizations.txt", "jit_step")
    _write(tmp_path, f"module_0007.jit_step.{word}.txt", "jit_step")
    _write(tmp_path, "module_0007.jit_step.after_spmd_partitioner.txt", "jit_step")
    (m,) = read_dump_dir(tmp_path).modules
    assert m.name == "jit_step"
    after = m.stages[-1]
    assert (after.kind, after.word) == (AFTER, word)
    assert m.stage(word).stage is after and m.stage("after_optimizations").stage is after
    assert m.stages[-2].kind == NAMED


def test_a_dotted_module_name_with_a_platform_word(tmp_path):
    _write(tmp_path, "module_0003.a.b.1.sm_9.0a_gpu_after_optimizations.txt", "a.b.1")
    _write(tmp_path, "module_0003.a.b.1.after_spmd_partitioner.txt", "a.b.1")
    (m,) = read_dump_dir(tmp_path).modules
    assert m.name == "a.b.1" and [s.word for s in m.stages] == ["after_spmd_partitioner",
                                                               "sm_9.0a_gpu_after_optimizations"]


_LOOKUP = f"""
import sys
from hlo_cli.sources.dumpdir import read_dump_dir
dd = read_dump_dir(sys.argv[1])
names = [m.name for m in dd.modules]
sel = dd.select("{MLP}", "sm_9.0a_gpu_after_optimizations")
print(names, sel.stage.path.rsplit("/", 1)[-1])
"""


def test_module_lookup_does_not_depend_on_the_hash_seed(tmp_path):
    """Without a before_optimizations dump the name comes from the other files; a platform word with a
    dot used to give two names of equal count, chosen by set order (the hash seed)."""
    for f in DIR.glob(f"module_87993.{MLP}.*"):
        if "before_optimizations" not in f.name and f.is_file():
            shutil.copy(f, tmp_path / f.name)
    outs = set()
    for seed in ("0", "1", "2", "3", "5", "8"):
        env = dict(os.environ, PYTHONHASHSEED=seed, PYTHONPATH=str(ROOT))
        p = subprocess.run([sys.executable, "-c", _LOOKUP, str(tmp_path)], capture_output=True, text=True,
                           env=env, timeout=120)
        assert p.returncode == 0, p.stderr
        outs.add(p.stdout.strip())
    assert outs == {f"['{MLP}'] module_87993.{MLP}.sm_9.0a_gpu_after_optimizations.txt"}


# ----------------------------------------------------------------------------- named stages among pass dumps

def test_named_stages_go_where_xla_dumped_them(tmp_path):
    """after_spmd_partitioner holds the text of the pass dumps around it; it goes before the last of
    them (the start of the pipeline XLA ran next).  Without a text to match, before the pipeline XLA
    runs next."""
    _write(tmp_path, "module_0001.jit_f.before_optimizations.txt", value=1)
    _write(tmp_path, "module_0001.jit_f.0000.pre-spmd.after_pipeline-start.before_a.txt", value=1)
    _write(tmp_path, "module_0001.jit_f.0001.pre-spmd.after_a.before_b.txt", value=2)
    _write(tmp_path, "module_0001.jit_f.0002.host.after_pipeline-start.before_h.txt", value=2)
    _write(tmp_path, "module_0001.jit_f.0003.optimization.after_pipeline-start.before_o.txt", value=2)
    _write(tmp_path, "module_0001.jit_f.0004.optimization.after_o.before_p.txt", value=3)
    _write(tmp_path, "module_0001.jit_f.0005.config-assigner.after_pipeline-start.before_c.txt", value=4)
    _write(tmp_path, "module_0001.jit_f.after_spmd_partitioner.txt", value=2)
    _write(tmp_path, "module_0001.jit_f.before_config_assignment.txt", value=9)     # no text to match
    _write(tmp_path, "module_0001.jit_f.sm_9.0a_gpu_after_optimizations.txt", value=5)
    (m,) = read_dump_dir(tmp_path).modules
    assert [s.label.split(":")[0] for s in m.stages] == [
        "before_optimizations", "0000 pre-spmd", "0001 pre-spmd", "0002 host", "after_spmd_partitioner",
        "0003 optimization", "0004 optimization", "before_config_assignment", "0005 config-assigner",
        "sm_9.0a_gpu_after_optimizations"]
    assert [s.index for s in m.stages] == list(range(10))


def test_a_stage_xla_dumps_under_another_name_is_offered(tmp_path):
    _write(tmp_path, "module_0001.jit_f.before_optimizations.txt", value=1)
    _write(tmp_path, "module_0001.jit_f.after_sharding_propagation.txt", value=2)
    _write(tmp_path, "module_0001.jit_f.cpu_after_optimizations.txt", value=3)
    (m,) = read_dump_dir(tmp_path).modules
    assert [(s.kind, s.selector) for s in m.stages] == [(BEFORE, "before_optimizations"),
                                                      (NAMED, "after_sharding_propagation"),
                                                      (AFTER, "after_optimizations")]
    assert m.stage("after_sharding_propagation").stage.index == 1


@pytest.mark.skipif(not (SHARED / "passes").is_dir(), reason="../shared/gpu/passes is not here")
def test_the_shared_pass_dump():
    (m,) = read_dump_dir(SHARED / "passes").modules
    labels = [s.label for s in m.stages]
    k = labels.index("after_spmd_partitioner")
    assert labels[k - 1] == "0006 host-compute: start" and labels[k + 1] == "0007 optimization: start"
    k = labels.index("before_config_assignment")
    assert labels[k - 1] == "0058 fusion-wrapper: start" and labels[k + 1] == "0059 config-assigner: start"
    assert labels[0] == "before_optimizations" and labels[-1] == "sm_9.0a_gpu_after_optimizations"
    assert len(m.stages) == 89


# ----------------------------------------------------------------------------- config.pbtxt

def _header(hlo, path) -> str:
    r = hlo("fmt", path)
    assert r.exit_code == 0, r.output
    return r.stdout.splitlines()[0]


def test_a_proto_stage_takes_its_header_from_config_pbtxt(hlo):
    """The module proto holds no config; XLA's text prints it (entry layout, sharding-propagation flags):
    with config.pbtxt beside it, the .hlo.pb reads with the same header as the .txt."""
    base = DIR / f"module_87993.{MLP}.before_optimizations"
    assert config_beside(f"{base}.hlo.pb") == str(DIR / f"module_87993.{MLP}.config.pbtxt")
    text = _header(hlo, f"{base}.txt")
    assert "allow_spmd_sharding_propagation_to_parameters={true" in text
    assert _header(hlo, f"{base}.hlo.pb") == text


def test_config_gives_replicas_and_partitions(hlo, tmp_path):
    src = DIR / f"module_87993.{MLP}.before_optimizations.hlo.pb"
    shutil.copy(src, tmp_path / src.name)
    alone = _header(hlo, tmp_path / src.name)
    assert "replica_count" not in alone and "allow_spmd" not in alone
    cfg = (DIR / f"module_87993.{MLP}.config.pbtxt").read_text()
    cfg = cfg.replace("replica_count: 1", "replica_count: 2").replace("num_partitions: 1", "num_partitions: 4")
    (tmp_path / f"module_87993.{MLP}.config.pbtxt").write_text(cfg)
    got = _header(hlo, tmp_path / src.name)
    assert got.endswith(", replica_count=2, num_partitions=4")
    doc = json.loads(hlo("info", tmp_path / src.name, "--format", "json").stdout)
    assert doc["header"]["replica_count"] == "2" and doc["header"]["num_partitions"] == "4"
    # another module's config is not taken; a config that does not read is an error naming it
    (tmp_path / f"module_87993.{MLP}.config.pbtxt").rename(tmp_path / "module_87994.jit_other.config.pbtxt")
    assert _header(hlo, tmp_path / src.name) == alone
    (tmp_path / f"module_87993.{MLP}.config.pbtxt").write_text("replica_count: {{{\n")
    r = hlo("fmt", tmp_path / src.name)
    assert r.exit_code == 2 and "config.pbtxt" in r.stderr and "HloModuleConfigProto" in r.stderr


# ----------------------------------------------------------------------------- the commands

def test_check_a_gpu_dump_directory(hlo):
    r = hlo("check", DIR)
    assert r.exit_code == 0, r.output
    last = r.stdout.strip().splitlines()[-1]
    assert last.startswith("12 files: 12 ok, 0 with errors;"), last      # 8 stages as .txt, 4 as .hlo.pb
    assert "18 other files skipped (8 reports, 7 configs, 3 compile inputs)" in last
    doc = json.loads(hlo("check", DIR, "--format", "json").stdout)
    assert doc["summary"]["skipped"] == 18
    assert {s["kind"] for s in doc["skipped"]} == {"config", "report", "compile input"}
    assert not any(f["file"].endswith(".pbtxt") for f in doc["files"])


def test_info_run_and_bisect_on_a_gpu_dump_directory(hlo):
    doc = json.loads(hlo("info", DIR, "--format", "json").stdout)
    assert [(m["name"], m["stages"]) for m in doc["modules"]] == [(MLP, 4), (CONV, 4)]
    doc = json.loads(hlo("info", DIR, "--module", MLP, "--format", "json").stdout)
    assert [s["selector"] for s in doc["stages"]][1:3] == ["after_spmd_partitioner", "before_config_assignment"]
    r = hlo("run", DIR, "--module", MLP, "--stage", "sm_9.0a_gpu_after_optimizations", "--random-inputs",
            "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["module_file"].endswith(f"{MLP}.sm_9.0a_gpu_after_optimizations.txt")
    r = hlo("bisect", DIR, "--module", MLP, "--random-inputs", "--format", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["status"] == "agree" and doc["snapshots"] == 4


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "dumps").is_dir(), reason="../shared/gpu/dumps is not here")
def test_the_shared_dump_directory(hlo):
    dumps = SHARED / "dumps"
    dd = read_dump_dir(dumps)
    assert sorted(m.name for m in dd.modules) == sorted([MLP, CONV, "jit_dump_transformer_step_bf16"])
    assert all(len(m.stages) == 4 for m in dd.modules)
    r = hlo("check", dumps, "--format", "json")
    doc = json.loads(r.stdout)
    # every file checked is a stage (configs and reports are skipped; .hlo.pb stages may need a newer
    # proto schema than this branch's)
    assert all(".txt" in f["file"] or ".hlo.pb" in f["file"] for f in doc["files"])
    assert all(f["status"] == "ok" for f in doc["files"] if f["file"].endswith(".txt"))
    assert {s["kind"] for s in doc["skipped"]} == {"config", "report", "compile input"}
