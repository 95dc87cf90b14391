"""`hlo run`: run a module on inputs with the NumPy interpreter.

The steps: read and check the module (`hlo check`'s rules; --no-check skips them), refuse elided
constants unless told how to fill them, bind the inputs to the entry parameters, decide every file
that will be written before anything runs (nothing a user gave is ever overwritten), run with the
hooks the options ask for (dump, finiteness guard, progress), then report: a summary table or JSON
on stdout, full values with --print, the comparison with --expect.

Exit codes: 0 success; 1 the module failed (check error, runtime error, --expect mismatch, a
non-finite value under --check-finite); 2 usage error or unreadable input.
"""
from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

import click

from ..errors import Diagnostic, ExitCode, HloError, HloEvalError, HloInputError, HloShapeError
from .common import load_module, no_cache_option, report_errors


def _input_error(msg: str):
    raise HloInputError(msg)


# ----------------------------------------------------------------------------- reading inputs

def _load_array(path: str, what: str):
    import numpy as np
    p = Path(path)
    if not p.exists():
        _input_error(f"{what}: no such file: {path}")
    if p.is_dir():
        _input_error(f"{what}: {path} is a directory")
    if p.suffix == ".npz":
        _input_error(f"{what}: {path} is an .npz archive; pass it with --inputs")
    try:
        a = np.load(p, allow_pickle=False)
    except Exception as e:  # numpy raises many kinds for bad files
        _input_error(f"{what}: cannot read {path} as a .npy array ({type(e).__name__}: {e})")
    if not isinstance(a, np.ndarray):
        a.close()
        _input_error(f"{what}: {path} is an .npz archive; pass it with --inputs")
    return a


def _load_npz(path: str, what: str) -> dict:
    import numpy as np
    p = Path(path)
    if not p.exists():
        _input_error(f"{what}: no such file: {path}")
    if p.is_dir():
        _input_error(f"{what}: {path} is a directory")
    try:
        z = np.load(p, allow_pickle=False)
    except Exception as e:
        _input_error(f"{what}: cannot read {path} as an .npz archive ({type(e).__name__}: {e})")
    if isinstance(z, np.ndarray):
        _input_error(f"{what}: {path} is a single array, not an .npz archive")
    try:
        with z:
            return {k: z[k] for k in z.files}
    except Exception as e:
        _input_error(f"{what}: cannot read {path} as an .npz archive ({type(e).__name__}: {e})")


def _load_reference(path: str) -> dict:
    """--expect: an .npz with keys out0, out1, ...; or one .npy for a single result."""
    import numpy as np
    if path.endswith(".npy"):
        return {"out0": _load_array(path, f"--expect {path}")}
    ref = _load_npz(path, f"--expect {path}")
    if not ref:
        _input_error(f"--expect {path}: the archive holds no arrays")
    return {k: np.asarray(v) for k, v in ref.items()}


# ----------------------------------------------------------------------------- statistics

def _is_intlike(a) -> bool:
    import numpy as np
    if a.dtype.kind in "iu":
        return True
    try:
        return bool(np.issubdtype(a.dtype, np.integer))
    except TypeError:
        return a.dtype.name.startswith(("int", "uint"))


def _stats(a):
    """Summary statistics of one array: shape, dtype, min/max/mean, NaN and Inf counts."""
    import numpy as np
    out = {"shape": list(a.shape), "dtype": str(a.dtype), "size": int(a.size)}
    if a.size == 0:
        return out
    kind = a.dtype.kind
    try:
        if kind == "b":
            t = int(np.count_nonzero(a))
            out.update(min=int(a.min()), max=int(a.max()), mean=t / a.size, true=t)
        elif _is_intlike(a):
            w = a.astype(np.int64) if kind not in "iu" else a
            out.update(min=int(w.min()), max=int(w.max()), mean=float(w.astype(np.float64).mean()))
        elif kind == "c":
            c = a.astype(np.complex128)
            mag = np.abs(c)
            fin = np.isfinite(c)
            out.update(nan=int(np.isnan(c).sum()), inf=int((np.isinf(c.real) | np.isinf(c.imag)).sum()),
                       min_abs=float(mag[fin].min()) if fin.any() else None,
                       max_abs=float(mag[fin].max()) if fin.any() else None,
                       mean=[float(c[fin].mean().real), float(c[fin].mean().imag)] if fin.any() else None)
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


