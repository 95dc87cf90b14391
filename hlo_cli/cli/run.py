"""`hlo run`: run a module on inputs with the NumPy interpreter.

The options become a RunRequest of the run pipeline (hlo_cli/pipeline/core.py), whose RunResult
is printed here.  The steps: read and check the module (`hlo check`'s rules; --no-check skips them), refuse elided
constants unless told how to fill them, bind the inputs to the entry parameters, decide every file
that will be written before anything runs (nothing a user gave is ever overwritten), run with the
hooks the options ask for (dump, finiteness guard) under the progress line (hlo_cli/cli/progress.py,
a sampler: nothing in the run's loops), then report: a summary table or JSON on stdout, full values
with --print, the comparison with --expect, the --profile tables (interpreter/profiling.py).

Exit codes: 0 success; 1 the module failed (check error, runtime error, --expect mismatch, a
non-finite value under --check-finite); 2 usage error or unreadable input (also a dump or output
that cannot be written); 3 a bug in hlo; 4 out of memory (--random-inputs too big, or an
instruction's value); 5 the run's estimated memory is above --max-memory (refused before any input
data is read); 6 the reference run could not be made (--reference xla: JAX missing, XLA refused or
crashed on the module, too few devices: hlo's own results are still reported); 7 hlo cannot run the
module (a custom-call target it has no implementation of: every one is named with its location
before anything runs; the module is not wrong).
"""
from __future__ import annotations

import json
import sys

import click

from ..errors import Diagnostic, ExitCode
from ..pipeline import (DeviceOptions, DumpOptions, RunHooks, RunRequest, RunResult, classify_error, error_document,
                        run as run_pipeline)
from ..pipeline.io import literal_text, number_text, scalar_str, stats, stats_text
from .common import (elided_constants_option, max_iterations_option, module_option, no_cache_option,
                     report_errors, resolve_stage, stage_option, stderr_is_terminal)


# ----------------------------------------------------------------------------- summaries

def _preview(a, n=5) -> str:
    """The first few elements, compactly (of an array, or of a pipeline.io.RowSummary: a value
    left on a Ray actor)."""
    flat = a.head if hasattr(a, "head") else a.reshape(-1)
    items = [scalar_str(x, a) for x in flat[:n]]
    return "[" + ", ".join(items) + (", ..." if a.size > n else "") + "]"


def _report_nonfinite(rep, src):
    line_text = src.line_text(rep["line"]) if src is not None and rep["line"] else None
    what = []
    s0 = next((s for s in rep["stats"] if s.get("nan") or s.get("inf")), {})
    if s0.get("nan"):
        what.append(f"{s0['nan']} NaN")
    if s0.get("inf"):
        what.append(f"{s0['inf']} Inf")
    at = f", first at {rep['first_index']} = {rep['first_value']}" if "first_index" in rep else ""
    on = ""
    if rep.get("devices"):
        from ..devices.values import who
        devs = rep["devices"]
        on = f" on {who(devs)}" + (f" (values of device {rep['device']})" if len(devs) != 1 else "")
    msg = (f"{rep['instruction']}: {rep['opcode']} produced a non-finite value ({', '.join(what)}{at}) from "
           f"finite operands{on} (execution {rep['execution']} of it, in computation {rep['computation']})")
    d = Diagnostic(msg, rep["file"], rep["line"], rep["column"], "error", "R100", rep["instruction"], line_text)
    lines = [d.format()]
    if rep.get("source"):
        lines.append(f"  source: {rep['source']}" + (f"  ({rep['op_name']})" if rep.get("op_name") else ""))
    elif rep.get("op_name"):
        lines.append(f"  op_name: {rep['op_name']}")
    for s in rep["stats"]:
        lines.append(f"  result: {stats_text(s)}")
    for op in rep["operands"]:
        at = f"  (at {rep['first_index']}: {op['value_at_first_index']})" if "value_at_first_index" in op else ""
        for s in op["stats"]:
            lines.append(f"  operand {op['operand']}: {stats_text(s)}{at}")
    click.echo("\n".join(lines), err=True)


