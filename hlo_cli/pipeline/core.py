"""The run pipeline: source -> module -> check -> memory budget -> inputs -> execute (one device, the
local devices, or a Ray cluster) -> outputs, dumps, comparison, finite checks, timings.

`run(request, hooks)` does what `hlo run` does, and returns a RunResult instead of printing: the
CLI (cli/run.py) maps its options to a RunRequest and prints the result.  Everything that will be
written is decided before anything runs (nothing a user gave is ever overwritten); errors are the
typed HloErrors of hlo_cli.errors, each with its exit code (classify_error gives the code and
message the CLI ends with).  A non-finite value under `check_finite` and a comparison that fails
are results, not errors (RunResult.status, RunResult.exit_code).
"""
from __future__ import annotations

import abc

import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Diagnostic, ExitCode, HloError, HloInputError, HloResourceError


def _input_error(msg: str):
    raise HloInputError(msg)


# ----------------------------------------------------------------------------- what a run is asked to do

@dataclass
class DumpOptions:
    """--dump-dir: every executed instruction's value (or, `summary`, statistics only) under `dir`."""
    dir: str
    filter: str | None = None          # a regular expression on the instruction's name or opcode
    summary: bool = False
    force: bool = False                # write into a non-empty directory hlo did not create


@dataclass
class DeviceOptions:
    """Where and how a multi-device run runs (hlo run's device options)."""
    replicas: int | None = None
    partitions: int | None = None
    per_device: bool = False           # every input holds one value per device, stacked
    output_global: bool = False        # --output/--expect hold global arrays
    output_sharding: str | None = None
    device: int | None = None          # the device whose results are shown
    cluster: str = "local"             # local, or ray
    ray_address: str | None = None
    ray_actors: int | None = None
    # the result values are wanted in this process; False lets a run on Ray leave them on its actors
    # (summaries here: pipeline.io.RowSummary) and write --output there (hlo run: unless --print)
    values_here: bool = True

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class RunRequest:
    """One run of a module.  Inputs: `inputs` ([NAME=]FILE.npy specs), `inputs_npz` (an .npz
    archive or an HloSnapshot .pb), `random_inputs`, or `arguments` (arrays, in parameter order);
    none of them for a snapshot file runs on its stored arguments."""
    module_file: str
    module_choice: str | None = None   # which module of a file holding several
    inputs: tuple = ()
    inputs_npz: str | None = None
    random_inputs: bool = False
    arguments: list | None = None
    seed: int = 0
    output: str | None = None          # .npz (all results) or .npy (a single one)
    force: bool = False                # --output may replace an existing file
    expect: str | None = None          # a reference .npz/.npy to compare with
    rtol: float = 1e-3
    atol: float = 1e-3
    dump: DumpOptions | None = None
    check_finite: bool = False
    max_iterations: int | None = None
    elided_constants: str | None = None    # zeros or random: run a module whose constants were elided
    check: bool = True                 # the checker's rules before running
    use_cache: bool = True
    devices: DeviceOptions = field(default_factory=DeviceOptions)
    profile: bool = False
    profile_top: int = 15              # rows of the profile's top instructions
    memory_limit: Any = "auto"         # bytes, "auto" (this machine) or None (no check)
    numerics: str = "auto"             # auto, cpu or gpu
    reference: Any = None              # a Reference (tools/reference.py: XlaReference) run beside hlo's


class RunHooks:
    """What a run reports while it goes; the default does nothing.  `watched`: a person is watching
    (a progress display), so slow steps announce themselves."""
    watched = False

    def phase(self, text: str) -> None:
        """What the run does now (parsing, checking, reading inputs, preparing)."""

    def note(self, text: str) -> None:
        """A note for the user (a conversion of an input, a snapshot's result not compared)."""

    def numerics(self, report: dict) -> None:
        """Whose arithmetic the run reproduces (interpreter/ops/numerics.py's report), once decided."""

    def executed(self) -> None:
        """The execution ended (normally or not): what follows is reporting."""

    def watch(self, source) -> None:
        """The run goes on in other processes (--cluster ray): SOURCE() says where it is (a
        interpreter.watch.Sample, or None), for a progress display; None: it stopped."""