def _nonfinite_mask(a):
    """Boolean mask of NaN/Inf elements, or None for types that cannot hold them."""
    import numpy as np
    if a.dtype.kind in "biu" or a.size == 0 or _is_intlike(a):
        return None
    try:
        return ~np.isfinite(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64))
    except (TypeError, ValueError):
        return None


def _nonfinite(a) -> bool:
    m = _nonfinite_mask(a)
    return m is not None and bool(m.any())


def _fmt_num(x) -> str:
    if x is None:
        return ""
    if isinstance(x, float):
        return f"{x:.6g}"
    if isinstance(x, list):
        return f"{x[0]:.4g}{x[1]:+.4g}j"
    return str(x)


def _scalar_str(x, a) -> str:
    import numpy as np
    if a.dtype.kind == "b":
        return "true" if x else "false"
    if _is_intlike(a):
        return str(int(x))
    if a.dtype.kind == "c":
        c = complex(x)
        return f"({c.real:.5g}{c.imag:+.5g}j)"
    return f"{float(np.float64(x)):.5g}"


def _preview(a, n=5) -> str:
    """The first few elements, compactly."""
    flat = a.reshape(-1)
    items = [_scalar_str(x, a) for x in flat[:n]]
    return "[" + ", ".join(items) + (", ..." if flat.size > n else "") + "]"


def _leaves_with_shapes(value, shape):
    """(array, array shape) leaves of a value, depth-first; tokens and opaque values left out."""
    from ..interpreter.values import TOKEN
    if shape.is_tuple:
        for v, s in zip(value, shape.tuple_shapes):
            yield from _leaves_with_shapes(v, s)
    elif value is not TOKEN and value is not None and shape.element_type not in ("token", "opaque"):
        yield value, shape


def _source_of(module, inst):
    """op_name, and the source file:line of the instruction (through the StackFrames section when
    the metadata has a stack_frame_id, else its source_file/source_line)."""
    md = inst.attrs.get("metadata")
    out = {}
    if md is None:
        return out
    if md.op_name:
        out["op_name"] = md.op_name
    fid = md.stack_frame_id
    if fid and module.stack_frames:
        stack = module.stack_frames.resolve(fid)
        if stack:
            f, _fn, line, _col = stack[0]
            out["source"] = f"{f}:{line}"
            out["stack"] = [f"{f}:{ln} ({fnn})" for f, fnn, ln, _ in stack]
    if "source" not in out and md.source_file:
        out["source"] = f"{md.source_file}:{md.source_line or 0}"
    return out


# ----------------------------------------------------------------------------- dumps

_OUR_DUMP_FILE = re.compile(r"^\d{6,}_.*\.npy$")
_MARKER = ".hlo-dump"


class _Dumper:
    """A hook writing every executed instruction's value (one .npy per tuple leaf) and a manifest."""

    def __init__(self, module, directory: Path, pattern, summary_only: bool, taken: set[str]):
        self.module = module
        self.dir = directory
        self.pattern = pattern
        self.summary_only = summary_only
        self.taken = taken                  # names in the directory that are not ours to replace
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
        for k, (leaf, _shape) in enumerate(_leaves_with_shapes(ev.value, inst.shape)):
            leaf = np.asarray(leaf)
            stats.append(_stats(leaf))
            if not self.summary_only:
                base = f"{self.seq:06d}_{safe}" + (f".{ev.count}" if ev.count > 1 else "") + \
                       (f".leaf{k}" if inst.shape.is_tuple else "")
                name, n = base + ".npy", 1
                while name in self.taken:      # --dump-force into a foreign directory: never replace
                    name, n = f"{base}~{n}.npy", n + 1
                np.save(self.dir / name, _storable(leaf))
                files.append(name)
        entry = {"order": self.seq, "computation": ev.computation.name, "instruction": inst.name,
                 "opcode": inst.opcode, "shape": inst.shape.to_str(False), "execution": ev.count,
                 "location": f"{inst.loc.file}:{inst.loc.line}:{inst.loc.column}", "stats": stats}
        if not self.summary_only:
            entry["files"] = files
        entry.update(_source_of(self.module, inst))
        self.entries.append(entry)

    def finish(self, status: str):
        manifest = {"module": self.module.name, "status": status, "summary_only": self.summary_only,
                    "instructions": self.entries}
        tmp = self.dir / "manifest.json.tmp"
        tmp.write_text(json.dumps(manifest, indent=1) + "\n")
        os.replace(tmp, self.dir / "manifest.json")


