"""Headless Chromium inside a sandbox, driven over the DevTools protocol.

Chromium's ``--remote-debugging-pipe`` reads requests on its fd 3 and writes replies and events
on its fd 4, each a JSON text ended by a NUL byte: no port, and no websocket library. The pipes
cross nsenter and setpriv as inherited file descriptors. A reader thread sorts what arrives:
replies by id, events dropped (the tests poll the page's own state instead).
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.sandbox import Sandbox

FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,900",
    "--user-data-dir=/var/tmp/chromium",
)


class BrowserError(Exception):
    pass


class Browser:
    def __init__(self, sb: Sandbox) -> None:
        commands_r, self._commands = os.pipe()
        self._events, events_w = os.pipe()
        # bash, not sh: dash's redirections take only one-digit file descriptors.
        remap = f'exec chromium "$@" 3<&{commands_r} 4>&{events_w} {commands_r}<&- {events_w}>&-'
        argv = ("bash", "-c", remap, "chromium", *FLAGS, "--remote-debugging-pipe", "about:blank")
        self.log = sb.dir / "chromium.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                sb._command(argv, None, None, "/"),
                pass_fds=(commands_r, events_w),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
            )
        os.close(commands_r)
        os.close(events_w)
        self._ids = itertools.count(1)
        self._replies: dict[int, dict[str, Any]] = {}
        self._arrived = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = ""

    def _read(self) -> None:
        buffer = b""
        while chunk := os.read(self._events, 65536):
            buffer += chunk
            *messages, buffer = buffer.split(b"\0")
            for raw in messages:
                message = json.loads(raw)
                if "id" in message:
                    with self._arrived:
                        self._replies[message["id"]] = message
                        self._arrived.notify_all()

    def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        timeout: float = 30,
        session: bool = True,
    ) -> dict[str, Any]:
        """One DevTools command, to the page unless session is False; its result."""
        number = next(self._ids)
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        with self._arrived:
            if not self._arrived.wait_for(lambda: number in self._replies, timeout):
                said = self.log.read_text(errors="replace")[-1500:]
                raise BrowserError(f"{method}: no reply within {timeout}s; Chromium said:\n{said}")
            reply = self._replies.pop(number)
        if "error" in reply:
            raise BrowserError(f"{method}: {reply['error']}")
        return dict(reply.get("result", {}))

    def open(self, url: str) -> None:
        """A page of its own, showing url."""
        target = self.send("Target.createTarget", {"url": "about:blank"}, session=False)
        attached = self.send(
            "Target.attachToTarget",
            {"targetId": target["targetId"], "flatten": True},
            session=False,
        )
        self.session = attached["sessionId"]
        self.send("Page.enable")
        self.go(url)

    def go(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})

    def js(self, expression: str) -> Any:
        """The value of expression in the page (a promise is awaited)."""
        result = self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in result:
            raise BrowserError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def until(self, expression: str, what: str, timeout: float = 20.0) -> Any:
        """Poll expression in the page until it is truthy in JavaScript's sense; its value."""
        expression = f"(() => {{ const v = ({expression}); return v ? (v === true || typeof v !== 'object' ? v : true) : false; }})()"
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.js(expression)
            except BrowserError:
                value = None  # the page is between two documents
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"the page never showed {what}")
            time.sleep(0.1)

    def type(self, text: str) -> None:
        """Type text into whatever has the focus, then Enter."""
        self.send("Input.insertText", {"text": text})
        for kind in ("keyDown", "keyUp"):
            self.send(
                "Input.dispatchKeyEvent",
                {
                    "type": kind,
                    "key": "Enter",
                    "code": "Enter",
                    "windowsVirtualKeyCode": 13,
                    "text": "\r",
                },
            )

    def screenshot(self, path: Path) -> None:
        shot = self.send("Page.captureScreenshot", {"format": "png", "captureBeyondViewport": True})
        path.write_bytes(base64.b64decode(shot["data"]))

    def close(self) -> None:
        try:
            self.send("Browser.close", session=False, timeout=10)
        except (BrowserError, OSError):
            self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._commands)
        self._reader.join(5)
        os.close(self._events)
