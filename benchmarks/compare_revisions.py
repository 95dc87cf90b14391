"""The same `hlo` commands timed with two checkouts of the project, side by side, in the same minutes.

Used to show that a change (a refactoring, a new fast path) is no slower: each command runs as a fresh
`hlo` process, as a user meets it, alternately with the old and the new checkout (so that the machine's
load falls on both alike), `--repeat` times each; the table gives the best wall time, the best CPU
time and the largest peak memory of each side, and the ratios new / old.

    python benchmarks/compare_revisions.py OLD_CHECKOUT NEW_CHECKOUT [--repeat 3] [--case NAME ...]

A case's command is run in a fresh scratch directory; a case marked cold starts with an empty parse
cache every time, the others keep each checkout's own cache across repeats (warmed by a first run).
CPU time (user + system, the process and its threads) is the steadier figure on a loaded machine.
The cases use the shipped samples and the benchmark dumps of benchmarks/data when they are there
(see gen_transformer.py); a case whose files are missing is left out and said so.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parent / "samples"
DATA = HERE / "data"

# name -> (arguments after `hlo`, files that must exist, whether the parse cache starts empty)
CASES = {
    "check-large-cold": (["check", "{big}"], ["{big}"], True),
    "check-large-cached": (["check", "{big}"], ["{big}"], False),
    "info-large-cached": (["info", "{big}"], ["{big}"], False),
    "fmt-large-cached": (["fmt", "{big}"], ["{big}"], False),
    "run-mobilenet-opt": (["run", f"{SAMPLES}/convnets/mobilenet_v2_tiny.opt.hlo", "--inputs",
                           f"{SAMPLES}/convnets/mobilenet_v2_tiny.inputs.npz", "-o", "out.npz", "--force"],
                          [f"{SAMPLES}/convnets/mobilenet_v2_tiny.opt.hlo"], False),
    "run-resnet": (["run", f"{SAMPLES}/convnets/resnet_tiny.hlo", "--inputs",
                    f"{SAMPLES}/convnets/resnet_tiny.inputs.npz", "-o", "out.npz", "--force"],
                   [f"{SAMPLES}/convnets/resnet_tiny.hlo"], False),
    "run-scan-loop": (["run", f"{SAMPLES}/loops/scan_fixed_weight.opt.hlo", "--inputs",
                       f"{SAMPLES}/loops/scan_fixed_weight.inputs.npz", "-o", "out.npz", "--force"],
                      [f"{SAMPLES}/loops/scan_fixed_weight.opt.hlo"], False),
    "run-scan2000": (["run", f"{DATA}/scan2000.hlo", "--inputs", f"{DATA}/scan2000.inputs.npz", "-o", "out.npz", "--force"],
                     [f"{DATA}/scan2000.hlo"], False),
    "run-transformer-opt": (["run", f"{DATA}/transformer.opt.hlo", "--inputs", f"{DATA}/transformer.inputs.npz",
                             "-o", "out.npz", "--force"], [f"{DATA}/transformer.opt.hlo"], False),
    "run-profile-mobilenet": (["run", f"{SAMPLES}/convnets/mobilenet_v2_tiny.hlo", "--inputs",
                               f"{SAMPLES}/convnets/mobilenet_v2_tiny.inputs.npz", "--profile", "-o", "out.npz", "--force"],
                              [f"{SAMPLES}/convnets/mobilenet_v2_tiny.hlo"], False),
    "run-8-devices": (["run", f"{SAMPLES}/spmd/dp_mp_matmul_grad_4x2.opt.hlo", "--inputs",
                       f"{SAMPLES}/spmd/dp_mp_matmul_grad_4x2.inputs.npz", "-o", "out.npz", "--force"],
                      [f"{SAMPLES}/spmd/dp_mp_matmul_grad_4x2.opt.hlo"], False),
    "diff-mobilenet": (["diff", f"{SAMPLES}/convnets/mobilenet_v2_tiny.hlo",
                        f"{SAMPLES}/convnets/mobilenet_v2_tiny.opt.hlo", "--inputs",
                        f"{SAMPLES}/convnets/mobilenet_v2_tiny.inputs.npz"],
                       [f"{SAMPLES}/convnets/mobilenet_v2_tiny.hlo"], False),
}


def _one(checkout: Path, args: list[str], cache: Path, work: Path) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds, peak RSS in MiB, exit code) of one fresh `hlo` process."""
    env = dict(os.environ, PYTHONPATH=str(checkout), HLO_CACHE_DIR=str(cache))
    env.pop("PYTHONDONTWRITEBYTECODE", None)     # as an installed package: modules' bytecode cached
    cmd = [sys.executable, "-c", "from hlo_cli.cli import main; main()", *args]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, os.waitstatus_to_exitcode(status)


def _expand(items: list[str], big: str) -> list[str]:
    return [s.replace("{big}", big) for s in items]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old", type=Path)
    ap.add_argument("new", type=Path)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--case", action="append", help="only these cases (default: all that have their files)")
    ap.add_argument("--big", default=str(DATA / "transformer.opt.hlo"), help="the large dump of the check/info/fmt cases")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args(argv)
    rows = []
    print("| case | old wall | new wall | ratio | old CPU | new CPU | ratio | old peak | new peak | exit |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    scratch = Path(tempfile.mkdtemp(prefix="hlo-revisions-"))
    try:
        for name, (args, needs, cold) in CASES.items():
            if a.case and name not in a.case:
                continue
            args, needs = _expand(args, a.big), _expand(needs, a.big)
            missing = [p for p in needs if not Path(p).exists()]
            if missing:
                print(f"left out {name}: {missing[0]} is missing", file=sys.stderr)
                continue
            best = {"old": [float("inf"), float("inf"), 0.0, None], "new": [float("inf"), float("inf"), 0.0, None]}
            for r in range(a.repeat + (0 if cold else 1)):       # a cached case warms its cache first
                for side, checkout in (("old", a.old), ("new", a.new)):
                    cache = scratch / f"cache-{side}" / (f"{name}-{r}" if cold else name)
                    work = scratch / f"work-{side}"
                    work.mkdir(parents=True, exist_ok=True)
                    wall, cpu, rss, code = _one(checkout.resolve(), args, cache, work)
                    if not cold and r == 0:
                        continue
                    b = best[side]
                    b[0], b[1], b[2], b[3] = min(b[0], wall), min(b[1], cpu), max(b[2], rss), code
            row = {"case": name, "old_s": best["old"][0], "new_s": best["new"][0], "old_cpu_s": best["old"][1],
                   "new_cpu_s": best["new"][1], "old_mib": best["old"][2], "new_mib": best["new"][2],
                   "old_exit": best["old"][3], "new_exit": best["new"][3]}
            rows.append(row)
            print(f"| {name} | {row['old_s']:.2f} s | {row['new_s']:.2f} s | {row['new_s'] / row['old_s']:.2f} "
                  f"| {row['old_cpu_s']:.2f} s | {row['new_cpu_s']:.2f} s | {row['new_cpu_s'] / row['old_cpu_s']:.2f} "
                  f"| {row['old_mib']:.0f} MiB | {row['new_mib']:.0f} MiB | {row['old_exit']}/{row['new_exit']} |",
                  flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if a.json:
        a.json.write_text(json.dumps({"old": str(a.old), "new": str(a.new), "repeat": a.repeat, "rows": rows},
                                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