def _storable(a):
    """ml_dtypes arrays (bfloat16, float8_*, int4, ...) are saved as raw records (|V2, |V1): NumPy
    cannot read their descriptors back; `hlo run --input` reads the records as the parameter's type."""
    import numpy as np
    try:
        builtin = np.dtype(a.dtype.str) == a.dtype
    except TypeError:
        builtin = False
    return a if builtin else a.view(np.dtype(f"V{a.dtype.itemsize}"))


def _prepare_dump_dir(path: str, force: bool, protected: set[str]) -> tuple[Path, set[str]]:
    """Create DIR, or reuse it when it is empty or holds an earlier dump of ours (whose files are
    removed); a non-empty directory hlo did not create needs --dump-force, and then nothing in it is
    replaced.  Returns the directory and the names in it the dump must not use."""
    d = Path(path)
    if not d.exists():
        try:
            d.mkdir(parents=True)
        except OSError as e:
            _input_error(f"--dump-dir {path}: cannot create it ({e.strerror})")
        (d / _MARKER).write_text("This directory holds a dump written by `hlo run --dump-dir`.\n")
        return d, set()
    if not d.is_dir():
        _input_error(f"--dump-dir {path} exists and is not a directory")
    names = {f.name for f in d.iterdir()}
    ours = _MARKER in names
    if names and not ours:
        if not force:
            _input_error(f"--dump-dir {path} is not empty and was not made by hlo; refusing to write into it "
                         f"(pass --dump-force to write there anyway; nothing in it is replaced)")
        if "manifest.json" in names:
            _input_error(f"--dump-dir {path} already holds a manifest.json that hlo did not write; "
                         f"refusing to replace it")
        return d, names
    # empty, or an earlier dump of ours: remove the files that dump wrote (and only those)
    old = set()
    try:
        manifest = json.loads((d / "manifest.json").read_text())
        for e in manifest.get("instructions", []):
            old.update(e.get("files", []))
    except (OSError, ValueError, AttributeError):
        pass
    old |= {n for n in names if _OUR_DUMP_FILE.match(n)}
    old = {n for n in old if "/" not in n and "\\" not in n and (d / n).is_file()}
    doomed = [d / n for n in sorted(old)] + [d / n for n in ("manifest.json", "manifest.json.tmp") if n in names]
    for f in doomed:
        if str(f.resolve()) in protected:
            _input_error(f"--dump-dir {path} holds {f.name}, which is an input of this run; refusing to "
                         f"replace it (dump into another directory)")
    for f in doomed:
        f.unlink()
    if not ours:
        (d / _MARKER).write_text("This directory holds a dump written by `hlo run --dump-dir`.\n")
    return d, {f.name for f in d.iterdir()}


# ----------------------------------------------------------------------------- --check-finite

class _NonFinite(BaseException):
    """Raised by the finiteness guard to stop the run (a BaseException, so that no rule's error
    handling can swallow it)."""


# Instructions whose called computations run instruction by instruction under the hooks: their
# own instructions are judged, so the caller is not (a NaN a callee takes from a constant, like
# jnp.take's fill value, is not the call's fault).
_JUDGED_INSIDE = {"call", "fusion", "while", "conditional", "async-start", "async-update", "async-done"}


class _FiniteGuard:
    """Stops the run at the first instruction whose value holds a NaN or Inf that none of its operands
    held.  Constants and parameters are where values come from, not where they go wrong: a -inf
    constant (a mask, a max-pool's initial value) is not reported, and neither is an input."""

    def __init__(self, module, src):
        self.module = module
        self.src = src
        self.report = None

    def __call__(self, ev):
        import numpy as np
        inst = ev.instruction
        if inst.opcode in ("constant", "parameter") or inst.opcode in _JUDGED_INSIDE:
            return
        vals = [np.asarray(v) for v, _ in _leaves_with_shapes(ev.value, inst.shape)]
        if not any(_nonfinite(v) for v in vals):
            return
        from ..interpreter.values import leaves
        if any(_nonfinite(np.asarray(v)) for op in ev.operands for v in leaves(op)):
            return
        self.report = _nonfinite_report(self.module, ev, vals)
        raise _NonFinite()


