"""Running one session's scope: start it race-free, stop it, signal it, and read its cgroup.

This is the I/O of a session's start (docs/architecture.md, "Creating a session") with no
registry and no locking: the lifecycle calls it under the session's lock and applies the result
to the record. ``Scopes`` is the seam where fast tests put a scripted systemd.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shlex
import signal as signals
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dbus_fast import Variant

from hostagent import resources, sandbox
from hostagent.config import LIMIT_PROPERTIES, USER_CAP_KEYS
from hostagent.daemon.host import checkpoint, namespace, procfs, tmux
from hostagent.daemon.host.forking import Forker
from hostagent.daemon.host.heldchild import HeldChild
from hostagent.daemon.host.procfs import Process
from hostagent.daemon.host.runtimedir import write_file
from hostagent.daemon.host.systemd import Systemd, SystemdError, UnitExists
from hostagent.daemon.state.paths import PANE_DIED, SessionPaths, hooks_fifo
from hostagent.errors import InvalidArgs, NotRunning, SpawnFailed, StopFailed
from hostagent.identity import Owner
from hostagent.session import Limits, SessionRecord, boot_usec, name_from_unit, now_usec
from hostagent.values import INFINITY

log = logging.getLogger(__name__)

JOB_TIMEOUT = 60.0
RELEASE_TIMEOUT = 30.0  # for tmux to start once let go; a stopped or stuck child is killed
SLICE = "hostagent.slice"
NO_LIMIT = INFINITY  # systemd's "infinity" and "not set"
# tmux hands a new session's command to its server in one message of at most 16 KiB, with
# the other options; a longer command line goes through a script (launch_argv).
TMUX_COMMAND_MAX = 8192


def user_slice(uid: int) -> str:
    """Where one user's sessions go on the system daemon: a slice under hostagent.slice that
    carries the per-user caps."""
    return f"hostagent-u{uid}.slice"


def slice_properties(uid: int, caps: Limits) -> list[tuple[str, Variant]]:
    """A user slice's properties; an unset cap is written as infinity, so a cap the admin
    took away is lifted, not kept from before."""
    props = [("Description", Variant("s", f"hostagent sessions of user {uid}"))]
    for key in USER_CAP_KEYS:
        props.append((LIMIT_PROPERTIES[key], Variant("t", getattr(caps, key) or NO_LIMIT)))
    return props


@dataclass(frozen=True)
class StartPlan:
    """What a start of a session's scope is given, all of it decided before (ops/spawn.py):
    the complete environment, the limits, the stop timeout, the slice it goes into, the FIFO
    its output is copied into (None for none), and the sandbox its held child makes (None for
    none)."""

    env: dict[str, str]
    limits: Limits
    stop_timeout: int
    slice: str = SLICE
    output: Path | None = None
    sandbox: namespace.Plan | None = None


@dataclass(frozen=True)
class Begun:
    """A start under way (Scopes.begin): the held child in the unit whose start job is job
    ("" when an earlier try's holds it); own_pids when the session numbers its own pids."""

    unit: str
    child: HeldChild
    job: str
    own_pids: bool = False


@dataclass(frozen=True)
class Started:
    leader_pid: int
    invocation_id: str
    started_at: int
    pane_pid: int = 0  # the agent's process, as tmux started it
    started_boottime: int = 0


def own_unit(cgroup: str) -> str:
    """The service a process runs in, from its cgroup path (procfs.cgroup_path); "" outside
    one (a daemon started by hand, or a test)."""
    name = cgroup.rpartition("/")[2]
    return name if name.endswith(".service") else ""


def scope_properties(
    record: SessionRecord,
    limits: Limits,
    stop_timeout: int,
    slice_: str = SLICE,
    daemon_unit: str = "",
) -> list[tuple[str, Variant]]:
    props = [
        ("Description", Variant("s", f"hostagent session {record.name} ({record.preset})")),
        ("Slice", Variant("s", slice_)),
        ("CollectMode", Variant("s", "inactive-or-failed")),
        ("SendSIGHUP", Variant("b", True)),
        ("TimeoutStopUSec", Variant("t", stop_timeout * 1_000_000)),
    ]
    if daemon_unit:
        # When the machine shuts down (or a user manager ends), the daemon is stopped before
        # any session, so it never hears a session end that is really the shutdown and never
        # records it as stopped: after the reboot recovery finds it running and makes it dormant.
        props.append(("Before", Variant("as", [daemon_unit])))
    for key, prop in LIMIT_PROPERTIES.items():
        value = getattr(limits, key)
        if value and key == "runtime_max_sec":
            # systemd takes microseconds here; infinity stays infinity.
            prop, value = "RuntimeMaxUSec", value if value == NO_LIMIT else value * 1_000_000
        if value:
            props.append((prop, Variant("t", value)))
    # The sandbox's words are the held child's to make (namespace.py), not the scope's.
    control = [p for p in record.properties if not sandbox.is_word(p.partition("=")[0])]
    try:
        extra = resources.scope_properties(control, resources.physical_memory())
    except resources.ResourceProblem as e:
        raise SpawnFailed(f"Session '{record.name}': its property {e}.") from None
    props += [(w.name, Variant(w.signature, w.value)) for w in extra]
    return props


def launch_argv(argv: list[str], sock: Path) -> list[str]:
    """What tmux runs in the pane: argv, or past what tmux carries to its server in one
    message, a script beside the socket that removes itself and execs argv (up to the kernel's
    limit). One word alone tmux gives to "$SHELL -c", which splits a path at a space or expands
    a '$': sh's exec of "$0" runs it as written, and costs less than the owner's shell."""
    if sum(len(a.encode(errors="surrogateescape")) + 1 for a in argv) <= TMUX_COMMAND_MAX:
        return ["/bin/sh", "-c", 'exec "$0"', argv[0]] if len(argv) == 1 else argv
    script = sock.with_suffix(".launch")
    write_file(script, 'rm -f -- "$0"\nexec ' + " ".join(shlex.quote(a) for a in argv) + "\n")
    return ["/bin/sh", str(script)]


def _start_failed(record: SessionRecord, e: BaseException) -> BaseException:
    """What a start's failure is said as: systemd's refusal or a timeout in words, anything
    else as it is."""
    if isinstance(e, SystemdError):
        return SpawnFailed(f"Failed to start unit {record.unit}: {e}")
    if isinstance(e, TimeoutError):
        return SpawnFailed(f"Starting unit {record.unit} did not finish in time.")
    return e


def check_signal(whom: str, signal: int) -> None:
    if whom not in ("agent", "all"):
        raise InvalidArgs(f"Kill target '{whom}' is not known; use 'agent' or 'all'.")
    if not 1 <= signal < signals.NSIG:
        raise InvalidArgs(f"Signal {signal} is not valid; use 1 to {signals.NSIG - 1}.")


class Scopes:
    """Sessions' scopes through systemd, their tmux servers through tmux."""

    def __init__(self, systemd: Systemd, tmux_client: tmux.Tmux, forker: Forker) -> None:
        """forker: what starts each session's first process (the daemon's Helpers')."""
        self.systemd = systemd
        self.tmux = tmux_client
        self.forker = forker
        self._slices: dict[str, list[tuple[str, Variant]]] = {}  # what each slice was given
        self.daemon_unit = own_unit(procfs.cgroup_of(os.getpid()))

    async def capped_slice(self, uid: int, caps: Limits) -> str:
        """The user's slice (what the system daemon's sessions and helpers of that user go
        into), given caps at runtime (they last until reboot) unless this daemon already gave
        it the same; SpawnFailed when systemd refuses, since nothing of the user's may start
        outside their caps."""
        slice_ = user_slice(uid)
        props = slice_properties(uid, caps)
        if self._slices.get(slice_) != props:
            try:
                await self.systemd.set_unit_properties(slice_, props)
            except SystemdError as e:
                raise SpawnFailed(f"Failed to set the limits of {slice_}: {e}") from None
            self._slices[slice_] = props
        return slice_

    async def begin(
        self, record: SessionRecord, owner: Owner, paths: SessionPaths, plan: StartPlan
    ) -> Begun:
        """A start's first half: the session's first process forked and held (in its
        sandbox, not yet running tmux) and put into a new scope whose start job systemd has
        taken. What must be done before anything of the session runs goes between this and
        release, in time the start would otherwise spend waiting; abandon gives it up.

        Raises SpawnFailed on any failure, after making sure no half-started scope is left.
        """
        sock = paths.socket
        died = tmux.died_hook(hooks_fifo(paths.runtime_dir), record.name, PANE_DIED)
        server_env, pane_env = tmux.split_env(plan.env)
        argv = tmux.new_session_argv(
            sock,
            record.columns,
            record.rows,
            launch_argv(record.last_argv, sock),
            plan.output,
            died,
            pane_env,
        )
        tmux.remove_socket(sock)  # a stale socket of a dead server would make tmux refuse
        try:
            child = await HeldChild.start(
                self.forker, owner, record.cwd, server_env, argv, plan.sandbox
            )
        except OSError as e:  # no fork to be had, or the forker ended under the request
            raise SpawnFailed(f"Session '{record.name}': its first process: {e}.") from None
        properties = scope_properties(
            record, plan.limits, plan.stop_timeout, plan.slice, self.daemon_unit
        )
        try:
            try:
                job = await self.systemd.start_scope(record.unit, child.pid, properties)
            except UnitExists:
                job = ""  # an earlier try's, if it holds our child
            except ProcessLookupError:
                # The held child is gone before its scope could take it: it could not enter
                # the working directory (125), or was killed.
                code = await child.wait()
                why = f"cannot change into '{record.cwd}'" if code == 125 else f"exit {code}"
                why = child.said() if code == namespace.FAILED else why
                raise SpawnFailed(
                    f"The session's first process ended before it started: {why}"
                ) from None
        except BaseException as e:
            await child.abort()
            raise _start_failed(record, e) from None
        own_pids = plan.sandbox is not None and plan.sandbox.own_pids
        return Begun(record.unit, child, job, own_pids)

    async def abandon(self, begun: Begun) -> None:
        """A begun start given up before its release: its child never runs tmux, and its
        scope, left empty, is stopped."""
        await begun.child.abort()
        with contextlib.suppress(StopFailed):
            await self.stop(begun.unit, JOB_TIMEOUT)

    async def release(self, record: SessionRecord, begun: Begun) -> Started:
        """A start's second half: once systemd's job is done, the held child let go to run
        tmux; the scope's ids and tmux's pids. Raises SpawnFailed on any failure, after making
        sure no half-started scope is left."""
        child = begun.child
        try:
            try:
                result = await self.systemd.wait_job(begun.job, JOB_TIMEOUT) if begun.job else ""
            except TimeoutError:
                result = ""  # its end may have been lost to systemd re-executing
            # No job of ours, or its end lost: ask whether the unit holds our child.
            result = result or await self._started_before(record.unit, child.pid)
            if result != "done":
                why = await child.why_gone()
                raise SpawnFailed(
                    f"Start job for unit {record.unit} finished with '{result}' ({why}); "
                    f"'journalctl -u {record.unit}' has systemd's side"
                )
            await checkpoint.reached(checkpoint.SCOPE_STARTED, record.name)
            # The unit's invocation id, while tmux starts (its signal said it, or it is asked).
            try:
                (code, out, err), invocation = await asyncio.gather(
                    child.release(RELEASE_TIMEOUT), self.systemd.started_invocation(record.unit)
                )
            except TimeoutError:
                await child.abort()
                await self.stop(record.unit, JOB_TIMEOUT)
                raise SpawnFailed(
                    f"tmux did not start within {RELEASE_TIMEOUT:.0f}s (stopped or stuck); "
                    "resume the session to try again"
                ) from None
        except BaseException as e:
            await child.abort()
            raise _start_failed(record, e) from None
        if code != 0:
            await self.stop(record.unit, JOB_TIMEOUT)
            reason = err or f"tmux exited with status {code}"
            if code == 125:
                reason = f"cannot change into '{record.cwd}'"
            raise SpawnFailed(f"Failed to start tmux: {reason}")
        # tmux printed its server's pid; a server that is already gone (the agent exited at once)
        # fails the cgroup check, and reconcile sees the rest.
        numbers = [int(n) if n.isdigit() else 0 for n in out.partition(" ")[::2]]
        if begun.own_pids:  # as the session's PID namespace numbers them
            numbers = [procfs.numbered(child.pid, n) if n else 0 for n in numbers]
        leader, pane = numbers
        leader = leader if self.leader_alive_in(record.unit, leader) else 0
        return Started(leader, invocation, now_usec(), pane, boot_usec())

    async def _started_before(self, unit: str, pid: int) -> str:
        """The start was retried after systemd came back and found the unit: "done" when
        the first try went through (the unit is active and holds our child), else raise."""
        if pid in await self.systemd.unit_pids(unit):
            return "done" if await self.systemd.active_state(unit) == "active" else "failed"
        raise SystemdError(f"Unit {unit} already exists and is not this session's")

    async def stop(self, unit: str, timeout: float) -> None:
        """Stop the unit and wait for the job; a unit that is already gone is fine."""
        try:
            job = await self.systemd.stop_unit(unit)
        except SystemdError as e:
            raise StopFailed(f"Failed to stop unit {unit}: {e}") from None
        if job is None:
            return
        try:
            await self.systemd.wait_job(job, timeout)
        except TimeoutError:
            log.warning("Stop job for %s did not finish in %.0fs, ignoring", unit, timeout)

    async def kill(
        self, record: SessionRecord, owner: Owner, sock: Path, whom: str, signal: int
    ) -> None:
        if whom == "all":
            try:
                await self.systemd.kill_unit(record.unit, "all", signal)
            except SystemdError as e:
                raise NotRunning(f"Session '{record.name}' cannot be signalled: {e}") from None
            return
        try:
            pid = await self.agent_pid(owner, sock, record.leader_pid)
        except tmux.TmuxError:
            raise NotRunning(f"Session '{record.name}' has no agent process.") from None
        # Signal through a pidfd, and only a process inside this session's scope.
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            raise NotRunning(f"Session '{record.name}' has no agent process.") from None
        try:
            if record.unit not in procfs.cgroup_of(pid).split("/"):
                raise NotRunning(f"Session '{record.name}': its agent left the session's scope.")
            signals.pidfd_send_signal(pidfd, signal)
        finally:
            os.close(pidfd)

    async def agent_pid(self, owner: Owner, sock: Path, leader: int) -> int:
        """The pid of the process in the session's pane as the daemon numbers it: tmux says
        it as the session's own PID namespace does, if it has one (leader: its tmux server)."""
        return procfs.numbered(leader, await self.tmux.pane_pid(owner, sock))

    # The cgroup reads: what /proc says about a pid and its scope.

    def ns_pid(self, pid: int) -> int:
        """pid as its session's own PID namespace numbers it (tmux's numbers), if it has one."""
        return procfs.ns_pid(pid)

    def numbered_among(self, pids: list[int], number: int) -> int:
        """The pid among a scope's pids that its session numbers number (procfs.numbered)."""
        return procfs.numbered_among(pids, number)

    def unit_of_pid(self, pid: int) -> str | None:
        """The hostagent scope a pid's cgroup names, if any."""
        return unit_in_cgroup(procfs.cgroup_of(pid))

    def leader_alive_in(self, unit: str, pid: int) -> bool:
        """Does the tmux server still run inside the unit's cgroup? systemd 252 on a hybrid
        cgroup layout can report a scope inactive while it still has processes."""
        return pid > 0 and unit in procfs.cgroup_of(pid).split("/")

    def process(self, pid: int) -> Process | None:
        return procfs.read(pid, details=True)

    # The agent's own end, seen without tmux: tmux 3.3 can miss a pane's SIGCHLD, leaving the
    # pane's process a zombie it never reaps and its pane-died hook never run.

    def follow_process(self, pid: int, on_exit: Callable[[], None]) -> Callable[[], None] | None:
        return procfs.follow(pid, on_exit)

    def exit_status_of(self, pid: int) -> int | None:
        return procfs.exit_status(pid)


def unit_in_cgroup(cgroup: str) -> str | None:
    """The hostagent scope a cgroup path names, if any."""
    for part in cgroup.split("/"):
        if name_from_unit(part):
            return part
    return None
