"""A long-lived child process running many small modules on XLA CPU (isolate, shrink's `--mismatch xla`).

`hlo run --reference xla` starts one child per module (hlo_cli.tools.reference): JAX's import alone is
slow, which is fine once and far too slow for thousands of isolated instructions.  XlaWorker
keeps one child (the same Python, reference.child_env) and sends it requests over a pipe: a module
text and its arguments in, the result leaves (or XLA's refusal: the stage and its message) out.
XLA may end its process on a failed internal check; the worker then says so (XlaCrash, with the
`Check failed:` line of the child's log) and starts a new child for the next request.
"""
from __future__ import annotations

import os
import pickle
import struct
import subprocess
import sys
import tempfile
import time

from ..errors import HloReferenceError
from .reference import INSTALL_HINT, child_env, crash_line, require_jax


class XlaRefused(Exception):
    """XLA refused a module: `stage` is parse, compile, devices or run; the message is XLA's first line."""

    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


class XlaCrash(Exception):
    """The child died on a module (XLA aborted): the message is its log's reason."""


def _send(f, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    f.write(struct.pack("<Q", len(data)))
    f.write(data)
    f.flush()


def _recv(f):
    head = f.read(8)
    if len(head) < 8:
        return None
    (n,) = struct.unpack("<Q", head)
    data = f.read(n)
    if len(data) < n:
        return None
    return pickle.loads(data)


class XlaWorker:
    """A child process compiling and running modules with XLA CPU on DEVICES host devices.  Use as a
    context manager, or call close().  `stats` counts compiles, crashes and the seconds spent."""

    def __init__(self, devices: int = 1, timeout: float | None = None):
        require_jax()
        self.devices = max(1, devices)
        self.timeout = timeout
        self.proc = None
        self._log = None
        self.stats = {"modules": 0, "crashes": 0, "startup_s": 0.0, "compile_s": 0.0, "run_s": 0.0, "wall_s": 0.0}

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self):
        t0 = time.perf_counter()
        self._log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen([sys.executable, "-c", "from hlo_cli.tools.xla_worker import serve; serve()"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                                     env=child_env(self.devices))
        hello = _recv(self.proc.stdout)
        if hello is None or not hello.get("ok"):
            why = (hello or {}).get("message") or self._log_tail() or "it stopped at once"
            self.close()
            raise HloReferenceError(f"XLA (JAX) cannot be started in a child process: {why}; install it with: "
                                    f"{INSTALL_HINT}", kind="missing")
        self.jax_version = hello.get("jax_version")
        self.stats["startup_s"] += time.perf_counter() - t0

    def _log_tail(self) -> str | None:
        if self._log is None:
            return None
        try:
            self._log.seek(0)
            return crash_line(self._log.read()[-200_000:].decode("utf-8", "replace"))
        except OSError:
            return None

    def run(self, text: str, args, *, replicas: int = 1, partitions: int = 1, mode: str = "single") -> list:
        """The result leaves of TEXT run on ARGS (arrays in parameter order; stacked over devices for
        mode per_device).  Raises XlaRefused or XlaCrash."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        t0 = time.perf_counter()
        self.stats["modules"] += 1
        try:
            _send(self.proc.stdin, {"text": text, "args": list(args), "replicas": replicas,
                                    "partitions": partitions, "mode": mode})
            answer = _recv(self.proc.stdout)
        except (BrokenPipeError, OSError):
            answer = None
        self.stats["wall_s"] += time.perf_counter() - t0
        return self._answer(answer)

    def run_rounds(self, text: str, rounds: list) -> list:
        """TEXT (on one device) run once per argument list of ROUNDS, compiled once; an argument None
        is the previous round's (its buffer stays on the device).  The result leaves of each round.
        Raises XlaRefused or XlaCrash (for the whole request)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()
        t0 = time.perf_counter()
        self.stats["modules"] += 1
        self.stats["rounds"] = self.stats.get("rounds", 0) + len(rounds)
        try:
            _send(self.proc.stdin, {"text": text, "rounds": rounds, "replicas": 1, "partitions": 1, "mode": "single"})
            answer = _recv(self.proc.stdout)
        except (BrokenPipeError, OSError):
            answer = None
        self.stats["wall_s"] += time.perf_counter() - t0
        return self._answer(answer)

    def _answer(self, answer):
        if answer is None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
            why = self._log_tail()
            rc = self.proc.returncode
            self.proc = None
            self.stats["crashes"] += 1
            raise XlaCrash(why or f"the XLA process ended (status {rc})")
        t = answer.get("timings") or {}
        self.stats["compile_s"] += t.get("parse_s", 0.0) + t.get("compile_s", 0.0)
        self.stats["run_s"] += t.get("run_s", 0.0)
        if not answer.get("ok"):
            lines = [ln.strip() for ln in (answer.get("message") or "").splitlines() if ln.strip()]
            first = lines[0] if lines else "no message"
            if first.endswith(":") and len(lines) > 1:
                first += " " + lines[1]
            raise XlaRefused(answer.get("stage") or "run", first)
        return answer["outputs"]

    def close(self):
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None


def serve():
    """The child: answer requests on stdin until it closes.  The last few modules stay compiled: the
    same text again (a batch run on other values) is not compiled again."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)                          # anything printed goes to the log, not into the pipe
    inp = sys.stdin.buffer
    try:
        import jax
        from . import xla_reference as xr
    except Exception as e:                 # noqa: BLE001 -- said to the user as it is
        _send(out, {"ok": False, "message": f"{type(e).__name__}: {e}"})
        return
    _send(out, {"ok": True, "jax_version": jax.__version__})
    cache: dict = {}                       # module text -> (executable, devices): a batch run on other values
    while True:
        req = _recv(inp)
        if req is None:
            return
        if "rounds" in req:
            _send(out, _rounds(xr, req, cache))
            continue
        try:
            exe, devices, timings = _compiled(xr, req, cache)
            outputs, run_t = xr.execute_on_devices(exe, devices, req["args"], req["mode"])
            timings.update(run_t)
            answer = {"ok": True, "outputs": outputs, "timings": timings}
        except xr.XlaStageError as e:
            answer = {"ok": False, "stage": e.stage, "message": str(e)}
        except Exception as e:             # noqa: BLE001
            answer = {"ok": False, "stage": "run", "message": f"{type(e).__name__}: {e}"}
        _send(out, answer)


def _compiled(xr, req, cache):
    key = (req["text"], req["replicas"], req["partitions"])
    if key in cache:
        return cache[key] + ({"parse_s": 0.0, "compile_s": 0.0},)
    exe, devices, timings = xr.compile_for_devices(req["text"], req["replicas"], req["partitions"])
    cache[key] = (exe, devices)
    while len(cache) > 8:
        cache.pop(next(iter(cache)))
    return exe, devices, timings


def _rounds(xr, req, cache) -> dict:
    """One module on one device, run once per argument list (None: the previous round's buffer)."""
    import time as _time

    import jax
    import numpy as np
    try:
        exe, devices, timings = _compiled(xr, req, cache)
        t0 = _time.perf_counter()
        bufs, outputs = [], []
        for args in req["rounds"]:
            bufs = [bufs[k] if a is None else jax.device_put(np.asarray(a), devices[0]) for k, a in enumerate(args)]
            leaves = exe.execute_sharded(bufs).disassemble_into_single_device_arrays()
            outputs.append([np.asarray(leaf[0]) for leaf in leaves])
        timings["run_s"] = _time.perf_counter() - t0
        return {"ok": True, "outputs": outputs, "timings": timings}
    except xr.XlaStageError as e:
        return {"ok": False, "stage": e.stage, "message": str(e)}
    except Exception as e:                 # noqa: BLE001
        return {"ok": False, "stage": "run", "message": f"{type(e).__name__}: {e}"}
