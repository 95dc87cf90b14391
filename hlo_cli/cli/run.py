"""`hlo run`: run a module on inputs with the NumPy interpreter."""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import click

from ..errors import Diagnostic, ExitCode, HloError, HloInputError
from .common import load_module, no_cache_option, report_errors


def _input_error(msg: str):
    raise HloInputError(msg, [Diagnostic(msg, "<inputs>", code="I002")])


def _load_array(path: str, what: str):
    import numpy as np
    p = Path(path)
    if not p.exists():
        _input_error(f"{what}: no such file: {path}")
    if p.is_dir():
        _input_error(f"{what}: {path} is a directory")
    try:
        if p.suffix == ".npz":
            _input_error(f"{what}: {path} is an .npz archive; pass it with --inputs")
        return np.load(p, allow_pickle=False)
    except HloError:
        raise
    except Exception as e:  # numpy raises many kinds for bad files
        _input_error(f"{what}: cannot read {path} as a .npy array ({type(e).__name__}: {e})")


def _load_npz(path: str, what: str) -> dict:
    import numpy as np
    p = Path(path)
    if not p.exists():
        _input_error(f"{what}: no such file: {path}")
    try:
        with np.load(p, allow_pickle=False) as z:
            if not hasattr(z, "files"):
                _input_error(f"{what}: {path} is a single array, not an .npz archive")
            return {k: z[k] for k in z.files}
    except HloError:
        raise
    except Exception as e:
        _input_error(f"{what}: cannot read {path} as an .npz archive ({type(e).__name__}: {e})")


def _stats(a):
    import numpy as np
    out = {"shape": list(a.shape), "dtype": str(a.dtype), "size": int(a.size)}
    if a.size == 0:
        return out
    kind = a.dtype.kind
    try:
        if kind == "b":
            out.update(true=int(a.sum()))
        elif kind in "iu":
            out.update(min=int(a.min()), max=int(a.max()), mean=float(a.astype(np.float64).mean()))
        elif kind == "c":
            mag = np.abs(a.astype(np.complex128))
            fin = np.isfinite(mag)
            out.update(nan=int(np.isnan(a.astype(np.complex128)).sum()), inf=int(np.isinf(mag).sum()),
                       max_abs=float(mag[fin].max()) if fin.any() else None)
        else:
            f = a.astype(np.float64)
            fin = np.isfinite(f)
            out.update(nan=int(np.isnan(f).sum()), inf=int(np.isinf(f).sum()),
                       min=float(f[fin].min()) if fin.any() else None,
                       max=float(f[fin].max()) if fin.any() else None,
                       mean=float(f[fin].mean()) if fin.any() else None)
    except (TypeError, ValueError):
        pass
    return out


def _nonfinite(a) -> bool:
    import numpy as np
    if a.dtype.kind in "biu" or a.size == 0:
        return False
    try:
        return not bool(np.isfinite(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64)).all())
    except (TypeError, ValueError):
        return False


def _preview(a, n=6) -> str:
    import numpy as np
    flat = a.reshape(-1)
    items = [str(x) for x in flat[:n].tolist()] if a.dtype.kind in "biuf" else [str(x) for x in flat[:n]]
    if a.dtype.kind not in "biufc":
        items = [str(float(x)) for x in flat[:n].astype(np.float64)]
    return "[" + ", ".join(items) + (", ..." if flat.size > n else "") + "]"


def _leaves_with_shapes(value, shape):
    from ..interpreter.values import TOKEN
    if shape.is_tuple:
        for v, s in zip(value, shape.tuple_shapes):
            yield from _leaves_with_shapes(v, s)
    elif value is not TOKEN and value is not None:
        yield value, shape


def _source_of(module, inst):
    md = inst.attrs.get("metadata")
    out = {}
    if md is not None:
        if md.op_name:
            out["op_name"] = md.op_name
        fid = md.stack_frame_id
        if fid and module.stack_frames:
            stack = module.stack_frames.resolve(fid)
            if stack:
                f, fn, line, col = stack[0]
                out["source"] = f"{f}:{line}"
                out["stack"] = [f"{f}:{ln} ({fnn})" for f, fnn, ln, _ in stack]
        elif md.source_file:
            out["source"] = f"{md.source_file}:{md.source_line or 0}"
    return out