class Reference(abc.ABC):
    """A second run of the same module to compare with (--reference), prepared with the arguments
    hlo bound before hlo's own run and run after it; tools/reference.py's XlaReference is one."""

    @abc.abstractmethod
    def prepare(self, module, device_run, args, hooks: RunHooks, request: RunRequest) -> None:
        """Take what the reference run needs (the module, the arguments hlo bound), before hlo runs."""

    @abc.abstractmethod
    def report(self, text: str, leaves: list, request: RunRequest, timings: dict, hooks: RunHooks) -> dict:
        """The comparison: a document with "status" (ok, mismatch or error) and --expect's rows."""


@dataclass
class RunResult:
    """What a run gave.  Filled as the run goes: after an error, what was known until then."""
    module_file: str
    module: Any = None                 # the Module (hlo_cli.ir.module)
    text: str | None = None            # the text it was parsed from
    source: Any = None                 # checker.positions.SourceIndex of the text
    info: dict = field(default_factory=dict)      # tool, module_file, sha256, inputs, seed, devices, numerics
    timings: dict = field(default_factory=dict)   # parse_s, check_s, memory_check_s, inputs_s, execute_s, ...
    status: str = "ok"                 # ok, mismatch, non-finite or reference-error
    leaves: list = field(default_factory=list)    # [(array, Shape)] of the result (one device)
    device_run: Any = None             # the DeviceRun of a multi-device run
    device_leaves: list | None = None  # its results (DeviceLeaf)
    mismatch: dict | None = None       # the comparison with request.expect or the snapshot's result
    expect_label: str | None = None    # what was compared with (a snapshot's result)
    reference: dict | None = None      # request.reference's report
    dumper: Any = None                 # the Dumper of request.dump
    profile: dict | None = None        # the profile's summary
    non_finite: dict | None = None     # the first non-finite value's report (check_finite)

    @property
    def module_name(self) -> str | None:
        return None if self.module is None else self.module.name

    @property
    def failed(self) -> bool:
        return self.status in ("mismatch", "non-finite")

    @property
    def exit_code(self) -> int:
        if self.failed:
            return ExitCode.FAILURE
        if self.status == "reference-error":
            return ExitCode.REFERENCE_FAILED
        return ExitCode.OK


def classify_error(e: BaseException) -> tuple[int, str]:
    """(exit code, message) of a run that ended in E, as `hlo run` ends and reports it."""
    if isinstance(e, HloError):
        return int(e.exit_code), str(e)
    if isinstance(e, KeyboardInterrupt):
        return 130, "interrupted"
    if isinstance(e, MemoryError):
        return HloResourceError.exit_code, "out of memory"
    if isinstance(e, RecursionError):
        return ExitCode.FAILURE, "the module is nested too deeply to process"
    return ExitCode.INTERNAL, f"internal error: {type(e).__name__}: {e}"


def diagnostic_dict(d) -> dict:
    """A diagnostic as JSON output shows it."""
    return {"file": d.file, "line": d.line, "column": d.column, "severity": d.severity, "code": d.code,
            "instruction": d.instruction, "message": d.message}


