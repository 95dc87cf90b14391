"""`hlo bisect`: the first XLA pass after which a module's results change (hlo_cli/bisect.py)."""
from __future__ import annotations

import json
import sys

import click

from ..errors import ExitCode
from ..pipeline.core import diagnostic_dict
from .common import report_errors, stderr_is_terminal


@click.command("bisect")
@click.argument("paths", nargs=-1, required=True, metavar="DIR | FILE...")
@click.option("--module", "-m", "module_choice", metavar="NAME|NNNN", default=None,
              help="The module of the dump directory to bisect (its name, or its number NNNN when several "
                   "modules have the name); `hlo info DIR` lists them.")
@click.option("--input", "-i", "inputs", multiple=True, metavar="[NAME=]FILE.npy",
              help="An input array, as `hlo run` takes it: in parameter order, or bound to the parameter NAME "
                   "(or argN).  Every stage runs on the same inputs.")
@click.option("--inputs", "inputs_npz", metavar="ARGS.npz",
              help="An .npz archive of inputs keyed by parameter name or arg0, arg1, ... (by position).")
@click.option("--random-inputs", is_flag=True, help="Fill every parameter with deterministic random values.")
@click.option("--snapshot", "snapshot", metavar="SNAPSHOT.pb",
              help="Take the inputs from an HloSnapshot (XLA_FLAGS=--xla_dump_hlo_snapshots: the arguments of an "
                   "execution).  Without any inputs given, the module's own snapshot in DIR is used when there "
                   "is one.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="Seed for --random-inputs and rng.")
@click.option("--rtol", type=float, default=1e-3, show_default=True,
              help="Relative tolerance: a stage differs when a result is not within atol + rtol * |reference|.")
@click.option("--atol", type=float, default=1e-3, show_default=True, help="Absolute tolerance.")
@click.option("--all", "exhaustive", is_flag=True,
              help="Run every distinct text instead of bisecting, and report the stages whose results agree "
                   "again after the first that differs.")
@click.option("--from", "first_stage", metavar="STAGE",
              help="Start at this stage (its results are the reference), as --stage names stages in `hlo run` "
                   "(before_optimizations, a step number, [PIPELINE:]PASS[#K], ...); by default the first.")
@click.option("--to", "last_stage", metavar="STAGE", help="End at this stage; by default the last.")
@click.option("--no-diff", is_flag=True, help="Do not diff the two neighbouring stages after the verdict.")
@click.option("--max-iterations", type=click.IntRange(min=0), default=None,
              help="Fail a while loop that runs more iterations than this (the stage counts as not runnable).")
@click.option("--numerics", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
              help="Whose arithmetic every stage's run reproduces, as `hlo run --numerics`; auto: gpu when the "
                   "module was compiled for a GPU (its last stage says so), for every stage alike.")
@click.option("--no-check", is_flag=True, help="Do not check each stage (hlo check's rules) before running it.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one document on stdout: the verdict, the stages before and after, the log of runs, "
                   "every stage's known result, and the diff (as `hlo diff --format json`).")
@click.option("--no-cache", is_flag=True, help="Do not read or write the parse cache.")
@report_errors
def bisect(paths, module_choice, inputs, inputs_npz, random_inputs, snapshot, seed, rtol, atol, exhaustive,
           first_stage, last_stage, no_diff, max_iterations, no_check, fmt, no_cache, numerics="auto"):
    """Find the first XLA pass after which a module's results change.

    DIR is an XLA dump directory made with XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_pass_re=.*"
    (one snapshot of each module after every pass that changed it; `hlo info DIR` lists them); or
    give two files or more, in pass order (files named as one module's XLA dumps are put in XLA's
    order).  Every snapshot runs on the same inputs (--input/--inputs, --snapshot or
    --random-inputs, as `hlo run`; by default the module's HloSnapshot in DIR when there is one); the
    first one's results (--from's) are the reference.  Like git bisect,
    the search assumes that once results differ they keep differing: it runs the first and the last
    snapshot, then halves the range, so it needs about log2(distinct texts) runs; a snapshot whose
    text is identical to one already run is not run (its result is known).  A snapshot that cannot
    be run (a checker error, a missing operation) is skipped; the nearest other one is tried.

    The verdict names the first snapshot that differs, the pass that made it (its pipeline) and the
    files before and after it; then the two are diffed as `hlo diff` does, pointing at the first
    instructions whose values changed.  --all runs every distinct snapshot; --rtol 0 --atol 0 finds
    the first pass that changes any value at all.

    Snapshots for several devices run on them: the per-device programs after SPMD partitioning take
    the global inputs cut by the first snapshot's parameter shardings, and their results are put
    together by its ROOT sharding before the comparison.

    No verdict is ever "agree" for snapshots that were not compared: when the first snapshot cannot be
    run by hlo (an instruction it has no implementation of, such as a compiled Triton kernel), or the
    snapshots that could be run agree while others could not be run, or the results changed between
    two snapshots with only unrunnable ones between them, the verdict is undecided (exit 8) and says
    which snapshots could not be run and what to do.

    Exit codes: 0 every snapshot agrees with the first; 1 a pass changed the results (or the first
    snapshot is rejected by the checker); 2 usage error or unreadable input; 8 undecided (snapshots
    that could not be run leave the verdict open).
    """
    from ..errors import HloError
    try:
        if not (rtol >= 0 and atol >= 0):
            raise click.UsageError("--rtol and --atol must not be negative or NaN")
        _bisect(paths, module_choice, inputs, inputs_npz, random_inputs, snapshot, seed, rtol, atol, exhaustive,
                no_diff, max_iterations, no_check, fmt, no_cache, first_stage, last_stage, numerics)
    except HloError as e:
        if fmt == "json":
            from ..errors import Diagnostic
            diags = e.diagnostics or [Diagnostic(str(e), paths[0], code="E000")]
            click.echo(json.dumps({"status": "error", "exit_code": int(e.exit_code), "message": str(e),
                                   "diagnostics": [diagnostic_dict(d) for d in diags]}, indent=2))
        raise


def _bisect(paths, module_choice, inputs, inputs_npz, random_inputs, snapshot, seed, rtol, atol, exhaustive,
            no_diff, max_iterations, no_check, fmt, no_cache, first_stage=None, last_stage=None, numerics=None):
    from ..errors import HloInputError
    from ..sources import load
    from ..tools.bisect import bisect as run_bisect
    from ..tools.bisect import OptionConflict, bisection_bound, stage_arguments, stage_range, stages_of
    def note(text):
        click.echo(text, err=True)
    try:
        module, dd = stages_of(paths, module_choice, note)
        module = stage_range(module, first_stage, last_stage, note)
    except OptionConflict as e:
        raise click.UsageError(str(e)) from None
    if not module.stages:
        raise HloInputError(f"{module.directory}: {module.title} has no stage")
    first, _ = load(module.stages[0].path, None, not no_cache)
    args, inputs_doc = stage_arguments(module, first.entry_computation.parameters, inputs, inputs_npz, random_inputs,
                                       snapshot, seed, note=note)
    live = fmt == "text" and stderr_is_terminal()

    def on_run(stage):
        if live:
            click.echo(f"running #{stage.index} {stage.label}", err=True)

    from ..interpreter.ops.numerics import resolve_together
    last = module.stages[-1].path              # the most optimized stage shows whether it was compiled for a GPU
    numerics = resolve_together([lambda: _stage_module(last, not no_cache)], numerics)
    report = run_bisect(module, args, rtol=rtol, atol=atol, exhaustive=exhaustive, use_cache=not no_cache,
                        check=not no_check, seed=seed, max_iterations=max_iterations, on_run=on_run,
                        diff=not no_diff, numerics=numerics)
    code = {"agree": ExitCode.OK, "differs": ExitCode.FAILURE, "undecided": ExitCode.UNDECIDED}[report.status]
    if fmt == "json":
        doc = dict(report.to_dict(), exit_code=int(code), inputs=inputs_doc,
                   bisection_bound=bisection_bound(report.distinct))
        if report.diff is not None:
            doc["diff"] = report.diff.to_json(max_pairs=200)
        click.echo(json.dumps(doc, indent=2))
    else:
        _print(report, dd, inputs_doc, bisection_bound(report.distinct))
    if code != ExitCode.OK:
        sys.exit(code)


def _ranges(indices) -> str:
    """'#0-#3, #7': stage numbers, runs of consecutive ones as ranges."""
    out, run = [], []
    for k in indices:
        if run and k == run[-1] + 1:
            run.append(k)
            continue
        if run:
            out.append(f"#{run[0]}" if len(run) == 1 else f"#{run[0]}-#{run[-1]}")
        run = [k]
    if run:
        out.append(f"#{run[0]}" if len(run) == 1 else f"#{run[0]}-#{run[-1]}")
    return ", ".join(out)


_WORD = {"reference": "reference", "agrees": "good", "differs": "bad", "cannot run": "skip"}


def _print(report, dd, inputs_doc, bound):
    m = report.module
    out = []
    if m.id is None:
        order = "in XLA's pass order" if m.pass_order else "in the order given"
        out.append(f"hlo bisect: {len(report.stages)} files {order}, {report.distinct} distinct texts")
    else:
        out.append(f"hlo bisect: {m.title} in {m.directory}: {len(report.stages)} stages, {report.distinct} "
                   "distinct texts")
    if inputs_doc.get("random"):
        out.append(f"inputs: random (seed {inputs_doc['seed']})")
    elif inputs_doc.get("snapshot"):
        out.append(f"inputs: the arguments recorded in {inputs_doc['snapshot']}")
    elif inputs_doc.get("files"):
        out.append("inputs: " + ", ".join(f"{s['parameter']}={s['file']}" for s in inputs_doc["files"]))
    out.append(f"a stage differs when a result is not within {report.atol:g} + {report.rtol:g} * |reference| of the "
               f"first stage's ({report.stages[0].label})")
    out.append("")
    width = max(len(o.stage.label) for o in report.log) if report.log else 0
    for o in report.log:
        how = "run  " if o.ran else "known"
        same = "" if o.ran else f" (same text as #{o.same_as})"
        summary = o.summary()
        detail = f"  {summary}" if o.status in ("differs", "cannot run") or summary != o.status else ""
        out.append(f"  {how} {_WORD.get(o.status, o.status):<9} #{o.stage.index:<4} {o.stage.label:<{width}}"
                   f"{detail}{same}".rstrip())
    out.append("")
    ran = report.ran
    tail = (f"ran {ran} of {len(report.stages)} stages ({report.distinct} distinct texts"
            + (f"; a bisection needs at most {bound}" if not report.exhaustive else "; --all: every distinct text")
            + ")")
    skipped = report.skipped
    if report.no_reference is not None:
        o = report.no_reference
        out.append(f"no verdict: the first stage, #{o.stage.index} {o.stage.label}, cannot be run, so nothing was "
                   f"compared: {o.error}")
        if report.hint:
            out.append(report.hint)
        out.append(tail)
    elif report.status == "undecided" and report.unrun:
        good = sorted(k for k, o in report.outcomes.items() if o.status in ("agrees", "reference"))
        n = len(report.unrun)
        out.append(f"no verdict: the stages that could be run agree with the first ({_ranges(good)}), "
                   f"but {n} stage{'s' if n != 1 else ''} could not be run, and a pass among them may have changed "
                   "the results:")
        for o in report.unrun[:8]:
            out.append(f"  #{o.stage.index} {o.stage.label}: {o.error}")
        if n > 8:
            out.append(f"  ... and {n - 8} more (--format json lists them)")
        if report.hint:
            out.append(report.hint)
        last = max(good)
        if any(o.stage.index > last for o in report.unrun):
            stage = next(s for s in report.stages if s.index == last)
            out.append(f"(--to {stage.selector} bisects the stages up to the last one that ran)")
        out.append(tail)
    elif report.status == "agree":
        if report.exhaustive:
            out.append("every stage's results agree with the first's: no pass changed them beyond the tolerance")
        else:
            out.append("every stage agrees: the last stage's results agree with the first's, so no pass changed "
                       "them beyond the tolerance (a bisection assumes a change is not undone by a later pass; "
                       "--all runs every distinct text)")
        out.append(tail)
    elif report.status == "undecided":
        lo, hi = report.undecided
        out.append(f"the results changed between #{lo.index} {lo.label} (good) and #{hi.index} {hi.label} (bad); "
                   "the stages between them cannot be run:")
        for s in (s for s in report.stages if lo.index < s.index < hi.index):
            o = report.outcomes.get(s.index)
            if o is not None and o.error:
                out.append(f"  #{s.index} {s.label}: {o.error}")
        out.append(tail)
    else:
        b, g = report.first_bad, report.last_good
        out.append(f"first bad stage: #{b.index} {b.label}")
        out.append(f"  {b.pass_description} changed the results")
        out.append(f"  before: {g.path}  (#{g.index} {g.label})")
        out.append(f"  after:  {b.path}")
        out.append(tail)
    if skipped and report.status != "undecided" and not report.unrun:
        for o in skipped[:8]:
            out.append(f"  skipped #{o.stage.index} {o.stage.label}: {o.error}")
        if len(skipped) > 8:
            out.append(f"  ... and {len(skipped) - 8} more (--format json lists them)")
    if any(o.error and o.error.startswith("the checker rejects it") for o in skipped):
        out.append("  (--no-check runs the stages the checker rejects anyway)")
    for o in report.contradictions:
        where = "after" if o.stage.index > (report.first_bad.index if report.first_bad else 0) else "before"
        out.append(f"warning: #{o.stage.index} {o.stage.label} {o.status} {where} the first bad stage: the results "
                   "do not change only once (--all runs every distinct text)")
    click.echo("\n".join(out))
    if report.first_bad is not None:
        click.echo("")
        if report.diff is not None:
            from ..diff import format_text
            click.echo(f"diff of the two stages (hlo diff {report.last_good.path} {report.first_bad.path}):")
            click.echo(format_text(report.diff))
        elif report.diff_note:
            click.echo(f"no diff: {report.diff_note}")


def _stage_module(path, use_cache):
    """The module of a stage's file, or None when it cannot be read (its run will say why)."""
    from ..errors import HloError
    from ..sources import load
    try:
        return load(path, None, use_cache)[0]
    except (HloError, OSError, RecursionError):
        return None