class _Dumper:
    def __init__(self, module, directory: Path, pattern, summary_only: bool):
        self.module = module
        self.dir = directory
        self.pattern = pattern
        self.summary_only = summary_only
        self.entries = []
        self.seq = 0

    def __call__(self, ev):
        import numpy as np
        inst = ev.instruction
        if self.pattern is not None and not (self.pattern.search(inst.name) or self.pattern.search(inst.opcode)):
            return
        self.seq += 1
        safe = re.sub(r"[^\w.\-]", "_", f"{ev.computation.name}.{inst.name}")
        files, stats = [], []
        for k, (leaf, shape) in enumerate(_leaves_with_shapes(ev.value, inst.shape)):
            leaf = np.asarray(leaf)
            stats.append(_stats(leaf))
            if not self.summary_only:
                name = f"{self.seq:06d}_{safe}" + (f".{ev.count}" if ev.count > 1 else "") + \
                       (f".leaf{k}" if inst.shape.is_tuple else "") + ".npy"
                np.save(self.dir / name, _storable(leaf))
                files.append(name)
        entry = {"order": self.seq, "computation": ev.computation.name, "instruction": inst.name,
                 "opcode": inst.opcode, "shape": inst.shape.to_str(False), "execution": ev.count,
                 "location": f"{inst.loc.file}:{inst.loc.line}:{inst.loc.column}", "stats": stats}
        if files:
            entry["files"] = files
        entry.update(_source_of(self.module, inst))
        self.entries.append(entry)

    def finish(self, status: str):
        manifest = {"module": self.module.name, "status": status, "instructions": self.entries}
        tmp = self.dir / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(tmp, self.dir / "manifest.json")


def _storable(a):
    """ml_dtypes arrays are saved as raw records (|V2 etc.), which `hlo run --input` reads back."""
    import numpy as np
    if a.dtype.kind == "V" or type(a.dtype).__module__.startswith("ml_dtypes") or \
            a.dtype.name in ("bfloat16",) or a.dtype.name.startswith(("float8", "float6", "float4", "int4",
                                                                         "uint4", "int2", "uint2", "int1",
                                                                         "uint1")):
        return a.view(np.dtype(f"V{a.dtype.itemsize}"))
    return a


class _FiniteGuard:
    """Stops the run at the first instruction that makes a NaN or Inf out of finite operands."""

    def __init__(self, module):
        self.module = module
        self.report = None

    def __call__(self, ev):
        import numpy as np
        vals = [np.asarray(v) for v, _ in _leaves_with_shapes(ev.value, ev.instruction.shape)]
        if not any(_nonfinite(v) for v in vals):
            return
        from ..interpreter.values import leaves
        if any(_nonfinite(np.asarray(v)) for op in ev.operands for v in leaves(op)):
            return
        inst = ev.instruction
        comp = ev.computation
        ops = []
        for name, val in zip(inst.operands, ev.operands):
            ops.append({"operand": name, "stats": [_stats(np.asarray(v)) for v in leaves(val)]})
        self.report = {"instruction": inst.name, "opcode": inst.opcode, "computation": comp.name,
                       "location": f"{inst.loc.file}:{inst.loc.line}:{inst.loc.column}",
                       "execution": ev.count, "stats": [_stats(v) for v in vals], "operands": ops}
        self.report.update(_source_of(self.module, inst))
        raise _NonFinite()


class _NonFinite(Exception):
    pass


def _check_output_path(path: str, force: bool, inputs: set[str]):
    p = Path(path).resolve()
    if str(p) in inputs:
        _input_error(f"--output {path} is one of the input files; refusing to overwrite it")
    if p.exists() and not force:
        _input_error(f"--output {path} exists; refusing to overwrite it (pass --force to replace it)")
    if p.parent and not p.parent.exists():
        _input_error(f"--output {path}: the directory {p.parent} does not exist")