@click.command("run")
@click.argument("module_file", metavar="MODULE", type=str)
@click.option("--input", "-i", "inputs", multiple=True, metavar="[NAME=]FILE.npy",
              help="An input array: in parameter order, or bound to the parameter NAME (or argN). Arrays of "
                   "bfloat16/float8/int4 saved as raw records (|V2, |V1) are read as the parameter's type; "
                   "float64 arrays for a floating-point parameter are rounded to its type, and int64/bool "
                   "arrays converted where no value changes (each with a note on stderr). A file's shape "
                   "and type are checked before its data is read.")
@click.option("--inputs", "inputs_npz", metavar="ARGS.npz",
              help="An .npz archive of inputs keyed by parameter name or arg0, arg1, ... (by position); or an "
                   "HloSnapshot .pb: its arguments, for any text of its module.")
@click.option("--random-inputs", is_flag=True, help="Fill every parameter with deterministic random values.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for --random-inputs and rng (a non-negative integer).")
@click.option("--output", "-o", metavar="OUT.npz|OUT.npy",
              help="Write the results: .npz with keys out0, out1, ... (tuple leaves, depth-first), or .npy "
                   "for a non-tuple result. On several devices each result holds one value per device, stacked "
                   "on a leading axis in device-id order (a program before partitioning: its global results).")
@click.option("--force", is_flag=True, help="Allow --output to replace an existing file (never an input).")
@click.option("--print", "print_values", is_flag=True, help="Print the full result values in XLA's literal format.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON document on stdout, for CI: results, comparison or error, with the tool "
                   "version, the module's SHA-256, the inputs (files, or the seed), and timings.")
@click.option("--expect", metavar="REF.npz", help="Compare the results with a reference (keys out0, out1, ...; "
                                                  "or one .npy for a single result); exit 1 if they differ.")
@click.option("--reference", "reference_platform", type=click.Choice(["xla"]), default=None,
              help="Also run the module on XLA CPU itself (through JAX: pip install 'hlo-cli[xla]') with the "
                   "same inputs and compare as --expect does (--rtol/--atol; exit 1 if they differ), with "
                   "XLA's compile and run times. XLA runs in a child process (a crash of XLA cannot take hlo "
                   "down) on the module's devices (replicas x partitions host devices; a module before "
                   "partitioning goes through XLA's SPMD partitioner and is compared on global arrays). Exit 6 "
                   "when XLA cannot give results: JAX missing, XLA refusing or crashing on the text (texts after "
                   "XLA's optimizations often cannot be compiled again: compare the module before them).")
@click.option("--rtol", type=float, default=1e-3, show_default=True, help="Relative tolerance for --expect.")
@click.option("--atol", type=float, default=1e-3, show_default=True, help="Absolute tolerance for --expect.")
@click.option("--dump-dir", metavar="DIR", help="Write every executed instruction's value (.npy, one per tuple "
                                                "leaf) and DIR/manifest.json. A new dump into an earlier one "
                                                "removes only the files that dump listed.")
@click.option("--dump-filter", metavar="REGEX", help="Dump only instructions whose name or opcode matches.")
@click.option("--dump-summary", is_flag=True, help="Write statistics to the manifest only, no arrays.")
@click.option("--dump-force", is_flag=True, help="Write into a non-empty --dump-dir that hlo did not create "
                                                 "(nothing in it is replaced).")
@click.option("--check-finite", is_flag=True,
              help="Stop at the first instruction that makes a NaN or Inf out of finite operands, and report "
                   "it with its operands and source location.")
@max_iterations_option
@elided_constants_option
@click.option("--no-check", is_flag=True, help="Do not check the module (hlo check's rules) before running it.")
@click.option("--no-progress", is_flag=True,
              help="No progress display. On a terminal (and with --format text) a status line on stderr shows, "
                   "after half a second, what the command is doing (parsing, checking, reading inputs), then "
                   "the computations being run with instruction k of N, the current instruction's opcode and "
                   "shape, a while loop's iteration (of its known trip count) and the elapsed time; it is off "
                   "anyway when stderr is not a terminal.")
