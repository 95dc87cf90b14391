"""Every benchmark at 1, 2 and all cores: the ratio hlo / XLA at each, so that scaling is visible.

Each suite below is one of the side-by-side benchmarks of this folder, run unchanged in a child
process pinned with `taskset` to the first k cores (hlo's threads follow the process's affinity,
hlo_cli/interpreter/parallel.py; XLA CPU sizes its thread pool from the same affinity), for k in
1, 2 and the machine's count (deduplicated: on a 2-core machine the columns are 1 and 2).  The
suite writes its own results file; this script reads the (hlo, XLA) times of each row from it.

    python benchmarks/scaling.py [--suites run window parse] [--repeat 3] [--cores 1 2 16]
    python benchmarks/scaling.py --report            # the table of the last results, measuring nothing

Writes benchmarks/results/scaling.json and prints a Markdown table: one row per measured case, for
each core count the hlo time, XLA's time and their ratio.  A ratio that grows with the cores means
hlo scales worse than XLA there.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "scaling.json"


def _run_rows(path):
    """bench_run.py: execution alone (steady state), best of --repeat."""
    for r in json.loads(Path(path).read_text())["rows"]:
        yield f"run {r['module']} (execute)", r["hlo_execute_s"], r["xla_execute_s"]
        yield f"run {r['module']} (end to end vs XLA compile + run)", r["hlo_run_e2e_s"], \
            r["xla_parse_compile_s"] + r["xla_execute_s"]


def _window_rows(path):
    """bench_window.py: one reduce-window / pad / reverse op at a training step's scale."""
    for r in json.loads(Path(path).read_text())["rows"]:
        yield f"window {r['op']} {r['shape']}", r["hlo_ms"] / 1e3, r["xla_ms"] / 1e3


def _parse_rows(path):
    """bench_parse.py: fresh `hlo check` processes (no cache, and cached) against XLA's parse of the
    same text (wall seconds of each)."""
    for r in json.loads(Path(path).read_text())["rows"]:
        for state in ("nocache", "cached"):
            key = f"check_{state}_s"
            if key in r:
                yield f"parse {r['file']} (hlo check, {state.replace('nocache', 'no cache')})", r[key], \
                    r["xla_parse_s"]


# suite: (script, its arguments given the results file and the repeat count, the rows reader)
SUITES = {
    "run": ("bench_run.py", lambda out, rep: ["--repeat", str(rep), "--out", out,
                                              "--only", "transformer.opt.hlo", "scan2000.hlo"], _run_rows),
    "window": ("bench_window.py", lambda out, rep: ["--repeat", str(rep), "--json", out], _window_rows),
    "parse": ("bench_parse.py", lambda out, rep: ["--repeat", str(rep), "--out", out, "--commands", "check",
                                                  "--states", "nocache,cached"], _parse_rows),
}


def core_counts(asked=None) -> list[int]:
    """1, 2 and every core this process may use (those asked for, if any), deduplicated, in order."""
    have = len(os.sched_getaffinity(0))
    counts = asked or [1, 2, have]
    return sorted({k for k in counts if 1 <= k <= have})


def measure(suite: str, cores: int, repeat: int, timeout: float) -> list[dict]:
    """Run one suite pinned to the first `cores` cores; its rows with their times."""
    script, argv, rows = SUITES[suite]
    allowed = sorted(os.sched_getaffinity(0))[:cores]
    with tempfile.TemporaryDirectory(prefix="hlo-scaling-") as tmp:
        out = os.path.join(tmp, "rows.json")
        cmd = ["taskset", "-c", ",".join(map(str, allowed)), sys.executable, str(HERE / script), *argv(out, repeat)]
        env = dict(os.environ, PYTHONPATH=str(HERE.parent))
        t = time.perf_counter()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0 or not os.path.exists(out):
            tail = (done.stderr or done.stdout)[-800:]
            raise SystemExit(f"{script} on {cores} core(s) failed (exit {done.returncode}):\n{tail}")
        print(f"  {suite} on {cores} core(s): {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)
        return [{"suite": suite, "case": name, "cores": cores, "hlo_s": h, "xla_s": x, "ratio": h / x}
                for name, h, x in rows(out)]


def table(rows: list[dict]) -> str:
    counts = sorted({r["cores"] for r in rows})
    cases = list(dict.fromkeys(r["case"] for r in rows))
    at = {(r["case"], r["cores"]): r for r in rows}
    head = "| case | " + " | ".join(f"{k} core{'s' if k > 1 else ''}: hlo / XLA" for k in counts) + " |"
    lines = [head, "| --- |" + " --: |" * len(counts)]
    for c in cases:
        cells = []
        for k in counts:
            r = at.get((c, k))
            cells.append("" if r is None else f"{_t(r['hlo_s'])} / {_t(r['xla_s'])} = **{r['ratio']:.2f}x**")
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _t(s: float) -> str:
    return f"{s * 1e3:.1f} ms" if s < 1 else f"{s:.2f} s"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suites", nargs="+", choices=sorted(SUITES), default=["run", "window", "parse"])
    ap.add_argument("--cores", type=int, nargs="+", help="core counts (default 1, 2 and all)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for one suite at one core count")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--report", action="store_true", help="print the table of --out, measure nothing")
    a = ap.parse_args(argv)
    if a.report:
        print(table(json.loads(Path(a.out).read_text())["rows"]))
        return
    rows = []
    for suite in a.suites:
        for k in core_counts(a.cores):
            rows += measure(suite, k, a.repeat, a.timeout)
    meta = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpus": len(os.sched_getaffinity(0)),
            "load_avg_1m_after": os.getloadavg()[0], "repeat": a.repeat,
            "command": "python benchmarks/scaling.py " + " ".join(argv if argv is not None else sys.argv[1:])}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    print(table(rows))


if __name__ == "__main__":
    main()
