"""Small fakes at the daemon's edges, for the fast layer: a systemd that keeps its units in
memory and sends the signals a real manager sends, the scope runner on top of it, and a tmux
whose screens a test scripts. Everything above the edges (registry, lifecycle, reconcile,
recovery, terminal, the bus objects) is the real code, assembled by ``Core.assemble``.

A test can park one side of a race at a chosen point: ``FakeScopes.gate`` holds every scope
start until the test opens it, the way the sandbox's checkpoints park the real daemon.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dbus_fast.aio import MessageBus

from hostagent.activity import Verdict
from hostagent.config import Config
from hostagent.daemon.bus.export import Exporter
from hostagent.daemon.bus.placement import Opener, Placement
from hostagent.daemon.core import Core
from hostagent.daemon.host import agents
from hostagent.daemon.host.heldchild import HeldChild
from hostagent.daemon.host.owner import DEFAULT_PATH, Helpers
from hostagent.daemon.host.owners import Owners
from hostagent.daemon.host.procfs import Process
from hostagent.daemon.host.scope import Begun, Started, StartPlan, unit_in_cgroup
from hostagent.daemon.host.systemd import UnitEvents, UnitInfo
from hostagent.daemon.host.tmux import TmuxError
from hostagent.daemon.host.worktree import Worktrees
from hostagent.daemon.state.asking import Asking
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.paths import SessionPaths
from hostagent.daemon.state.settings import Settings
from hostagent.daemon.state.store import SidecarStore
from hostagent.errors import NotRunning, SpawnFailed
from hostagent.identity import Owner
from hostagent.options import CreateRequest
from hostagent.presets import IdSource, Preset
from hostagent.profile import AgentProfile
from hostagent.session import Limits, SessionRecord, now_usec

_PIDS = itertools.count(40000)


@dataclass
class FakeUnit:
    name: str
    state: str = "active"
    invocation: str = field(default_factory=lambda: uuid.uuid4().hex)
    leader: int = field(default_factory=lambda: next(_PIDS))
    leader_alive: bool = True
    limits: Limits | None = None
    user_caps: Limits | None = None  # its owner's slice's caps (system daemon), else None
    signals: list[tuple[str, int]] = field(default_factory=list)


class FakeSystemd:
    """The part of the systemd client the daemon's core uses, over units kept in memory."""

    def __init__(self) -> None:
        self.units: dict[str, FakeUnit] = {}
        # Whom a unit's change is told, as the real client's connect is given; None while
        # the daemon is gone (a test stops listening).
        self.events: UnitEvents | None = None
        self.stopped: list[str] = []  # units the daemon asked to stop
        self.after_list: Callable[[], None] = lambda: None
        self.stopping = False  # the manager is going down
        self.started = 0  # the manager's start (µs); 0 as when systemd cannot say

    def end(self, unit: str, state: str = "") -> None:
        """The unit's processes are gone; systemd unloads it ("") or keeps it failed, and
        says so on the bus."""
        u = self.units.get(unit)
        if u is not None:
            u.leader_alive = False
            if state:
                u.state = state
            else:
                del self.units[unit]
        self.on_unit(unit, state)

    def on_unit(self, unit: str, state: str) -> None:
        """systemd's signal of a unit's ActiveState, as the daemon hears it."""
        if self.events is not None:
            self.events.on_unit(unit, state)

    async def active_state(self, unit: str) -> str:
        u = self.units.get(unit)
        return u.state if u else ""

    async def list_units(self, pattern: str) -> list[UnitInfo]:
        listed = [UnitInfo(u.name, u.state) for u in self.units.values()]
        self.after_list()
        return listed

    async def invocation_id(self, unit: str) -> str:
        u = self.units.get(unit)
        return u.invocation if u else ""

    async def unit_pids(self, unit: str) -> list[int]:
        u = self.units.get(unit)
        return [u.leader] if u and u.leader_alive else []

    async def stop_unit(self, unit: str) -> str | None:
        self.stopped.append(unit)
        if unit not in self.units:
            return None
        self.end(unit)
        return f"/job/{len(self.stopped)}"

    async def unit_property(self, unit: str, interface: str, name: str) -> Any:
        if name == "ControlGroup":
            return None  # no cgroup files: the counters below are asked of this manager
        return 4096 if unit in self.units else None

    async def shutting_down(self) -> bool:
        return self.stopping

    async def started_usec(self) -> int:
        return self.started


