"""One run of the daemon, in named phases: startup, serve, shutdown.

startup connects to systemd, prepares the store, assembles the core (core.py), recovers every
session, exports the bus objects and takes the bus name; serve announces READY=1 and runs the
core's loops and the daemon's own (STATUS=, the state directory, the watchdog) until SIGTERM or
the bus's loss; shutdown says STOPPING=1, ends the loops and flushes the records. While
hostagent.yaml is broken the daemon refuses calls instead (misconfigured.py) until a reload
finds it good, then starts up.

Sessions are not the daemon's children: a stop (or a crash) ends the daemon and leaves every
scope running; the next start adopts them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import signal
from pathlib import Path
from typing import Any

import sdnotify
from dbus_fast import BusType, Message, RequestNameReply
from dbus_fast.aio import MessageBus

from hostagent import BUS_NAME, __version__
from hostagent import log as logsetup
from hostagent.bus.call import DBUS
from hostagent.bus.compat import pace_writes
from hostagent.config import Config, config_paths, load_config
from hostagent.daemon.bus.auth import Authorizer
from hostagent.daemon.bus.export import Exporter
from hostagent.daemon.bus.intake import Intake
from hostagent.daemon.bus.placement import Placement, now, read_opener
from hostagent.daemon.core import Core
from hostagent.daemon.host.confine import Confiner
from hostagent.daemon.host.inside import Insides, exec_inside
from hostagent.daemon.host.owner import Helpers
from hostagent.daemon.host.owners import Owners
from hostagent.daemon.host.scope import Scopes, unit_in_cgroup
from hostagent.daemon.host.systemd import Systemd
from hostagent.daemon.host.tmux import Tmux
from hostagent.daemon.host.worktree import Worktrees
from hostagent.daemon.misconfigured import Misconfigured
from hostagent.daemon.process import end_tasks
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.daemon.state.store import SidecarStore
from hostagent.errors import InvalidArgs
from hostagent.presets import Preset, load_presets, preset_dirs
from hostagent.yamlfile import SettingsError

log = logging.getLogger("hostagent")

STATUS_INTERVAL = 0.5  # seconds between two STATUS= updates at most
STOP_FLUSH_TIMEOUT = 5.0  # seconds a stop waits for the records' fsync
STATE_CHECK_SEC = 30.0  # how soon a record removed under the daemon is written again
NAME_TIMEOUT = 10.0  # seconds a start waits for the bus name a previous daemon held


def state_dir(system: bool) -> Path:
    if system:
        return Path(os.environ.get("STATE_DIRECTORY", "/var/lib/hostagent").split(":")[0])
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "hostagent"


def runtime_root(system: bool) -> Path:
    if system:
        return Path(os.environ.get("RUNTIME_DIRECTORY", "/run/hostagent").split(":")[0])
    xdg = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.getuid()}"
    return Path(xdg) / "hostagent"


def read_boot_id() -> str:
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip().replace("-", "")


class StatusLine:
    """A registry listener that wakes the STATUS= loop on every change."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()

    def session_added(self, session: Session) -> None:
        self.changed.set()

    def session_removed(self, session: Session) -> None:
        self.changed.set()

    def session_changed(self, session: Session) -> None:
        self.changed.set()