def _nonfinite_report(module, ev, vals):
    import numpy as np
    from ..interpreter.values import leaves
    inst, comp = ev.instruction, ev.computation
    rep = {"instruction": inst.name, "opcode": inst.opcode, "computation": comp.name,
           "location": f"{inst.loc.file}:{inst.loc.line}:{inst.loc.column}",
           "file": inst.loc.file, "line": inst.loc.line, "column": inst.loc.column,
           "execution": ev.count, "stats": [_stats(v) for v in vals]}
    rep.update(_source_of(module, inst))
    first = next((v for v in vals if _nonfinite(v)), None)
    index = None
    if first is not None:
        index = tuple(int(i) for i in np.argwhere(_nonfinite_mask(first))[0])
        rep["first_index"] = list(index)
        rep["first_value"] = _scalar_str(first[index], first)
    ops = []
    for name, val in zip(inst.operands, ev.operands):
        entry = {"operand": name, "stats": [_stats(np.asarray(v)) for v in leaves(val)]}
        arr = val if isinstance(val, np.ndarray) else None
        if arr is not None and first is not None and arr.shape == first.shape and index is not None:
            entry["value_at_first_index"] = _scalar_str(arr[index], arr)
        ops.append(entry)
    rep["operands"] = ops
    return rep


def _report_nonfinite(rep, src):
    line_text = src.line_text(rep["line"]) if src is not None and rep["line"] else None
    what = []
    s0 = next((s for s in rep["stats"] if s.get("nan") or s.get("inf")), {})
    if s0.get("nan"):
        what.append(f"{s0['nan']} NaN")
    if s0.get("inf"):
        what.append(f"{s0['inf']} Inf")
    at = f", first at {rep['first_index']} = {rep['first_value']}" if "first_index" in rep else ""
    msg = (f"{rep['instruction']}: {rep['opcode']} produced a non-finite value ({', '.join(what)}{at}) from "
           f"finite operands (execution {rep['execution']} of it, in computation {rep['computation']})")
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


# ----------------------------------------------------------------------------- progress

class _Progress:
    """A transient status line on stderr for runs longer than half a second (only on a terminal)."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.last = 0.0
        self.status = None

    def __call__(self, executed: int):
        now = time.monotonic()
        if now - self.last < 0.1 or now - self.t0 < 0.5:
            return
        self.last = now
        msg = f"running... {executed:,} instructions executed ({now - self.t0:.0f} s)"
        if self.status is None:
            from rich.console import Console
            self.status = Console(stderr=True).status(msg)
            self.status.start()
        else:
            self.status.update(msg)

    def stop(self):
        if self.status is not None:
            self.status.stop()


# ----------------------------------------------------------------------------- checks before running

class _CheckFailed(HloShapeError):
    """The checker's errors, printed as `hlo check` prints them (source line, caret, notes)."""

    def format(self) -> str:
        from .check import _format
        return "\n".join(_format(d) for d in self.diagnostics)


def _check_before_running(module, text):
    from ..checker import check_module
    diags = [d for d in check_module(module, text, warnings=False) if d.severity == "error"]
    if diags:
        n = len(diags)
        msg = (f"{n} error{'s' if n != 1 else ''} found by the checker; not running the module "
               f"(pass --no-check to run it anyway)")
        raise _CheckFailed(msg, diags + [Diagnostic(msg, module.source, code="C000")])


def _refuse_elided(module, src):
    diags = []
    for comp in module.computations:
        for inst in comp.instructions:
            lit = inst.literal
            if inst.opcode == "constant" and lit is not None and _has_elided(lit):
                loc = inst.loc
                diags.append(Diagnostic(f"{inst.name}: this constant's values were elided in the dump ({{...}})",
                                        loc.file, loc.line, loc.column, "error", "R002", inst.name,
                                        src.line_text(loc.line) if src is not None and loc.line else None))
    if diags:
        n = len(diags)
        shown = diags[:5]
        more = [Diagnostic(f"... and {n - 5} more elided constants", module.source, code="R002")] if n > 5 else []
        summary = Diagnostic(f"{n} constant{'s' if n != 1 else ''} elided ({{...}}): refusing to invent "
                             f"{'their' if n != 1 else 'its'} values; re-dump with the constants printed "
                             f"(--xla_dump_large_constants), or pass --allow-elided-constants=zeros|random "
                             f"to run anyway", module.source, code="R002")
        raise HloEvalError(summary.message, shown + more + [summary])


