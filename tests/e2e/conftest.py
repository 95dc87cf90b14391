"""End-to-end tests in a real browser: headless Chromium (Debian's `chromium`) driven over the
DevTools protocol (cdp.py), Model Explorer with our extension, and `hlo graph`'s HTML page.

They skip only where Chromium or the `explorer` extra is missing, and the reason is printed at
the end of every run (not only with -rs): CI installs both (.ci/run), so a skip there is a sign.
Screenshots go to each test's tmp_path; the path is printed (pytest -s shows it, and the summary
lists them).
"""
from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from .cdp import Browser, find_chromium

_SKIPS: list[tuple[str, str]] = []
_SCREENSHOTS: list[str] = []
HERE = Path(__file__).resolve().parent


@pytest.fixture
def chromium() -> str:
    path = find_chromium()
    if path is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    return path


@pytest.fixture
def model_explorer():
    if importlib.util.find_spec("model_explorer") is None:
        pytest.skip("Model Explorer is not installed (pip install \"hlo-cli[explorer]\")")
    return True


@pytest.fixture
def browser(chromium):
    b = Browser(chromium)
    try:
        yield b
    finally:
        b.close()


@pytest.fixture
def screenshot(browser, tmp_path, request):
    """screenshot(name) -> the PNG's path, in the test's tmp_path, printed and listed in the summary."""
    def take(name: str) -> Path:
        p = browser.screenshot(tmp_path / f"{name}.png")
        print(f"screenshot: {p}")
        _SCREENSHOTS.append(f"{request.node.name}: {p}")
        return p
    return take


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ExplorerServer:
    """`model-explorer PATHS --extensions=hlo_cli.explorer --port P --no_open_in_browser`, in the
    interpreter running the tests; .url is the page that opens PATHS."""

    def __init__(self, paths: list[str], node_data: list[str] = (), timeout: float = 90, launcher=False):
        self.port = free_port()
        if launcher:       # python -m hlo_cli.explorer: our adapter for every file, whatever its suffix
            cmd = [sys.executable, "-m", "hlo_cli.explorer", *map(str, paths), "--host", "127.0.0.1",
                   "--port", str(self.port), "--no-browser"]
            cmd += [f"--node-data={p}" for p in node_data]
        else:
            cmd = [sys.executable, "-m", "model_explorer", ",".join(str(p) for p in paths),
                   "--extensions=hlo_cli.explorer", "--host", "127.0.0.1", "--port", str(self.port),
                   "--no_open_in_browser"]
            if node_data:
                cmd.append("--node_data_paths=" + ",".join(str(p) for p in node_data))
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.lines: list[str] = []
        self.url: str | None = None
        got = threading.Event()

        def read():
            for line in self.proc.stdout:
                self.lines.append(line)
                m = re.search(r"(http://\S+/\?data=\S+)", line)
                if m and self.url is None:
                    self.url = m.group(1)
                    got.set()
            got.set()
        threading.Thread(target=read, daemon=True).start()
        if not got.wait(timeout) or self.url is None:
            out = "".join(self.lines)
            self.stop()
            raise AssertionError(f"Model Explorer did not start (exit {self.proc.returncode}):\n{out}")
        self._wait_listening(timeout)

    def _wait_listening(self, timeout: float):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"Model Explorer is not listening on port {self.port}")

    @property
    def log(self) -> str:
        return "".join(self.lines)

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)   # its own session: the server and nothing else
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


@pytest.fixture
def explorer_server(model_explorer):
    servers = []

    def start(paths, node_data=(), launcher=False):
        s = ExplorerServer(paths, node_data, launcher=launcher)
        servers.append(s)
        return s
    yield start
    for s in servers:
        s.stop()


def pytest_runtest_logreport(report):
    if report.skipped and ("e2e/" in report.nodeid or "explorer/" in report.nodeid):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        _SKIPS.append((report.nodeid, reason.replace("Skipped: ", "")))


def pytest_terminal_summary(terminalreporter):
    if _SKIPS:
        terminalreporter.write_line("browser and Model Explorer tests skipped (CI installs what they need: .ci/run):",
                                    yellow=True)
        seen = set()
        for nodeid, reason in _SKIPS:
            if reason not in seen:
                seen.add(reason)
                terminalreporter.write_line(f"  SKIPPED {reason} ({sum(1 for _, r in _SKIPS if r == reason)} tests)",
                                            yellow=True)
    if _SCREENSHOTS:
        terminalreporter.write_line("browser test screenshots:")
        for s in _SCREENSHOTS:
            terminalreporter.write_line(f"  {s}")


def which_hlo() -> list[str]:
    """How to run the `hlo` command of the interpreter running the tests."""
    exe = shutil.which("hlo", path=os.path.dirname(sys.executable))
    return [exe] if exe else [sys.executable, "-c", "from hlo_cli.cli import main; main()"]
