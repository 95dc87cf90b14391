"""Bisecting XLA's pass pipeline: which pass first changed a module's results?

The snapshots of one module (an XLA dump directory's stages in pass order, or a list of files; see
sources/dumpdir.py) are run on the same inputs.  The first snapshot's results are the reference; a
snapshot "differs" when a result is not within |got - want| <= atol + rtol * |want| of it (NaN
equal to NaN; hlo_cli.pipeline.compare).  Like git bisect, the search assumes that once the results differ
they keep differing, and runs as few snapshots as that needs:

- snapshots whose text is identical to one already run are not run: their result is known (with
  ``--xla_dump_hlo_pass_re=.*`` every pipeline dumps at its start, so most stages repeat a text);
- the first and the last snapshot are run; if the last agrees, every snapshot is taken to agree;
- otherwise the range between the last agreeing and the first differing text is halved until they
  are neighbours: ceil(log2(distinct texts)) runs more at most;
- a snapshot that cannot be run (a checker error, an operation the interpreter lacks, several
  devices) is skipped, as `git bisect skip` does, and the nearest other one in the range is tried;
  when only skipped snapshots are left between the two, the verdict names the range (undecided);
- a bisection that compared nothing (hlo cannot run the first snapshot) or whose runnable snapshots
  all agree while others could not be run reaches no verdict either (undecided, `unrun` says which):
  never "agree" for snapshots that were not compared.

``exhaustive=True`` runs every distinct text instead and reports every snapshot that contradicts
the assumption (agrees again after the first that differs).  Known results contradicting it (a
later snapshot's text identical to an agreeing earlier one) are reported either way.

    from hlo_cli.tools.bisect import bisect
    from hlo_cli.sources.dumpdir import read_dump_dir
    m = read_dump_dir("dump/").module("jit_step")
    report = bisect(m, args)                 # args: the entry's inputs in parameter order
    report.first_bad, report.last_good       # Stages (None when every snapshot agrees)
    report.to_dict()                         # what `hlo bisect --format json` prints
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from ..errors import HloError, HloEvalError, HloInputError, HloUnsupportedError
from ..sources.dumpdir import DumpModule, Stage, text_key

REFERENCE, AGREES, DIFFERS, FAILED = "reference", "agrees", "differs", "cannot run"


@dataclass
class Outcome:
    """What one snapshot gave (run, or known from an identical text)."""
    stage: Stage
    status: str                     # REFERENCE, AGREES, DIFFERS or FAILED
    ran: bool                       # False: known from the identical text of `same_as`
    same_as: int | None = None      # the stage index whose run gave this result
    comparison: dict | None = None  # hlo_cli.pipeline.compare.compare's document against the reference
    error: str | None = None        # why it could not be run
    seconds: float = 0.0
    unsupported: bool = False       # it could not be run because hlo cannot run some of its instructions

    def summary(self) -> str:
        """One line: the verdict and, for a difference, where it is largest."""
        if self.status == FAILED:
            return f"cannot run: {self.error}"
        if self.status == DIFFERS and self.comparison is not None:
            bad = [r for r in self.comparison["rows"] if r["status"] != "ok"]
            parts = []
            for r in bad[:3]:
                if "mismatched" in r:
                    parts.append(f"{r['key']}: {r['mismatched']}/{r['size']} differ, max |diff| "
                                 f"{r['max_abs_diff']:.3g}")
                else:
                    parts.append(f"{r['key']}: {r['status']}")
            more = f", {len(bad) - 3} more" if len(bad) > 3 else ""
            return "differs (" + "; ".join(parts) + more + ")"
        if self.status == AGREES and self.comparison is not None:
            worst = max((r.get("max_abs_diff", 0.0) for r in self.comparison["rows"]), default=0.0)
            if worst > 0:
                return f"agrees (max |diff| {worst:.3g}, within the tolerance)"
        return self.status

    def to_dict(self) -> dict:
        d = {"index": self.stage.index, "stage": self.stage.label, "file": self.stage.path, "status": self.status,
             "ran": self.ran}
        if self.same_as is not None:
            d["same_text_as"] = self.same_as
        if self.error is not None:
            d["error"] = self.error
        if self.unsupported:
            d["unsupported"] = True
        if self.comparison is not None:
            d["comparison"] = self.comparison["rows"]
        if self.ran:
            d["seconds"] = round(self.seconds, 4)
        return d


@dataclass
class BisectReport:
    """The verdict, the log of what was run in order, and every snapshot's known result."""
    module: DumpModule
    rtol: float
    atol: float
    outcomes: dict                           # Stage.index -> Outcome (the stages whose result is known)
    log: list                                # Outcomes in the order they were decided
    distinct: int                            # distinct texts among the stages
    exhaustive: bool = False
    first_bad: Stage | None = None           # the first snapshot that differs
    last_good: Stage | None = None           # its neighbour before it that agrees
    undecided: tuple = ()                    # (last agreeing, first differing) with skipped ones between
    contradictions: list = field(default_factory=list)   # Outcomes that break the monotonic assumption
    diff: object = None                      # the diff of last_good and first_bad (hlo_cli.diff), if made
    diff_note: str | None = None             # why there is no diff
    unrun: tuple = ()                        # Outcomes of stages that could not be run while the others
                                             # agree: they leave the verdict open
    no_reference: Outcome | None = None      # the first stage could not be run (hlo cannot run it)
    hint: str | None = None                  # what to do about stages hlo cannot run

    @property
    def stages(self) -> tuple:
        return self.module.stages

    @property
    def ran(self) -> int:
        return sum(1 for o in self.log if o.ran)

    @property
    def skipped(self) -> list:
        """The Outcomes of stages that could not be run (in the order they were tried)."""
        return [o for o in self.log if o.status == FAILED]

    @property
    def status(self) -> str:
        """"agree": every snapshot was compared and none differs; "differs": first_bad names the pass;
        "undecided": no verdict: the results changed between two snapshots with only unrunnable ones
        between them, or snapshots that could not be run leave it open (`unrun`: the others agree;
        `no_reference`: the first could not be run, so nothing was compared)."""
        if self.first_bad is not None:
            return "differs"
        if self.undecided or self.unrun or self.no_reference is not None:
            return "undecided"
        return "agree"

    @property
    def changed_stages(self) -> tuple:
        """Every stage from the last agreeing to the first differing one (first_bad's pass and any
        stage dumped without a text change before it are what the verdict points at)."""
        if self.first_bad is None:
            return ()
        return tuple(s for s in self.stages if self.last_good.index < s.index <= self.first_bad.index)

    def to_dict(self) -> dict:
        m = self.module
        doc = {"status": self.status, "module": {"key": m.key, "name": m.name, "directory": m.directory},
               "rtol": self.rtol, "atol": self.atol, "exhaustive": self.exhaustive,
               "snapshots": len(self.stages), "distinct_texts": self.distinct, "runs": self.ran,
               "first_bad": self.first_bad.to_dict() if self.first_bad else None,
               "last_good": self.last_good.to_dict() if self.last_good else None,
               "log": [o.to_dict() for o in self.log],
               "results": [dict(stage=s.label, index=s.index, status=self.outcomes[s.index].status)
                           if s.index in self.outcomes else dict(stage=s.label, index=s.index, status="not run")
                           for s in self.stages],
               "contradictions": [o.to_dict() for o in self.contradictions],
               "skipped": [o.to_dict() for o in self.skipped]}
        if self.undecided:
            lo, hi = self.undecided
            doc["undecided"] = {"last_agreeing": lo.to_dict(), "first_differing": hi.to_dict(),
                                "skipped": [s.to_dict() for s in self.stages if lo.index < s.index < hi.index
                                            and s.index in self.outcomes and self.outcomes[s.index].status == FAILED]}
        if self.unrun or self.no_reference is not None:
            agreeing = [k for k, o in self.outcomes.items() if o.status in (AGREES, REFERENCE)]
            doc["open"] = {"reason": ("the first stage could not be run: nothing was compared"
                                      if self.no_reference is not None else
                                      "the stages that could be run agree with the first; these could not be run"),
                           "agreeing": sorted(set(agreeing)),
                           "could_not_run": [o.to_dict() for o in ((self.no_reference,) if self.no_reference
                                                                   else self.unrun)],
                           "hint": self.hint}
        if self.diff_note:
            doc["diff_note"] = self.diff_note
        return doc