def _prepare_dump_dir(path: str, force: bool) -> Path:
    d = Path(path)
    if d.exists():
        if not d.is_dir():
            _input_error(f"--dump-dir {path} exists and is not a directory")
        marker = d / ".hlo-dump"
        if any(d.iterdir()) and not marker.exists() and not force:
            _input_error(f"--dump-dir {path} is not empty and was not made by hlo; refusing to write into it "
                         f"(pass --dump-force to write there anyway)")
        # an earlier dump of ours: clear our own files only
        for f in d.iterdir():
            if f.is_file() and (f.suffix == ".npy" or f.name in ("manifest.json", "manifest.json.tmp")):
                f.unlink()
    else:
        try:
            d.mkdir(parents=True)
        except OSError as e:
            _input_error(f"--dump-dir {path}: cannot create it ({e.strerror})")
    (d / ".hlo-dump").write_text("This directory holds a dump written by `hlo run --dump-dir`.\n")
    return d


@click.command("run")
@click.argument("module_file", metavar="MODULE", type=str)
@click.option("--input", "-i", "inputs", multiple=True, metavar="[NAME=]FILE.npy",
              help="An input array; in parameter order, or bound to a parameter by NAME (or argN).")
@click.option("--inputs", "inputs_npz", metavar="ARGS.npz",
              help="An .npz archive of inputs keyed by parameter name or arg0, arg1, ...")
@click.option("--random-inputs", is_flag=True, help="Fill every parameter with deterministic random values.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --random-inputs and rng.")
@click.option("--output", "-o", metavar="OUT.npz|OUT.npy",
              help="Write the results: .npz with keys out0, out1, ... (tuple leaves, depth-first), or .npy "
                   "for a non-tuple result.")
@click.option("--force", is_flag=True, help="Allow --output to replace an existing file.")
@click.option("--print", "print_values", is_flag=True, help="Print the full result values in XLA's literal format.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--expect", metavar="REF.npz", help="Compare the results with a reference (keys out0, out1, ...).")
@click.option("--rtol", type=float, default=1e-3, show_default=True, help="Relative tolerance for --expect.")
@click.option("--atol", type=float, default=1e-3, show_default=True, help="Absolute tolerance for --expect.")
@click.option("--dump-dir", metavar="DIR", help="Write every executed instruction's value and DIR/manifest.json.")
@click.option("--dump-filter", metavar="REGEX", help="Dump only instructions whose name or opcode matches.")
@click.option("--dump-summary", is_flag=True, help="Write statistics to the manifest only, no arrays.")
@click.option("--dump-force", is_flag=True, help="Write into a non-empty --dump-dir that hlo did not create.")
@click.option("--check-finite", is_flag=True,
              help="Stop at the first instruction that makes a NaN or Inf out of finite operands.")
@click.option("--max-iterations", type=int, default=None, help="Fail a while loop that runs more iterations.")
@click.option("--allow-elided-constants", type=click.Choice(["zeros", "random"]), default=None,
              help="Run modules whose dump elided constants ({...}), filling them this way.")
