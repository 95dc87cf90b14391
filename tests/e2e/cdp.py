"""A small Chrome DevTools Protocol client over `--remote-debugging-pipe` (standard library only).

Chromium started with `--remote-debugging-pipe` reads protocol messages from file descriptor 3 and
writes its answers to descriptor 4, each message one JSON object followed by a NUL byte.  No
websocket, no driver binary, no port: a pipe pair and a reader thread.  Enough for the end-to-end
tests: open a page, evaluate JavaScript in it, type, press keys, take a screenshot.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio")


def find_chromium() -> str | None:
    """The Chromium binary on PATH (Debian's `chromium`), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


class CdpError(RuntimeError):
    pass


class Browser:
    """One headless Chromium process driven over the pipe; one page (target) at a time."""

    def __init__(self, binary: str, width: int = 1400, height: int = 900):
        self.width, self.height = width, height
        self._profile = tempfile.mkdtemp(prefix="hlo-e2e-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire():  # in the child: our pipes become descriptors 3 and 4 (inheritable)
            high_r = fcntl.fcntl(to_child_r, fcntl.F_DUPFD, 10)   # out of the way of 3 and 4 first
            high_w = fcntl.fcntl(from_child_w, fcntl.F_DUPFD, 10)
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [binary, *FLAGS, "--remote-debugging-pipe", f"--user-data-dir={self._profile}",
             f"--window-size={width},{height}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=wire, close_fds=False)
        os.close(to_child_r)
        os.close(from_child_w)
        self._next_id = 0
        self._lock = threading.Lock()
        self._answers: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()
        self.session: str | None = None

    # -- protocol ------------------------------------------------------------------------------
    def _read_loop(self):
        buf = b""
        while True:
            try:
                chunk = os.read(self._from_child, 1 << 20)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\0" in buf:
                raw, buf = buf.split(b"\0", 1)
                msg = json.loads(raw)
                if "id" in msg:
                    with self._cond:
                        self._answers[msg["id"]] = msg
                        self._cond.notify_all()
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def send(self, method: str, params: dict | None = None, session: bool = True, timeout: float = 60):
        with self._lock:
            self._next_id += 1
            mid = self._next_id
        msg = {"id": mid, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._cond:
            while mid not in self._answers:
                left = deadline - time.monotonic()
                if self._closed or left <= 0:
                    raise CdpError(f"no answer to {method} ({'browser exited' if self._closed else 'timeout'})")
                self._cond.wait(left)
            answer = self._answers.pop(mid)
        if "error" in answer:
            raise CdpError(f"{method}: {answer['error']}")
        return answer.get("result", {})

    # -- pages ---------------------------------------------------------------------------------
    def open(self, url: str):
        """Open URL in a fresh page and make it the page later calls talk to."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)["targetId"]
        self.session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]
        self.send("Page.enable")
        self.send("Runtime.enable")
        self.send("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        self.send("Page.navigate", {"url": url})

    def eval(self, expression: str, timeout: float = 60):
        """Evaluate a JavaScript expression in the page (promises awaited); its JSON value."""
        res = self.send("Runtime.evaluate", {"expression": expression, "awaitPromise": True,
                                             "returnByValue": True}, timeout=timeout)
        if "exceptionDetails" in res:
            raise CdpError(f"JavaScript error: {res['exceptionDetails'].get('exception', res['exceptionDetails'])}")
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 60, interval: float = 0.25):
        """Poll EXPRESSION until it is truthy; its value.  CdpError on timeout."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.eval(expression)
            except CdpError:
                last = None
            if last:
                return last
            time.sleep(interval)
        raise CdpError(f"timed out after {timeout:.0f} s waiting for: {expression}")

    def type_text(self, text: str):
        self.send("Input.insertText", {"text": text})

    def press(self, key: str, code: str | None = None, key_code: int | None = None):
        codes = {"Enter": 13, "Escape": 27, "ArrowDown": 40, "Tab": 9}
        params = {"key": key, "code": code or key, "windowsVirtualKeyCode": key_code or codes.get(key, 0)}
        if key == "Enter":
            params["text"] = "\r"
        self.send("Input.dispatchKeyEvent", {"type": "keyDown", **params})
        self.send("Input.dispatchKeyEvent", {"type": "keyUp", **params})

    def click(self, x: float, y: float):
        for kind in ("mousePressed", "mouseReleased"):
            self.send("Input.dispatchMouseEvent", {"type": kind, "x": x, "y": y, "button": "left",
                                                   "clickCount": 1})

    def screenshot(self, path: str | os.PathLike) -> Path:
        data = self.send("Page.captureScreenshot", {"format": "png"})["data"]
        path = Path(path)
        path.write_bytes(base64.b64decode(data))
        return path

    def close(self):
        try:
            if self.proc.poll() is None:
                try:
                    self.send("Browser.close", session=False, timeout=5)
                except CdpError:
                    pass
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=5)
        finally:
            for fd in (self._to_child, self._from_child):
                try:
                    os.close(fd)
                except OSError:
                    pass
            shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