# ----------------------------------------------------------------------------- running one snapshot

class _Runner:
    """Parses, checks and runs snapshots on fixed inputs, comparing with the reference."""

    def __init__(self, args, *, rtol, atol, use_cache, check, seed, max_iterations, on_run, stages=(),
                 numerics=None):
        self.args, self.rtol, self.atol = args, rtol, atol
        self.numerics = numerics
        self.use_cache, self.check, self.seed, self.max_iterations = use_cache, check, seed, max_iterations
        self.on_run = on_run
        self.reference = None
        self.shardings = None             # the reference stage's (see reference_shardings)
        self.stages = tuple(stages)       # every stage, in pass order (for _shardings_for)
        self._global_shardings: dict = {}  # path -> shardings of a stage before partitioning, or None
        self.hints: list = []              # what to do, from the stages hlo could not run

    def _shardings_for(self, stage: Stage):
        """The reference's shardings, their holes (JAX leaves the ROOT's to XLA: Shardy writes it in a
        later stage) filled from the nearest stage before STAGE that computes on global values."""
        ref = self.shardings
        if ref is not None and ref[1] is not None and all(s is not None for s in ref[0]):
            return ref
        params, root = (list(ref[0]), ref[1]) if ref is not None else (None, None)
        from ..devices.inputs import values_are_global
        from ..sources import load
        for other in sorted((s for s in self.stages if s.index < stage.index), key=lambda s: -s.index):
            if other.path not in self._global_shardings:
                got = None
                try:
                    module, _ = load(other.path, None, self.use_cache)
                    if values_are_global(module):
                        got = reference_shardings(other.path, self.use_cache)
                except (HloError, OSError, RecursionError):
                    got = None
                self._global_shardings[other.path] = got
            got = self._global_shardings[other.path]
            if got is None:
                continue
            if params is None or len(params) != len(got[0]):
                params = list(got[0]) if params is None else params
            else:
                params = [p if p is not None else g for p, g in zip(params, got[0])]
            root = root if root is not None else got[1]
            if root is not None and all(p is not None for p in params):
                break
        return (params, root) if params is not None else ref

    def run(self, stage: Stage) -> Outcome:
        if self.on_run is not None:
            self.on_run(stage)
        t0 = time.perf_counter()
        try:
            leaves = run_snapshot(stage.path, self.args, use_cache=self.use_cache, check=self.check, seed=self.seed,
                                  max_iterations=self.max_iterations, shardings=lambda: self._shardings_for(stage),
                                  numerics=self.numerics)
        except HloInputError:
            raise
        except HloUnsupportedError as e:
            self.hints.append(e.hint)
            return Outcome(stage, FAILED, True, error=_unsupported_line(e), seconds=time.perf_counter() - t0,
                           unsupported=True)
        except HloError as e:
            return Outcome(stage, FAILED, True, error=_first_line(e), seconds=time.perf_counter() - t0)
        except RecursionError:
            return Outcome(stage, FAILED, True, error="the module is nested too deeply to process",
                           seconds=time.perf_counter() - t0)
        dt = time.perf_counter() - t0
        if self.reference is None:
            self.reference = leaves
            self.shardings = reference_shardings(stage.path, self.use_cache)
            return Outcome(stage, REFERENCE, True, seconds=dt)
        from ..pipeline.compare import compare
        cmp = compare(leaves, {f"out{k}": v for k, v in enumerate(self.reference)}, self.rtol, self.atol)
        return Outcome(stage, AGREES if cmp["ok"] else DIFFERS, True, comparison=cmp, seconds=dt)