def error_document(result: RunResult, code: int, message: str, e: BaseException) -> dict:
    """The JSON document of a run that ended in error E (CODE and MESSAGE: classify_error's)."""
    diags = getattr(e, "diagnostics", None) or [Diagnostic(message, result.module_file, code="E000")]
    doc = {"module": result.module_name, "status": "error", "exit_code": code, "message": message,
           "diagnostics": [diagnostic_dict(d) for d in diags]}
    uses = getattr(e, "uses", None)
    if uses:                                         # hlo cannot run it (exit code 7)
        doc["status"] = "unsupported"
        doc["unsupported"] = [u.to_dict() for u in uses]
        doc["hint"] = e.hint
    if isinstance(e, HloResourceError):
        doc["memory"] = {k: getattr(e, k) for k in ("instruction", "requested_bytes", "result_bytes")
                         if getattr(e, k, None) is not None}
    est = getattr(e, "estimate", None)
    if est is not None and hasattr(est, "to_dict"):          # the memory limit refused the run (exit code 5)
        doc.setdefault("memory", {}).update(estimate=est.to_dict(), limit_bytes=getattr(e, "limit", None),
                                            total_bytes=getattr(e, "total", None))
    doc.update(result.info)
    if result.timings:
        doc["timings"] = result.timings
    if result.profile is not None and result.profile.get("stopped"):     # (the time until the run stopped)
        doc["profile"] = result.profile
    return doc


# ----------------------------------------------------------------------------- the run

def run(request: RunRequest, hooks: RunHooks | None = None, result: RunResult | None = None) -> RunResult:
    """Run REQUEST and return its RunResult.  HOOKS hear what the run does (RunHooks); RESULT, when
    given, is the one filled in, so that a caller still has what was known when an error is raised."""
    return _Pipeline(request, hooks or RunHooks(), result or RunResult(request.module_file)).run()


