"""The Manager bus object, org.hostagent.HostAgent1.Manager, and the bus side of the registry.

``BusFrontend`` is a listener of the registry and keeps one SessionObject exported per session.
Its signals are queued and sent together once the running code yields to the event loop, as
systemd's own bus queue does: a method's reply goes out before the signals its work caused,
and a session that changes twice in one step sends one PropertiesChanged.
Manager methods that take a session name are one-line redirects into the Session object's
handlers (bus/session.py), so validation and authorization are written once, as machined's
``redirect_method_to_machine`` does.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from dbus_fast import Variant

from hostagent import MANAGER_INTERFACE, MANAGER_PATH, __version__
from hostagent.answerrules import MAX_TEXT as MAX_RULES_TEXT
from hostagent.bus.compat import fix_value
from hostagent.daemon.bus import session as bus_session
from hostagent.daemon.bus.interface import Call, Interface, Method, Property, Signal
from hostagent.daemon.bus.questions import get_answer_rules, list_questions, set_answer_rules
from hostagent.daemon.bus.replies import Prepared
from hostagent.daemon.bus.services import Services
from hostagent.daemon.bus.session import SESSION, SessionObject, session_path
from hostagent.daemon.bus.usage import get_usage, lift_budget
from hostagent.daemon.follow.terminal import MAX_WAIT_NAMES, check_activities
from hostagent.daemon.host import sandboxing
from hostagent.daemon.ops import confining
from hostagent.daemon.state.live import Session
from hostagent.errors import AccessDenied, InvalidCwd, NoSessionForPID, NoSuchPreset, quote
from hostagent.identity import Owner
from hostagent.options import (
    CREATE_ARGS_MAX,
    MAX_ARGV_BYTES,
    MAX_ENV_BYTES,
    MAX_PROPERTIES_BYTES,
    cwd_problem,
    parse_options,
)
from hostagent.permissions import (
    create_owner,
    exempt_from_caps,
    made_from_inside,
    require_in_tree,
    require_reload,
)

log = logging.getLogger(__name__)


class BusFrontend:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.registry = services.registry
        self.exporter = services.exporter
        self.objects: dict[str, SessionObject] = {}
        # ListSessions' reply, kept until a session is added, removed or announced: the list
        # is asked for far more often than it changes (docs/benchmarks-notes.md).
        self._rows: Prepared | None = None
        self._queue: list[Callable[[], None]] = []  # signals not sent yet, in order
        self._dirty: set[str] = set()  # sessions whose PropertiesChanged is in the queue
        self._flush_soon: asyncio.Handle | None = None

    def export_all(self) -> None:
        self.exporter.export(MANAGER_PATH, MANAGER, self)
        for session in self.registry.sessions.values():
            self._export(session)

    def _export(self, session: Session) -> SessionObject:
        obj = SessionObject(session, self.services)
        self.objects[session.name] = obj
        self.exporter.export(obj.path, SESSION, obj)
        return obj

    def object_of(self, name: str) -> SessionObject:
        self.registry.get(name)  # NoSuchSession
        return self.objects[name]

    # ---- Listener -----------------------------------------------------------------------

    def session_added(self, session: Session) -> None:
        self._rows = None
        obj = self._export(session)
        self._later(
            lambda: self.exporter.emit(
                MANAGER_PATH, MANAGER_INTERFACE, "SessionNew", "so", [session.name, obj.path]
            )
        )

    def session_removed(self, session: Session) -> None:
        self._rows = None
        obj = self.objects.pop(session.name, None)
        if obj is None:
            return
        # What was queued before goes first; the object is gone from the bus at once.
        self.flush()
        obj.publish()
        self.exporter.unexport(obj.path)
        self.exporter.emit(
            MANAGER_PATH, MANAGER_INTERFACE, "SessionRemoved", "so", [session.name, obj.path]
        )

    def session_changed(self, session: Session) -> None:
        self._rows = None
        obj = self.objects.get(session.name)
        if obj is not None and session.name not in self._dirty:
            self._dirty.add(session.name)
            self._later(lambda: self._publish(obj))

    def _publish(self, obj: SessionObject) -> None:
        self._dirty.discard(obj.session.name)
        if self.objects.get(obj.session.name) is obj:
            obj.publish()

    def _later(self, send: Callable[[], None]) -> None:
        self._queue.append(send)
        if self._flush_soon is None:
            try:
                self._flush_soon = asyncio.get_running_loop().call_soon(self.flush)
            except RuntimeError:  # no loop (a unit test's direct call): send now
                self.flush()

    def flush(self) -> None:
        """Send every queued signal, in the order their changes happened."""
        if self._flush_soon is not None:
            self._flush_soon.cancel()
            self._flush_soon = None
        queue, self._queue = self._queue, []
        for send in queue:
            try:
                send()
            except Exception:
                log.exception("Failed to send a queued signal")

    def rows(self) -> Prepared:
        if self._rows is None:
            # What is on the bus, as announced; tuples, which the collector untracks, so a
            # reply of 1000 rows promotes nothing into the old generation.
            self._rows = Prepared(fix_value([o.row() for o in self.objects.values()]))
        return self._rows


async def _list(f: BusFrontend, call: Call) -> Prepared | list[tuple[Any, ...]]:
    """Every session; from inside one (without its owner's rights), it and those made from
    inside it."""
    seen = await f.services.caller_tree(call.sender)
    if seen is None:
        return f.rows()
    return [o.row() for o in f.objects.values() if o.session.record.uuid in seen[1]]


async def _get(f: BusFrontend, call: Call, name: str) -> str:
    obj = f.object_of(name)
    seen = await f.services.caller_tree(call.sender)
    if seen is not None:
        require_in_tree(seen[0].record, obj.session.record, seen[1])
    return obj.path


async def _by_pid(f: BusFrontend, call: Call, pid: int) -> str:
    """pid 0: the caller's own session, as the bus places it (as systemd's GetUnitByPID(0)):
    a process in a session's PID namespace knows no pid the daemon would."""
    if pid == 0:
        session = await f.services.caller_session(call.sender)
        if session is None:
            raise NoSessionForPID("The caller does not belong to any session.")
        return session_path(session.name)
    session = f.registry.by_unit(f.services.scopes.unit_of_pid(pid))
    if session is None:
        raise NoSessionForPID(f"PID {pid} does not belong to any session.")
    return session_path(session.name)