@click.option("--profile", is_flag=True,
              help="Time every instruction and print where the time went after the run: the top instructions "
                   "(computation, opcode, shape, calls, self and total time, share of the run) and the opcodes by "
                   "time; on stdout after the results, or under \"profile\" with --format json. Self time "
                   "excludes the computations an instruction calls and the preparation of a computation on its "
                   "first call (found by sampling, shown apart). Results are the same bits; runs of many small "
                   "instructions take longer (no generated code for hot loops).")
@click.option("--max-memory", "max_memory", metavar="SIZE|none|auto", default="auto", show_default=True,
              help="Refuse to run (exit 5) when the estimated memory of the run (parameters and the largest "
                   "set of values alive at once) exceeds SIZE (e.g. 16G, 512MB, 1.5GiB); auto: what this "
                   "machine has; none: no check. Checked before any input data is read.")
@click.option("--replicas", type=click.IntRange(min=1), default=None,
              help="Run on this many replicas (default: the module's replica_count).")
@click.option("--partitions", type=click.IntRange(min=1), default=None,
              help="Run on this many partitions (default: the module's num_partitions, or the size of its "
                   "Shardy mesh).")
@click.option("--per-device", is_flag=True,
              help="Every input holds one value per device, stacked on a new leading axis in device-id order "
                   "(device = replica x partitions + partition). Without it, an input is the parameter's "
                   "global array, split per device by the parameter's sharding.")
@click.option("--output-global", is_flag=True,
              help="--output/--expect hold the global arrays, reassembled from the devices' pieces by the "
                   "ROOT's sharding (or --output-sharding), instead of one value per device stacked on a "
                   "leading axis.")
@click.option("--output-sharding", metavar="SHARDING",
              help="The sharding of the result for --output-global, written as in a module, e.g. "
                   "'{devices=[2,4]<=[8]}'.")
@click.option("--device", "device", type=click.IntRange(min=0), default=None,
              help="Show this device's results only (summary, --print, JSON).")
@click.option("--cluster", type=click.Choice(["local", "ray"]), default="local", show_default=True,
              help="Where the devices of a multi-device run live: local (this process) or ray (actors of a Ray "
                   "cluster, each holding a group of devices and reading only their inputs; pip install "
                   "'hlo-cli[ray]'). Results are the same bits.")
@click.option("--ray-address", metavar="ADDRESS", default=None,
              help="The Ray cluster to join with --cluster ray (host:port, or auto for the one running here; "
                   "default $RAY_ADDRESS, else a cluster of this machine started for the run).")
@click.option("--ray-actors", type=click.IntRange(min=1), default=None,
              help="With --cluster ray: how many actors share the devices (default one per node).")
@click.option("--numerics", type=click.Choice(["auto", "cpu", "gpu"]), default="auto", show_default=True,
              help="Whose arithmetic to reproduce: XLA CPU's, or XLA GPU's (TF32 products for f32 dots and "
                   "convolutions of DEFAULT/HIGH precision on Ampere and newer, dot algorithms as a GPU runs "
                   "them); auto: gpu for a module compiled for a GPU.")
