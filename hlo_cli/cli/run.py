"""`hlo run`: run a module on inputs with the NumPy interpreter.

The steps: read and check the module (`hlo check`'s rules; --no-check skips them), refuse elided
constants unless told how to fill them, bind the inputs to the entry parameters, decide every file
that will be written before anything runs (nothing a user gave is ever overwritten), run with the
hooks the options ask for (dump, finiteness guard) under the progress line (hlo_cli/progress.py,
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
import os
import re
import sys
import time
from pathlib import Path

import click

from ..errors import Diagnostic, ExitCode, HloError, HloInputError
from ..io import has_nonfinite, leaves_with_shapes, literal_text, scalar_str, stats
from .common import (check_before_running, has_elided, refuse_elided, snapshot_of, stderr_is_terminal,
                     diagnostic_dict, load_module, module_option, no_cache_option, report_errors, resolve_stage,
                     stage_option)


def _input_error(msg: str):
    raise HloInputError(msg)


# ----------------------------------------------------------------------------- summaries

def _fmt_num(x) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, list):
        return f"{x[0]:.4g}{x[1]:+.4g}j"
    return str(x)


def _preview(a, n=5) -> str:
    """The first few elements, compactly."""
    flat = a.reshape(-1)
    items = [scalar_str(x, a) for x in flat[:n]]
    return "[" + ", ".join(items) + (", ..." if flat.size > n else "") + "]"


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
        lines.append(f"  result: {_fmt_stats(s)}")
    for op in rep["operands"]:
        at = f"  (at {rep['first_index']}: {op['value_at_first_index']})" if "value_at_first_index" in op else ""
        for s in op["stats"]:
            lines.append(f"  operand {op['operand']}: {_fmt_stats(s)}{at}")
    click.echo("\n".join(lines), err=True)


def _fmt_stats(s):
    keys = [k for k in ("min", "max", "mean", "nan", "inf") if s.get(k) is not None]
    return f"{s['dtype']}{s['shape']} " + " ".join(f"{k}={_fmt_num(s[k])}" for k in keys)


# ----------------------------------------------------------------------------- checks before running

def _check_output_path(path: str, force: bool, protected: set[str], root_shape):
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
@click.option("--max-iterations", type=click.IntRange(min=0), default=None,
              help="Fail a while loop that runs more iterations than this.")
@click.option("--allow-elided-constants", type=click.Choice(["zeros", "random"]), default=None,
              help="Run modules whose dump elided constants ({...}), filling them this way.")
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
    state = {"module": None, "module_file": module_file, "numerics": numerics}
    try:
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
        state["module_file"] = module_file
        limit = _memory_limit_option(max_memory)
        devices = {"replicas": replicas, "partitions": partitions, "per_device": per_device,
                   "output_global": output_global, "output_sharding": output_sharding, "device": device,
                   "cluster": cluster, "ray_address": ray_address, "ray_actors": ray_actors}
        if cluster == "ray":
            for flag, given in (("--profile", profile), ("--reference", reference_platform)):
                if given:
                    raise click.UsageError(f"{flag} cannot be combined with --cluster ray: it runs in this "
                                           f"process (use --cluster local)")
        elif ray_address is not None or ray_actors is not None:
            raise click.UsageError("--ray-address and --ray-actors need --cluster ray")
        if not no_progress and fmt == "text" and stderr_is_terminal():
            from ..progress import Display
            state["progress"] = Display().start()       # shown once the command has taken half a second
        try:
            _run(state, module_file, inputs, inputs_npz, random_inputs, seed, output, force, print_values, fmt,
                 expect, rtol, atol, dump_dir, dump_filter, dump_summary, dump_force, check_finite, max_iterations,
                 allow_elided_constants, no_check, no_progress, no_cache, module_choice, devices, profile, limit,
                 reference_platform)
        finally:
            if state.get("progress") is not None:
                state["progress"].stop()
    except (SystemExit, click.exceptions.Exit, BrokenPipeError):
        raise
    except BaseException as e:
        if fmt == "json":
            click.echo(json.dumps(_error_document(state, e), indent=2))
        raise


def _error_document(state, e: BaseException) -> dict:
    """The JSON document of a run that ended in error E (the exit code is the one the command ends with)."""
    from ..errors import HloResourceError
    if isinstance(e, HloError):
        code, message = int(e.exit_code), str(e)
    elif isinstance(e, click.UsageError):
        code, message = ExitCode.USAGE, e.format_message()
    elif isinstance(e, KeyboardInterrupt):
        code, message = 130, "interrupted"
    elif isinstance(e, MemoryError):
        code, message = HloResourceError.exit_code, "out of memory"
    elif isinstance(e, RecursionError):
        code, message = ExitCode.FAILURE, "the module is nested too deeply to process"
    else:
        code, message = ExitCode.INTERNAL, f"internal error: {type(e).__name__}: {e}"
    diags = getattr(e, "diagnostics", None) or [Diagnostic(message, state["module_file"], code="E000")]
    doc = {"module": state["module"], "status": "error", "exit_code": code, "message": message,
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
    if est is not None and hasattr(est, "to_dict"):          # --max-memory refused the run (exit code 5)
        doc.setdefault("memory", {}).update(estimate=est.to_dict(), limit_bytes=getattr(e, "limit", None),
                                            total_bytes=getattr(e, "total", None))
    doc.update(state.get("info", {}))
    if state.get("timings"):
        doc["timings"] = state["timings"]
    if state.get("profile") is not None:
        doc["profile"] = state["profile"]
    return doc


def _run(state, module_file, inputs, inputs_npz, random_inputs, seed, output, force, print_values, fmt, expect,
         rtol, atol, dump_dir, dump_filter, dump_summary, dump_force, check_finite, max_iterations,
         allow_elided_constants, no_check, no_progress, no_cache, module_choice=None, devices=None, profile=False,
         memory_limit="auto", reference_platform=None):
    import hashlib

    import numpy as np

    from .. import __version__
    from ..checker.positions import SourceIndex
    from ..compare import compare, load_reference
    from ..dumps import OUR_DUMP_FILE, DumpFailed, Dumper, prepare_dump_dir
    from ..finite import FiniteGuard, NonFinite
    from ..interpreter import RunOptions, run_module
    from ..interpreter.inputs import random_inputs as make_random
    from ..io import load_inputs, write_results

    timings = state["timings"] = {}
    progress = state.get("progress")
    phase = _phase_setter(progress)
    clock = time.perf_counter
    t0 = clock()
    phase("parsing " + ("<stdin>" if module_file == "-" else Path(module_file).name))
    module, text = load_module(module_file, use_cache=not no_cache, with_text=True, module=module_choice)
    timings["parse_s"] = clock() - t0
    state["module"] = module.name
    info = state["info"] = {"tool": {"name": "hlo", "version": __version__},
                            "module_file": "<stdin>" if module_file == "-" else module_file,
                            "module_sha256": hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()}
    src = SourceIndex(text)
    t0 = clock()
    phase("checking " + module.name)
    if not no_check:
        check_before_running(module, text, (devices or {}).get("replicas"), (devices or {}).get("partitions"))
    from ..support import check_runnable
    check_runnable(module)             # every instruction hlo cannot run, named at once (exit 7)
    timings["check_s"] = clock() - t0
    if allow_elided_constants is None:
        refuse_elided(module, src)
    from ..devices.outputs import DeviceRun
    dv = DeviceRun(module, devices or {})
    if dv.multi:
        info["devices"] = {"replicas": dv.grid.replicas, "partitions": dv.grid.partitions}
    from ..interpreter.numerics import report as numerics_report
    info["numerics"] = numerics_report(module, state.get("numerics"))
    if fmt == "text" and info["numerics"]["mode"] == "gpu" and info["numerics"]["requested"] == "auto":
        click.echo(f"note: XLA GPU's numerics, as {info['numerics']['why']} (--numerics cpu: XLA CPU's)", err=True)
    t0 = clock()
    phase("estimating the memory of " + module.name)
    _check_memory(module, memory_limit, dv.grid.count if dv.multi else 1)
    timings["memory_check_s"] = clock() - t0

    # -- inputs: every file's header is checked against its parameter before its data is read
    t0 = clock()
    phase("reading inputs")
    params = module.entry_computation.parameters
    protected = set()
    if module_file != "-":
        protected.add(str(Path(os.path.realpath(module_file))))
    snap = snapshot_of(module_file)
    snap_args = snap is not None and not (inputs or inputs_npz or random_inputs)
    if snap is not None and not snap_args:
        _note(progress, "note: the inputs given replace the snapshot's arguments; its stored result is not compared")
    if snap_args:
        from ..reference import snapshot_arguments
        notes = []
        values = snapshot_arguments(snap, params, notes)
        info["inputs"] = [{"parameter": p.name, "number": p.parameter_number, "snapshot": module_file}
                          for p in params if p.shape.element_type != "token"]
        args = dv.distribute(values, notes) if dv.multi else values
        for note in notes:
            _note(progress, f"note: {note}")
    elif random_inputs:
        if inputs or inputs_npz:
            _input_error("--random-inputs cannot be combined with --input/--inputs")
        if dv.per_device:
            _input_error("--per-device says how --input/--inputs hold their values; --random-inputs draws "
                         "global values and splits them by the parameters' shardings")
        info.update(inputs=[{"parameter": p.name, "number": p.parameter_number, "random": True} for p in params
                            if p.shape.element_type != "token"], seed=seed)
        args = dv.random_inputs(seed) if dv.multi else make_random(params, seed)
    else:
        if not inputs and not inputs_npz and any(p.shape.element_type != "token" for p in params):
            _input_error(f"the entry computation takes {len(params)} parameter{'s' if len(params) != 1 else ''} ("
                         + ", ".join(f"{p.name}: {p.shape.to_str(False)}" for p in params)
                         + "); pass --input/--inputs, or --random-inputs")
        loaded = load_inputs(params, inputs, inputs_npz, dv.shape_for if dv.multi else None, read=not dv.remote)
        protected |= loaded.paths
        info["inputs"] = loaded.sources
        if _uses_rng(module):
            info["seed"] = seed
        args = dv.distribute(loaded.values, loaded.notes) if dv.multi else loaded.values
        for note in loaded.notes:
            _note(progress, f"note: {note}")
    timings["inputs_s"] = clock() - t0
    if check_finite:
        for p, a in zip(params, args):
            if dv.multi and not hasattr(a, "value"):
                continue                  # read by the Ray actors (--cluster ray): not here
            a = a.value if dv.multi else a
            bad = [leaf for leaf, _ in leaves_with_shapes(a, p.shape) if has_nonfinite(np.asarray(leaf))]
            if bad:
                _note(progress, f"note: input parameter {p.parameter_number} '{p.name}' holds non-finite values "
                                f"({_fmt_stats(stats(np.asarray(bad[0])))}); --check-finite looks for where new "
                                f"ones appear")

    # -- everything that will be written is decided before anything runs
    if expect:
        protected.add(str(Path(os.path.realpath(expect))))
    root_shape = module.entry_computation.root_instruction.shape
    if output:
        _check_output_path(output, force, protected, root_shape)
    reference = None
    if expect and dv.multi:
        dv.check_reference(expect)        # (read after the run: the result's form decides its shapes)
    elif expect:
        reference = load_reference(expect, [(s.dims, s.dynamic) if s.is_dynamic else s.dims
                                            for s in root_shape.leaves()
                                            if s.element_type not in ("token", "opaque")])
    elif snap_args and snap.result is None and not reference_platform:
        _note(progress, "note: the snapshot holds no result to compare with (--reference xla runs it on XLA)")
    elif snap_args and snap.result is not None and dv.multi:
        _note(progress, "note: the snapshot's stored result is not compared on several devices")
    elif snap_args and snap.result is not None:       # the stored result, as --expect would compare it
        from ..reference import snapshot_reference
        reference = snapshot_reference(snap)
        expect = state["expect_label"] = f"{module_file} (the snapshot's result)"
    if reference_platform:
        from ..reference import require_jax
        require_jax()                                # before hlo's own run: nothing to wait for
        if allow_elided_constants == "random" and any(
                i.opcode == "constant" and i.literal is not None and has_elided(i.literal)
                for c in module.computations for i in c.instructions):
            _note(progress, "note: --reference xla: XLA fills elided constants ({...}) its own way (zeros on the "
                            "XLA CPU measured); hlo's random values for them will not match (use "
                            "--allow-elided-constants zeros)")
        state["xla_args"], state["root_shape"], state["grid"] = _xla_arguments(dv, args), root_shape, dv.grid
        from ..reference import unsupported
        state["xla_refused"] = unsupported(module)

        def canonical(module=module):
            from ..ir.printer import format_module
            return format_module(module)
        state["xla_canonical"] = canonical
    hooks = []
    dumper = None
    if dump_dir:
        try:
            pattern = re.compile(dump_filter) if dump_filter else None
        except re.error as e:
            _input_error(f"--dump-filter {dump_filter!r}: not a regular expression ({e})")
        if output and Path(os.path.realpath(output)).parent == Path(os.path.realpath(dump_dir)) and \
                OUR_DUMP_FILE.match(Path(output).name):
            _input_error(f"--output {output}: a dump file name inside --dump-dir; choose another name")
        d = prepare_dump_dir(dump_dir, dump_force, protected)
        dumper = Dumper(module, d, pattern, dump_summary, info)
        hooks.append(dumper)
    guard = FiniteGuard(module) if check_finite else None
    if guard:
        hooks.append(guard)
    dv.dumper, dv.guard = dumper, guard       # (--cluster ray makes them again in each actor)

    prof = None
    if profile:
        from ..interpreter.profiling import Profile
        prof = Profile()
        hooks = [prof.hook(hooks[0] if len(hooks) == 1 else _all(hooks))] if hooks else []

    if not hooks:
        hook = None
    elif len(hooks) == 1:
        hook = hooks[0]
    else:
        def hook(ev):
            for h in hooks:
                h(ev)

    # -- run: execute_s is the evaluation of the entry computation alone
    options = RunOptions(seed=seed, max_iterations=max_iterations, elided_constants=allow_elided_constants,
                         profile=prof, numerics=state.get("numerics"))
    phase("preparing " + module.name)        # the sampler shows the computations once they run
    if prof is not None and hook is None:
        import threading
        prof.start_sampling(threading.get_ident())
    t0 = clock()
    try:
        if dv.multi:
            result = dv.run(args, options, hook, None)
        else:
            result = run_module(module, args, options, hook, None)
    except NonFinite:
        timings["execute_s"] = clock() - t0
        if progress:
            progress.stop()
        _stopped_profile(state, prof, timings, fmt)
        if dumper:
            dumper.finish("non-finite", timings)
        if fmt == "json":
            doc = {"module": module.name, "status": "non-finite", "exit_code": ExitCode.FAILURE, **info,
                   "non_finite": guard.report, "timings": timings}
            if state.get("profile") is not None:
                doc["profile"] = state["profile"]
            click.echo(json.dumps(doc, indent=2))
        _report_nonfinite(guard.report, src)
        sys.exit(ExitCode.FAILURE)
    except BaseException as e:
        timings["execute_s"] = clock() - t0
        if progress:
            progress.stop()
        _stopped_profile(state, prof, timings, fmt)
        if dumper:
            status = "interrupted" if isinstance(e, KeyboardInterrupt) else "error"
            try:
                dumper.finish(status, timings)
            except HloError:
                pass                       # the error that stopped the run is the one to report
        if isinstance(e, DumpFailed):
            raise e.error from None
        raise
    timings["execute_s"] = clock() - t0
    if progress:
        progress.stop()
    prof_doc = None
    if prof is not None:
        prof.stop_sampling()
        prof_doc = prof.summary(timings["execute_s"], top=50 if fmt == "json" else 15)
        if dv.multi and prof.mode == "steps":
            prof_doc["mode"] = "steps, per device; the device walk's own instructions sampled"

    # -- report
    if dv.multi and dv.ray_run is not None:
        info["cluster"] = dv.ray_run.to_dict()
    if dv.multi:
        _report_devices(dv, result, module, root_shape, output, expect, rtol, atol, print_values, fmt, dumper,
                        info, timings, prof_doc, state if reference_platform else None, text)
        return
    t0 = clock()
    leaves = [(np.asarray(v), s) for v, s in leaves_with_shapes(result, root_shape)]
    if dumper:
        dumper.finish("ok", timings)
    if output:
        write_results(output, [v for v, _ in leaves])
    timings["write_s"] = clock() - t0
    mismatch = compare([v for v, _ in leaves], reference, rtol, atol) if reference is not None else None
    failed = mismatch is not None and not mismatch["ok"]
    xref = _xla_reference(state, text, None, [v for v, _ in leaves], rtol, atol, timings) \
        if reference_platform else None
    failed = failed or (xref is not None and xref["status"] == "mismatch")

    if fmt == "json":
        results = [dict(key=f"out{k}", hlo_shape=s.to_str(False), **stats(v)) for k, (v, s) in enumerate(leaves)]
        if print_values:
            for r, (v, s) in zip(results, leaves):
                r["literal"] = literal_text(v, s, oneline=True)
        _echo_json(module, failed, info, results, output, mismatch, rtol, atol, expect, dumper, timings, prof_doc,
                   xref)
    else:
        _print_summary(module, leaves)
        if print_values:
            for k, (v, s) in enumerate(leaves):
                click.echo(f"out{k} = {literal_text(v, s)}")
        if mismatch is not None:
            _print_mismatch(mismatch, rtol, atol, "the snapshot's result" if state.get("expect_label") else
                            "the reference", info.get("numerics"))
        _print_xla_reference(xref, rtol, atol, timings)
        if prof_doc is not None:
            _print_profile(prof_doc)
    _exit_after_report(failed, xref)


def _echo_json(module, failed, info, results, output, mismatch, rtol, atol, expect, dumper, timings, profile=None,
               xref=None):
    """The JSON document of a finished run."""
    doc = {"module": module.name, "status": "mismatch" if failed else "ok",
           "exit_code": ExitCode.FAILURE if failed else ExitCode.OK, **info, "results": results}
    if xref is not None and xref["status"] == "error" and not failed:
        doc.update(status="reference-error", exit_code=ExitCode.REFERENCE_FAILED)
    if output:
        doc["output"] = output
    if mismatch is not None:
        doc["expect"] = dict(mismatch, rtol=rtol, atol=atol, reference=expect)
        if not mismatch["ok"] and info.get("numerics"):
            from ..interpreter.numerics import mismatch_hint
            doc["expect"]["hint"] = mismatch_hint(info["numerics"])
    if xref is not None:
        doc["reference"] = xref
    if dumper:
        doc["dump"] = {"dir": str(dumper.dir), "instructions": len(dumper.entries)}
    doc["timings"] = timings
    if profile is not None:
        doc["profile"] = profile
    click.echo(json.dumps(doc, indent=2))


def _report_devices(dv, result, module, root_shape, output, expect, rtol, atol, print_values, fmt, dumper, info,
                    timings, prof_doc=None, xla_state=None, text=None):
    """The report of a multi-device run: --output, --expect, and the summary or JSON (per device)."""
    import numpy as np

    from ..compare import compare
    from ..devices.outputs import leaf_rows, results_json
    from ..devices.values import who
    from ..io import write_results
    t0 = time.perf_counter()
    leaves = dv.leaves(result)
    if dumper:
        dumper.finish("ok", timings)
    arrays = dv.output_arrays(leaves) if (output or expect) else []
    if output:
        write_results(output, arrays)
    timings["write_s"] = time.perf_counter() - t0
    mismatch = compare([np.asarray(a) for a in arrays], dv.reference(expect, arrays), rtol, atol) if expect else None
    failed = mismatch is not None and not mismatch["ok"]
    xref = None
    if xla_state is not None:        # per device stacked, or global: the forms XLA's results come in
        mine = [np.asarray(leaf.global_value if leaf.stacked is None else leaf.stacked) for leaf in leaves]
        xref = _xla_reference(xla_state, text, dv, mine, rtol, atol, timings)
        failed = failed or xref["status"] == "mismatch"
    if fmt == "json":
        results = results_json(leaves, dv.device,
                               (lambda v, s: literal_text(v, s, oneline=True)) if print_values else None)
        _echo_json(module, failed, info, results, output, mismatch, rtol, atol, expect, dumper, timings, prof_doc,
                   xref)
    else:
        g = dv.grid
        rows = leaf_rows(leaves, dv.device)
        where = (f"on {g.count} device{'s' if g.count != 1 else ''} ({g.replicas} replica"
                 f"{'s' if g.replicas != 1 else ''} x {g.partitions} partition{'s' if g.partitions != 1 else ''})")
        _print_summary(module, [(np.asarray(v), leaf.shape) for leaf, _, v in rows], where,
                       [leaf.key for leaf, _, _ in rows],
                       ["global" if devs is None else who(devs) for _, devs, _ in rows])
        if print_values:
            for leaf, devs, v in rows:
                at = "" if devs is None else f" ({who(devs)})"
                click.echo(f"{leaf.key}{at} = {literal_text(v, leaf.shape)}")
        if mismatch is not None:
            _print_mismatch(mismatch, rtol, atol, numerics=info.get("numerics"))
        _print_xla_reference(xref, rtol, atol, timings)
        if prof_doc is not None:
            _print_profile(prof_doc)
    _exit_after_report(failed, xref)


def _uses_rng(module) -> bool:
    return any(inst.opcode == "rng" for comp in module.computations for inst in comp.instructions)


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
    for k, (v, shape) in enumerate(leaves):
        s = stats(v)
        lo, hi = s.get("min"), s.get("max")
        if "max_abs" in s:
            lo, hi = s.get("min_abs"), s.get("max_abs")
            lo = None if lo is None else f"|z| {lo:.6g}"
            hi = None if hi is None else f"|z| {hi:.6g}"
        head = [Text(keys[k] if keys else f"out{k}")] + ([Text(devices[k])] if devices else [])
        t.add_row(*head, Text(shape.to_str(False)), _fmt_num(lo), _fmt_num(hi), _fmt_num(s.get("mean")),
                  _fmt_num(s.get("nan")), _fmt_num(s.get("inf")), Text(_preview(v)))
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
            from ..interpreter.numerics import mismatch_hint
            click.echo(f"note: {mismatch_hint(numerics)}", err=True)


# ----------------------------------------------------------------------------- progress, --profile, --max-memory

def _phase_setter(progress):
    """A function naming what the command does now, for the progress line (a no-op without one)."""
    if progress is None:
        return lambda text: None

    def phase(text):
        progress.phase = text
    return phase


def _note(progress, text: str):
    """A note on stderr, with the progress line taken away while it is written."""
    hold = getattr(progress, "hold", None)
    if hold is None:
        click.echo(text, err=True)
        return
    with hold():
        click.echo(text, err=True)


def _stopped_profile(state, prof, timings, fmt):
    """--profile of a run that stopped (an error, ^C, a non-finite value): the time until then, in
    the JSON document, or printed before the error is."""
    if prof is None:
        return
    try:
        prof.stop_sampling()
        doc = prof.summary(timings["execute_s"], top=50 if fmt == "json" else 15)
        doc["stopped"] = True
        state["profile"] = doc
        if fmt != "json":
            _print_profile(doc)
    except Exception:       # noqa: BLE001 -- the error that stopped the run is the one to report
        pass


def _all(hooks):
    def hook(ev):
        for h in hooks:
            h(ev)
    return hook


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


def _check_memory(module, limit, devices: int):
    """Refuse (HloMemoryLimitError, exit 5) a run whose estimated memory is above `limit`, before
    any input data is read."""
    if limit is None:
        return
    from ..interpreter.memory import check_budget
    check_budget(module, limit, devices=devices)


# ----------------------------------------------------------------------------- --reference xla

def _xla_arguments(dv, args):
    """What XLA gets (hlo_cli/reference.py): the arguments hlo bound, taken before hlo's run."""
    from ..reference import arguments_for
    return arguments_for(dv, args)


def _xla_reference(state, text, dv, leaves, rtol, atol, timings) -> dict:
    """Run the module on XLA and compare (the `reference` section of the JSON document); XLA's
    times also go into TIMINGS (xla_compile_s, xla_run_s, xla_total_s)."""
    from ..reference import reference_report
    xla_args, mode = state["xla_args"]
    dims = None
    if mode == "global":
        dims = [s.dims for s in state["root_shape"].leaves() if s.element_type not in ("token", "opaque")]
    if state.get("progress") is not None:          # (a person watching: XLA's compile can take seconds)
        click.echo("running the module on XLA CPU (through JAX) ...", err=True)
    doc = reference_report(text, xla_args, mode, state["grid"], leaves, rtol, atol, dims,
                           timings.get("execute_s"), state.get("module_file"), state.get("xla_refused"),
                           state.get("xla_canonical"))
    for k in ("xla_compile_s", "xla_run_s", "xla_total_s"):
        if k in doc.get("timings", {}):
            timings[k] = doc["timings"][k]
    return doc


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


def _exit_after_report(failed: bool, xref):
    if failed:
        sys.exit(ExitCode.FAILURE)
    if xref is not None and xref["status"] == "error":
        sys.exit(ExitCode.REFERENCE_FAILED)