class Server:
    """One run of the daemon on one bus."""

    def __init__(self, system: bool) -> None:
        self.system = system
        self.notifier = sdnotify.SystemdNotifier()
        self.core: Core | None = None
        self.status = StatusLine()
        self.to_resume: list[str] = []
        self.tasks: list[asyncio.Task[None]] = []
        self.misconfigured: Misconfigured[tuple[Config, dict[str, Preset]]] | None = None

    def load_settings(self, strict: bool) -> tuple[Config, dict[str, Preset]]:
        config = load_config(config_paths(self.system))
        presets = load_presets(preset_dirs(self.system), strict=strict)
        return config, presets

    def reload(self) -> None:
        """Re-read config and presets; on any error keep the last good ones and say why."""
        assert self.core is not None
        try:
            config, presets = self.load_settings(strict=True)
        except SettingsError as e:
            log.error("Failed to reload, keeping the last good configuration: %s", e)
            raise InvalidArgs(f"Configuration not reloaded: {e}") from None
        self.core.settings.replace(config, presets)

    async def run(self) -> int:
        """The daemon's one run: startup, serve until SIGTERM or the bus goes, shutdown."""
        bus_type = BusType.SYSTEM if self.system else BusType.SESSION
        bus = await MessageBus(bus_type=bus_type, negotiate_unix_fd=True).connect()
        intake = Intake.guard(bus)
        if not pace_writes(bus):
            log.warning("This dbus-fast keeps its writer elsewhere; a burst may drop the bus")
        stop = self._handle_signals()
        settings = await self._settings(bus, stop)
        if settings is None:
            return 0
        if not await self.startup(bus, intake, settings):
            return 1
        lost = await self.serve(bus, stop)
        return await self.shutdown(bus, lost)

    def _handle_signals(self) -> asyncio.Future[None]:
        """SIGTERM and SIGINT end serve; SIGHUP reloads; the watchdog is fed if asked for.
        The future that a stop sets."""
        loop = asyncio.get_running_loop()
        stop: asyncio.Future[None] = loop.create_future()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, _finish, stop)
        loop.add_signal_handler(signal.SIGHUP, self._reload_quietly)
        watchdog = int(os.environ.get("WATCHDOG_USEC", "0") or 0)
        if watchdog and os.environ.get("WATCHDOG_PID", str(os.getpid())) == str(os.getpid()):
            self.tasks.append(loop.create_task(self._watchdog(watchdog / 2e6)))
        return stop

    async def startup(
        self, bus: MessageBus, intake: Intake, settings: tuple[Config, dict[str, Preset]]
    ) -> bool:
        """systemd, the store and the core; recovery; the bus objects exported and the name
        taken. Nothing is served before recovery has looked at every record. False when the
        name is another daemon's."""
        config, presets = settings
        systemd = Systemd(bus)
        store = SidecarStore(state_dir(self.system), runtime_root(self.system) / "records")
        store.prepare()
        # Every process run for a user goes through these; a user's own code (a login shell,
        # git) goes into a scope under her slice on the system daemon (the lifecycle's, made
        # below: no helper runs before recovery).
        confiner = Confiner(systemd, lambda uid: core.lifecycle.owner_slice(uid))
        helpers = Helpers(confiner if self.system else None)
        # The daemon's tmux clients run inside their sessions (host/enclosure.py).
        # The record it asks is the core's, made below; nothing is entered before recovery.
        insides = Insides(systemd, lambda name: _leader(core.registry, name))
        tmux = Tmux(helpers.run, functools.partial(exec_inside, helpers), insides.locate)
        self.core = core = Core.assemble(
            scopes=Scopes(systemd, tmux, helpers.forker),
            owners=Owners(self.system, helpers),
            worktrees=Worktrees(helpers),
            store=store,
            settings=Settings(config, presets),
            runtime_root=runtime_root(self.system),
            system=self.system,
            boot_id=read_boot_id(),
        )
        await systemd.connect(core.reconciler)
        core.registry.listeners.append(self.status)
        logsetup.set_session_fields(lambda name: _journal_fields(core.registry, name))
        report = await core.recover()
        log.info("%s", report.summary(config.recovery_policy.value))
        self.to_resume = report.to_resume
        exporter = Exporter(bus, systemd.sends)
        # A call too big for its method is refused from its header alone (bus/intake.py).
        intake.limit(exporter.largest, exporter.refuse)
        auth = Authorizer(bus, use_polkit=self.system)
        placement = Placement(bus, auth.caller_process, read_opener, now, unit_in_cgroup)
        frontend = core.front(auth, placement, exporter, self.reload)
        frontend.export_all()
        # A daemon that refused calls while its file was broken owns its name already.
        named = self.misconfigured is not None
        if self.misconfigured is not None:
            self.misconfigured.close()
        await exporter.follow_callers()
        await placement.follow()
        if not named and not await _own_name(bus):
            log.error("Failed to own %s: it is taken; is another hostagent running?", BUS_NAME)
            return False
        log.info(
            "hostagent %s serving %s on the %s bus",
            __version__,
            BUS_NAME,
            "system" if self.system else "session",
        )
        if self.misconfigured is not None:
            self.misconfigured.answer_reload()
            self.misconfigured = None
        return True

    async def _settings(
        self, bus: MessageBus, stop: asyncio.Future[None]
    ) -> tuple[Config, dict[str, Preset]] | None:
        """The configuration and presets; while hostagent.yaml is broken, refuse every call
        until a reload finds it good (hostagent.daemon.misconfigured says why the daemon does
        not exit). None if the daemon is stopped before that."""
        try:
            return self.load_settings(strict=False)
        except SettingsError as e:
            log.error("Failed to load configuration, refusing every call until it is fixed: %s", e)
            refusing = Misconfigured(
                bus,
                e,
                lambda: self.load_settings(strict=False),
                Authorizer(bus, use_polkit=self.system),
                os.getuid(),
                self.system,
                lambda status: self.notify(f"STATUS={status}"),
            )
        self.misconfigured = refusing
        if not await _own_name(bus):
            log.error("Failed to own %s: it is taken; is another hostagent running?", BUS_NAME)
            return None
        self.notify(f"READY=1\nSTATUS={refusing.status}")
        disconnected = _disconnection(bus)
        ends: list[asyncio.Future[Any]] = [refusing.fixed, stop, disconnected]
        await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
        if not refusing.fixed.done():
            refusing.close()
            return None
        return refusing.fixed.result()

    async def serve(self, bus: MessageBus, stop: asyncio.Future[None]) -> bool:
        """READY=1, then the core's loops and the daemon's own until a stop or the bus's
        loss; True when the bus was lost."""
        assert self.core is not None
        core = self.core
        loop = asyncio.get_running_loop()
        self.notify(f"READY=1\nSTATUS={core.registry.status_line()}")
        self.tasks += [loop.create_task(work) for work in core.loops()]
        self.tasks.append(loop.create_task(self._status_loop()))
        self.tasks.append(loop.create_task(self._keep_state_directory()))
        if self.to_resume:
            cfg = core.settings.config
            self.tasks.append(
                loop.create_task(
                    core.resume_dormant(
                        self.to_resume, cfg.recovery_max_parallel, cfg.recovery_stagger_sec
                    )
                )
            )
        disconnected = _disconnection(bus)
        await asyncio.wait([stop, disconnected], return_when=asyncio.FIRST_COMPLETED)
        return disconnected.done()

    async def shutdown(self, bus: MessageBus, lost: bool) -> int:
        """STOPPING=1: the loops cancelled, the records flushed (within a bound), the bus
        left. Sessions keep running in their scopes. The exit status."""
        assert self.core is not None
        self.notify("STOPPING=1")
        log.info("Stopping; sessions keep running in their scopes")
        self.core.usage.close()  # a follow-up reading due later is the next daemon's to make
        for t in self.tasks:
            t.cancel()
        self.core.registry.write_unsaved()  # a change written soon, or not yet written
        self.core.registry.store.check()  # a record lost under the daemon: written from memory
        if not self.core.registry.store.flush(timeout=STOP_FLUSH_TIMEOUT):
            log.warning("Stopping before the disk confirmed the last records; the kernel has them")
        if lost:
            log.error("Lost the bus connection")
        else:
            bus.disconnect()
        await end_tasks()
        return 1 if lost else 0

    def _reload_quietly(self) -> None:
        if self.misconfigured is not None:
            self.misconfigured.retry()
            return
        if self.core is None:
            return  # still starting: the files it reads are the new ones
        try:
            self.reload()
        except Exception as e:  # SIGHUP has no caller to answer
            log.error("Reload on SIGHUP failed: %s", e)

    def notify(self, text: str) -> None:
        self.notifier.notify(text)

    async def _status_loop(self) -> None:
        """Refresh STATUS= when the counts change; woken by the registry, not by polling.

        Each STATUS= costs systemd a PropertiesChanged of its own, at the moment it is busy
        starting the scope of the create that changed the counts. So after each update the
        loop rests STATUS_INTERVAL, and a burst of changes becomes one line."""
        assert self.core is not None
        last = ""
        while True:
            await self.status.changed.wait()
            self.status.changed.clear()
            line = self.core.registry.status_line()
            if line != last:
                self.notify(f"STATUS={line}")
                last = line
                await asyncio.sleep(STATUS_INTERVAL)

    async def _keep_state_directory(self) -> None:
        """A state directory, a record, a copy or the copies' directory removed or changed
        under the daemon is written again from memory within STATE_CHECK_SEC, even while
        nothing changes (a stat of each)."""
        assert self.core is not None
        while True:
            await asyncio.sleep(STATE_CHECK_SEC)
            self.core.registry.store.check()

    async def _watchdog(self, interval: float) -> None:
        while True:
            self.notify("WATCHDOG=1")
            await asyncio.sleep(interval)