@module_option
@stage_option
@no_cache_option
@report_errors
def run(module_file, inputs, inputs_npz, random_inputs, seed, output, force, print_values, fmt, expect, rtol, atol,
        dump_dir, dump_filter, dump_summary, dump_force, check_finite, max_iterations, allow_elided_constants,
        no_check, no_progress, profile, max_memory, replicas, partitions, per_device, output_global,
        output_sharding, device, module_choice, no_cache, reference_platform, cluster="local", ray_address=None,
        ray_actors=None, numerics="auto", stage=None):
    """Run MODULE's entry computation on inputs and report the results.

    Inputs: --input FILE.npy per parameter in order, --input NAME=FILE.npy by name, --inputs ARGS.npz,
    or --random-inputs.  The module is checked first (as `hlo check` does).

    An HloSnapshot (XLA's --xla_dump_hlo_snapshots writes module_NNNN.NAME.snapshot.N.pb: the module,
    the arguments of one execution and its result) runs on its stored arguments and is compared with
    its stored result as --expect compares (exit 1 if they differ): the failing execution replayed.
    --input/--inputs/--random-inputs replace its arguments (its result is then not compared);
    --expect replaces its result.  An HloUnoptimizedSnapshot (--xla_dump_hlo_unoptimized_snapshots:
    *.hlo_unoptimized_snapshot.pb, the module before optimizations and the arguments, no result)
    runs on its arguments; --reference xla compares it with XLA.

    Several devices (replica_count x num_partitions in the header, or --replicas/--partitions): an
    input is a global array split by its parameter's sharding (or, with --per-device, one value per
    device); --output writes every result stacked over the devices (--output-global: reassembled).

    Exit codes: 0 success; 1 the module failed (check error, runtime error, --expect mismatch,
    non-finite value under --check-finite); 2 usage error or unreadable input; 3 a bug in hlo;
    4 out of memory; 5 the estimated memory is above --max-memory; 6 --reference xla could not run
    (JAX missing, XLA refused or crashed on the module); 7 hlo cannot run the module: it calls
    custom-call targets hlo has no implementation of (compiled device code...), all named with their
    locations before anything runs, with what to do instead (the module is not wrong).
    """
    result = RunResult(module_file)
    try:
        request, progress = _request(module_file, inputs, inputs_npz, random_inputs, seed, output, force, fmt,
                                     expect, rtol, atol, dump_dir, dump_filter, dump_summary, dump_force,
                                     check_finite, max_iterations, allow_elided_constants, no_check, no_progress,
                                     profile, max_memory, replicas, partitions, per_device, output_global,
                                     output_sharding, device, module_choice, no_cache, reference_platform, cluster,
                                     ray_address, ray_actors, numerics, stage, print_values)
        result.module_file = request.module_file
        try:
            run_pipeline(request, _Hooks(progress, fmt), result)
        except BaseException:
            if fmt != "json" and result.profile is not None and result.profile.get("stopped"):
                _print_profile(result.profile)         # the time until the run stopped, before its error
            raise
        finally:
            if progress is not None:
                progress.stop()
        _report(result, request, fmt, print_values)
    except (SystemExit, click.exceptions.Exit, BrokenPipeError):
        raise
    except BaseException as e:
        if fmt == "json":
            if isinstance(e, click.UsageError):
                code, message = ExitCode.USAGE, e.format_message()
            else:
                code, message = classify_error(e)
            click.echo(json.dumps(error_document(result, code, message, e), indent=2))
        raise


