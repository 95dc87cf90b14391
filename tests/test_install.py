"""The installed package: grammar shipped inside it, console script, instant help."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import hlo_cli
from hlo_cli.parser.grammar import grammar_path

PKG = Path(hlo_cli.__file__).resolve().parent


def test_grammar_is_found_and_loads():
    p = grammar_path()
    assert p.is_file()
    assert "start:" in p.read_text()
    if "site-packages" in PKG.parts or "dist-packages" in PKG.parts:
        # an ordinary install must carry the grammar inside the package itself
        assert p.resolve().is_relative_to(PKG)


def test_console_script_or_module_runs():
    exe = shutil.which("hlo")
    cmd = [exe] if exe and "site-packages" in PKG.parts else [sys.executable, "-c",
                                                            "from hlo_cli.cli import main; main()"]
    out = subprocess.run(cmd + ["--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert hlo_cli.__version__ in out.stdout


def test_help_does_not_import_heavy_modules():
    code = ("import sys; from hlo_cli.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('lark', 'numpy', 'rich', 'ml_dtypes') if m in sys.modules]\n"
            "print('HEAVY:' + ','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "HEAVY:"