class SnapshotRejected(HloEvalError):
    """A snapshot that is not run: the checker's errors, elided constants, several devices."""


def _unsupported_line(e: HloUnsupportedError) -> str:
    """'hlo cannot run it: '__cudnn$convForward' (3 calls, first at FILE:81:3), ...'."""
    uses = getattr(e, "uses", ())
    if not uses:
        return "hlo cannot run it: " + _first_line(e)
    parts = [f"'{u.target}' ({u.count} call{'s' if u.count != 1 else ''}, first at line {u.first.loc.line})"
             for u in uses]
    return "hlo cannot run it: " + ", ".join(parts)


def _first_line(e: HloError) -> str:
    text = str(e).strip() or type(e).__name__
    if e.diagnostics and not isinstance(e, SnapshotRejected):
        d = e.diagnostics[0]
        text = d.format(with_source=False)
        if len(e.diagnostics) > 1:
            text += f" (and {len(e.diagnostics) - 1} more)"
    return text.splitlines()[0] if text else type(e).__name__


def run_snapshot(path: str, args, *, use_cache: bool = True, check: bool = True, seed: int = 0,
                 max_iterations: int | None = None, shardings=None, numerics: str | None = None) -> list:
    """Run the module in PATH (one module) on ARGS and return its result leaves as arrays, in
    depth-first order; a program for several devices runs on them, its inputs split and its results
    put together by their shardings (ARGS are global arrays; SHARDINGS, from reference_shardings or a
    callable giving them when first needed,
    stand in for those a program after SPMD partitioning no longer has).  Raises HloError: the checker's errors
    (check=True), elided constants, anything the run raises."""
    import numpy as np

    from ..interpreter import RunOptions, run_module
    from ..pipeline.io import leaves_with_shapes
    from ..sources import load
    module, src = load(path, None, use_cache)
    n_params = len(module.entry_computation.parameters)
    if n_params != len(args):
        # XLA's passes keep the entry's parameters: another module's file, not a stage of this one
        raise HloInputError(f"{path}: {module.name}'s entry takes {n_params} parameter{'s' if n_params != 1 else ''}, "
                            f"the first stage's {len(args)}: not a stage of the same module (bisect one module's "
                            f"dump; hlo diff compares two modules)")
    if check:
        from ..checker import check_module
        errors = [d for d in check_module(module, src.text, warnings=False) if d.severity == "error"]
        if errors:
            raise SnapshotRejected(f"the checker rejects it: {errors[0].format(with_source=False)}"
                               + (f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""), errors)
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode == "constant" and inst.literal is not None and getattr(inst.literal, "elided", False):
                raise SnapshotRejected(f"{inst.name}: this constant's values were elided in the dump ({{...}}); "
                                   "re-dump with --xla_dump_large_constants")
    from ..pipeline.support import check_runnable
    check_runnable(module, "this stage")       # every target it cannot run, named at once
    from ..topology import grid_of
    from ..devices import needs_devices
    try:
        grid = grid_of(module)
        multi = needs_devices(module, grid)
    except HloError:
        multi = False
    options = RunOptions(seed=seed, max_iterations=max_iterations, numerics=numerics)
    if multi:
        return _run_on_devices(module, args, options, grid, shardings)
    result = run_module(module, list(args), options)
    root = module.entry_computation.root_instruction.shape
    return [np.asarray(v) for v, _ in leaves_with_shapes(result, root)]