async def _create(
    f: BusFrontend, call: Call, name: str, preset: str, cwd: str, options: dict[str, Variant]
) -> str:
    if too_long := cwd_problem(cwd):  # before anyone is asked anything: a bad path is cheap
        raise InvalidCwd(too_long)
    req = parse_options({k: (v.signature, v.value) for k, v in options.items()})
    s = f.services
    # Who calls, and from which session if any, asked of the bus at once.
    caller, inside = await asyncio.gather(
        s.auth.caller_uid(call.sender), s.caller_session(call.sender)
    )
    if inside is not None:
        made_from_inside(inside.record, req, s.cli_state(inside))
    owner = create_owner(caller, req.user, s.system, s.daemon_uid())
    # Bad names and presets are refused before polkit could ask anyone for a password.
    admission = s.lifecycle.admit(
        owner, name, preset, req.limits, exempt_from_caps(caller, s.system)
    )
    # polkit is asked only where the admin lets admins past the caps, and only when the
    # request goes past one.
    if (
        admission.over_caps
        and s.settings.config.users.admins_exceed
        and await s.auth.is_admin(call.sender, call.interactive)
    ):
        admission = admission.exempted()
    session = await s.lifecycle.create(admission, cwd, req)
    return session_path(session.name)


async def _resume(f: BusFrontend, call: Call, name: str) -> str:
    obj = f.object_of(name)
    await bus_session.resume(obj, call)
    return obj.path


async def _stop(f: BusFrontend, call: Call, name: str) -> None:
    await bus_session.stop(f.object_of(name), call)


async def _kill(f: BusFrontend, call: Call, name: str, whom: str, signal: int) -> None:
    await bus_session.kill(f.object_of(name), call, whom, signal)


async def _remove(f: BusFrontend, call: Call, name: str) -> None:
    await bus_session.remove(f.object_of(name), call)


async def _remove_with_flags(f: BusFrontend, call: Call, name: str, flags: int) -> str:
    return await bus_session.remove_with_flags(f.object_of(name), call, flags)


def _worktrees(f: BusFrontend, call: Call) -> list[list[str]]:
    return [
        [s.name, s.record.worktree, s.record.branch]
        for s in sorted(f.registry.sessions.values(), key=lambda s: s.name)
        if s.record.worktree
    ]


def _presets(f: BusFrontend, call: Call) -> list[list[Any]]:
    return [
        [p.name, p.description, p.command]
        for p in sorted(f.services.settings.presets.values(), key=lambda p: p.name)
    ]


async def _agents(f: BusFrontend, call: Call) -> list[list[str]]:
    """For the caller: each preset's program as their login shell finds it, and its version."""
    s = f.services
    try:
        owner = Owner.from_uid(await s.auth.caller_uid(call.sender))
    except KeyError:
        raise AccessDenied("Your user id has no account on this host.") from None
    presets = sorted(s.settings.presets.values(), key=lambda p: p.name)
    programs = {p.name: p.command[0] for p in presets if p.command}
    found = await s.owners.installed(owner, programs)
    return [[name, *found[name]] for name in programs]