@click.option("--no-progress", is_flag=True, help="No progress display (it is off anyway when not a terminal).")
@no_cache_option
@report_errors
def run(module_file, inputs, inputs_npz, random_inputs, seed, output, force, print_values, fmt, expect, rtol, atol,
        dump_dir, dump_filter, dump_summary, dump_force, check_finite, max_iterations, allow_elided_constants,
        no_progress, no_cache):
    """Run MODULE's entry computation on inputs and report the results.

    Exit codes: 0 success; 1 the module failed (check error, runtime error, --expect mismatch,
    non-finite value under --check-finite); 2 usage error or unreadable input.
    """
    import numpy as np

    from ..interpreter import RunOptions, run_module
    from ..interpreter.inputs import bind, random_inputs as make_random

    module = load_module(module_file, use_cache=not no_cache)
    params = module.entry_computation.parameters
    positional, named, input_paths = [], {}, set()
    for spec in inputs:
        name, eq, path = spec.partition("=")
        if not eq:
            name, path = None, spec
        input_paths.add(str(Path(path).resolve()))
        arr = _load_array(path, f"--input {spec}")
        if name is None:
            if named:
                _input_error("positional --input FILE must come before NAME=FILE inputs")
            positional.append(arr)
        else:
            named[name] = arr
    if inputs_npz:
        input_paths.add(str(Path(inputs_npz).resolve()))
        for k, v in _load_npz(inputs_npz, f"--inputs {inputs_npz}").items():
            if k in named:
                _input_error(f"input '{k}' is given by both --input and --inputs")
            named[k] = v
    if random_inputs:
        if positional or named:
            _input_error("--random-inputs cannot be combined with --input/--inputs")
        args = make_random(params, seed)
    else:
        if not positional and not named and params:
            _input_error(f"the entry computation takes {len(params)} parameter{'s' if len(params) != 1 else ''} ("
                         + ", ".join(f"{p.name}: {p.shape.to_str(False)}" for p in params)
                         + "); pass --input/--inputs, or --random-inputs")
        args = bind(params, positional, named)
    if output:
        _check_output_path(output, force, input_paths)
    reference = _load_npz(expect, f"--expect {expect}") if expect else None

    hooks = []
    dumper = None
    if dump_dir:
        try:
            pattern = re.compile(dump_filter) if dump_filter else None
        except re.error as e:
            _input_error(f"--dump-filter: bad regular expression: {e}")
        dumper = _Dumper(module, _prepare_dump_dir(dump_dir, dump_force), pattern, dump_summary)
        hooks.append(dumper)
    guard = _FiniteGuard(module) if check_finite else None
    if guard:
        hooks.append(guard)

    def hook(ev):
        for h in hooks:
            h(ev)

    options = RunOptions(seed=seed, max_iterations=max_iterations, elided_constants=allow_elided_constants)
    show_progress = not no_progress and sys.stderr.isatty() and fmt == "text"
    status = "ok"
    try:
        if show_progress:
            from rich.console import Console
            console = Console(stderr=True)
            with console.status("running...") as st:
                def progress(n, _st=st):
                    _st.update(f"running... {n:,} instructions executed")
                result = run_module(module, args, options, hook if hooks else None, progress)
        else:
            result = run_module(module, args, options, hook if hooks else None)
    except _NonFinite:
        status = "non-finite"
        if dumper:
            dumper.finish(status)
        _report_nonfinite(guard.report, fmt)
        sys.exit(ExitCode.FAILURE)
    except HloError:
        if dumper:
            dumper.finish("error")
        raise
    if dumper:
        dumper.finish(status)

    root_shape = module.entry_computation.root_instruction.shape
    leaves = [np.asarray(v) for v, _ in _leaves_with_shapes(result, root_shape)]
    if output:
        _write_output(output, leaves, root_shape)
    mismatch = _compare(leaves, reference, rtol, atol) if reference is not None else None

    if fmt == "json":
        doc = {"module": module.name, "results": [dict(key=f"out{k}", **_stats(v)) for k, v in enumerate(leaves)]}
        if mismatch is not None:
            doc["expect"] = mismatch
        click.echo(json.dumps(doc, indent=2))
    else:
        _print_summary(module, leaves, print_values, root_shape, result)
        if mismatch is not None:
            _print_mismatch(mismatch, rtol, atol)
    if mismatch is not None and not mismatch["ok"]:
        sys.exit(ExitCode.FAILURE)


def _write_output(path, leaves, root_shape):
    import numpy as np
    tmp = Path(path + ".tmp")
    try:
        if path.endswith(".npy"):
            if root_shape.is_tuple:
                _input_error(f"--output {path}: the result is a tuple of {len(leaves)} arrays; use an .npz file")
            with open(tmp, "wb") as f:
                np.save(f, _storable(leaves[0]))
        else:
            with open(tmp, "wb") as f:
                np.savez(f, **{f"out{k}": _storable(v) for k, v in enumerate(leaves)})
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def _compare(leaves, reference, rtol, atol):
    import numpy as np
    rows, ok = [], True
    keys = [f"out{k}" for k in range(len(leaves))]
    for k in sorted(set(reference) - set(keys)):
        rows.append({"key": k, "status": "missing in results"})
        ok = False
    for key, got in zip(keys, leaves):
        if key not in reference:
            rows.append({"key": key, "status": "missing in reference"})
            ok = False
            continue
        want = reference[key]
        if want.dtype.kind == "V" and want.dtype.itemsize == got.dtype.itemsize:
            want = want.view(got.dtype)
        if want.shape != got.shape:
            rows.append({"key": key, "status": f"shape {list(got.shape)} vs reference {list(want.shape)}"})
            ok = False
            continue
        g = got.astype(np.complex128 if got.dtype.kind == "c" else np.float64)
        w = want.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
        with np.errstate(invalid="ignore"):
            close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
            diff = np.abs(g - w)
        bad = int((~close).sum())
        finite = np.isfinite(diff)
        row = {"key": key, "status": "ok" if bad == 0 else "mismatch", "mismatched": bad, "size": int(g.size),
               "max_abs_diff": float(diff[finite].max()) if finite.any() else 0.0}
        if bad:
            first = np.argwhere(~close)[0]
            row.update(first_index=first.tolist(), got=str(g[tuple(first)]), want=str(w[tuple(first)]))
            ok = False
        rows.append(row)
    return {"ok": ok, "rows": rows}