class _Pipeline:
    def __init__(self, request: RunRequest, hooks: RunHooks, result: RunResult):
        self.req, self.hooks, self.res = request, hooks, result
        self.protected: set[str] = set()
        self.snap = None
        self.snap_args = False
        self.reference_values = None
        self.guard = None
        self.prof = None

    def run(self) -> RunResult:
        self._load()
        args = self._inputs()
        self._plan_outputs(args)
        hook = self._hooks()
        value = self._execute(args, hook)
        if self.res.non_finite is None:
            self._collect(value)
        return self.res

    # -- source -> module -> check -> memory budget
    def _load(self):
        from .. import __version__
        from ..checker.positions import SourceIndex
        from ..sources import load
        req, res, clock = self.req, self.res, time.perf_counter
        module_file = req.module_file
        t0 = clock()
        self.hooks.phase("parsing " + ("<stdin>" if module_file == "-" else Path(module_file).name))
        module, src = load(module_file, req.module_choice, req.use_cache)
        res.module, res.text = module, src.text
        res.timings["parse_s"] = clock() - t0
        import hashlib
        res.info.update(tool={"name": "hlo", "version": __version__},
                        module_file="<stdin>" if module_file == "-" else module_file,
                        module_sha256=hashlib.sha256(res.text.encode("utf-8", "surrogatepass")).hexdigest())
        res.source = SourceIndex(res.text)
        from .verdicts import RunVerdicts
        verdicts = RunVerdicts(res.text, src.file, req.devices.replicas, req.devices.partitions, req.use_cache)
        try:
            self._prepare(module, verdicts)
        finally:
            verdicts.save()
        if module_file != "-":
            self.protected.add(str(Path(os.path.realpath(module_file))))

    # -- check -> memory budget: what the text alone decides comes from the cache on a repeat (verdicts.py)
    def _prepare(self, module, verdicts):
        from .devices import DeviceRun
        from .prepare import check_errors, has_elided_constants, raise_check_errors, refuse_elided
        from .verdicts import is_bool, is_dict
        req, res, clock = self.req, self.res, time.perf_counter
        t0 = clock()
        self.hooks.phase("checking " + module.name)
        if req.check:
            rows = verdicts.get("check_errors", lambda: [_diagnostic_row(d) for d in check_errors(
                module, res.text, req.devices.replicas, req.devices.partitions)], _diagnostic_rows_valid)
            raise_check_errors(module, [Diagnostic(**d) for d in rows])
        if verdicts.get("custom_calls", lambda: _calls_custom(module), is_bool):
            from .support import check_runnable
            check_runnable(module)         # every instruction hlo cannot run, named at once (exit 7)
        res.timings["check_s"] = clock() - t0
        if req.elided_constants is None and verdicts.get("elided", lambda: has_elided_constants(module), is_bool):
            refuse_elided(module, res.source)
        dv = res.device_run = DeviceRun(module, req.devices.to_dict(), verdicts.get)
        if dv.multi:
            res.info["devices"] = {"replicas": dv.grid.replicas, "partitions": dv.grid.partitions}
        res.info["numerics"] = verdicts.get("numerics:" + str(req.numerics), lambda: _numerics(module, req.numerics),
                                            is_dict)
        self.hooks.numerics(res.info["numerics"])
        t0 = clock()
        self.hooks.phase("estimating the memory of " + module.name)
        if req.memory_limit is not None:
            from ..interpreter.memory import MemoryEstimate, check_budget, estimate, remember_estimate
            record = verdicts.get("memory_estimate", lambda: estimate(module).to_record(), _estimate_valid)
            remember_estimate(module, MemoryEstimate.from_record(record))
            check_budget(module, req.memory_limit, devices=dv.grid.count if dv.multi else 1)
        from ..interpreter.memory import preflight_facts, remember_preflight_facts
        remember_preflight_facts(module, verdicts.get("preflight", lambda: list(preflight_facts(module)), _is_pair))
        res.timings["memory_check_s"] = clock() - t0

    # -- inputs: every file's header is checked against its parameter before its data is read
    def _inputs(self) -> list:
        from .prepare import snapshot_of
        req, res, dv = self.req, self.res, self.res.device_run
        t0 = time.perf_counter()
        self.hooks.phase("reading inputs")
        params = res.module.entry_computation.parameters
        self.snap = snapshot_of(req.module_file)
        given = bool(req.inputs or req.inputs_npz or req.random_inputs or req.arguments is not None)
        self.snap_args = self.snap is not None and not given
        if self.snap is not None and not self.snap_args:
            self.hooks.note("note: the inputs given replace the snapshot's arguments; its stored result is not "
                            "compared")
        if self.snap_args:
            args = self._snapshot_args(params)
        elif req.random_inputs:
            args = self._random_args(params)
        elif req.arguments is not None:
            from ..interpreter.inputs import bind
            values = bind(params, req.arguments)
            res.info["inputs"] = [{"parameter": p.name, "number": p.parameter_number, "given": True}
                                  for p in params if p.shape.element_type != "token"]
            args = dv.distribute(values, None) if dv.multi else values
        else:
            args = self._file_args(params)
        res.timings["inputs_s"] = time.perf_counter() - t0
        if req.check_finite:
            self._note_nonfinite_inputs(params, args)
        return args

    def _snapshot_args(self, params) -> list:
        from .inputs import snapshot_arguments
        dv, notes = self.res.device_run, []
        values = snapshot_arguments(self.snap, params, notes)
        self.res.info["inputs"] = [{"parameter": p.name, "number": p.parameter_number, "snapshot": self.req.module_file}
                                   for p in params if p.shape.element_type != "token"]
        args = dv.distribute(values, notes) if dv.multi else values
        for note in notes:
            self.hooks.note(f"note: {note}")
        return args

    def _random_args(self, params) -> list:
        from ..interpreter.inputs import random_inputs
        req, dv = self.req, self.res.device_run
        if req.inputs or req.inputs_npz:
            _input_error("--random-inputs cannot be combined with --input/--inputs")
        if dv.per_device:
            _input_error("--per-device says how --input/--inputs hold their values; --random-inputs draws "
                         "global values and splits them by the parameters' shardings")
        self.res.info.update(inputs=[{"parameter": p.name, "number": p.parameter_number, "random": True}
                                     for p in params if p.shape.element_type != "token"], seed=req.seed)
        return dv.random_inputs(req.seed) if dv.multi else random_inputs(params, req.seed)

    def _file_args(self, params) -> list:
        from .inputs import load_inputs, require_inputs
        req, res, dv = self.req, self.res, self.res.device_run
        if not req.inputs and not req.inputs_npz:
            require_inputs(params)
        loaded = load_inputs(params, req.inputs, req.inputs_npz, dv.shape_for if dv.multi else None,
                             read=not dv.remote)
        self.protected |= loaded.paths
        res.info["inputs"] = loaded.sources
        if any(inst.opcode == "rng" for comp in res.module.computations for inst in comp.instructions):
            res.info["seed"] = req.seed
        args = dv.distribute(loaded.values, loaded.notes) if dv.multi else loaded.values
        for note in loaded.notes:
            self.hooks.note(f"note: {note}")
        return args

    def _note_nonfinite_inputs(self, params, args):
        import numpy as np

        from .io import has_nonfinite, leaves_with_shapes, stats, stats_text
        multi = self.res.device_run.multi
        for p, a in zip(params, args):
            if multi and not hasattr(a, "value"):
                continue                  # read by the Ray actors (--cluster ray): not here
            a = a.value if multi else a
            bad = [leaf for leaf, _ in leaves_with_shapes(a, p.shape) if has_nonfinite(np.asarray(leaf))]
            if bad:
                self.hooks.note(f"note: input parameter {p.parameter_number} '{p.name}' holds non-finite values "
                                f"({stats_text(stats(np.asarray(bad[0])))}); --check-finite looks for where new "
                                f"ones appear")

    # -- everything that will be written is decided before anything runs
    def _plan_outputs(self, args):
        req, res, dv = self.req, self.res, self.res.device_run
        if req.expect:
            self.protected.add(str(Path(os.path.realpath(req.expect))))
        root_shape = res.module.entry_computation.root_instruction.shape
        if req.output:
            check_output_path(req.output, req.force, self.protected, root_shape)
        snap = self.snap
        if req.expect and dv.multi:
            dv.check_reference(req.expect)        # (read after the run: the result's form decides its shapes)
        elif req.expect:
            from .compare import load_reference
            self.reference_values = load_reference(req.expect, [(s.dims, s.dynamic) if s.is_dynamic else s.dims
                                                                for s in root_shape.leaves()
                                                                if s.element_type not in ("token", "opaque")])
        elif self.snap_args and snap.result is None and req.reference is None:
            self.hooks.note("note: the snapshot holds no result to compare with (--reference xla runs it on XLA)")
        elif self.snap_args and snap.result is not None and dv.multi:
            self.hooks.note("note: the snapshot's stored result is not compared on several devices")
        elif self.snap_args and snap.result is not None:       # the stored result, as --expect would compare it
            from .inputs import snapshot_reference
            self.reference_values = snapshot_reference(snap)
            res.expect_label = f"{req.module_file} (the snapshot's result)"
        if req.reference is not None:
            req.reference.prepare(res.module, dv, args, self.hooks, req)     # before hlo's own run
        if not req.expect and req.reference is None and self.reference_values is None and dv.streamable():
            dv.keep = True                     # the result stays on the Ray actors: summaries here
            dv.stream_to = req.output          # ... and --output written by them

    def _hooks(self):
        from .finite import FiniteGuard
        req, res = self.req, self.res
        hooks = []
        if req.dump is not None:
            res.dumper = self._dumper()
            hooks.append(res.dumper)
        self.guard = FiniteGuard(res.module) if req.check_finite else None
        if self.guard:
            hooks.append(self.guard)
        res.device_run.dumper, res.device_run.guard = res.dumper, self.guard   # (--cluster ray makes them again)
        if self.hooks.watched:
            res.device_run.watch = self.hooks.watch
        res.device_run.profile_top = req.profile_top
        if req.profile:
            from ..interpreter.profiling import Profile
            self.prof = Profile()
            hooks = [self.prof.hook(hooks[0] if len(hooks) == 1 else _all(hooks))] if hooks else []
        if not hooks:
            return None
        return hooks[0] if len(hooks) == 1 else _all(hooks)

    def _dumper(self):
        from .dumps import OUR_DUMP_FILE, Dumper, prepare_dump_dir
        req, dump = self.req, self.req.dump
        try:
            pattern = re.compile(dump.filter) if dump.filter else None
        except re.error as e:
            _input_error(f"--dump-filter {dump.filter!r}: not a regular expression ({e})")
        if req.output and Path(os.path.realpath(req.output)).parent == Path(os.path.realpath(dump.dir)) and \
                OUR_DUMP_FILE.match(Path(req.output).name):
            _input_error(f"--output {req.output}: a dump file name inside --dump-dir; choose another name")
        d = prepare_dump_dir(dump.dir, dump.force, self.protected)
        return Dumper(self.res.module, d, pattern, dump.summary, self.res.info)

    # -- execute: execute_s is the evaluation of the entry computation alone
    def _execute(self, args, hook):
        from ..interpreter import RunOptions, run_module
        from .dumps import DumpFailed
        from .finite import NonFinite
        req, res, dv, prof = self.req, self.res, self.res.device_run, self.prof
        options = RunOptions(seed=req.seed, max_iterations=req.max_iterations, elided_constants=req.elided_constants,
                             profile=prof, numerics=req.numerics)
        self.hooks.phase("preparing " + res.module.name)        # the sampler shows the computations once they run
        if prof is not None and hook is None:
            import threading
            prof.start_sampling(threading.get_ident())
        t0 = time.perf_counter()
        try:
            value = dv.run(args, options, hook, None) if dv.multi else run_module(res.module, args, options, hook, None)
        except NonFinite:
            self._stopped(t0)
            if res.dumper:
                res.dumper.finish("non-finite", res.timings)
            res.status, res.non_finite = "non-finite", self.guard.report
            return None
        except BaseException as e:
            self._stopped(t0)
            if res.dumper:
                status = "interrupted" if isinstance(e, KeyboardInterrupt) else "error"
                try:
                    res.dumper.finish(status, res.timings)
                except HloError:
                    pass                       # the error that stopped the run is the one to report
            if isinstance(e, DumpFailed):
                raise e.error from None
            raise
        res.timings["execute_s"] = time.perf_counter() - t0
        self.hooks.executed()
        if prof is not None:
            prof.stop_sampling()
            res.profile = prof.summary(res.timings["execute_s"], top=req.profile_top)
            if dv.multi and dv.remote_profile is not None:     # (--cluster ray: the actors' profiles)
                res.profile = dv.remote_profile
            elif dv.multi and prof.mode == "steps":
                res.profile["mode"] = "steps, per device; the device walk's own instructions sampled"
        return value

    def _stopped(self, t0: float):
        """A run that stopped (an error, ^C, a non-finite value): its time, and the profile until then."""
        self.res.timings["execute_s"] = time.perf_counter() - t0
        self.hooks.executed()
        if self.prof is None:
            return
        try:
            self.prof.stop_sampling()
            doc = self.prof.summary(self.res.timings["execute_s"], top=self.req.profile_top)
            dv = self.res.device_run
            if dv is not None and dv.multi and dv.remote_profile is not None:
                doc = dict(dv.remote_profile)
            doc["stopped"] = True
            self.res.profile = doc
        except Exception:       # noqa: BLE001 -- the error that stopped the run is the one to report
            pass

    # -- outputs, comparison, the reference
    def _collect(self, value):
        import numpy as np

        from .compare import compare
        from .io import leaves_with_shapes, write_results
        req, res, dv = self.req, self.res, self.res.device_run
        if dv.multi and dv.ray_run is not None:
            res.info["cluster"] = dv.ray_run.to_dict()
        t0 = time.perf_counter()
        if dv.multi:
            res.device_leaves = dv.leaves(value)
        else:
            root_shape = res.module.entry_computation.root_instruction.shape
            res.leaves = [(np.asarray(v), s) for v, s in leaves_with_shapes(value, root_shape)]
        if res.dumper:
            res.dumper.finish("ok", res.timings)
        if dv.multi and dv.stream_to is not None:
            arrays = []
            dv.write_streamed(req.output, res.device_leaves)
        elif dv.multi:
            arrays = dv.output_arrays(res.device_leaves) if (req.output or req.expect) else []
        else:
            arrays = [v for v, _ in res.leaves]
        if req.output and dv.stream_to is None:
            write_results(req.output, arrays)
        res.timings["write_s"] = time.perf_counter() - t0
        if dv.multi and req.expect:
            self.reference_values = dv.reference(req.expect, arrays)
            arrays = [np.asarray(a) for a in arrays]
        if self.reference_values is not None:
            res.mismatch = compare(arrays, self.reference_values, req.rtol, req.atol)
        failed = res.mismatch is not None and not res.mismatch["ok"]
        if req.reference is not None:   # per device stacked, or global: the forms the reference's results come in
            mine = [np.asarray(leaf.global_value if leaf.stacked is None else leaf.stacked)
                    for leaf in res.device_leaves] if dv.multi else [v for v, _ in res.leaves]
            res.reference = req.reference.report(res.text, mine, req, res.timings, self.hooks)
            failed = failed or res.reference["status"] == "mismatch"
        if failed:
            res.status = "mismatch"
        elif res.reference is not None and res.reference["status"] == "error":
            res.status = "reference-error"