def reference_shardings(path: str, use_cache: bool = True):
    """(each entry parameter's sharding, the ROOT's sharding) of the module in PATH: how the global
    arrays of a program before SPMD partitioning are cut into, and put together from, the devices'
    values of the programs after it (whose text no longer says)."""
    from ..devices.inputs import parameter_shardings
    from ..pipeline.devices import root_sharding
    from ..sources import load
    module, _ = load(path, None, use_cache)
    try:
        return parameter_shardings(module), root_sharding(module)
    except HloError:
        return None


def _run_on_devices(module, args, options, grid, shardings) -> list:
    """A program for several devices on the global ARGS: split by the parameters' shardings, run on
    every device, the results put together by the ROOT's sharding, so that they compare with the
    global program's.  A program after SPMD partitioning takes the shardings its text lacks from
    SHARDINGS (those of the reference stage, before partitioning)."""
    import numpy as np

    from ..devices import run_devices
    from ..devices.inputs import distribute, parameter_shardings, values_are_global
    from ..pipeline.devices import output_arrays, result_leaves, root_sharding
    from ..topology.sharding import ShardingError, shard
    params = module.entry_computation.parameters
    root = module.entry_computation.root_instruction.shape
    try:
        if values_are_global(module):
            placed = distribute(module, list(args), grid)
            sharding = root_sharding(module)
        else:
            own = parameter_shardings(module)
            shardings = shardings() if callable(shardings) else shardings
            ref_params, ref_root = shardings if shardings is not None else ([None] * len(params), None)
            if len(ref_params) != len(params):
                ref_params = [None] * len(params)
            stacked = []
            for p, a, sh, ref in zip(params, args, own, ref_params):
                if p.shape.is_tuple or p.shape.element_type == "token":
                    raise SnapshotRejected(f"{p.name}: a tuple or token parameter of a partitioned program")
                stacked.append(shard(np.asarray(a), sh if sh is not None else ref, tuple(p.shape.dims),
                                     grid.count, partitions=grid.partitions))
            placed = distribute(module, stacked, grid, per_device=True, global_values=False)
            sharding = root_sharding(module) or ref_root
        result = run_devices(module, placed, grid, options, None, None)
        return [np.asarray(a) for a in output_arrays(result_leaves(result, root), root, sharding, True,
                                                     grid.partitions)]
    except (HloInputError, ShardingError) as e:
        text = _first_line(e) if isinstance(e, HloError) else str(e)
        raise SnapshotRejected(f"a program for {grid.count} devices whose inputs or results cannot be placed "
                               f"or put together: {text}") from None


