"""What the hostile tests use around each attack: bob's side (bob.py) started as bob, and the
probe that times another client's calls meanwhile. test_hostile.py's fixtures put the probe
and alice's session (named ALICES) around every test."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Awaitable
from typing import Any

from hostagent.bus.call import call
from hostagent.client.library import Client
from tests.integration.helpers import create
from tests.sandbox import GUEST_REPO, Sandbox

BOB = (
    "env",
    f"PYTHONPATH={GUEST_REPO}",
    "PYTHONPYCACHEPREFIX=/tmp/bob-pycache",
    "python3",
    "-m",
    "tests.integration.bob",
)
STALL = 1.0  # the bound on how long others may wait while bob attacks


def bob(sb: Sandbox, *args: str, user: str = "bob", timeout: float = 120) -> dict[str, Any]:
    """Run one of bob's attacks as user; what it printed last."""
    result = sb.run(*BOB, *args, user=user, timeout=timeout)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


ALICES = "alice-work"
SYSTEMD = "org.freedesktop.systemd1"


def finish(process: subprocess.Popen[str]) -> None:
    """Kill a process started with sb.popen if it still runs, and close its pipes."""
    with contextlib.suppress(ProcessLookupError):
        process.kill()
    with contextlib.suppress(ValueError):  # already communicated with
        process.communicate(timeout=30)


class Probe:
    """Another client's view while bob attacks, as a bystander on the same bus: ListSessions
    and GetSession (alice's session) every round (50 ms apart unless told), and a CreateSession
    (then its Remove) about every second; the slowest of each is kept."""

    # The bench's reference: systemd's answer on the same bus, which hostagent does not serve.
    SYSTEMD = "systemd GetUnit"

    def __init__(self, sb: Sandbox, reference: bool = False, every: float = 0.05) -> None:
        """reference: also time systemd's GetUnit each round, a call through the same bus
        and machine that hostagent has no part in (what the attack costs everyone). every:
        the pause between rounds, in seconds."""
        self.sb = sb
        self.reference = reference
        self.every = every
        self.create_every = max(1, round(1 / every))  # rounds: about a second
        self.slowest_by: dict[str, float] = {}
        self.samples: dict[str, list[float]] = {}  # every call's seconds, by method
        self.calls = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    @property
    def slowest(self) -> float:
        return max(self.slowest_by.values(), default=0.0)

    async def _timed(self, what: str, call: Awaitable[object]) -> None:
        started = time.monotonic()
        try:
            await asyncio.wait_for(call, 30)
        except Exception as e:
            self.errors.append(f"{what}: {e!r}")
        took = time.monotonic() - started
        self.slowest_by[what] = max(self.slowest_by.get(what, 0.0), took)
        self.samples.setdefault(what, []).append(took)

    async def _run(self) -> None:
        client = await Client.connect(True, self.sb.bus_address)
        reference = (await Client.connect(True, self.sb.bus_address)).bus
        try:
            while not self._stop.is_set():
                listed = self._timed("ListSessions", client.list_sessions())
                if self.reference:
                    # At the same moment as ListSessions, on a connection of its own: a stall of
                    # the bus itself then shows in both, not only in whichever asked first.
                    await asyncio.gather(
                        listed,
                        self._timed(
                            self.SYSTEMD,
                            call(
                                reference,
                                SYSTEMD,
                                "/org/freedesktop/systemd1",
                                f"{SYSTEMD}.Manager",
                                "GetUnit",
                                "s",
                                ["init.scope"],
                            ),
                        ),
                    )
                else:
                    await listed
                await self._timed("GetSession", client.get_session(ALICES))
                if self.calls % self.create_every == 0:
                    name = f"probe-{self.calls}"
                    await self._timed("CreateSession", client.create(name, "shell", "/tmp", {}))
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(client.remove(name), 30)
                self.calls += 1
                await asyncio.sleep(self.every)
        finally:
            reference.disconnect()
            await client.aclose()

    def __enter__(self) -> Probe:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=60)


def long_history(sb: Sandbox, name: str, row: str, timeout: float = 60) -> bool:
    """bob's session name, made with columns for row, with 20 000 rows of it in its history;
    whether the screen showed the whole printed."""
    made = bob(sb, "create", name, json.dumps({"columns": ["q", len(row) + 1]}), "/tmp")
    assert "ok" in made, made
    sock = f"/run/hostagent/{sb.uid('bob')}/{name}.sock"
    printer = f'python3 -c \'print(("{row}" + "\\n") * 20000, end=""); print("printed")\''
    sb.run(
        "tmux",
        "-S",
        sock,
        "set",
        "-g",
        "history-limit",
        "30000",
        ";",
        "new-window",
        f"{printer}; sleep 3600",
        user="bob",
    ).check()
    return bool(sb.screen_showing(name, "printed", user="bob", timeout=timeout))


def bobs(sb: Sandbox, name: str, *extra: str) -> str:
    return create(sb, "shell", *extra, user="bob", name=name)