def _diagnostic_row(d: Diagnostic) -> dict:
    from dataclasses import asdict
    return asdict(d)


def _diagnostic_rows_valid(rows) -> bool:
    """ROWS are diagnostics as _diagnostic_row writes them (a cache entry read back)."""
    if not isinstance(rows, list):
        return False
    try:
        for d in rows:
            Diagnostic(**d)
    except TypeError:
        return False
    return True


def _estimate_valid(record) -> bool:
    from ..interpreter.memory import MemoryEstimate
    try:
        return MemoryEstimate.from_record(record).devices == 1
    except (TypeError, KeyError, ValueError, AttributeError):
        return False


def _is_pair(value) -> bool:
    from .verdicts import is_counts
    return is_counts(value, 2)


def _calls_custom(module) -> bool:
    """Whether any instruction of MODULE is a custom call (only then is the registry asked)."""
    return any(inst.opcode == "custom-call" for comp in module.computations for inst in comp.instructions)


def _numerics(module, requested) -> dict:
    from ..interpreter.ops.numerics import report
    return report(module, requested)


def _all(hooks):
    def hook(ev):
        for h in hooks:
            h(ev)
    return hook


def check_output_path(path: str, force: bool, protected: set[str], root_shape):
    """--output PATH can be written: a name ending in .npz or .npy (a single result), not an input
    of the run (PROTECTED: resolved paths), not replacing anything but a file (and a file only with
    FORCE), in a directory that exists."""
    if not (path.endswith(".npz") or path.endswith(".npy")):
        _input_error(f"--output {path}: the name must end in .npz (all results) or .npy (a single result)")
    if path.endswith(".npy") and root_shape.is_tuple:
        n = sum(1 for _ in root_shape.leaves())
        _input_error(f"--output {path}: the result is a tuple ({root_shape.to_str(False)}, {n} arrays); "
                     f"write it to an .npz file")
    p = Path(os.path.realpath(path))
    if str(p) in protected:
        _input_error(f"--output {path} is an input of this run; refusing to overwrite it")
    if os.path.lexists(path) and not os.path.islink(path) and not os.path.isfile(path):
        from ..sources.reading import file_kind
        _input_error(f"--output {path} is {file_kind(os.stat(path).st_mode)}; refusing to replace it")
    if os.path.lexists(path) and not force:
        what = "is a symbolic link" if os.path.islink(path) else "exists"
        _input_error(f"--output {path} {what}; refusing to overwrite it (pass --force to replace it)")
    if not p.parent.exists():
        _input_error(f"--output {path}: the directory {p.parent} does not exist")
