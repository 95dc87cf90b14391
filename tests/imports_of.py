"""Which modules a fresh `hlo` process imports: for tests that keep heavy imports off a path."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported_by(args: list[str], modules: tuple[str, ...]) -> tuple[list[str], str]:
    """(those of `modules` that `hlo ARGS` imported, its standard output), run in a fresh process from
    the checkout; the command must exit 0."""
    code = ("import sys\nfrom hlo_cli.cli import main\nsys.argv = ['hlo'] + sys.argv[2:]\n"
            "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "print(sorted(m for m in sys.argv[1].split(',') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code, ",".join(modules), *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={"HLO_SLOW_EXIT": "1", "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    *_, last = out.stdout.strip().splitlines()
    return ast.literal_eval(last), out.stdout
