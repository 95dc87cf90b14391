"""Large dumps: `hlo check`, `info`, `fmt` and `run`'s refusal path, cold and cached, against XLA's own
C++ parser, in one run.

XLA's parser is the one JAX ships (`jaxlib._hlo.hlo_module_from_text`), timed in this process on the
same text.  Every `hlo` command is one fresh process, timed end to end as a user runs it (interpreter
start-up, imports, reading, parsing, checking, printing) in three states of the cache:

    nocache  --no-cache: parse and compute everything, read and write nothing
    first    an empty cache directory: what a first run costs (it also fills the cache)
    cached   the same command again: what a repeat costs

`run` is `hlo run FILE --random-inputs --max-memory 1`: it checks the module, estimates its memory and
refuses (exit 5) before running anything: a dry run.  Each figure is the best of --repeat runs, wall
seconds and the process's CPU seconds (user + system: on a shared, loaded machine the CPU time is the
steadier measure; XLA's is this process's CPU time around its parse).

    python benchmarks/bench_parse.py                              # the default dumps (generated if missing)
    python benchmarks/bench_parse.py --repeat 3 FILE...
    python benchmarks/bench_parse.py --commands check,info FILE   # a subset
    python benchmarks/bench_parse.py --commands check,info --states cached --repeat 5 M.hlo.pb   # warm proto repeats
    PYTHONPATH=/other/checkout python benchmarks/bench_parse.py   # another revision's hlo, same XLA

Prints a Markdown table and writes benchmarks/results/parse.json (--out).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
COMMANDS = {
    "check": (["check"], (0,)),
    "info": (["info", "--format", "json"], (0,)),
    "fmt": (["fmt"], (0,)),
    "run": (["run", "--random-inputs", "--max-memory", "1", "--no-progress"], (5,)),
}
STATES = ("nocache", "first", "cached")
PROTO_SUFFIXES = (".pb", ".pbtxt")     # module protos: hlo reads them, XLA's text parser does not
_INSTRUCTION_LINE = re.compile(r"^[ \t]*(?:ROOT[ \t]+)?%?[A-Za-z_][\w.\-]*[ \t]*=[ \t]", re.M)   # about one a line


def hlo_cmd() -> list[str]:
    # `python -c` so that PYTHONPATH picks the checkout (the console script may belong to another);
    # -P keeps the current directory (a checkout itself, often) from coming before PYTHONPATH
    safe = ["-P"] if sys.version_info >= (3, 11) else []
    return [sys.executable, *safe, "-c", "from hlo_cli.cli import main; main()"]


def timed(args: list[str], env: dict, ok: tuple[int, ...]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `hlo ARGS` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(hlo_cmd() + args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode not in ok:
        raise SystemExit(f"hlo {' '.join(args)} exited {out.returncode}:\n{out.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def xla_parse(text: str, repeat: int) -> tuple[float, float]:
    from jaxlib import _hlo
    best = (float("inf"), float("inf"))
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        _hlo.hlo_module_from_text(text)
        best = (min(best[0], time.perf_counter() - t0), min(best[1], time.process_time() - c0))
    return best


def measure(f: Path, commands: list[str], repeat: int, states: list[str]) -> dict:
    """A row for FILE: XLA's parse (HLO text only; a module proto has none) and each command in each
    state of the cache, best of REPEAT."""
    data = f.read_bytes()
    row = {"file": f.name, "bytes": len(data), "instructions": None, "xla_parse_s": None, "xla_parse_cpu_s": None}
    if f.suffix not in PROTO_SUFFIXES:
        text = data.decode()
        row["instructions"] = len(_INSTRUCTION_LINE.findall(text))
        row["xla_parse_s"], row["xla_parse_cpu_s"] = xla_parse(text, repeat)
    for name in commands:
        args, ok = COMMANDS[name]
        best = {s: (float("inf"), float("inf")) for s in states}
        for _ in range(repeat):
            cache = tempfile.mkdtemp(prefix="hlo-bench-cache-")
            try:
                env = dict(os.environ, HLO_CACHE_DIR=cache)
                runs = {}
                if "nocache" in states:
                    runs["nocache"] = timed(args + ["--no-cache", str(f)], env, ok)
                first = timed(args + [str(f)], env, ok)       # (fills the cache for "cached")
                if "first" in states:
                    runs["first"] = first
                if "cached" in states:
                    runs["cached"] = timed(args + [str(f)], env, ok)
            finally:
                shutil.rmtree(cache, ignore_errors=True)
            for s, (w, c) in runs.items():
                best[s] = (min(best[s][0], w), min(best[s][1], c))
        for s in states:
            row[f"{name}_{s}_s"], row[f"{name}_{s}_cpu_s"] = best[s]
    return row


def table(rows: list[dict], commands: list[str], states: list[str]) -> str:
    names = {"nocache": "--no-cache", "first": "first (empty cache)", "cached": "cached"}
    out = ["| file | instructions | XLA parse | command | " + " | ".join(names[s] for s in states) + " |",
           "| --- | --: | --: | --- | " + " | ".join("--:" for _ in states) + " |"]
    for r in rows:
        xw, xc = r["xla_parse_s"], r["xla_parse_cpu_s"]
        for k, name in enumerate(commands):
            cells = []
            for s in states:
                w, c = r[f"{name}_{s}_s"], r[f"{name}_{s}_cpu_s"]
                cells.append(f"{w:.2f} s ({w / xw:.1f}x); CPU {c:.2f} s ({c / xc:.1f}x)" if xw else
                             f"{w:.2f} s; CPU {c:.2f} s")
            xla = f"{xw:.2f} s; CPU {xc:.2f} s" if xw else "-"
            count = f"{r['instructions']:,}" if r["instructions"] is not None else "-"
            head = f"{r['file']} | {count} | {xla}" if k == 0 else " | | "
            out.append(f"| {head} | hlo {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--commands", default=",".join(COMMANDS),
                    help=f"comma-separated subset of {', '.join(COMMANDS)}")
    ap.add_argument("--states", default=",".join(STATES),
                    help=f"comma-separated subset of {', '.join(STATES)} (first runs in any case: it fills the cache)")
    ap.add_argument("--out", default=str(HERE / "results" / "parse.json"))
    args = ap.parse_args()
    commands = [c for c in args.commands.split(",") if c]
    bad = [c for c in commands if c not in COMMANDS]
    if bad:
        ap.error(f"unknown command(s) {', '.join(bad)}: choose from {', '.join(COMMANDS)}")
    states = [s for s in STATES if s in args.states.split(",")]
    if not states or set(args.states.split(",")) - set(STATES):
        ap.error(f"--states: a comma-separated subset of {', '.join(STATES)}")
    files = [Path(f) for f in args.files] or [DATA / "transformer.hlo", DATA / "transformer.opt.hlo"]
    if any(not f.exists() for f in files) and not args.files:
        subprocess.run([sys.executable, str(HERE / "gen_transformer.py"), "--out", str(DATA)], check=True)
    rows = [measure(f, commands, args.repeat, states) for f in files]
    import jax
    meta = {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
            "load_average": os.getloadavg(), "jax": jax.__version__, "repeat": args.repeat,
            "hlo": subprocess.run(hlo_cmd()[:-1] + ["import hlo_cli; print(hlo_cli.__file__)"],
                                  capture_output=True, text=True).stdout.strip()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"meta": meta, "rows": rows}, indent=2) + "\n")
    print(table(rows, commands, states))


if __name__ == "__main__":
    main()
