"""What the `hlo run` test files share: the `hlo` fixture running the CLI in a scratch directory."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from hlo_cli.cli import main


@pytest.fixture()
def hlo(monkeypatch, tmp_path):
    """Run `hlo ARGS...` in tmp_path; check that no traceback appears anywhere."""
    monkeypatch.setenv("HLO_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)

    def _run(*args, input=None):
        result = CliRunner().invoke(main, [str(a) for a in args], input=input, catch_exceptions=False)
        for text in (result.stdout, result.stderr or ""):
            assert "Traceback" not in text, text
            assert "internal error" not in text, text
        return result
    return _run