def _request(module_file, inputs, inputs_npz, random_inputs, seed, output, force, fmt, expect, rtol, atol, dump_dir,
             dump_filter, dump_summary, dump_force, check_finite, max_iterations, allow_elided_constants, no_check,
             no_progress, profile, max_memory, replicas, partitions, per_device, output_global, output_sharding,
             device, module_choice, no_cache, reference_platform, cluster, ray_address, ray_actors, numerics, stage,
             print_values=False):
    """The options as a RunRequest (usage errors said first), and the progress display if one is shown."""
    for flag, given in (("--dump-filter", dump_filter), ("--dump-summary", dump_summary),
                        ("--dump-force", dump_force)):
        if given and not dump_dir:
            raise click.UsageError(f"{flag} needs --dump-dir")
    if not (rtol >= 0 and atol >= 0):
        raise click.UsageError("--rtol and --atol must not be negative or NaN")
    if seed < 0:
        raise click.BadParameter(f"{seed} is negative; a seed is a non-negative integer", param_hint="'--seed'")
    if output_sharding is not None and not output_global:
        raise click.UsageError("--output-sharding needs --output-global")
    module_file, module_choice = resolve_stage(module_file, module_choice, stage)   # --stage in a dump dir
    limit = _memory_limit_option(max_memory)
    devices = DeviceOptions(replicas=replicas, partitions=partitions, per_device=per_device,
                            output_global=output_global, output_sharding=output_sharding, device=device,
                            cluster=cluster, ray_address=ray_address, ray_actors=ray_actors,
                            values_here=print_values)           # (a run on Ray brings no value here otherwise)
    if cluster != "ray" and (ray_address is not None or ray_actors is not None):
        raise click.UsageError("--ray-address and --ray-actors need --cluster ray")
    reference = None
    if reference_platform:
        from ..tools.reference import XlaReference
        reference = XlaReference()
    request = RunRequest(module_file=module_file, module_choice=module_choice, inputs=tuple(inputs),
                         inputs_npz=inputs_npz, random_inputs=random_inputs, seed=seed, output=output, force=force,
                         expect=expect, rtol=rtol, atol=atol,
                         dump=DumpOptions(dump_dir, dump_filter, dump_summary, dump_force) if dump_dir else None,
                         check_finite=check_finite, max_iterations=max_iterations,
                         elided_constants=allow_elided_constants, check=not no_check, use_cache=not no_cache,
                         devices=devices, profile=profile, profile_top=50 if fmt == "json" else 15,
                         memory_limit=limit, numerics=numerics, reference=reference)
    progress = None
    if not no_progress and fmt == "text" and stderr_is_terminal():
        from .progress import Display
        progress = Display().start()       # shown once the command has taken half a second
    return request, progress


class _Hooks(RunHooks):
    """The run's reports on stderr, under the progress line (hlo_cli/cli/progress.py) when one is shown."""

    def __init__(self, progress, fmt: str):
        self.progress, self.fmt = progress, fmt
        self.watched = progress is not None

    def phase(self, text: str) -> None:
        if self.progress is not None:
            self.progress.phase = text

    def note(self, text: str) -> None:
        _note(self.progress, text)

    def numerics(self, report: dict) -> None:
        if self.fmt == "text" and report["mode"] == "gpu" and report["requested"] == "auto":
            click.echo(f"note: XLA GPU's numerics, as {report['why']} (--numerics cpu: XLA CPU's)", err=True)

    def executed(self) -> None:
        if self.progress is not None:
            self.progress.stop()

    def watch(self, source) -> None:
        if self.progress is not None:
            self.progress.source = source


# ----------------------------------------------------------------------------- the report

def _report(result: RunResult, request: RunRequest, fmt: str, print_values: bool):
    """The result on stdout (a summary table, or JSON), the non-finite value or the comparison on
    stderr, and the exit code."""
    if result.non_finite is not None:
        if fmt != "json" and result.profile is not None:
            _print_profile(result.profile)
        if fmt == "json":
            doc = {"module": result.module_name, "status": "non-finite", "exit_code": ExitCode.FAILURE, **result.info,
                   "non_finite": result.non_finite, "timings": result.timings}
            if result.profile is not None:
                doc["profile"] = result.profile
            click.echo(json.dumps(doc, indent=2))
        _report_nonfinite(result.non_finite, result.source)
        sys.exit(ExitCode.FAILURE)
    if fmt == "json":
        _echo_json(result, request, _results_json(result, print_values))
    else:
        _print_results(result, print_values)
        if result.mismatch is not None:
            _print_mismatch(result.mismatch, request.rtol, request.atol,
                            "the snapshot's result" if result.expect_label else "the reference",
                            result.info.get("numerics"))
        _print_xla_reference(result.reference, request.rtol, request.atol, result.timings)
        if result.profile is not None:
            _print_profile(result.profile)
    if result.exit_code != ExitCode.OK:
        sys.exit(result.exit_code)