def _has_elided(lit) -> bool:
    if getattr(lit, "elided", False):
        return True
    if lit.shape.is_tuple and isinstance(lit.value, (tuple, list)):
        return any(_has_elided(e) for e in lit.value)
    return False


def _check_output_path(path: str, force: bool, protected: set[str], root_shape):
    if not (path.endswith(".npz") or path.endswith(".npy")):
        _input_error(f"--output {path}: the name must end in .npz (all results) or .npy (a single result)")
    if path.endswith(".npy") and root_shape.is_tuple:
        n = sum(1 for _ in root_shape.leaves())
        _input_error(f"--output {path}: the result is a tuple ({root_shape.to_str(False)}, {n} arrays); "
                     f"write it to an .npz file")
    p = Path(path).resolve()
    if str(p) in protected:
        _input_error(f"--output {path} is an input of this run; refusing to overwrite it")
    if p.is_dir():
        _input_error(f"--output {path} is a directory")
    if p.exists() and not force:
        _input_error(f"--output {path} exists; refusing to overwrite it (pass --force to replace it)")
    if not p.parent.exists():
        _input_error(f"--output {path}: the directory {p.parent} does not exist")


# ----------------------------------------------------------------------------- the command

@click.command("run")
@click.argument("module_file", metavar="MODULE", type=str)
@click.option("--input", "-i", "inputs", multiple=True, metavar="[NAME=]FILE.npy",
              help="An input array: in parameter order, or bound to the parameter NAME (or argN). Arrays of "
                   "bfloat16/float8/int4 saved as raw records (|V2, |V1) are read as the parameter's type.")
@click.option("--inputs", "inputs_npz", metavar="ARGS.npz",
              help="An .npz archive of inputs keyed by parameter name or arg0, arg1, ... (by position).")
@click.option("--random-inputs", is_flag=True, help="Fill every parameter with deterministic random values.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --random-inputs and rng.")
@click.option("--output", "-o", metavar="OUT.npz|OUT.npy",
              help="Write the results: .npz with keys out0, out1, ... (tuple leaves, depth-first), or .npy "
                   "for a non-tuple result.")
