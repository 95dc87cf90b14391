"""Run `hlo check --no-cache` on every `*.hlo` file under a directory, one process per file, and
count the exit codes: how the release notes measure hlo on files none of us wrote (XLA's own
repository: export its `.hlo` files into one directory first, e.g. with `git show` from a clone).

    python scripts/sweep_check.py DIR [--json out.json] [--timeout 120]

Prints one line per file that did not exit 0 (code, file, first error line) and the counts.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory")
    ap.add_argument("--json", help="write {file: [exit code, stderr tail]} here")
    ap.add_argument("--timeout", type=float, default=120.0)
    a = ap.parse_args()
    results = {}
    for f in sorted(Path(a.directory).rglob("*.hlo")):
        try:
            p = subprocess.run([sys.executable, "-c", "from hlo_cli.cli import main; main()", "check", "--no-cache", str(f)],
                               capture_output=True, text=True, timeout=a.timeout)
            results[str(f)] = (p.returncode, p.stderr[-600:])
        except subprocess.TimeoutExpired:
            results[str(f)] = ("timeout", "")
    for f, (code, err) in results.items():
        if code != 0:
            first = next((line for line in err.splitlines() if "error" in line), "")
            print(f"{code}  {Path(f).name}  {first[-160:]}")
    print(dict(Counter(str(code) for code, _ in results.values())))
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