def _results_json(result: RunResult, print_values: bool) -> list[dict]:
    if result.device_leaves is not None:
        from ..pipeline.devices import results_json
        return results_json(result.device_leaves, result.device_run.device,
                            (lambda v, s: literal_text(v, s, oneline=True)) if print_values else None)
    results = [dict(key=f"out{k}", hlo_shape=s.to_str(False), **stats(v)) for k, (v, s) in enumerate(result.leaves)]
    if print_values:
        for r, (v, s) in zip(results, result.leaves):
            r["literal"] = literal_text(v, s, oneline=True)
    return results


def _print_results(result: RunResult, print_values: bool):
    """The summary table (and --print's values): per result leaf; on devices, per set of devices
    holding the same value."""
    if result.device_leaves is None:
        _print_summary(result.module, result.leaves)
        if print_values:
            for k, (v, s) in enumerate(result.leaves):
                click.echo(f"out{k} = {literal_text(v, s)}")
        return
    import numpy as np

    from ..devices.values import who
    from ..pipeline.devices import leaf_rows
    dv = result.device_run
    g = dv.grid
    rows = leaf_rows(result.device_leaves, dv.device)
    where = (f"on {g.count} device{'s' if g.count != 1 else ''} ({g.replicas} replica"
             f"{'s' if g.replicas != 1 else ''} x {g.partitions} partition{'s' if g.partitions != 1 else ''})")
    _print_summary(result.module, [(v if hasattr(v, "head") else np.asarray(v), leaf.shape) for leaf, _, v in rows],
                   where,
                   [leaf.key for leaf, _, _ in rows],
                   ["global" if devs is None else who(devs) for _, devs, _ in rows])
    if print_values:
        for leaf, devs, v in rows:
            at = "" if devs is None else f" ({who(devs)})"
            click.echo(f"{leaf.key}{at} = {literal_text(v, leaf.shape)}")


def _echo_json(result: RunResult, request: RunRequest, results: list[dict]):
    """The JSON document of a finished run."""
    doc = {"module": result.module_name, "status": "mismatch" if result.failed else "ok",
           "exit_code": ExitCode.FAILURE if result.failed else ExitCode.OK, **result.info, "results": results}
    if result.status == "reference-error":
        doc.update(status="reference-error", exit_code=ExitCode.REFERENCE_FAILED)
    if request.output:
        doc["output"] = request.output
    if result.mismatch is not None:
        doc["expect"] = dict(result.mismatch, rtol=request.rtol, atol=request.atol,
                             reference=result.expect_label or request.expect)
        if not result.mismatch["ok"] and result.info.get("numerics"):
            from ..interpreter.ops.numerics import mismatch_hint
            doc["expect"]["hint"] = mismatch_hint(result.info["numerics"])
    if result.reference is not None:
        doc["reference"] = result.reference
    if result.dumper:
        doc["dump"] = {"dir": str(result.dumper.dir), "instructions": len(result.dumper.entries)}
    doc["timings"] = result.timings
    if result.profile is not None:
        doc["profile"] = result.profile
    click.echo(json.dumps(doc, indent=2))


def _console():
    from .common import stdout_console
    return stdout_console(160)


def _print_summary(module, leaves, where: str | None = None, keys=None, devices=None):
    """One row per result leaf; on devices, WHERE names them, KEYS label the rows and DEVICES says
    which devices hold each row's value."""
    from rich.table import Table
    from rich.text import Text
    t = Table(title=f"results of {module.name}" + (f" {where}" if where else ""), title_justify="left",
              show_edge=False)
    cols = ("", "devices", "shape", "min", "max", "mean", "nan", "inf", "preview") if devices else \
        ("", "shape", "min", "max", "mean", "nan", "inf", "preview")
    for col in cols:
        t.add_column(col, justify="right" if col in ("min", "max", "mean", "nan", "inf") else "left",
                     no_wrap=True, overflow="ellipsis")
    from ..pipeline.io import value_stats
    for k, (v, shape) in enumerate(leaves):
        s = value_stats(v)
        lo, hi = s.get("min"), s.get("max")
        if "max_abs" in s:
            lo, hi = s.get("min_abs"), s.get("max_abs")
            lo = None if lo is None else f"|z| {lo:.6g}"
            hi = None if hi is None else f"|z| {hi:.6g}"
        head = [Text(keys[k] if keys else f"out{k}")] + ([Text(devices[k])] if devices else [])
        t.add_row(*head, Text(shape.to_str(False)), number_text(lo), number_text(hi), number_text(s.get("mean")),
                  number_text(s.get("nan")), number_text(s.get("inf")), Text(_preview(v)))
    _console().print(t)