class FakeTmux:
    """Scripted screens, one per session socket."""

    def __init__(self, systemd: FakeSystemd) -> None:
        self.systemd = systemd
        self.screens: dict[str, tuple[str, str]] = {}  # session name -> (screen, title)
        self.coloured: dict[str, str] = {}  # session name -> its screen with its colours
        self.typed: list[tuple[str, str, bool]] = []
        self.pressed: list[tuple[str, tuple[str, ...]]] = []  # (session name, keys)
        self.ended: dict[str, tuple[int | None, int | None]] = {}  # name -> (status, signal)
        self.on_server_pid: Callable[[str], None] = lambda name: None
        self.capture_gate: asyncio.Event | None = None  # set: captures wait for it

    @staticmethod
    def _name(sock: Path) -> str:
        # a session's own directory holds its socket; an older hostagent's socket is NAME.sock
        if sock.name == "tmux.sock":
            return sock.parent.name.removesuffix(".d")
        return sock.name.removesuffix(".sock")

    def _unit(self, sock: Path) -> FakeUnit:
        u = self.systemd.units.get(f"hostagent-{self._name(sock)}.scope")
        if u is None or not u.leader_alive:
            raise TmuxError(f"no server running on {sock}")
        return u

    async def server_pid(self, owner: Owner, sock: Path) -> int:
        self.on_server_pid(self._name(sock))
        return self._unit(sock).leader

    async def pane_pid(self, owner: Owner, sock: Path) -> int:
        return self._unit(sock).leader + 1

    async def pane_end(self, owner: Owner, sock: Path) -> tuple[bool, int | None, int | None]:
        self._unit(sock)
        end = self.ended.get(self._name(sock))
        return (False, None, None) if end is None else (True, *end)

    async def capture(self, owner: Owner, sock: Path, scrollback: int, limit: int = 0) -> str:
        self._unit(sock)
        if self.capture_gate is not None:
            await self.capture_gate.wait()
        return self.screens.get(self._name(sock), ("", ""))[0]

    async def capture_to(self, owner: Owner, sock: Path, scrollback: int, fd: int) -> None:
        os.write(fd, (await self.capture(owner, sock, scrollback)).encode())

    async def coloured_screen(self, owner: Owner, sock: Path) -> str:
        """The screen with its colours: what the test set in coloured, else the plain one."""
        name = self._name(sock)
        return self.coloured.get(name) or self.screens.get(name, ("", ""))[0]

    async def screen_and_title(self, owner: Owner, sock: Path) -> tuple[str, str, str]:
        self._unit(sock)
        screen, title = self.screens.get(self._name(sock), ("", ""))
        return screen, title, ""

    async def pipe_output(self, owner: Owner, sock: Path, fifo: Path) -> tuple[str, str, str]:
        return await self.screen_and_title(owner, sock)

    async def send_keys(self, owner: Owner, sock: Path, keys: tuple[str, ...]) -> None:
        self._unit(sock)
        self.pressed.append((self._name(sock), keys))

    async def send_text(self, owner: Owner, sock: Path, text: str, enter: bool) -> None:
        self._unit(sock)
        self.typed.append((self._name(sock), text, enter))


class _NoChild(HeldChild):
    """A fake start's child: none is forked."""

    def __init__(self) -> None:
        pass