# ----------------------------------------------------------------------------- the search

def bisect(module: DumpModule, args, *, rtol: float = 1e-3, atol: float = 1e-3, exhaustive: bool = False,
           use_cache: bool = True, check: bool = True, seed: int = 0, max_iterations: int | None = None,
           on_run=None, diff: bool = True, numerics: str | None = None) -> BisectReport:
    """Find the first stage of MODULE whose results on ARGS (the entry's inputs in parameter
    order) differ from the first stage's (see the module docstring).  ON_RUN(stage) is called
    before each run (progress).  With DIFF, the two neighbours are diffed with hlo_cli.diff when
    it is available.  Raises HloInputError for a module with fewer than two stages or a file that
    cannot be read, and the first stage's error when it cannot be run."""
    stages = module.stages
    if len(stages) < 2:
        where = module.directory or "the files given"
        raise HloInputError(f"{where}: {module.title} has {len(stages)} stage{'s' if len(stages) != 1 else ''}; "
                            "bisecting needs the module dumped after its passes (XLA_FLAGS=--xla_dump_to=DIR "
                            "--xla_dump_hlo_pass_re=.*) or two files or more")
    try:
        keys = [text_key(s.path) for s in stages]
    except OSError as e:
        path = getattr(e, "filename", None) or "?"
        raise HloInputError(f"{path}: cannot read it ({e.strerror or e})") from None
    # versions: runs of consecutive stages with one text
    versions: list[list[int]] = []
    for k in range(len(stages)):
        if versions and keys[versions[-1][0]] == keys[k]:
            versions[-1].append(k)
        else:
            versions.append([k])
    runner = _Runner(args, rtol=rtol, atol=atol, use_cache=use_cache, check=check, seed=seed,
                     max_iterations=max_iterations, on_run=on_run, stages=stages, numerics=numerics)
    report = BisectReport(module, rtol, atol, {}, [], len(set(keys)), exhaustive)
    by_key: dict = {}                     # text -> the Outcome of its run

    def result(v: int) -> Outcome:
        """The outcome of version v (run, or known from an identical text)."""
        first = versions[v][0]
        if stages[first].index in report.outcomes:
            return report.outcomes[stages[first].index]
        known = by_key.get(keys[first])
        if known is not None:
            o = Outcome(stages[first], known.status if known.status != REFERENCE else AGREES, False,
                        same_as=known.stage.index, comparison=known.comparison, error=known.error)
        else:
            o = runner.run(stages[first])
            by_key[keys[first]] = o
        status = AGREES if o.status == REFERENCE else o.status
        for k in versions[v]:
            report.outcomes[stages[k].index] = o if k == first else Outcome(stages[k], status, False, same_as=o.stage.index
                                                               if o.ran else o.same_as, comparison=o.comparison,
                                                               error=o.error)
        report.log.append(o)
        return o

    ref = result(0)
    if ref.status == FAILED and ref.unsupported:
        report.no_reference = ref              # nothing can be compared: no verdict
        report.hint = _hint(runner)
        return report
    if ref.status == FAILED:
        raise HloEvalError(f"{stages[0].path}: the first snapshot ({stages[0].label}) cannot be run, so there "
                           f"is no reference to compare with: {ref.error}")
    good = lambda o: o.status in (AGREES, REFERENCE)  # noqa: E731
    n = len(versions)
    if exhaustive:
        first_bad = None
        last_ok = 0
        for v in range(1, n):
            o = result(v)
            if o.status == FAILED:
                continue
            if first_bad is None and not good(o):
                first_bad = v
            elif first_bad is None:
                last_ok = v
        if first_bad is not None:
            _verdict(report, versions, last_ok, first_bad)
    else:
        lo, hi = 0, None
        # the last runnable version: the first to differ is at or before it
        for v in range(n - 1, 0, -1):
            o = result(v)
            if o.status != FAILED:
                if not good(o):
                    hi = v
                break
        if hi is not None:
            while hi - lo > 1:
                v = _pick(lo, hi, versions, report.outcomes, stages)
                if v is None:
                    break
                o = result(v)
                if o.status == FAILED:
                    continue
                if good(o):
                    lo = v
                else:
                    hi = v
            _verdict(report, versions, lo, hi)
    if report.first_bad is None and not report.undecided:
        # the stages that could be run agree: those that could not leave the verdict open
        report.unrun = tuple(o for o in report.log if o.status == FAILED)
        report.hint = _hint(runner) if report.unrun else None
    if report.first_bad is not None:
        bad, ok = report.first_bad.index, report.last_good.index
        report.contradictions = [o for o in report.log if o.status != FAILED and
                                 ((o.stage.index > bad and good(o)) or (o.stage.index < ok and not good(o)))]
    if diff and report.first_bad is not None:
        _diff(report, args, rtol, atol, use_cache, seed, max_iterations, numerics)
    return report