def _print_mismatch(mm, rtol, atol, against: str = "the reference", numerics=None):
    from rich.table import Table
    from rich.text import Text
    t = Table(title=f"comparison with {against} (rtol={rtol:g}, atol={atol:g})", title_justify="left",
              show_edge=False)
    for col in ("key", "status", "mismatched", "max |diff|", "max rel", "first mismatch (got vs want)"):
        t.add_column(col, no_wrap=col != "status")
    for r in mm["rows"]:
        first = f"{r['first_index']}: {r['got']} vs {r['want']}" if "first_index" in r else ""
        t.add_row(Text(r["key"]), Text(r["status"] + (f" ({r['note']})" if r.get("note") else "")),
                  f"{r['mismatched']}/{r['size']}" if "size" in r else "",
                  f"{r['max_abs_diff']:.3g}" if "max_abs_diff" in r else "",
                  f"{r['max_rel_diff']:.3g}" if "max_rel_diff" in r else "", Text(first))
    _console().print(t)
    if mm["ok"]:
        click.echo(f"results match {against}")
    else:
        n = sum(1 for r in mm["rows"] if r["status"] != "ok")
        click.echo(f"error: {n} result{'s' if n != 1 else ''} differ{'s' if n == 1 else ''} from {against} "
                   f"(rtol={rtol:g}, atol={atol:g})", err=True)
        if numerics is not None:               # --expect: whose arithmetic ran, and the other choice
            from ..interpreter.ops.numerics import mismatch_hint
            click.echo(f"note: {mismatch_hint(numerics)}", err=True)


# ----------------------------------------------------------------------------- --profile, --max-memory

def _note(progress, text: str):
    """A note on stderr, with the progress line taken away while it is written."""
    hold = getattr(progress, "hold", None)
    if hold is None:
        click.echo(text, err=True)
        return
    with hold():
        click.echo(text, err=True)


