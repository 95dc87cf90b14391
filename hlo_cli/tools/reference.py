"""XLA itself as the reference of a run: `hlo run MODULE --reference xla`.

    from hlo_cli.tools.reference import run_xla, compare_with_xla
    ref = run_xla(text, args)                         # an XlaRun: outputs, timings, devices
    report = compare_with_xla(leaves, ref, rtol, atol)   # as --expect compares: {"ok", "rows"}

XLA runs in a child process (the same Python, `JAX_PLATFORMS=cpu`, `JAX_ENABLE_X64=1`), never in
ours: XLA ends the whole process on an internal check failure (its `Check failed:` aborts are
common on after-optimization texts), a multi-device run needs
`XLA_FLAGS=--xla_force_host_platform_device_count=N` set before JAX starts, and JAX's thread pools
stay out of hlo's process.  The child reads the module text and the arguments from a private
temporary directory, compiles the module with XLA CPU (hlo_module_from_text, then XLA's HLO to
StableHLO translation, then PJRT's compile: what JAX does with a module), runs it once and writes
the result leaves back, with the time of each stage.

Devices: one device, or `replicas x partitions` host devices (device d = replica x partitions +
partition, as hlo's).  A program per device (replica programs, XLA's partitioned output,
hand-written collectives) gets each device's own arguments and gives each device's results,
stacked on a leading axis; a module before partitioning (sharding annotations, Shardy meshes,
shard_map regions) is partitioned by XLA's SPMD partitioner (Shardy's when the text carries
Shardy's attributes), takes the global arrays and gives the global results back, reassembled by the
shardings XLA chose.  XLA CPU runs its SPMD partitioner on any module of several partitions: a
program per device that it refuses as written (partition-id, send/recv, XLA's own partitioned
output) is tried once more with its instructions marked `sharding={manual}` (manual_text), which
the partitioner leaves as they are; a note says so.

The report (reference_report, the `reference` section of `hlo run --format json`): the rows
--expect gives, how many results are bit for bit XLA's (`identical`), XLA's times and hlo's.
HloSnapshot runs (`hlo run SNAPSHOT.pb`) take their arguments and stored result from run/inputs.py
(snapshot_arguments, snapshot_reference).

What XLA cannot take ends in HloReferenceError (exit code 6) saying why: JAX not installed (the
`xla` extra: pip install 'hlo-cli[xla]'), XLA refusing the text (its first message line; texts
after XLA's optimizations often cannot be compiled again: XLA compiles from the start of its
pipeline), XLA crashing on it (the process killed by a signal; the `Check failed:` line of its
log), too few host devices.
"""
from __future__ import annotations

import importlib.util
import os
import pickle
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import HloReferenceError
from ..pipeline.core import Reference
from ..pipeline.io import flatten_arrays

INSTALL_HINT = "pip install 'hlo-cli[xla]'"


@dataclass
class XlaRun:
    """What XLA computed: `outputs`, the result leaves depth-first (tokens left out): as they are on
    one device, stacked per device for a per-device program, global arrays for a module before
    partitioning; `timings` in seconds: startup_s (the child process and JAX's import), parse_s,
    compile_s (StableHLO translation and XLA's compilation), run_s (one execution, until every
    result is ready), transfer_s (arguments in, results out), total_s; `notes`: what was done to
    make XLA take the module (the manual marking)."""
    outputs: list
    timings: dict
    devices: int = 1
    mode: str = "single"
    jax_version: str | None = None
    notes: list = field(default_factory=list)


def jax_installed() -> bool:
    """Whether `import jax` can be tried at all (the child says whether it works)."""
    try:
        return importlib.util.find_spec("jax") is not None and importlib.util.find_spec("jaxlib") is not None
    except (ImportError, ValueError):
        return False


def require_jax() -> None:
    """HloReferenceError (kind missing) when JAX is not installed: said before hlo's own run."""
    if not jax_installed():
        raise HloReferenceError(f"--reference xla needs JAX (XLA's CPU compiler comes with jaxlib), which is "
                                f"not installed in this Python ({sys.executable}); install it with: "
                                f"{INSTALL_HINT}", kind="missing")


def looks_optimized(text: str) -> bool:
    """A text after XLA's optimizations (scheduled, or with fusions): XLA often cannot compile those again."""
    head = text[:4096]
    return "is_scheduled=true" in head or bool(re.search(r"\bfusion\(", text))