@click.option("--force", is_flag=True, help="Allow --output to replace an existing file (never an input).")
@click.option("--print", "print_values", is_flag=True, help="Print the full result values in XLA's literal format.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="json: one JSON document on stdout (results, comparison, errors), for CI.")
@click.option("--expect", metavar="REF.npz", help="Compare the results with a reference (keys out0, out1, ...; "
                                                  "or one .npy for a single result); exit 1 if they differ.")
@click.option("--rtol", type=float, default=1e-3, show_default=True, help="Relative tolerance for --expect.")
@click.option("--atol", type=float, default=1e-3, show_default=True, help="Absolute tolerance for --expect.")
@click.option("--dump-dir", metavar="DIR", help="Write every executed instruction's value (.npy, one per tuple "
                                                "leaf) and DIR/manifest.json.")
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
@click.option("--no-progress", is_flag=True, help="No progress display (it is off anyway when not a terminal).")
@no_cache_option
@report_errors
def run(module_file, inputs, inputs_npz, random_inputs, seed, output, force, print_values, fmt, expect, rtol, atol,
        dump_dir, dump_filter, dump_summary, dump_force, check_finite, max_iterations, allow_elided_constants,
        no_check, no_progress, no_cache):
    """Run MODULE's entry computation on inputs and report the results.

    Inputs: --input FILE.npy per parameter in order, --input NAME=FILE.npy by name, --inputs ARGS.npz,
    or --random-inputs.  The module is checked first (as `hlo check` does).

    Exit codes: 0 success; 1 the module failed (check error, runtime error, --expect mismatch,
    non-finite value under --check-finite); 2 usage error or unreadable input.
    """
    for flag, given in (("--dump-filter", dump_filter), ("--dump-summary", dump_summary),
                        ("--dump-force", dump_force)):
        if given and not dump_dir:
            raise click.UsageError(f"{flag} needs --dump-dir")
    if rtol < 0 or atol < 0:
        raise click.UsageError("--rtol and --atol must not be negative")
    state = {"module": None}
    try:
        _run(state, module_file, inputs, inputs_npz, random_inputs, seed, output, force, print_values, fmt,
             expect, rtol, atol, dump_dir, dump_filter, dump_summary, dump_force, check_finite, max_iterations,
             allow_elided_constants, no_check, no_progress, no_cache)
    except HloError as e:
        if fmt == "json":
            diags = e.diagnostics or [Diagnostic(str(e), state["module"] or module_file, code="E000")]
            doc = {"module": state["module"], "status": "error", "exit_code": int(e.exit_code), "message": str(e),
                   "diagnostics": [{"file": d.file, "line": d.line, "column": d.column, "severity": d.severity,
                                    "code": d.code, "instruction": d.instruction, "message": d.message}
                                   for d in diags]}
            click.echo(json.dumps(doc, indent=2))
        raise


def _run(state, module_file, inputs, inputs_npz, random_inputs, seed, output, force, print_values, fmt, expect,
         rtol, atol, dump_dir, dump_filter, dump_summary, dump_force, check_finite, max_iterations,
         allow_elided_constants, no_check, no_progress, no_cache):
    import numpy as np

    from ..checker.positions import SourceIndex
    from ..interpreter import RunOptions, run_module
    from ..interpreter.inputs import bind, random_inputs as make_random

    module, text = load_module(module_file, use_cache=not no_cache, with_text=True)
    state["module"] = module.name
    src = SourceIndex(text)
    if not no_check:
        _check_before_running(module, text)
    if allow_elided_constants is None:
        _refuse_elided(module, src)

    # -- inputs
    params = module.entry_computation.parameters
    param_names = {p.name for p in params}
    positional, named, protected = [], {}, set()
    pos_origin, named_origin = [], {}
    if module_file != "-":
        protected.add(str(Path(module_file).resolve()))
    for spec in inputs:
        name, eq, path = spec.partition("=")
        if not eq or (name not in param_names and not re.fullmatch(r"arg\d+", name) and Path(spec).is_file()):
            name, path = None, spec
        if not path:
            _input_error(f"--input {spec}: no file given")
        protected.add(str(Path(path).resolve()))
        arr = _load_array(path, f"--input {spec}")
        if name is None:
            if named:
                _input_error(f"--input {spec}: inputs in parameter order must come before NAME=FILE inputs")
            positional.append(arr)
            pos_origin.append(path)
        else:
            if name in named:
                _input_error(f"--input {spec}: input '{name}' is given twice")
            named[name] = arr
            named_origin[name] = path
    if inputs_npz:
        protected.add(str(Path(inputs_npz).resolve()))
        for k, v in _load_npz(inputs_npz, f"--inputs {inputs_npz}").items():
            if k in named:
                _input_error(f"input '{k}' is given by both --input and --inputs")
            named[k] = v
            named_origin[k] = f"{inputs_npz}[{k}]"
    if random_inputs:
        if positional or named:
            _input_error("--random-inputs cannot be combined with --input/--inputs")
        args = make_random(params, seed)
    else:
        if not positional and not named and any(p.shape.element_type != "token" for p in params):
            _input_error(f"the entry computation takes {len(params)} parameter{'s' if len(params) != 1 else ''} ("
                         + ", ".join(f"{p.name}: {p.shape.to_str(False)}" for p in params)
                         + "); pass --input/--inputs, or --random-inputs")
        args = bind(params, positional, named, origins=(pos_origin, named_origin))
    if check_finite:
        for p, a in zip(params, args):
            bad = [leaf for leaf, _ in _leaves_with_shapes(a, p.shape) if _nonfinite(np.asarray(leaf))]
            if bad:
                click.echo(f"note: input parameter {p.parameter_number} '{p.name}' holds non-finite values "
                           f"({_fmt_stats(_stats(np.asarray(bad[0])))}); --check-finite looks for where new "
                           f"ones appear", err=True)

    # -- everything that will be written is decided before anything runs
    if expect:
        protected.add(str(Path(expect).resolve()))
    root_shape = module.entry_computation.root_instruction.shape
    if output:
        _check_output_path(output, force, protected, root_shape)
    reference = _load_reference(expect) if expect else None
    hooks = []
    dumper = None
    if dump_dir:
        try:
            pattern = re.compile(dump_filter) if dump_filter else None
        except re.error as e:
            _input_error(f"--dump-filter {dump_filter!r}: not a regular expression ({e})")
        if output and Path(output).resolve().parent == Path(dump_dir).resolve() and \
                _OUR_DUMP_FILE.match(Path(output).name):
            _input_error(f"--output {output}: a dump file name inside --dump-dir; choose another name")
        d, taken = _prepare_dump_dir(dump_dir, dump_force, protected)
        dumper = _Dumper(module, d, pattern, dump_summary, taken)
        hooks.append(dumper)
    guard = _FiniteGuard(module, src) if check_finite else None
    if guard:
        hooks.append(guard)

    if not hooks:
        hook = None
    elif len(hooks) == 1:
        hook = hooks[0]
    else:
        def hook(ev):
            for h in hooks:
                h(ev)

    # -- run
    options = RunOptions(seed=seed, max_iterations=max_iterations, elided_constants=allow_elided_constants)
    progress = _Progress() if (not no_progress and fmt == "text" and sys.stderr.isatty()) else None
    try:
        result = run_module(module, args, options, hook, progress)
    except _NonFinite:
        if progress:
            progress.stop()
        if dumper:
            dumper.finish("non-finite")
        if fmt == "json":
            click.echo(json.dumps({"module": module.name, "status": "non-finite", "exit_code": ExitCode.FAILURE,
                                   "non_finite": guard.report}, indent=2))
        _report_nonfinite(guard.report, src)
        sys.exit(ExitCode.FAILURE)
    except BaseException as e:
        if progress:
            progress.stop()
        if dumper:
            dumper.finish("interrupted" if isinstance(e, KeyboardInterrupt) else "error")
        raise
    if progress:
        progress.stop()
    if dumper:
        dumper.finish("ok")

    # -- report
    leaves = [(np.asarray(v), s) for v, s in _leaves_with_shapes(result, root_shape)]
    if output:
        _write_output(output, [v for v, _ in leaves])
    mismatch = _compare([v for v, _ in leaves], reference, rtol, atol) if reference is not None else None
    failed = mismatch is not None and not mismatch["ok"]

    if fmt == "json":
        doc = {"module": module.name, "status": "mismatch" if failed else "ok",
               "exit_code": ExitCode.FAILURE if failed else ExitCode.OK,
               "results": [dict(key=f"out{k}", hlo_shape=s.to_str(False), **_stats(v))
                           for k, (v, s) in enumerate(leaves)]}
        if print_values:
            for r, (v, s) in zip(doc["results"], leaves):
                r["literal"] = _literal_text(v, s)
        if output:
            doc["output"] = output
        if mismatch is not None:
            doc["expect"] = dict(mismatch, rtol=rtol, atol=atol, reference=expect)
        if dumper:
            doc["dump"] = {"dir": str(dumper.dir), "instructions": len(dumper.entries)}
        click.echo(json.dumps(doc, indent=2))
    else:
        _print_summary(module, leaves)
        if print_values:
            for k, (v, s) in enumerate(leaves):
                click.echo(f"out{k} = {_literal_text(v, s)}")
        if mismatch is not None:
            _print_mismatch(mismatch, rtol, atol)
    if failed:
        sys.exit(ExitCode.FAILURE)


def _literal_text(v, shape) -> str:
    """A value in XLA's literal format: `f32[2,3] { { 1, 2, 3 }, { 4, 5, 6 } }`."""
    from ..ir.literal import Literal, format_literal
    return f"{shape.to_str(False)} {format_literal(Literal(shape.without_layout(), v))}"


def _write_output(path, leaves):
    import numpy as np
    tmp = Path(path + ".tmp")
    if tmp.exists():
        _input_error(f"--output {path}: {tmp} exists; refusing to overwrite it")
    try:
        with open(tmp, "wb") as f:
            if path.endswith(".npy"):
                np.save(f, _storable(leaves[0]))
            else:
                np.savez(f, **{f"out{k}": _storable(v) for k, v in enumerate(leaves)})
        os.replace(tmp, path)
    except OSError as e:
        _input_error(f"--output {path}: cannot write it ({e.strerror or e})")
    finally:
        if tmp.exists():
            tmp.unlink()


def _compare(leaves, reference, rtol, atol):
    """Each result leaf against the reference: |got - want| <= atol + rtol * |want| elementwise, NaN
    equal to NaN, infinities equal to themselves."""
    import numpy as np
    rows, ok = [], True
    keys = [f"out{k}" for k in range(len(leaves))]
    for key, got in zip(keys, leaves):
        if key not in reference:
            rows.append({"key": key, "status": "missing in the reference"})
            ok = False
            continue
        want = np.asarray(reference[key])
        if want.dtype.kind == "V":
            if want.dtype.itemsize != got.dtype.itemsize:
                rows.append({"key": key, "status": f"reference holds raw {want.dtype.itemsize}-byte records, "
                                                   f"the result is {got.dtype}"})
                ok = False
                continue
            want = want.view(got.dtype)
        if want.shape != got.shape:
            rows.append({"key": key, "status": f"shape {list(got.shape)} vs the reference's {list(want.shape)}"})
            ok = False
            continue
        try:
            cplx = got.dtype.kind == "c" or want.dtype.kind == "c"
            g = got.astype(np.complex128 if cplx else np.float64)
            w = want.astype(np.complex128 if cplx else np.float64)
        except (TypeError, ValueError):
            rows.append({"key": key, "status": f"cannot compare {got.dtype} with the reference's {want.dtype}"})
            ok = False
            continue
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
            diff = np.abs(g - w)
            rel = diff / np.abs(w)
        finite = np.isfinite(diff)
        rfin = finite & (np.abs(w) > 0)
        bad = int((~close).sum())
        row = {"key": key, "status": "ok" if bad == 0 else "mismatch", "mismatched": bad, "size": int(g.size),
               "max_abs_diff": float(diff[finite].max()) if finite.any() else 0.0,
               "max_rel_diff": float(rel[rfin].max()) if rfin.any() else 0.0}
        if got.dtype != want.dtype:
            row["note"] = f"dtype {got.dtype} vs the reference's {want.dtype}"
        if bad:
            first = tuple(int(i) for i in np.argwhere(~close)[0])
            row.update(first_index=list(first), got=_scalar_str(got[first], got), want=_scalar_str(want[first], want))
            ok = False
        rows.append(row)
    for k in sorted(set(reference) - set(keys)):
        rows.append({"key": k, "status": "not among the results"})
        ok = False
    return {"ok": ok, "rows": rows}


def _console():
    from rich.console import Console
    con = Console(highlight=False)
    if not con.is_terminal:
        con = Console(highlight=False, width=160)
    return con


def _print_summary(module, leaves):
    from rich.table import Table
    from rich.text import Text
    t = Table(title=f"results of {module.name}", title_justify="left", show_edge=False)
    for col in ("", "shape", "min", "max", "mean", "nan", "inf", "preview"):
        t.add_column(col, justify="right" if col in ("min", "max", "mean", "nan", "inf") else "left",
                     no_wrap=True, overflow="ellipsis")
    for k, (v, shape) in enumerate(leaves):
        s = _stats(v)
        lo, hi = s.get("min"), s.get("max")
        if "max_abs" in s:
            lo, hi = s.get("min_abs"), s.get("max_abs")
            lo = None if lo is None else f"|z| {lo:.6g}"
            hi = None if hi is None else f"|z| {hi:.6g}"
        t.add_row(Text(f"out{k}"), Text(shape.to_str(False)), _fmt_num(lo), _fmt_num(hi), _fmt_num(s.get("mean")),
                  _fmt_num(s.get("nan")), _fmt_num(s.get("inf")), Text(_preview(v)))
    _console().print(t)


def _print_mismatch(mm, rtol, atol):
    from rich.table import Table
    from rich.text import Text
    t = Table(title=f"comparison with the reference (rtol={rtol:g}, atol={atol:g})", title_justify="left",
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
        click.echo("results match the reference")
    else:
        n = sum(1 for r in mm["rows"] if r["status"] != "ok")
        click.echo(f"error: {n} result{'s' if n != 1 else ''} differ{'s' if n == 1 else ''} from the reference "
                   f"(rtol={rtol:g}, atol={atol:g})", err=True)