class FakeScopes:
    """The scope runner over FakeSystemd: a start makes a unit whose leader lives."""

    def __init__(self) -> None:
        self.systemd = FakeSystemd()
        self.tmux = FakeTmux(self.systemd)
        self.launched: list[list[str]] = []  # every argv a scope was started with
        self.plans: list[StartPlan] = []  # every start's plan, in order
        self.slices: dict[str, Limits] = {}  # each user slice's caps
        self.fail_with = ""  # the next start fails with this message
        self.crash_with: BaseException | None = None  # the next start raises this, unforeseen
        self.gate: asyncio.Event | None = None  # when set up, starts wait for it
        self.parked = asyncio.Event()  # set while a start waits at the gate
        self.gate_before_job = False  # the gate holds starts before systemd takes their job
        self.cgroups: dict[int, str | None] = {}  # the scope a pid is in, as /proc would say
        # What a stop does instead of systemd's (a refusal, a disk that fills meanwhile).
        self.stop_with: Callable[[str, float], Awaitable[None]] | None = None

    async def capped_slice(self, uid: int, caps: Limits) -> str:
        self.slices[f"hostagent-u{uid}.slice"] = caps
        return f"hostagent-u{uid}.slice"

    async def begin(
        self, record: SessionRecord, owner: Owner, paths: SessionPaths, plan: StartPlan
    ) -> Begun:
        self.plans.append(plan)
        if self.crash_with is not None:
            error, self.crash_with = self.crash_with, None
            raise error
        if self.fail_with:  # refused before systemd took a job (a bad cwd, no fork)
            message, self.fail_with = self.fail_with, ""
            raise SpawnFailed(message)
        if self.gate_before_job:
            await self._at_gate()
        # systemd has taken the job; the start is under way
        caps = self.slices.get(plan.slice)
        self.systemd.units[record.unit] = FakeUnit(record.unit, limits=plan.limits, user_caps=caps)
        return Begun(record.unit, _NoChild(), "job")

    async def abandon(self, begun: Begun) -> None:
        self.systemd.units.pop(begun.unit, None)

    async def release(self, record: SessionRecord, begun: Begun) -> Started:
        if not self.gate_before_job:
            await self._at_gate()
        unit = self.systemd.units[record.unit]
        self.launched.append(list(record.last_argv))
        return Started(unit.leader, unit.invocation, now_usec())

    async def _at_gate(self) -> None:
        if self.gate is not None:
            self.parked.set()
            await self.gate.wait()

    def open_gate(self) -> None:
        """Let the starts held at the gate go on."""
        assert self.gate is not None, "no start is held: set up gate first"
        self.gate.set()

    async def stop(self, unit: str, timeout: float) -> None:
        if self.stop_with is not None:
            await self.stop_with(unit, timeout)
            return
        await self.systemd.stop_unit(unit)

    async def stop_as_systemd_does(self, unit: str, timeout: float) -> None:
        """The stop systemd makes, whatever stop_with says instead."""
        await self.systemd.stop_unit(unit)

    async def kill(
        self, record: SessionRecord, owner: Owner, sock: Path, whom: str, signal: int
    ) -> None:
        u = self.systemd.units.get(record.unit)
        if u is None:
            raise NotRunning(f"Session '{record.name}' cannot be signalled")
        u.signals.append((whom, signal))

    def unit_of_pid(self, pid: int) -> str | None:
        if pid in self.cgroups:
            return self.cgroups[pid]
        return next((u.name for u in self.systemd.units.values() if u.leader == pid), None)

    async def agent_pid(self, owner: Owner, sock: Path, leader: int) -> int:
        return await self.tmux.pane_pid(owner, sock)  # fake sessions share one PID namespace

    def ns_pid(self, pid: int) -> int:
        return pid

    def numbered_among(self, pids: list[int], number: int) -> int:
        return number if number in pids else 0

    def leader_alive_in(self, unit: str, pid: int) -> bool:
        u = self.systemd.units.get(unit)
        return u is not None and u.leader_alive and u.leader == pid and pid > 0

    def follow_process(self, pid: int, on_exit: Callable[[], None]) -> Callable[[], None] | None:
        return lambda: None  # fake pids belong to nobody here

    def exit_status_of(self, pid: int) -> int | None:
        return None

    def process(self, pid: int) -> Process | None:
        """A unit's leader is a tmux server of the current user's."""
        unit = self.unit_of_pid(pid)
        proc = Process(pid, 1, "tmux: server", "", False, ["tmux", "-S", "x"], "/", os.getuid())
        return proc if unit else None