async def _own_name(bus: MessageBus) -> bool:
    """Own BUS_NAME. On a restart the previous daemon has exited, but the bus may not have
    noticed its connection close yet: a request queued behind it is granted a moment later."""
    acquired = asyncio.get_running_loop().create_future()

    def on_message(msg: Message) -> None:
        ours = msg.member == "NameAcquired" and msg.sender == DBUS and msg.body == [BUS_NAME]
        if ours and not acquired.done():
            acquired.set_result(None)

    bus.add_message_handler(on_message)
    try:
        reply = await bus.request_name(BUS_NAME)
        if reply in (RequestNameReply.PRIMARY_OWNER, RequestNameReply.ALREADY_OWNER):
            return True
        if reply is not RequestNameReply.IN_QUEUE:
            return False
        log.info("Waiting for %s to be released by the previous owner", BUS_NAME)
        try:
            await asyncio.wait_for(acquired, NAME_TIMEOUT)
        except TimeoutError:
            return False
        return True
    finally:
        bus.remove_message_handler(on_message)


def _finish(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _leader(registry: Registry, name: str) -> tuple[str, int] | None:
    """The unit and tmux server pid that session name's record has, if it is known."""
    session = registry.sessions.get(name)
    return None if session is None else (session.record.unit, session.record.leader_pid)


def _journal_fields(registry: Registry, name: str) -> dict[str, str]:
    """What the journal lines about session name carry besides its name: its owner and
    conversation, so journalctl can select them (log.py asks)."""
    session = registry.sessions.get(name)
    if session is None:
        return {}
    fields = {"HOSTAGENT_OWNER_UID": str(session.record.owner)}
    if session.record.agent_session:
        fields["HOSTAGENT_AGENT_SESSION"] = session.record.agent_session
    return fields


def _disconnection(bus: MessageBus) -> asyncio.Future[Any]:
    """A future done when the bus connection ends. How it ended (an error, when the bus went
    away) is taken by the caller that looks, or dropped: never "exception was never
    retrieved" in the journal at a stop."""
    ended = asyncio.ensure_future(bus.wait_for_disconnect())  # type: ignore[no-untyped-call]
    ended.add_done_callback(lambda f: f.cancelled() or f.exception())
    return ended