def _print_profile(doc):
    """The --profile tables: the top instructions by self time, then every opcode."""
    from rich.table import Table
    from rich.text import Text
    con = _console()
    how = {"hook events": "time between hook events (generic loop)"}.get(doc["mode"], doc["mode"])
    until = " until the run stopped" if doc.get("stopped") else ""
    t = Table(title=f"profile: {doc['run_ms'] / 1e3:.3f} s of execution{until}, {doc['instructions_timed']:,} "
                    f"instructions timed ({how}); self time, top {len(doc['top_instructions'])}",
              title_justify="left", show_edge=False)
    rows = []
    for r in doc["top_instructions"]:
        name = r["instruction"]
        if r.get("members"):
            m = r["members"]
            name += f" (+{len(m) - 1} fused: " + ", ".join(m[:-1][:4]) + (", ..." if len(m) > 5 else "") + ")"
        calls = f"{r['calls']:,}" if r["calls"] is not None else f"~{r.get('samples', 0)}s"
        rows.append((name, r["opcode"], r["shape"], r["computation"], calls, f"{r['self_ms']:.3f}",
                     f"{r['total_ms']:.3f}", f"{r['percent']:.1f}"))
    cols = ("instruction", "opcode", "shape", "computation", "calls", "self ms", "total ms", "% of run")
    for n, col in enumerate(cols):
        if n >= 4:           # numbers are never cut; the names and shapes give way
            t.add_column(col, justify="right", no_wrap=True,
                         min_width=max([len(col)] + [len(row[n]) for row in rows]))
        else:
            t.add_column(col, no_wrap=True, overflow="ellipsis", max_width=(32, 20, 32, 28)[n])
    for row in rows:
        t.add_row(*[Text(x) for x in row[:4]], *row[4:])
    con.print(t)
    t = Table(title="profile by opcode (self time)", title_justify="left", show_edge=False)
    for col in ("opcode", "instructions", "calls", "self ms", "% of run"):
        t.add_column(col, justify="left" if col == "opcode" else "right", no_wrap=True)
    shown = doc["opcodes"][:15]
    for r in shown:
        calls = f"{r['calls']:,}"
        if r.get("samples"):
            calls = f"~{r['samples']}s" if not r["calls"] else f"{calls} + ~{r['samples']}s"
        t.add_row(Text(r["opcode"]), f"{r['instructions']:,}", calls, f"{r['self_ms']:.3f}", f"{r['percent']:.1f}")
    rest = doc["opcodes"][15:]
    if rest:
        ms = sum(r["self_ms"] for r in rest)
        t.add_row(Text(f"({len(rest)} more opcodes)"), f"{sum(r['instructions'] for r in rest):,}",
                  f"{sum(r['calls'] for r in rest):,}", f"{ms:.3f}",
                  f"{100 * ms / doc['run_ms']:.1f}" if doc["run_ms"] else "")
    if doc["untimed_ms"] >= 0.001:
        t.add_row(Text("(outside instructions)"), "", "", f"{doc['untimed_ms']:.3f}",
                  f"{100 * doc['untimed_ms'] / doc['run_ms']:.1f}" if doc["run_ms"] else "")
    con.print(t)
    outside = ["preparing the module and its computations (compiled into steps on their first call, "
               f"constants folded; {doc['preparing_ms'] / 1e3:.3f} s found by sampling)"]
    if doc["mode"] == "hook events":
        outside.append("the hooks' own work (--dump-dir, --check-finite)")
    click.echo("self time: an instruction's own, without the instructions of the computations it calls; "
               "'outside instructions': " + "; ".join(outside))
    if doc.get("preparing_top"):
        click.echo("longest to prepare (sampled): " + ", ".join(f"{p['computation']} {p['ms'] / 1e3:.3f} s"
                                                              for p in doc["preparing_top"][:5]))
    if "device walk" in doc["mode"]:
        click.echo("on several devices: what each device runs (fusions, calls, loop bodies) is timed per "
                   "instruction; the instructions the device walk runs itself (collectives, elementwise and data "
                   "movement on all devices' values at once, control flow) are timed by sampling every 5 ms "
                   "(calls '~Ns': N samples), so short ones may be missing")


def _memory_limit_option(text: str):
    """--max-memory: "auto" (what the machine has), None (none: no check) or a number of bytes."""
    from ..interpreter.memory import parse_size
    try:
        return parse_size(text)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--max-memory'") from None



# ----------------------------------------------------------------------------- --reference xla

def _print_xla_reference(xref, rtol, atol, timings):
    if xref is None:
        return
    if xref["status"] == "error":
        click.echo(f"error: --reference xla: {xref['message']}", err=True)
        return
    for note in xref.get("notes", ()):
        click.echo(f"note: --reference xla: {note}", err=True)
    n = xref["devices"]
    _print_mismatch(xref, rtol, atol, f"XLA (jax {xref.get('jax_version')}, CPU, {n} device{'s' if n != 1 else ''})")
    rows = xref["rows"]
    click.echo(f"bit for bit the same as XLA's: {xref.get('identical', 0)} of {len(rows)} result"
               f"{'s' if len(rows) != 1 else ''}")
    t = xref["timings"]
    click.echo(f"XLA: compile {t['xla_compile_s']:.3f} s, run {t['xla_run_s']:.3f} s (with its start "
               f"{t['xla_total_s']:.3f} s); hlo: run {timings.get('execute_s', 0.0):.3f} s")