SHELL = Preset(name="shell", command=["/bin/sh"])
ASSIGNED = Preset(
    name="assigned",
    command=["agent"],
    id_source=IdSource.ASSIGNED,
    assign_args=["--session-id", "{id}"],
    resume_args=["--resume", "{id}"],
)


Answer = Callable[[list[str]], tuple[int, bytes, bytes] | None]


class FakeOwners:
    """Running things as the owner, for a unit test's owner (the current user): the
    environment and the cwd check as the daemon makes them, programs found at once (they need
    not exist), and helpers run for real unless a test scripts their answer."""

    def __init__(self, system: bool, helpers: Helpers) -> None:
        self.real = Owners(system, helpers)
        self.program_lookups = 0  # programs looked for with the owner's login shell
        self.ran: list[list[str]] = []  # every helper's argv, in order
        # A scripted answer for a helper, by a part of its argv (a script's text, a program).
        self.answers: dict[str, Answer] = {}

    def environment(
        self, owner: Owner, preset_env: dict[str, str], caller_env: dict[str, str]
    ) -> dict[str, str]:
        return self.real.environment(owner, preset_env, caller_env)

    def prepare_runtime_dir(self, paths: SessionPaths, name: str, owner: Owner) -> None:
        self.real.prepare_runtime_dir(paths, name, owner)

    async def check_cwd(self, owner: Owner, cwd: str) -> str | None:
        return await self.real.check_cwd(owner, cwd)

    async def resolve(self, owner: Owner, paths: list[str]) -> dict[str, str] | None:
        return await self.real.resolve(owner, paths)

    async def find_program(self, owner: Owner, program: str) -> agents.Found:
        self.program_lookups += 1
        return agents.Found(program, DEFAULT_PATH)

    async def program_problem(self, owner: Owner, program: str, path: str) -> str | None:
        self.program_lookups += 1
        return None

    async def installed(
        self, owner: Owner, programs: dict[str, str]
    ) -> dict[str, tuple[str, str, str]]:
        return await self.real.installed(owner, programs)

    async def run(
        self,
        owner: Owner,
        argv: list[str],
        timeout: float = 10.0,
        env: dict[str, str] | None = None,
        runs_user_code: str = "",
        limit: int = 0,
    ) -> tuple[int, bytes, bytes] | None:
        self.ran.append(list(argv))
        for part, answer in self.answers.items():
            if any(part in arg for arg in argv):
                return answer(argv)
        return await self.real.run(owner, argv, timeout, env, runs_user_code, limit)


