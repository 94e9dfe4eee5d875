"""Load a page in Debian's headless Chromium over the DevTools protocol (pipe transport, stdlib only).

`inspect_page(url, screenshot)` navigates, waits for the load event, collects console messages,
uncaught exceptions and failed loads, evaluates a JavaScript expression (a Promise is awaited), and saves
a PNG screenshot.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-pipe",
    "--window-size=1280,900",
    "--hide-scrollbars",
]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def require_chromium() -> None:
    """Skip the calling test without Chromium; fail it instead under CI=true, where it must be installed."""
    import pytest

    if chromium_path():
        return
    if os.environ.get("CI"):
        pytest.fail("CI=true but chromium is not installed (apt-get install -y chromium)", pytrace=False)
    pytest.skip("chromium is not installed (apt-get install -y chromium)")


@dataclass
class PageReport:
    console: list[dict] = field(default_factory=list)  # {"level", "text"}
    exceptions: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    value: object = None

    @property
    def errors(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and failed loads: all should be empty."""
        return (
            [f"console.{m['level']}: {m['text']}" for m in self.console if m["level"] in ("error", "warning")]
            + self.exceptions
            + self.failed_requests
        )


class _Pipe:
    """Chromium's --remote-debugging-pipe: JSON messages separated by NUL on fds 3 (in) and 4 (out)."""

    def __init__(self, binary: str, profile: str):
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds():  # runs in the child before exec: put the pipe ends at fds 3 and 4
            os.dup2(to_child_r, 3)
            os.dup2(from_child_w, 4)

        self.proc = subprocess.Popen(
            [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire_fds,
            pass_fds=(3, 4),
        )  # kept open through exec (close_fds runs after preexec_fn)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def send(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 30) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 30) -> dict:
        deadline = time.monotonic() + timeout
        for event in self.events:
            if event.get("method") == method:
                return event
        while True:
            event = self._read(deadline)
            self.events.append(event)
            if event.get("method") == method:
                return event

    def _read(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer over the DevTools pipe in time")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe (crashed or exited)")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=5)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)


def inspect_page(
    url: str, screenshot: Path, expression: str = "null", binary: str | None = None, width: int | None = None
) -> PageReport:
    """Open `url`, wait for load, evaluate `expression` (JSON-able result), screenshot the full page. `width`: the
    viewport's width in CSS pixels (default: the window's, 1280)."""
    binary = binary or chromium_path()
    if not binary:
        raise FileNotFoundError("chromium is not installed (apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="envbuild-chromium-") as profile:
        pipe = _Pipe(binary, profile)
        try:
            target = pipe.send("Target.createTarget", {"url": "about:blank"})["targetId"]
            session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
            for domain in ("Page", "Runtime", "Log", "Network"):
                pipe.send(f"{domain}.enable", session=session)
            if width:
                pipe.send(
                    "Emulation.setDeviceMetricsOverride",
                    {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
                    session=session,
                )
            pipe.send("Page.navigate", {"url": url}, session=session)
            pipe.wait_for("Page.loadEventFired")
            report = PageReport()
            report.value = pipe.send(
                "Runtime.evaluate",
                {"expression": expression, "returnByValue": True, "awaitPromise": True},
                session=session,
            )["result"].get("value")
            metrics = pipe.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
            shot = pipe.send(
                "Page.captureScreenshot",
                {
                    "format": "png",
                    "captureBeyondViewport": True,
                    "clip": {
                        "x": 0,
                        "y": 0,
                        "width": metrics["width"],
                        "height": min(metrics["height"], 4000),
                        "scale": 1,
                    },
                },
                session=session,
            )
            screenshot.write_bytes(base64.b64decode(shot["data"]))
            _collect(pipe.events, report)
            return report
        finally:
            pipe.close()


def _collect(events: list[dict], report: PageReport) -> None:
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled":
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            report.console.append({"level": params.get("type"), "text": text})
        elif method == "Log.entryAdded":
            entry = params["entry"]
            report.console.append({"level": entry.get("level"), "text": f"{entry.get('text')} {entry.get('url', '')}"})
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            description = (details.get("exception") or {}).get("description", "")
            report.exceptions.append(f"{details.get('text', 'exception')} {description}")
        elif method == "Network.loadingFailed":
            report.failed_requests.append(f"load failed: {params.get('errorText')} ({params.get('type')})")