def _hint(runner) -> str | None:
    hints = [h for h in runner.hints if h]
    return hints[0] if hints else None


def _pick(lo: int, hi: int, versions, outcomes, stages) -> int | None:
    """The version nearest the middle of (lo, hi) that has not failed; None when all have."""
    mid = (lo + hi) // 2
    order = sorted(range(lo + 1, hi), key=lambda v: (abs(v - mid), v))
    for v in order:
        o = outcomes.get(stages[versions[v][0]].index)
        if o is None or o.status != FAILED:
            return v
    return None


def _verdict(report: BisectReport, versions, lo: int, hi: int):
    """Versions lo (agrees) and hi (differs): neighbours name the pass; with skipped versions
    between them the range is all that can be said."""
    stages = report.stages
    if hi - lo == 1:
        report.first_bad = stages[versions[hi][0]]
        report.last_good = stages[versions[lo][-1]]
    else:
        report.undecided = (stages[versions[lo][-1]], stages[versions[hi][0]])


def _diff(report: BisectReport, args, rtol, atol, use_cache, seed, max_iterations, numerics=None):
    """The diff of the two neighbouring snapshots (hlo_cli.diff, when it is there)."""
    try:
        from ..diff import diff_modules
    except ImportError:
        report.diff_note = "hlo diff is not available in this installation"
        return
    from ..sources import load
    try:
        a, _ = load(report.last_good.path, None, use_cache)
        b, _ = load(report.first_bad.path, None, use_cache)
        from ..interpreter import RunOptions
        report.diff = diff_modules(a, b, list(args), rtol=rtol, atol=atol,
                                   options=RunOptions(seed=seed, max_iterations=max_iterations, numerics=numerics),
                                   path_a=report.last_good.path, path_b=report.first_bad.path)
    except HloError as e:
        report.diff_note = f"the diff of the two snapshots failed: {_first_line(e)}"


def bisection_bound(distinct: int) -> int:
    """The most runs a bisection over DISTINCT texts needs with nothing skipped: the first, the
    last, and ceil(log2(distinct - 1)) between them."""
    if distinct <= 1:
        return 1
    return 2 + max(0, math.ceil(math.log2(distinct - 1)))


__all__ = ["AGREES", "DIFFERS", "FAILED", "REFERENCE", "BisectReport", "Outcome", "bisect", "bisection_bound",
           "run_snapshot"]