class Host:
    """A daemon core on fakes, with its state directory in tmp."""

    def __init__(
        self,
        tmp: Path,
        config: Config | None = None,
        boot_id: str = "boot1",
        system: bool = False,
        profile: bool = False,
    ) -> None:
        self.tmp = tmp
        self.scopes = FakeScopes()
        self.helpers = Helpers()  # the real helpers run as the current user
        self.owners = FakeOwners(system, self.helpers)
        self.systemd = self.scopes.systemd
        tmp.mkdir(parents=True, exist_ok=True)
        self.store = SidecarStore(tmp / "state")
        self.store.prepare()
        self.config = config or Config()
        if not profile:  # the fakes' sessions are not confined unless a test asks for that
            self.config.sandbox.agents = AgentProfile(words=[])
        self.core = Core.assemble(
            scopes=self.scopes,
            owners=self.owners,
            worktrees=Worktrees(self.helpers),
            store=self.store,
            settings=Settings(self.config, {"shell": SHELL, "assigned": ASSIGNED}),
            runtime_root=tmp / "run",
            system=system,
            boot_id=boot_id,
        )
        self.systemd.events = self.core.reconciler  # as the server's connect does
        self.registry = self.core.registry
        self.lifecycle = self.core.lifecycle
        self.events: list[tuple[str, str, str]] = []  # (what, name, state) as listeners saw
        self.exporter: Exporter | None = None  # the real exporter, where a test serves a bus
        self.registry.listeners.append(self)

    @classmethod
    async def started(
        cls, tmp: Path, config: Config | None = None, system: bool = False, profile: bool = False
    ) -> Host:
        """A daemon that has recovered (from an empty store) and follows unit signals."""
        host = cls(tmp, config, system=system, profile=profile)
        await host.core.recover()
        await host.core.look_for_ended()
        return host

    def restart(self, boot_id: str = "boot1") -> Host:
        """A new daemon over the same state directory and the same systemd."""
        again = Host.__new__(Host)
        Host.__init__(again, self.tmp, self.config, boot_id, profile=True)
        again.scopes.systemd = again.systemd = self.systemd
        again.scopes.tmux.systemd = self.systemd
        again.systemd.events = again.core.reconciler  # the old core's no longer
        return again

    async def create(
        self,
        owner: int,
        name: str,
        preset: str,
        cwd: str,
        req: CreateRequest,
        exempt: bool = False,
    ) -> Session:
        """A create as the bus makes one: admitted, then created from its admission."""
        admission = self.lifecycle.admit(owner, name, preset, req.limits, exempt)
        return await self.lifecycle.create(admission, cwd, req)

    # Listener
    def session_added(self, session: Session) -> None:
        self.events.append(("added", session.name, session.record.state.value))

    def session_removed(self, session: Session) -> None:
        self.events.append(("removed", session.name, session.record.state.value))

    def session_changed(self, session: Session) -> None:
        self.events.append(("changed", session.name, session.record.state.value))

    def on_disk(self, name: str) -> str | None:
        """The state the record on disk says, or None when there is none."""
        self.store.flush()
        records = {r.name: r for r in SidecarStore(self.store.directory).load_all()}
        record = records.get(name)
        return record.state.value if record else None

    async def settle(self) -> None:
        """Let the queued reconciles (and whatever else runs in the background) end."""
        await self.core.background.settle()


def run(coro: Coroutine[Any, Any, None]) -> None:
    """Run one test body on a fresh event loop, as the daemon runs on one."""
    asyncio.run(asyncio.wait_for(coro, 10))


def me() -> int:
    return os.getuid()


class FakeExporter:
    """The exporter's side the bus objects use, with nothing exported: handlers called
    directly by a test reply to no one."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, str, str]] = []  # (path, interface, member)

    def export(self, path: str, interface: Any, target: Any) -> None:
        pass

    def unexport(self, path: str) -> None:
        pass

    def emit(self, path: str, interface: str, member: str, signature: str, body: list[Any]) -> None:
        self.emitted.append((path, interface, member))

    def emit_changed(self, path: str, interface: str, changed: dict[str, Any]) -> None:
        if changed:
            self.emitted.append((path, interface, "PropertiesChanged"))


class ShownWatch:
    """A pane watch that shows whatever verdict the test sets (session.watch)."""

    def __init__(self) -> None:
        self.verdict: Verdict | None = None
        self.last_screen = ""
        self.asking = Asking()
        self.looks_again: list[float] = []
        self.closed = False

    def look_again(self, delay: float) -> None:
        self.looks_again.append(delay)

    def report_hook(self, verdict: Verdict) -> None:
        pass

    def expect_hook(self, grace: float) -> None:
        self.asking.expecting = True

    def hook_asks_not(self) -> None:
        self.asking.expecting = False

    async def look_now(self) -> None:
        pass

    def close(self) -> None:
        pass


def placed(bus: MessageBus, units: dict[str, str]) -> Placement:
    """A placement that already knows where each caller is (a unit, or "" outside every
    session), as its first call would have found; any other caller cannot be placed."""

    async def nothing(sender: str) -> Opener:
        return Opener(pidfd=-2)  # never read: the read below finds nothing

    placement = Placement(bus, nothing, lambda process: None, lambda: 0, unit_in_cgroup)
    placement._units.update(units)
    return placement