async def _agent_profile(f: BusFrontend, call: Call, preset: str) -> tuple[list[str], list[str]]:
    """For the caller: the words a session of preset's would start from, and notes."""
    s = f.services
    found = s.settings.preset(preset)
    if found is None:
        raise NoSuchPreset(f"No preset {quote(preset)} known; 'hostagentctl presets' lists them.")
    try:
        owner = Owner.from_uid(await s.auth.caller_uid(call.sender))
    except KeyError:
        raise AccessDenied("Your user id has no account on this host.") from None
    agents, presets = s.settings.config.sandbox.agents, s.settings.presets.values()
    return confining.told(agents, found, presets, owner)


async def _wait_any(
    f: BusFrontend, call: Call, names: list[str], activities: list[str], timeout: int
) -> tuple[str, str]:
    wanted = check_activities(activities)
    seen = await f.services.caller_tree(call.sender)
    if seen is not None:
        inside, tree = seen
        for name in names:
            require_in_tree(inside.record, f.object_of(name).session.record, tree)
    return await f.services.terminal.wait_for_activity(names, wanted, timeout)


async def _reload(f: BusFrontend, call: Call) -> None:
    s = f.services
    require_reload(await s.auth.caller_uid(call.sender), s.daemon_uid())
    s.reload()


MANAGER = Interface(
    MANAGER_INTERFACE,
    methods=[
        Method("ListSessions", [], [("sessions", "a(ssssuo)")], _list),
        Method("GetSession", [("name", "s")], [("path", "o")], _get),
        Method("GetSessionByPID", [("pid", "u")], [("path", "o")], _by_pid),
        Method(
            "CreateSession",
            [("name", "s"), ("preset", "s"), ("cwd", "s"), ("options", "a{sv}")],
            [("path", "o")],
            _create,
            largest=CREATE_ARGS_MAX,  # a valid call's at most: a bigger one is not unmarshalled
            too_big=f"A session's command line may hold {MAX_ARGV_BYTES >> 10} KiB, its "
            f"environment {MAX_ENV_BYTES >> 10} KiB and its properties "
            f"{MAX_PROPERTIES_BYTES >> 10} KiB.",
        ),
        Method("ResumeSession", [("name", "s")], [("path", "o")], _resume),
        Method("StopSession", [("name", "s")], [], _stop),
        Method("KillSession", [("name", "s"), ("whom", "s"), ("signal", "i")], [], _kill),
        Method("RemoveSession", [("name", "s")], [], _remove),
        Method(
            "RemoveSessionWithFlags",
            [("name", "s"), ("flags", "t")],
            [("note", "s")],
            _remove_with_flags,
        ),
        Method("ListWorktrees", [], [("worktrees", "a(sss)")], _worktrees),
        Method("ListQuestions", [], [("questions", "a(sa{sv})")], list_questions),
        Method(
            "SetAnswerRules",
            [("rules", "s")],
            [("count", "u")],
            set_answer_rules,
            largest=MAX_RULES_TEXT + 1024,
            too_big=f"Answer rules are at most {MAX_RULES_TEXT >> 10} KiB.",
        ),
        Method("GetAnswerRules", [], [("rules", "s")], get_answer_rules),
        Method("ListPresets", [], [("presets", "a(ssas)")], _presets),
        Method("ListAgents", [], [("agents", "a(ssss)")], _agents),
        Method(
            "GetAgentProfile",
            [("preset", "s")],
            [("words", "as"), ("notes", "as")],
            _agent_profile,
        ),
        Method(
            "WaitAny",
            [("names", "as"), ("activities", "as"), ("timeout_usec", "t")],
            [("name", "s"), ("activity", "s")],
            _wait_any,
            waits=True,
            largest=MAX_WAIT_NAMES * 72 + 64 * 1024,  # that many names of 63 characters
            too_big=f"Wait for at most {MAX_WAIT_NAMES} sessions at once.",
        ),
        Method("Reload", [], [], _reload),
        Method(
            "GetUsage",
            [("since_usec", "t"), ("until_usec", "t")],
            [("usage", "a(usa{sv})")],
            get_usage,
        ),
        Method("LiftBudget", [("uid", "u")], [("resumed", "as")], lift_budget),
    ],
    properties=[
        Property("Version", "s", lambda f: __version__, "const"),
        Property("Mode", "s", lambda f: "system" if f.services.system else "user", "const"),
        Property("BootID", "s", lambda f: f.services.lifecycle.boot_id, "const"),
        Property("SetAsideRecords", "as", lambda f: f.services.registry.store.set_aside(), "false"),
        Property("Sandboxing", "a{ss}", lambda f: sandboxing.support(f.services.system), "const"),
    ],
    signals=[
        Signal("SessionNew", [("name", "s"), ("path", "o")]),
        Signal("SessionRemoved", [("name", "s"), ("path", "o")]),
    ],
)

__all__ = ["MANAGER", "BusFrontend"]