def _print_summary(module, leaves, print_values, root_shape, result):
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    con = Console(highlight=False)
    t = Table(title=f"results of {module.name}", title_justify="left", show_edge=False)
    for col in ("", "shape", "min", "max", "mean", "nan", "inf", "preview"):
        t.add_column(col, justify="right" if col in ("min", "max", "mean", "nan", "inf") else "left")
    shapes = [sh for _, sh in _leaves_with_shapes(result, root_shape)]
    for k, v in enumerate(leaves):
        s = _stats(v)

        def f(x):
            return "" if x is None else (f"{x:.6g}" if isinstance(x, float) else str(x))
        t.add_row(Text(f"out{k}"), Text(shapes[k].to_str(False)), f(s.get("min")), f(s.get("max")),
                  f(s.get("mean")), f(s.get("nan", "")), f(s.get("inf", "")), Text(_preview(v)))
    con.print(t)
    if print_values:
        from ..ir.literal import Literal, format_literal
        for k, (v, shape) in enumerate(_leaves_with_shapes(result, root_shape)):
            click.echo(f"out{k} = {shape.to_str(False)} " + format_literal(Literal(shape, v)))


def _print_mismatch(mm, rtol, atol):
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text
    con = Console(highlight=False)
    t = Table(title=f"comparison with the reference (rtol={rtol:g}, atol={atol:g})", title_justify="left",
              show_edge=False)
    for col in ("key", "status", "mismatched", "max |diff|", "first mismatch"):
        t.add_column(col)
    for r in mm["rows"]:
        first = f"{r['first_index']}: {r['got']} vs {r['want']}" if "first_index" in r else ""
        t.add_row(Text(r["key"]), Text(r["status"]), f"{r.get('mismatched', '')}/{r.get('size', '')}"
                  if "size" in r else "", f"{r['max_abs_diff']:.3g}" if "max_abs_diff" in r else "", Text(first))
    con.print(t)
    click.echo("results match the reference" if mm["ok"] else "error: results differ from the reference",
               err=not mm["ok"])


def _report_nonfinite(rep, fmt):
    if fmt == "json":
        click.echo(json.dumps({"non_finite": rep}, indent=2))
        return
    lines = [f"{rep['location']}: error: {rep['instruction']}: {rep['opcode']} produced a non-finite value "
             f"from finite operands (execution {rep['execution']} in computation {rep['computation']})"]
    if rep.get("source"):
        lines.append(f"  source: {rep['source']}" + (f"  ({rep['op_name']})" if rep.get("op_name") else ""))
    for s in rep["stats"]:
        lines.append(f"  result: {_fmt_stats(s)}")
    for op in rep["operands"]:
        for s in op["stats"]:
            lines.append(f"  operand {op['operand']}: {_fmt_stats(s)}")
    click.echo("\n".join(lines), err=True)


def _fmt_stats(s):
    keys = [k for k in ("min", "max", "mean", "nan", "inf") if s.get(k) is not None]
    return f"{s['dtype']}{s['shape']} " + " ".join(
        f"{k}={s[k]:.6g}" if isinstance(s[k], float) else f"{k}={s[k]}" for k in keys)