def child_env(count: int) -> dict:
    """The environment of a child process running XLA CPU on COUNT host devices (JAX on the CPU,
    64-bit values kept, the host device count set, this package importable)."""
    env = dict(os.environ)
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_ENABLE_X64"] = "1"                     # 64-bit arguments reach XLA as they are
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    if count > 1:
        flags = env.get("XLA_FLAGS", "")
        m = re.findall(r"--xla_force_host_platform_device_count=(\d+)", flags)
        have = max((int(x) for x in m), default=0)
        flags = re.sub(r"\s*--xla_force_host_platform_device_count=\d+", "", flags).strip()
        env["XLA_FLAGS"] = (flags + f" --xla_force_host_platform_device_count={max(count, have)}").strip()
        # (newer JAX reads its own setting first: a smaller JAX_NUM_CPU_DEVICES would win over the flag)
        try:
            given = int(env.get("JAX_NUM_CPU_DEVICES", "0"))
        except ValueError:
            given = 0
        env["JAX_NUM_CPU_DEVICES"] = str(max(count, have, given))
    # the child imports this package from where this process found it
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


_SIGNALS = {getattr(signal, n): n for n in ("SIGABRT", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGKILL")
            if hasattr(signal, n)}


def crash_line(stderr: str) -> str | None:
    """The line of XLA's log that says why it stopped (a failed check, a fatal log line)."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        m = re.search(r"(?:\] )?(Check failed: .*)", ln)
        if m:
            where = re.search(r"\s(\S+\.(?:cc|h):\d+)\]", ln)
            return m.group(1) + (f" ({where.group(1)})" if where else "")
    for i, ln in enumerate(lines):
        if re.match(r"^[FE]\d{4} ", ln):
            msg = ln.split("] ", 1)[-1]
            if msg.endswith(":") and i + 1 < len(lines):
                msg += " " + lines[i + 1]
            return msg
    for ln in reversed(lines):
        if not ln.startswith(("@", "***", "Fatal Python", "Current thread", "Thread ", "File ")):
            return ln
    return None


_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*")
_LEAF = re.compile(r"\b[a-z][a-z0-9]*\[")


def _shape_at(line: str, pos: int) -> str | None:
    """The shape written at LINE[POS:] (balanced parentheses for a tuple)."""
    if line.startswith("(", pos):
        depth = 0
        for i in range(pos, len(line)):
            depth += {"(": 1, ")": -1}.get(line[i], 0)
            if depth == 0:
                return line[pos:i + 1]
        return None
    m = re.match(r"\S+", line[pos:])
    return m.group(0) if m else None


def manual_text(text: str) -> str:
    """TEXT with every instruction that carries no sharding marked manual (`sharding={manual}`, one
    `{manual}` per leaf of a tuple): how a program per device says so to XLA's SPMD partitioner,
    which XLA CPU runs on any module of several partitions (unmarked, it may cut the program's
    values again, or refuse partition-id and send/recv)."""
    out = []
    for line in text.splitlines():
        m = _INSTRUCTION.match(line)
        shape = _shape_at(line, m.end()) if m and "sharding=" not in line else None
        if shape and re.match(r"\s*[\w\-]+\(", line[m.end() + len(shape):]):
            n = len(_LEAF.findall(shape))
            sh = "{manual}" if not shape.startswith("(") else "{" + ", ".join(["{manual}"] * n) + "}"
            line = line.rstrip() + f", sharding={sh}"
        out.append(line)
    return "\n".join(out) + "\n"


def run_xla(text: str, args, *, replicas: int = 1, partitions: int = 1, mode: str | None = None,
            result_dims=None, timeout: float | None = None, canonical=None) -> XlaRun:
    """Compile TEXT with XLA CPU in a child process and run it once on ARGS (one value per entry
    parameter: an array, a tuple of them for a tuple parameter; tokens are left out).  MODE:
    "single" (one device), "per_device" (each argument stacked over the devices on a leading axis),
    "global" (global arrays of a module before partitioning; RESULT_DIMS gives each result leaf's
    global dims).  A program per device on several partitions that XLA refuses as written is tried
    once more with its instructions marked manual (manual_text; XlaRun.notes says so).  A text
    XLA's parser refuses (spellings only hlo reads: the short layout `<1,0>`, `t#0`) is tried once
    more as CANONICAL (a callable giving the module printed by hlo's printer, as `hlo fmt` prints
    it), when given.  Raises HloReferenceError when XLA cannot give the results."""
    require_jax()
    count = replicas * partitions
    mode = mode or ("single" if count == 1 else "per_device")
    request = {"text": text, "args": [flatten_arrays(a) for a in args], "replicas": replicas, "partitions": partitions,
               "mode": mode, "result_dims": result_dims}
    with tempfile.TemporaryDirectory(prefix="hlo-xla-") as tmp:
        try:
            return _attempt(request, Path(tmp), count, timeout)
        except HloReferenceError as first:
            if first.stage == "parse" and canonical is not None:
                printed = canonical() if callable(canonical) else canonical
                if printed and printed != text:
                    try:
                        run = run_xla(printed, args, replicas=replicas, partitions=partitions, mode=mode,
                                      result_dims=result_dims, timeout=timeout)
                    except HloReferenceError:
                        raise first from None
                    run.notes.insert(0, f"XLA could not parse the text as written ({first.xla_message}); it ran "
                                        f"the module as hlo prints it (hlo fmt)")
                    return run
            if mode != "per_device" or partitions <= 1 or first.kind not in ("refused", "crashed"):
                raise
            marked = manual_text(text)
            if marked == text:
                raise
            try:
                run = _attempt(dict(request, text=marked), Path(tmp), count, timeout)
            except HloReferenceError:
                raise first from None
            why = first.xla_message or str(first).splitlines()[0]
            run.notes.append(f"XLA refused the program as written ({why}); it ran with every instruction marked "
                             f"sharding={{manual}} (a program per device, left as written by XLA's SPMD partitioner)")
            return run


def _attempt(request: dict, tmp: Path, count: int, timeout: float | None) -> XlaRun:
    text = request["text"]
    req, resp = tmp / "request.pkl", tmp / "response.pkl"
    if resp.exists():
        resp.unlink()
    with open(req, "wb") as f:
        pickle.dump(request, f, protocol=pickle.HIGHEST_PROTOCOL)
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-c", "from hlo_cli.tools.reference import _child; _child()", str(tmp)],
                              env=child_env(count), stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HloReferenceError(f"XLA did not finish within {timeout:g} s", kind="crashed") from None
    except OSError as e:
        raise HloReferenceError(f"could not start Python for XLA ({e})", kind="missing") from None
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not resp.exists():
        _crashed(proc.returncode, proc.stderr.decode("utf-8", "replace"), text)
    with open(resp, "rb") as f:
        answer = pickle.load(f)
    if not answer.get("ok"):
        _refused(answer, text, count)
    timings = dict(answer["timings"])
    inside = sum(timings.get(k, 0.0) for k in ("parse_s", "compile_s", "run_s", "transfer_s"))
    timings["startup_s"] = max(wall - inside, 0.0)
    timings["total_s"] = wall
    return XlaRun(answer["outputs"], timings, count, request["mode"], answer.get("jax_version"))


def _crashed(returncode: int, stderr: str, text: str):
    sig = -returncode if returncode < 0 else None
    line = crash_line(stderr)
    how = f"killed by {_SIGNALS.get(sig, f'signal {sig}')}" if sig else f"exit status {returncode}"
    msg = f"XLA crashed on this module ({how})" + (f": {line}" if line else "")
    if looks_optimized(text):
        msg += ("; this text is after XLA's optimizations, which XLA cannot always compile again: compare "
                "the module before optimizations instead")
    raise HloReferenceError(msg, kind="crashed", xla_message=line)


def _refused(answer: dict, text: str, count: int):
    stage, message = answer.get("stage"), answer.get("message") or ""
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    first = lines[0] if lines else ""
    if first.endswith(":") and len(lines) > 1:      # ("Syntax error when trying to parse ...:" then where)
        first += " " + lines[1]
    if stage == "import":
        raise HloReferenceError(f"--reference xla needs JAX, which cannot be imported here ({first}); install "
                                f"it with: {INSTALL_HINT}", kind="missing", xla_message=first)
    if stage == "devices":
        raise HloReferenceError(f"XLA cannot run this module on {count} devices: {first}", kind="devices",
                                xla_message=first)
    what = {"parse": "could not parse", "compile": "could not compile", "run": "failed running"}.get(stage, "failed on")
    msg = f"XLA {what} this module: {first}"
    if "PartitionId instruction is not supported for SPMD partitioning" in message:
        msg += ("\n  (XLA CPU runs its SPMD partitioner on every module of several partitions: a program it has "
                "partitioned already cannot run on it as written)")
    if stage in ("parse", "compile") and looks_optimized(text):
        msg += ("\n  (this text is after XLA's optimizations: XLA compiles a module from the start of its "
                "pipeline and cannot take every optimized text; compare the module before optimizations)")
    raise HloReferenceError(msg, kind="refused", stage=stage, xla_message=first)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """The same dtype, shape and bytes (hlo aims at XLA CPU's bits, NaN payloads included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return a.tobytes() == b.tobytes()


def compare_with_xla(leaves, xla: XlaRun, rtol: float, atol: float) -> dict:
    """LEAVES (hlo's result leaves, in the form XlaRun.outputs has) against XLA's, as --expect
    compares: {"ok", "rows"}.  A result of bounded dynamic size, which XLA gives as its buffer at
    the bound (the values first: XLA's padded layout), is compared on the run's size (a row note
    says so)."""
    from ..pipeline.compare import compare
    ref, notes = {}, {}
    for k, out in enumerate(xla.outputs):
        want = np.asarray(out)
        if k < len(leaves):
            got = np.asarray(leaves[k])
            if got.shape != want.shape and got.ndim == want.ndim and \
                    all(g <= w for g, w in zip(got.shape, want.shape)):
                # a result of dynamic size: XLA gives its buffer at the bound, the values first
                # (padded layout), and hlo the run's size
                notes[f"out{k}"] = (f"XLA's buffer of the bound {list(want.shape)} read at the run's size "
                                    f"{list(got.shape)}")
                want = want[tuple(slice(0, n) for n in got.shape)]
        ref[f"out{k}"] = want
    mm = compare([np.asarray(v) for v in leaves], ref, rtol, atol)
    for row in mm["rows"]:
        if row["key"] in notes:
            row["note"] = notes[row["key"]] + (f"; {row['note']}" if row.get("note") else "")
    return mm


# ----------------------------------------------------------------------------- the child process

def _child():
    """The child's work: read request.pkl in the directory argv[1], write response.pkl there."""
    tmp = Path(sys.argv[1])
    with open(tmp / "request.pkl", "rb") as f:
        request = pickle.load(f)
    answer = _child_run(request)
    with open(tmp / "response.pkl", "wb") as f:
        pickle.dump(answer, f, protocol=pickle.HIGHEST_PROTOCOL)


def _child_run(request: dict) -> dict:
    try:
        import jax
        import jaxlib  # noqa: F401
        from . import xla_reference as xr
    except Exception as e:                          # noqa: BLE001 -- said to the user as it is
        return {"ok": False, "stage": "import", "message": f"{type(e).__name__}: {e}"}
    mode = request["mode"]
    try:
        exe, devices, timings = xr.compile_for_devices(request["text"], request["replicas"], request["partitions"])
        args = [a for leaves in request["args"] for a in leaves]
        outputs, run_t = xr.execute_on_devices(exe, devices, args, mode, request.get("result_dims"))
    except xr.XlaStageError as e:
        return {"ok": False, "stage": e.stage, "message": str(e)}
    except Exception as e:                          # noqa: BLE001
        return {"ok": False, "stage": "run", "message": f"{type(e).__name__}: {e}"}
    timings.update(run_t)
    return {"ok": True, "outputs": outputs, "timings": timings, "jax_version": jax.__version__}


# ----------------------------------------------------------------------------- what `hlo run` asks for

def arguments_for(dv, args) -> tuple[list, str]:
    """XLA's arguments and run mode for the arguments hlo bound: ARGS as `hlo run` holds them (plain
    values on one device; the device layer's Uniform/Stacked values when DV, its DeviceRun, is
    multi-device)."""
    if dv is None:
        return list(args), "single"
    if not dv.multi:
        # a module before partitioning whose results do not depend on the devices runs on one device
        # in hlo; XLA runs it as it would be run, partitioned over the module's devices
        global_module = dv.grid.count > 1 and dv.global_values and dv.grid.replicas == 1
        return list(args), "global" if global_module else "single"
    from ..devices.values import Uniform
    n = dv.grid.count
    if dv.global_values:
        if dv.grid.replicas > 1:
            raise HloReferenceError(f"--reference xla runs a module before partitioning on partitions only; this run "
                                    f"has {dv.grid.replicas} replicas x {dv.grid.partitions} partitions",
                                    kind="devices")
        out = []
        for a in args:
            if not isinstance(a, Uniform):
                raise HloReferenceError("--reference xla gives a module before partitioning its global arrays; "
                                        "these inputs hold one value per device (--per-device)", kind="refused")
            out.append(a.value)
        return out, "global"
    return [a.stacked(n) if hasattr(a, "stacked") else a for a in args], "per_device"


def glob_escape(text: str) -> str:
    import glob
    return glob.escape(text)


def before_optimizations(path: str | None) -> str | None:
    """The file holding the module before XLA's optimizations next to PATH, when there is one:
    NAME.hlo for NAME.opt.hlo, an XLA dump's `module_NNNN.NAME.before_optimizations.txt` for its
    `...after_optimizations.txt` (cpu_, gpu_) or `.snapshot.N.pb` (an unoptimized snapshot of
    the module first: it holds the arguments too)."""
    if not path or path == "-":
        return None
    p = Path(path)
    name = p.name
    candidates = []
    if name.endswith(".opt.hlo"):
        candidates.append(name[:-len(".opt.hlo")] + ".hlo")
    m = re.match(r"^(module_\d+\.[^/]+?)\.(?:\w+_)?after_optimizations\.(?:txt|hlo\.pb|pb)$", name) or \
        re.match(r"^(module_\d+\.[^/]+?)\.snapshot\.-?\d+\.pb$", name)
    if m:
        # an unoptimized snapshot of the same module holds arguments too: the best to compare
        candidates += sorted(q.name for q in p.parent.glob(glob_escape(m.group(1)) +
                                                            ".execution_*.hlo_unoptimized_snapshot.pb"))[:1]
        candidates += [m.group(1) + ".before_optimizations.txt", m.group(1) + ".before_optimizations.hlo.pb"]
    m = re.match(r"^(.+)\.snapshot\.pb$", name)
    if m:
        candidates += [m.group(1) + ".hlo_unoptimized_snapshot.pb", m.group(1) + ".hlo"]
    for c in candidates:
        if (p.parent / c).is_file():
            return str(p.parent / c)
    return None


def unsupported(module) -> str | None:
    """Why XLA through JAX cannot run MODULE at all, or None: a token among the entry parameters
    (JAX makes no token buffers to pass)."""
    for p in module.entry_computation.parameters:
        if any(s.element_type == "token" for s in p.shape.leaves()):
            return (f"XLA through JAX cannot be given a token parameter (parameter {p.parameter_number} "
                    f"'{p.name}': {p.shape.to_str(False)})")
    return None


def reference_report(text: str, xla_args, mode: str, grid, leaves, rtol: float, atol: float,
                     result_dims=None, hlo_execute_s: float | None = None, source: str | None = None,
                     refused: str | None = None, canonical=None) -> dict:
    """Run TEXT on XLA (run_xla) and compare hlo's result LEAVES with XLA's: the `reference`
    section of `hlo run --format json`.  status ok / mismatch (with the rows --expect gives), or
    error (kind, stage, message) when XLA could not give results; timings of both."""
    replicas, partitions = (grid.replicas, grid.partitions) if grid is not None and mode != "single" else (1, 1)
    doc = {"platform": "xla", "devices": replicas * partitions, "mode": mode}
    try:
        if refused:
            raise HloReferenceError(refused, kind="refused")
        xla = run_xla(text, xla_args, replicas=replicas, partitions=partitions, mode=mode, result_dims=result_dims,
                      canonical=canonical)
    except HloReferenceError as e:
        doc.update(status="error", exit_code=int(e.exit_code), kind=e.kind, stage=e.stage, message=str(e))
        before = before_optimizations(source) if e.kind in ("refused", "crashed") and looks_optimized(text) else None
        if before:
            doc["before_optimizations"] = before
            how = "it holds the arguments" if before.endswith("hlo_unoptimized_snapshot.pb") else "with the same inputs"
            given = f" --inputs {source}" if (source or "").endswith(".pb") and ".snapshot." in Path(source).name else ""
            doc["message"] += (f"\n  the module before optimizations is next to it: hlo run {before}{given} --reference "
                               f"xla" + ("" if given else f" ({how})"))
        if hlo_execute_s is not None:
            doc["timings"] = {"hlo_execute_s": hlo_execute_s}
        return doc
    mm = compare_with_xla(leaves, xla, rtol, atol)
    identical = 0
    for row, got, want in zip(mm["rows"], leaves, xla.outputs):
        got, want = np.asarray(got), np.asarray(want)
        if got.shape != want.shape and got.ndim == want.ndim and all(g <= w for g, w in zip(got.shape, want.shape)):
            want = want[tuple(slice(0, n) for n in got.shape)]        # (a dynamic size: as compared)
        row["identical"] = _same_bits(got, want)
        identical += row["identical"]
    doc.update(status="ok" if mm["ok"] else "mismatch", ok=mm["ok"], rows=mm["rows"], rtol=rtol, atol=atol,
               identical=identical, jax_version=xla.jax_version)
    if xla.notes:
        doc["notes"] = list(xla.notes)
    t = {f"xla_{k}": v for k, v in xla.timings.items()}
    if hlo_execute_s is not None:
        t["hlo_execute_s"] = hlo_execute_s
    doc["timings"] = t
    return doc


# ----------------------------------------------------------------------------- the pipeline's reference

class XlaReference(Reference):
    """`hlo run --reference xla` for the run pipeline (pipeline.core.run's RunRequest.reference):
    XLA's arguments taken before hlo's run (require_jax first: nothing to wait for when JAX is
    missing), the module run on XLA after it and compared as --expect compares."""

    def __init__(self):
        self.xla_args = self.root_shape = self.grid = self.refused = self.canonical = None
        self.remote_args = None

    def prepare(self, module, device_run, args, hooks, request) -> None:
        from ..pipeline.prepare import has_elided
        require_jax()
        if request.elided_constants == "random" and any(
                i.opcode == "constant" and i.literal is not None and has_elided(i.literal)
                for c in module.computations for i in c.instructions):
            hooks.note("note: --reference xla: XLA fills elided constants ({...}) its own way (zeros on the "
                       "XLA CPU measured); hlo's random values for them will not match (use "
                       "--allow-elided-constants zeros)")
        if getattr(device_run, "remote", False):
            # --cluster ray: the Ray actors read the input files for their devices; XLA runs every
            # device in one process here, so the files are read here, after hlo's run (report)
            self.xla_args, self.remote_args = None, (device_run, args)
        else:
            self.xla_args, self.remote_args = arguments_for(device_run, args), None
        self.root_shape, self.grid = module.entry_computation.root_instruction.shape, device_run.grid
        self.refused = unsupported(module)

        def canonical(module=module):
            from ..ir.printer import format_module
            return format_module(module)
        self.canonical = canonical

    def report(self, text: str, leaves: list, request, timings: dict, hooks) -> dict:
        """Run the module on XLA and compare (the `reference` section of the JSON document); XLA's
        times also go into TIMINGS (xla_compile_s, xla_run_s, xla_total_s)."""
        refused = self.refused
        if self.remote_args is not None:
            dv, args = self.remote_args
            try:
                self.xla_args = arguments_for(dv, dv.local_arguments(args))
            except HloReferenceError as e:
                self.xla_args, refused = ([], "single"), refused or str(e)
        xla_args, mode = self.xla_args
        dims = None
        if mode == "global":
            dims = [s.dims for s in self.root_shape.leaves() if s.element_type not in ("token", "opaque")]
        if hooks.watched:                          # (a person watching: XLA's compile can take seconds)
            hooks.note("running the module on XLA CPU (through JAX) ...")
        doc = reference_report(text, xla_args, mode, self.grid, leaves, request.rtol, request.atol, dims,
                               timings.get("execute_s"), request.module_file, refused, self.canonical)
        for k in ("xla_compile_s", "xla_run_s", "xla_total_s"):
            if k in doc.get("timings", {}):
                timings[k] = doc["timings"][k]
        return doc