def stage_arguments(module, params, inputs=(), inputs_npz: str | None = None, random_inputs: bool = False,
                    snapshot: str | None = None, seed: int = 0, note=lambda text: None) -> tuple:
    """(the arguments every stage runs on, what they are for the report): `--input`/`--inputs`
    files, `--random-inputs`, or an HloSnapshot's arguments (`--snapshot`, else the snapshot the dump
    directory holds for MODULE when no inputs are given), bound to PARAMS (the first stage's)."""
    from ..interpreter.inputs import random_inputs as random_inputs_of
    from ..pipeline.inputs import load_inputs, require_inputs, snapshot_arguments
    from ..sources.proto import read_snapshot
    given = [o for o, v in (("--input", inputs), ("--inputs", inputs_npz), ("--random-inputs", random_inputs),
                            ("--snapshot", snapshot)) if v]
    if len(given) > 1 and (random_inputs or snapshot):
        raise HloInputError(f"{' and '.join(given)} cannot be combined: choose one way to give the inputs")
    if not given and module.snapshots:
        snapshot = module.snapshots[0]
    if snapshot:
        notes: list = []
        args = snapshot_arguments(read_snapshot(snapshot), params, notes)
        inputs_doc = {"snapshot": snapshot}
        for n in notes:
            note(f"note: {n}")
    elif random_inputs:
        args = random_inputs_of(params, seed)
        inputs_doc = {"random": True, "seed": seed}
    else:
        if not inputs and not inputs_npz:
            require_inputs(params, "--input/--inputs, --snapshot, or --random-inputs")
        loaded = load_inputs(params, inputs, inputs_npz)
        args = loaded.values
        inputs_doc = {"files": loaded.sources}
        for n in loaded.notes:
            note(f"note: {n}")
    return args, inputs_doc


class OptionConflict(HloInputError):
    """Options that cannot go together (the CLI says it as a usage error)."""


def stages_of(paths, module_choice: str | None = None, note=lambda text: None) -> tuple:
    """(the module whose stages are bisected, the dump directory or None): PATHS is one XLA dump
    directory (MODULE_CHOICE picks its module) or two files or more in pass order (NOTE hears about
    the files that are not stages).  HloInputError for anything else; OptionConflict for a
    MODULE_CHOICE among files."""
    from pathlib import Path

    from ..errors import Diagnostic
    from ..sources.dumpdir import read_dump_dir, stages_from_files
    if len(paths) == 1:
        p = paths[0]
        if p != "-" and Path(p).is_dir():
            dd = read_dump_dir(p)
            return dd.module(module_choice), dd
        msg = ("hlo bisect takes an XLA dump directory (XLA_FLAGS=\"--xla_dump_to=DIR --xla_dump_hlo_pass_re=.*\") "
               "or two files or more in pass order")
        raise HloInputError(f"{p}: {msg}", [Diagnostic(msg, p, code="E087")])
    dirs = [p for p in paths if Path(p).is_dir()]
    if dirs:
        msg = "a directory among several paths: give one dump directory, or files only"
        raise HloInputError(f"{dirs[0]}: {msg}", [Diagnostic(msg, dirs[0], code="E087")])
    if module_choice is not None:
        raise OptionConflict("--module chooses a module of a dump directory; the files given are the stages")
    m = stages_from_files(paths)
    if m.ignored:
        note(f"note: {len(m.ignored)} of the files given are not module stages and are left out "
             f"({', '.join(Path(f.path).name for f in m.ignored[:3])}{', ...' if len(m.ignored) > 3 else ''})")
    return m, None


def stage_range(module, first_stage: str | None = None, last_stage: str | None = None, note=lambda text: None):
    """MODULE with only the stages from FIRST_STAGE to LAST_STAGE (--from, --to: as --stage names
    them; NOTE hears how an ambiguous name was read); OptionConflict when --to comes before --from."""
    if first_stage is None and last_stage is None:
        return module
    import dataclasses
    pos = {s.index: k for k, s in enumerate(module.stages)}
    lo, hi = 0, len(module.stages) - 1
    for which, option in ((first_stage, "--from"), (last_stage, "--to")):
        if which is None:
            continue
        sel = module.stage(which, option)
        if sel.note:
            note(f"note: {sel.note}")
        if option == "--from":
            lo = pos[sel.stage.index]
        else:
            hi = pos[sel.stage.index]
    if hi < lo:
        raise OptionConflict(f"--to {last_stage} comes before --from {first_stage} in pass order")
    return dataclasses.replace(module, stages=module.stages[lo:hi + 1])
