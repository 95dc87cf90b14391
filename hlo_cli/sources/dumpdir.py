"""XLA dump directories as sources of modules: the modules of an ``--xla_dump_to=DIR`` directory and
the stages each was dumped at, in pass order.

    dd = read_dump_dir("dump/")                      # a DumpDir: dd.modules, dd.ignored
    m = dd.module("jit_f")                           # --module NAME | NNNN | module_NNNN
    stage = m.stage("fusion")                        # --stage (see below); stage.path is its file
    m = stages_from_files(["a.txt", "b.txt"])        # a plain list of files, already in pass order

What XLA writes (xla/service/dump.cc, xla/hlo/pass/hlo_pass_pipeline.cc), one module ``module_NNNN``
(its unique id, ``%04d``) at a time, optionally behind a timestamp (``--xla_dump_include_timestamp``):

- ``module_NNNN.NAME.before_optimizations.txt``: the module as it came in;
- ``module_NNNN.NAME.SSSS.PIPELINE.after_PASS.before_NEXT.txt`` with ``--xla_dump_hlo_pass_re=RE``:
  the module after PASS ran in PIPELINE (NEXT is the pass that runs next).  SSSS counts the module's
  dumps, so it gives their order.  Each pipeline dumps once at its start (``after_pipeline-start``);
  with ``RE = .*`` a pass dumps only when it changed the module, with any other RE after every pass
  that matches.  A pipeline is itself a pass of the pipeline around it (``after_simplification``);
  passes run many times (``algsimp`` in every simplification pipeline);
- ``module_NNNN.NAME.SSSS.PASS.STEP.txt``: a pass's own dumps between its steps (copy-insertion's
  ``after_adding_copies_to_resolve_interference``...);
- ``module_NNNN.NAME.after_spmd_partitioner.txt``, ``module_NNNN.NAME.before_config_assignment.txt``
  (XLA GPU): stages dumped by name between the passes, placed in pass order (NAMED_STAGES);
- ``module_NNNN.NAME.PLATFORM_after_optimizations.txt``: the module XLA compiles; PLATFORM is ``cpu``,
  ``sm_9.0a_gpu`` (CUDA's compute capability, with its dot), ``gfx942_gpu`` (ROCm), ...;
- the same stages as ``.hlo.pb`` with ``--xla_dump_hlo_as_proto`` (their header's config comes from
  ``config.pbtxt``, see config_beside); besides them, not stages (classify: their kind and what they
  are): buffer assignments, live ranges, memory reports, thunk sequences (reports); ``config.pbtxt``,
  ``autotune_results.pbtxt``, ``gpu_target_config.pbtxt``, ``debug_options`` (configs); LLVM IR, PTX,
  Triton IR, MLIR, cuDNN graphs, object files (compiler outputs); graphs; snapshots; fusions and
  autotuner candidates extracted as modules; PJRT's compile inputs in a ``module_NNNN.NAME/``
  directory.

NAME is left out when the file name would be longer than 255 characters; characters ``/\\[] `` of a
name are written as ``_``.

Choosing a stage (``--stage S``; Module.stage):

- ``before_optimizations`` / ``after_optimizations`` (also ``cpu_after_optimizations``...);
- a step number SSSS as in the file names (``14`` or ``0014``);
- a pass name ``PASS``: the stage dumped after PASS ran (``after_PASS``; for a pass's own dumps, its
  step name); ``PIPELINE:PASS`` narrows it to one pipeline; ``PASS#K`` takes its K-th occurrence
  (1-based) and ``PASS#last`` the last.  A plain PASS that occurs several times is an error that lists
  the stages it matches with what picks each (never a silent choice);
- a stage XLA dumps by name between the passes: ``after_spmd_partitioner``, ``before_config_assignment``;
- a file name of the directory (its stage).
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import Diagnostic, HloInputError

BEFORE, PASS, DURING, AFTER, FILE = "before_optimizations", "pass", "during_pass", "after_optimizations", "file"
NAMED = "named"                 # a stage XLA dumps by name between the passes (after_spmd_partitioner...)
_KIND_RANK = {BEFORE: 0, PASS: 1, DURING: 1, FILE: 1, NAMED: 1, AFTER: 2}

_TEXT_EXT = ".txt"
_PROTO_EXTS = (".hlo.pb", ".pb", ".pbtxt")
_HEAD = re.compile(r"^(?:(?P<ts>\d+)\.)?module_(?P<id>\d{4,})(?:\.(?P<tail>.+))?$")
_STEP = re.compile(r"^(?:(?P<name>.+?)\.)?(?P<num>\d{4,})\.(?P<rest>.+)$")
_BETWEEN = re.compile(r"^(?P<pipeline>.+?)\.after_(?P<after>.+?)\.before_(?P<before>.+)$")
_DURING = re.compile(r"^(?P<pass>[^.]+)\.(?P<step>.+)$")
# after_optimizations behind the platform's word (xla/service/gpu/compile_module_to_llvm_ir.cc GetDumpName,
# cpu_compiler.cc): cpu_, sm_8.0_gpu_ / sm_9.0a_gpu_ / sm_10.0f_gpu_ (CUDA: the compute capability with its
# feature letter), gfx942_gpu_ / gfx90a_gpu_ (ROCm: the gfx version), _gpu_ (a GPU without either), and any
# other backend's word (tpu_...).  The only dot a word may hold is the compute capability's, so a module name
# is never split there (the name before it is matched lazily).
_PLATFORM = r"(?:sm_\d+\.\d+[a-z]?_gpu|gfx[0-9a-z]+_gpu|_gpu|[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)*?)"
_AFTER_WORD = rf"(?:{_PLATFORM}_)?after_optimizations"
_ENDS = re.compile(rf"^(?:(?P<name>.+?)\.)?(?P<which>before_optimizations|{_AFTER_WORD})$")
# stages XLA dumps by name between before_optimizations and after_optimizations (gpu_compiler.cc:
# after_spmd_partitioner, before_config_assignment; hlo-opt: before_optimization, after_optimization), in
# the order a compilation writes them, with the pipeline that runs next (where one is placed among the
# numbered pass dumps when no dump between passes holds the same text)
NAMED_STAGES = {"after_spmd_partitioner": ("the module after SPMD partitioning, before XLA's optimization "
                                           "passes", "optimization"),
                "before_config_assignment": ("the module before XLA GPU assigns each fusion its kernel "
                                             "configuration (after fusion, before autotuning's choices)",
                                             "config-assigner"),
                "before_optimization": ("the module before hlo-opt's passes", None),
                "after_optimization": ("the module after hlo-opt's passes", None)}
# any other word of that form XLA may dump a module at (its place: by its text among the pass dumps)
_NAMED = re.compile(r"^(?:(?P<name>.+?)\.)?(?P<which>(?:before|after)_[a-z][a-z0-9_]*)$")
_BEFORE_NAME = re.compile(r"^(?:(?P<name>.+)\.)?before_optimizations$")


@dataclass(frozen=True)
class Stage:
    """One snapshot of a module in its pass order."""
    index: int                      # 0-based position in the module's pass order
    kind: str                       # BEFORE, PASS, DURING, AFTER, or FILE (a file given in a list)
    files: tuple[str, ...]          # its files, the text dump first
    number: int | None = None       # XLA's step number SSSS (None: before/after_optimizations, files)
    pipeline: str | None = None     # the pipeline that dumped it (PASS)
    pass_name: str | None = None    # the pass just run: after_PASS (PASS), the pass (DURING)
    step: str | None = None         # a pass's own dump: its step (DURING)
    next_pass: str | None = None    # before_NEXT (PASS)
    word: str | None = None         # the name as written for before/after_optimizations
    occurrence: int = 1             # 1-based: which occurrence of pass_name among the module's stages
    occurrences: int = 1            # how many stages have this pass_name

    @property
    def path(self) -> str:
        """The file to read: the text dump when there is one."""
        return self.files[0]

    @property
    def file_name(self) -> str:
        return os.path.basename(self.path)

    @property
    def number_text(self) -> str:
        return "" if self.number is None else f"{self.number:04d}"

    @property
    def label(self) -> str:
        """How the stage reads in a listing: `0014 HLO_passes_after_layout_assignment: after fusion`."""
        if self.kind in (BEFORE, AFTER, NAMED):
            return self.word or self.kind
        if self.kind == PASS:
            what = ("start" if self.pass_name == "pipeline-start" else f"after {self.pass_name}")
            return f"{self.number_text} {self.pipeline}: {what}"
        if self.kind == DURING:
            return f"{self.number_text} {self.pass_name}: {self.step}"
        return self.file_name

    @property
    def selector(self) -> str:
        """What --stage takes to choose this stage (a pass name, with #K when it occurs again)."""
        if self.kind in (BEFORE, AFTER):
            return self.kind
        if self.kind == NAMED:
            return self.word
        if self.kind == FILE:
            return self.file_name
        name = self.step if self.kind == DURING else self.pass_name
        if self.kind == PASS and self.pass_name == "pipeline-start":
            return self.number_text
        return name if self.occurrences == 1 else f"{name}#{self.occurrence}"

    @property
    def pass_description(self) -> str:
        """The step that made this snapshot, in words."""
        if self.kind == BEFORE:
            return "the module before optimizations"
        if self.kind == AFTER:
            return "the optimized module (after every pass)"
        if self.kind == NAMED:
            return NAMED_STAGES.get(self.word, (f"the module XLA dumped as {self.word}",))[0]
        if self.kind == DURING:
            return f"pass {self.pass_name}, step {self.step}"
        if self.kind == PASS:
            if self.pass_name == "pipeline-start":
                return (f"the start of pipeline {self.pipeline} (whatever ran after the previous dump and "
                        f"before this pipeline)")
            return f"pass {self.pass_name} in pipeline {self.pipeline}"
        return f"file {self.file_name}"

    def to_dict(self) -> dict:
        return {"index": self.index, "kind": self.kind, "number": self.number, "pipeline": self.pipeline,
                "pass": self.pass_name, "step": self.step, "next_pass": self.next_pass, "label": self.label,
                "selector": self.selector, "file": self.path, "files": list(self.files)}


@dataclass(frozen=True)
class Selection:
    """A stage chosen by --stage, with a note when the choice was not the only one possible."""
    stage: Stage
    note: str | None = None


@dataclass(frozen=True)
class DumpModule:
    """A module of a dump directory and its stages in pass order."""
    id: str | None                 # "0006" (None for a list of files)
    name: str | None
    stages: tuple[Stage, ...]
    timestamp: str | None = None
    directory: str | None = None
    snapshots: tuple[str, ...] = ()   # its HloSnapshots (--xla_dump_hlo_snapshots): executions' arguments
    ignored: tuple = ()               # files of a list that are not stages (stages_from_files)
    pass_order: bool = True           # False: a list of files taken in the order given

    @property
    def key(self) -> str:
        if self.id is None:
            return self.name or "(files)"
        return (f"{self.timestamp}." if self.timestamp else "") + f"module_{self.id}"

    @property
    def title(self) -> str:
        return f"{self.key} {self.name}" if self.name and self.id is not None else self.key

    @property
    def pass_stages(self) -> int:
        return sum(1 for s in self.stages if s.kind in (PASS, DURING))

    def listing(self, limit: int | None = None) -> str:
        rows = self.stages if limit is None or len(self.stages) <= limit else self.stages[:limit]
        width = max((len(s.selector) for s in rows), default=0)
        out = [f"  {s.selector:<{width}}  {s.label}" for s in rows]
        if len(rows) < len(self.stages):
            out.append(f"  ... and {len(self.stages) - len(rows)} more (hlo info DIR --module {self.key} lists them)")
        return "\n".join(out)

    def stage(self, which: str, option: str = "--stage") -> Selection:
        """The stage --stage WHICH names (see the module docstring).  Raises HloInputError (exit 2)
        listing the choices."""
        w = which.strip()
        if not w:
            raise self._error(f"{option} {which!r}: empty")
        stages = self.stages
        if w in (BEFORE, AFTER):
            hits = [s for s in stages if s.kind == w]
            if hits:
                return Selection(hits[0] if w == BEFORE else hits[-1])
            raise self._error(f"{option} {w}: this module has no {w} dump")
        if w.startswith(("after_", "before_")):
            hits = [s for s in stages if s.kind == NAMED and s.word == w]
            if hits:
                return Selection(hits[0])
        if w.endswith("_after_optimizations"):
            hits = [s for s in stages if s.kind == AFTER and s.word == w]
            if hits:
                return Selection(hits[-1])
        if re.fullmatch(r"\d+", w):
            n = int(w)
            hits = [s for s in stages if s.number == n]
            if hits:
                return Selection(hits[0])
            if self.id is None and 0 <= n < len(stages):
                return Selection(stages[n])
            raise self._error(f"{option} {w}: no stage number {n}")
        base = os.path.basename(w)
        hits = [s for s in stages if base in (os.path.basename(f) for f in s.files)]
        if hits:
            return Selection(hits[0])
        name, occ = w, None
        m = re.fullmatch(r"(.+)#(\d+|last)", w)
        if m:
            name, occ = m.group(1), m.group(2)
        pipeline = None
        if ":" in name:
            pipeline, name = name.split(":", 1)
        hits = self._named(name, pipeline)
        if not hits and name.startswith("after_"):
            hits = self._named(name[len("after_"):], pipeline)
        if not hits:
            raise self._error(f"{option} {which}: no stage of this name")
        if occ is None:
            if len(hits) > 1 and len({s.selector for s in hits}) > 1:
                raise self._ambiguous(option, which, name, hits)
            return Selection(hits[0])
        if occ == "last":
            return Selection(hits[-1])
        k = int(occ)
        if 1 <= k <= len(hits):
            return Selection(hits[k - 1])
        raise self._error(f"{option} {which}: {name} occurs {len(hits)} time{'s' if len(hits) != 1 else ''}")

    def _named(self, name: str, pipeline: str | None) -> list[Stage]:
        """The stages NAME names: after the pass NAME, or a pass's own step NAME (their selectors count
        these occurrences); only when there is none, a pass's own dumps by the pass's name."""
        exact, by_pass = [], []
        for s in self.stages:
            if s.kind == PASS and s.pass_name == name and (pipeline is None or s.pipeline == pipeline):
                exact.append(s)
            elif s.kind == DURING and s.step == name and (pipeline is None or s.pass_name == pipeline):
                exact.append(s)
            elif s.kind == DURING and pipeline is None and s.pass_name == name:
                by_pass.append(s)
        return exact or by_pass

    def _ambiguous(self, option: str, which: str, name: str, hits: list[Stage]) -> HloInputError:
        """--stage NAME that names several stages: the error listing them, each with what picks it."""
        where = self.directory or "the files given"
        width = max(len(s.selector) for s in hits)
        rows = [f"  {s.selector:<{width}}  {s.label}" for s in hits[:40]]
        if len(hits) > 40:
            rows.append(f"  ... and {len(hits) - 40} more")
        msg = (f"{option} {which}: {len(hits)} stages of {self.title} match; choose one ({name}#K the K-th, "
               f"{name}#last the last, PIPELINE:{name} one pipeline's):\n" + "\n".join(rows))
        return HloInputError(f"{where}: {msg}", [Diagnostic(msg, where, code="E084")])

    def _error(self, message: str) -> HloInputError:
        where = self.directory or "the files given"
        msg = f"{message}; {self.title} has {len(self.stages)} stage{'s' if len(self.stages) != 1 else ''} " \
              f"(--stage takes the first column, a step number, or PIPELINE:PASS[#K]):\n" + self.listing(60)
        return HloInputError(f"{where}: {msg}", [Diagnostic(msg, where, code="E084")])


@dataclass(frozen=True)
class IgnoredFile:
    path: str
    reason: str


@dataclass(frozen=True)
class DumpDir:
    """An XLA dump directory read into its modules."""
    path: str
    modules: tuple[DumpModule, ...]
    ignored: tuple[IgnoredFile, ...] = field(default=())

    def listing(self) -> str:
        return "\n".join(f"  {m.key:<12} {m.name or '':<28} {len(m.stages):>4} stages ({m.pass_stages} after passes)"
                         for m in self.modules)

    def module(self, which: str | None) -> DumpModule:
        """The module WHICH names: its name, its id (NNNN, N or module_NNNN), or module_NNNN.NAME;
        None asks for the only one.  Raises HloInputError (exit 2) listing the modules."""
        mods = self.modules
        if which is None:
            if len(mods) == 1:
                return mods[0]
            raise self._error(f"holds {len(mods)} modules; choose one with --module NAME (or its number "
                              f"NNNN):\n{self.listing()}")
        w = which.strip()
        m = re.fullmatch(r"(?:(\d+)\.)?(?:module_)?(\d+)(?:\.(.+))?", w)
        if m:
            ts, num, name = m.groups()
            hits = [d for d in mods if d.id is not None and int(d.id) == int(num)
                    and (ts is None or d.timestamp == ts) and (name is None or d.name == name)]
            if len(hits) == 1:
                return hits[0]
            if len(hits) > 1:
                raise self._error(f"--module {which}: {len(hits)} modules have this number (dumps of "
                                  f"several processes); add its timestamp:\n{self.listing()}")
        hits = [d for d in mods if d.name == w]
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise self._error(f"--module {which}: {len(hits)} modules have this name (compiled several "
                              f"times); choose one by its number:\n{self.listing()}")
        raise self._error(f"--module {which}: no module of this name or number here; it holds:\n{self.listing()}")

    def choice(self, m: DumpModule) -> str:
        """What --module takes to name M: its name when no other module has it, else its number."""
        return m.name if m.name and sum(1 for d in self.modules if d.name == m.name) == 1 else m.key

    def select(self, module: str | None, stage: str) -> Selection:
        return self.module(module).stage(stage)

    def _error(self, message: str) -> HloInputError:
        return HloInputError(f"{self.path}: {message}", [Diagnostic(message, self.path, code="E084")])


# ----------------------------------------------------------------------------- reading

def _split_ext(name: str) -> tuple[str, str] | None:
    """(stem, ".txt" or a proto extension) of a file that may be a stage; None otherwise."""
    if name.endswith(_TEXT_EXT):
        return name[:-len(_TEXT_EXT)], _TEXT_EXT
    for ext in _PROTO_EXTS:
        if name.endswith(ext):
            return name[:-len(ext)], ext
    return None


@dataclass
class _Parsed:
    key: tuple            # (timestamp, id)
    kind: str
    name: str | None
    number: int | None = None
    rest: str = ""
    word: str | None = None


# What XLA writes besides a module's stages (xla/service/dump.cc, gpu_compiler.cc, gpu_executable.cc,
# nvptx_compiler.cc, llvm_util.cc, the Triton and cuDNN emitters, priority_fusion.cc, the autotuner), by the
# end of the file name after module_NNNN.NAME.: the rows of dump_files.tsv (kind, pattern, what it is).  Kinds are counted in one line
# by `hlo check DIR`; MODULE_TEXT files hold HLO modules that are not stages of the pass pipeline.
REPORT, CONFIG, COMPILED, GRAPH, SNAPSHOT, MODULE_TEXT, OTHER = ("report", "config", "compiler output", "graph",
                                                                 "snapshot", "module", "other")
COMPILE_INPUT = "compile input"
COMPRESSED = "compressed module"


@functools.lru_cache(maxsize=1)
def _other_files() -> list[tuple[re.Pattern, str, str]]:
    """(pattern, kind, what it is) of dump_files.tsv beside this file, in its order (read and
    compiled on the first name to classify: a run of one file never needs them)."""
    rows = []
    for line in (Path(__file__).resolve().parent / "dump_files.tsv").read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            kind, pattern, what = line.split("\t")
            rows.append((re.compile(f"(?:{pattern})$"), kind, what))
    return rows


def classify(fname: str) -> tuple[str, str] | None:
    """(kind, what it is) of a file XLA writes beside the stages, from its name (module_NNNN.NAME.SUFFIX);
    None for a name that is not one of them."""
    head = _HEAD.match(fname)
    tail = (head.group("tail") or "") if head else fname
    for pat, kind, what in _other_files():
        if pat.search(tail):
            return kind, what
    return None


_COMPILE_INPUTS = re.compile(r"module\.mlir|(compile_options|topology)\.(pb|txt|pbtxt|textproto)")


def dump_file_kind(fname: str, parent: str | None = None) -> tuple[str, str] | None:
    """(kind, what it is) of a file named as an XLA dump (module_NNNN....) that is not a stage of a
    module's passes: one of classify's kinds, or SNAPSHOT; ("module", ...) for the module texts that are
    not stages; None for a stage, or a name that is not an XLA dump's.  PARENT, the name of the
    directory holding the file: PJRT writes a module's compile inputs into module_NNNN.NAME/
    (xla/pjrt/dump/dump.cc)."""
    if parent is not None and _HEAD.match(parent) and _COMPILE_INPUTS.fullmatch(fname):
        return COMPILE_INPUT, "PJRT's compile inputs of a module (its StableHLO, compile options, device topology)"
    if _HEAD.match(fname) is None:
        return None
    parsed, reason = _parse_name(fname, {})
    if parsed is not None:
        return None
    if reason.startswith("an HloSnapshot"):
        return SNAPSHOT, reason
    return classify(fname)


def _parse_name(fname: str, known_names: dict) -> tuple[_Parsed | None, str | None]:
    """What a dump file's name says: (_Parsed, None) for a stage, (None, reason) otherwise."""
    head = _HEAD.match(fname)
    if head is None:
        return None, "not named like an XLA dump (module_NNNN....)"
    key = (head.group("ts"), head.group("id"))
    tail = head.group("tail") or ""
    if ".hlo_snapshot." in f".{tail}" or re.search(r"(^|\.)snapshot\.[^.]*\.pb$", tail):
        return None, "an HloSnapshot (hlo run SNAPSHOT.pb replays it)"
    if ".hlo_unoptimized_snapshot." in f".{tail}":   # --xla_dump_hlo_unoptimized_snapshots (.pb, or .txt as text)
        return None, "an HloSnapshot before optimizations, an HloUnoptimizedSnapshot (hlo run FILE runs it on its arguments)"
    other = classify(fname)
    if other is not None:
        return None, other[1]
    split = _split_ext(tail)
    if split is None:
        return None, "not a module dump (LLVM IR, object file, debug options, ...)"
    stem, ext = split
    name = known_names.get(key)
    if name and stem.startswith(name + "."):
        word = stem[len(name) + 1:]
        if word == BEFORE or re.fullmatch(_AFTER_WORD, word):
            return _Parsed(key, BEFORE if word == BEFORE else AFTER, name, word=word), None
        if re.fullmatch(r"(?:before|after)_[a-z][a-z0-9_]*", word):
            return _Parsed(key, NAMED, name, word=word), None
    m = _ENDS.match(stem)
    if m:
        which = m.group("which")
        kind = BEFORE if which == BEFORE else AFTER
        return _Parsed(key, kind, m.group("name"), word=which), None
    m = _NAMED.match(stem)
    if m and _STEP.match(stem) is None:
        return _Parsed(key, NAMED, m.group("name"), word=m.group("which")), None
    rest = None
    if name and stem.startswith(name + "."):
        m2 = re.match(r"(\d{4,})\.(.+)$", stem[len(name) + 1:])
        if m2:
            rest = (int(m2.group(1)), m2.group(2))
    if rest is None:
        m2 = _STEP.match(stem)
        if m2 is None:
            return None, "not a stage of the pass pipeline (no step number)"
        name = m2.group("name")
        rest = (int(m2.group("num")), m2.group("rest"))
    num, what = rest
    if _BETWEEN.match(what):
        return _Parsed(key, PASS, name, num, what), None
    if _DURING.match(what):
        return _Parsed(key, DURING, name, num, what), None
    return None, "not a stage of the pass pipeline"


def config_beside(path) -> str | None:
    """The config.pbtxt XLA dumped for the module of the dump file PATH (module_NNNN.NAME.config.pbtxt,
    or module_NNNN.config.pbtxt when the name was left out, in the same directory; without the
    timestamp the stages may carry), or None."""
    p = Path(path)
    head = _HEAD.match(p.name)
    if head is None or p.name.endswith("config.pbtxt"):
        return None
    mid = head.group("id")
    tail = head.group("tail") or ""
    try:
        names = [e.name for e in os.scandir(p.parent) if e.name.endswith(".config.pbtxt") and e.is_file()]
    except OSError:
        return None
    best = None
    for n in sorted(names):
        h = _HEAD.match(n)
        if h is None or h.group("id") != mid:
            continue
        name = (h.group("tail") or "")[:-len(".config.pbtxt")] if h.group("tail") != "config.pbtxt" else ""
        if name and not tail.startswith(name + "."):
            continue
        if h.group("ts") not in (None, head.group("ts")):
            continue
        if best is None or len(n) > len(best):
            best = n
    return str(p.parent / best) if best else None


def text_key(path: str) -> str:
    """What decides that two stages hold "the same text": the SHA-256 of the file's bytes."""
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def is_dump_dir(path) -> bool:
    """Whether PATH is a directory holding at least one file named like an XLA module dump."""
    p = Path(path)
    if not p.is_dir():
        return False
    try:
        return any(_HEAD.match(e.name) and e.is_file() for e in os.scandir(p))
    except OSError:
        return False


def read_dump_dir(path) -> DumpDir:
    """The modules of an XLA dump directory (its top level; XLA writes no subdirectories of
    modules) and their stages in pass order.  Raises HloInputError (exit 2) for a path that is not
    a directory, cannot be listed, or holds no module dump."""
    p = Path(path)
    where = str(path)
    if not p.exists():
        raise HloInputError(f"{where}: no such directory", [Diagnostic("no such directory", where, code="E085")])
    if not p.is_dir():
        raise HloInputError(f"{where}: not a directory", [Diagnostic("not a directory", where, code="E085")])
    try:
        entries = sorted((e.name for e in os.scandir(p) if not e.name.startswith(".")))
    except OSError as e:
        msg = f"cannot list the directory ({e.strerror or e})"
        raise HloInputError(f"{where}: {msg}", [Diagnostic(msg, where, code="E085")]) from None
    files = [n for n in entries if (p / n).is_file()]
    # names first from the before/after_optimizations dumps (no step number to confuse them)
    known: dict = {}
    for n in files:
        head = _HEAD.match(n)
        if head and head.group("tail"):
            split = _split_ext(head.group("tail"))
            m = _BEFORE_NAME.match(split[0]) if split else None
            if m and m.group("name"):
                known.setdefault((head.group("ts"), head.group("id")), m.group("name"))
    groups: dict = {}
    ignored = []
    snapshots: dict = {}
    for n in files:
        parsed, reason = _parse_name(n, known)
        if parsed is None:
            ignored.append(IgnoredFile(str(p / n), reason))
            head = _HEAD.match(n)
            if head and reason.startswith("an HloSnapshot"):
                snapshots.setdefault((head.group("ts"), head.group("id")), []).append(str(p / n))
            continue
        groups.setdefault(parsed.key, []).append((parsed, str(p / n)))
    if not groups:
        if not files:
            msg = "the directory is empty"
        else:
            msg = (f"no XLA module dump here (files named module_NNNN.NAME....txt or .hlo.pb, as --xla_dump_to=DIR "
                   f"writes them); {len(files)} other file{'s' if len(files) != 1 else ''}")
            snaps = [f for f in ignored if f.reason.startswith("an HloSnapshot")]
            unopt = [f for f in snaps if "HloUnoptimizedSnapshot" in f.reason]
            if unopt and len(unopt) == len(snaps):
                # (measured with jaxlib 0.10.2, XLA CPU: this flag writes the snapshots alone)
                msg += (f", {len(unopt)} of them HloUnoptimizedSnapshots (hlo run FILE runs one on its arguments; "
                        "with --xla_dump_hlo_unoptimized_snapshots XLA dumps no module stages: leave it out to "
                        "get them)")
            elif snaps:
                msg += (f", {len(snaps)} of them HloSnapshots (hlo run SNAPSHOT.pb replays one; XLA writes the "
                        "modules too with --xla_dump_hlo_as_text or --xla_dump_hlo_as_proto)")
        subdirs = [n for n in entries if (p / n).is_dir() and is_dump_dir(p / n)]
        if subdirs:
            msg += (f"; {'these subdirectories hold' if len(subdirs) > 1 else 'this subdirectory holds'} "
                    f"dumps: " + ", ".join(str(p / n) for n in subdirs[:5]) + (", ..." if len(subdirs) > 5 else ""))
        raise HloInputError(f"{where}: {msg}", [Diagnostic(msg, where, code="E086")])
    modules = [_module(key, items, where, tuple(snapshots.get(key, ()))) for key, items in groups.items()]
    modules.sort(key=lambda m: (m.timestamp or "", int(m.id)))
    return DumpDir(where, tuple(modules), tuple(ignored))


def _module(key, items, directory: str, snapshots: tuple = ()) -> DumpModule:
    ts, mid = key
    by_stage: dict = {}
    names = []
    for parsed, path in items:
        skey = (_KIND_RANK[parsed.kind], parsed.number if parsed.number is not None else -1, parsed.rest,
                parsed.word or "")
        by_stage.setdefault(skey, (parsed, []))[1].append(path)
        if parsed.name:
            names.append((parsed.kind != BEFORE, parsed.name))
    raw, named = [], []
    for skey in sorted(by_stage):
        parsed, paths = by_stage[skey]
        paths.sort(key=lambda f: (not f.endswith(_TEXT_EXT), f))
        (named if parsed.kind == NAMED else raw).append((parsed, tuple(paths)))
    for item in sorted(named, key=lambda it: _named_rank(it[0].word)):
        raw.insert(_named_position(item, raw), item)
    return DumpModule(mid, _module_name(names), _number(raw), ts, directory, snapshots)


def _module_name(names: list) -> str | None:
    """The module's name: the before_optimizations dump's (nothing follows the name there), else the
    name most of its files give, the shortest on a tie; never dependent on set order."""
    if not names:
        return None
    counts: dict = {}
    for not_before, n in names:
        counts[n] = counts.get(n, 0) + (1 if not_before else len(names) + 1)
    return min(counts, key=lambda n: (-counts[n], len(n), n))


def _named_rank(word: str) -> int:
    order = list(NAMED_STAGES)
    return order.index(word) if word in order else len(order)


def _named_position(item, raw) -> int:
    """Where a stage XLA dumps by name (after_spmd_partitioner...) goes among RAW (before_optimizations,
    the numbered pass dumps, after_optimizations): without pass dumps, after the earlier named ones;
    among pass dumps, before the last of the first run of pass dumps holding the same text (XLA dumps
    each pipeline at its start, so that is the start of the pipeline that ran next); else before the
    first dump of the pipeline XLA runs next; else after the last pass dump."""
    parsed, paths = item
    numbered = [k for k, (p, _) in enumerate(raw) if p.kind in (PASS, DURING)]
    after_before = 1 if raw and raw[0][0].kind == BEFORE else 0
    if not numbered:
        k = after_before
        while k < len(raw) and raw[k][0].kind == NAMED:
            k += 1
        return k
    run = _same_text_run(paths[0], [(k, raw[k][1][0]) for k in numbered])
    if run:
        return run[-1]
    nxt = NAMED_STAGES.get(parsed.word, (None, None))[1]
    if nxt is not None:
        for k in numbered:
            if raw[k][0].kind == PASS and raw[k][0].rest.split(".after_", 1)[0] == nxt:
                return k
    return numbered[-1] + 1


def _same_text_run(path: str, candidates: list) -> list:
    """The positions of the first run of consecutive CANDIDATES ((position, file)) whose file holds the
    same bytes as PATH (files of another size are not read)."""
    try:
        size = os.path.getsize(path)
        want = None
        run: list = []
        for k, f in candidates:
            same = False
            if os.path.getsize(f) == size:
                want = want or text_key(path)
                same = text_key(f) == want
            if same:
                run.append(k)
            elif run:
                break
        return run
    except OSError:
        return []


def _number(raw) -> tuple[Stage, ...]:
    """Stages with their index and pass-name occurrences."""
    fields = []
    for parsed, paths in raw:
        f = {"kind": parsed.kind, "files": paths, "number": parsed.number, "word": parsed.word}
        if parsed.kind == PASS:
            m = _BETWEEN.match(parsed.rest)
            f.update(pipeline=m.group("pipeline"), pass_name=m.group("after"), next_pass=m.group("before"))
        elif parsed.kind == DURING:
            m = _DURING.match(parsed.rest)
            f.update(pass_name=m.group("pass"), step=m.group("step"))
        fields.append(f)
    counts: dict = {}
    for f in fields:
        n = _occurrence_name(f)
        if n is not None:
            counts[n] = counts.get(n, 0) + 1
    seen: dict = {}
    out = []
    for k, f in enumerate(fields):
        n = _occurrence_name(f)
        if n is not None:
            seen[n] = seen.get(n, 0) + 1
            f.update(occurrence=seen[n], occurrences=counts[n])
        out.append(Stage(index=k, **f))
    return tuple(out)


def _occurrence_name(f: dict) -> str | None:
    if f["kind"] == PASS:
        return f["pass_name"]
    if f["kind"] == DURING:
        return f["step"]
    return None


def stages_from_files(paths) -> DumpModule:
    """A list of files taken as the stages of one module.  Files named as XLA dumps one module
    (a shell pattern such as dump/module_0008.*) are put in XLA's pass order whatever the order
    given, and those that are not stages (buffer assignments, LLVM IR...) are left out (listed in
    `ignored`); any other list is taken in the order given.  Raises HloInputError (exit 2) for a
    file that does not exist or is not a regular file."""
    raw, ignored = [], []
    for path in paths:
        p = Path(path)
        if not p.is_file():
            what = "no such file" if not p.exists() else "not a regular file"
            raise HloInputError(f"{path}: {what}", [Diagnostic(what, str(path), code="E085")])
        raw.append((p, _HEAD.match(p.name)))
    keys = {(m.group("ts"), m.group("id")) for _, m in raw if m}
    if raw and all(m for _, m in raw) and len(keys) == 1:
        known: dict = {}
        for p, m in raw:
            split = _split_ext(m.group("tail") or "")
            b = _BEFORE_NAME.match(split[0]) if split else None
            if b and b.group("name"):
                known[keys.copy().pop()] = b.group("name")
        items = []
        for p, _ in raw:
            parsed, reason = _parse_name(p.name, known)
            if parsed is None:
                ignored.append(IgnoredFile(str(p), reason))
            else:
                items.append((parsed, str(p)))
        if items:
            m = _module(keys.pop(), items, None)
            return DumpModule(None, m.name, m.stages, ignored=tuple(ignored))
    out = []
    for p, _ in raw:
        parsed, _ = _parse_name(p.name, {})
        out.append((parsed or _Parsed((None, None), FILE, None), (str(p),)))
    names = [r[0].name for r in out if r[0].name]
    return DumpModule(None, names[0] if names and len(set(names)) == 1 else None, _number(out), pass_order=False)


__all__ = ["AFTER", "BEFORE", "DURING", "FILE", "PASS", "DumpDir", "DumpModule", "IgnoredFile", "Selection", "Stage",
           "is_dump_dir", "read_dump_dir", "stages_from_files", "text_key"]
