"""The Manager bus object, org.hostagent.HostAgent1.Manager, and the bus side of the registry.

``BusFrontend`` listens to the manager and keeps one SessionObject exported per session.
Manager methods that take a session name go through the same SessionObject code path as the
Session interface, so authorization is written once.
"""

from __future__ import annotations

import os
from typing import Any

from dbus_fast import Variant

from . import MANAGER_INTERFACE, MANAGER_PATH, SESSION_INTERFACE, __version__
from .auth import Authorizer
from .dbus_export import Call, Exporter, Interface, Method, Prepared, Property, Signal
from .dbus_session import SESSION, SessionObject, session_path
from .dbuscompat import fix_value
from .errors import AccessDenied
from .manager import Manager, Session
from .options import parse_options


class BusFrontend:
    def __init__(self, manager: Manager, auth: Authorizer, exporter: Exporter, reload: Any) -> None:
        self.manager = manager
        self.auth = auth
        self.exporter = exporter
        self.reload_fn = reload
        self.objects: dict[str, SessionObject] = {}
        # ListSessions' reply, kept until a session is added, removed or announced: the list
        # is asked for far more often than it changes (docs/benchmarks-notes.md).
        self._rows: Prepared | None = None
        manager.listener = self

    def export_all(self) -> None:
        self.exporter.export(MANAGER_PATH, MANAGER, self)
        for session in self.manager.sessions.values():
            self._export(session)

    def _export(self, session: Session) -> SessionObject:
        obj = SessionObject(session, self.manager, self.auth, self.exporter)
        self.objects[session.name] = obj
        self.exporter.export(obj.path, SESSION, obj)
        return obj

    def daemon_uid(self) -> int:
        return 0 if self.manager.system else os.getuid()

    def object_of(self, name: str) -> SessionObject:
        self.manager.get(name)  # NoSuchSession
        return self.objects[name]

    # ---- Listener -----------------------------------------------------------------------

    def session_added(self, session: Session) -> None:
        self._rows = None
        obj = self._export(session)
        self.exporter.emit(
            MANAGER_PATH, MANAGER_INTERFACE, "SessionNew", "so", [session.name, obj.path]
        )

    def session_removed(self, session: Session) -> None:
        self._rows = None
        obj = self.objects.pop(session.name, None)
        if obj is None:
            return
        obj.publish()
        self.exporter.unexport(obj.path)
        self.exporter.emit(
            MANAGER_PATH, MANAGER_INTERFACE, "SessionRemoved", "so", [session.name, obj.path]
        )

    def session_changed(self, session: Session) -> None:
        self._rows = None
        obj = self.objects.get(session.name)
        if obj is not None:
            obj.publish()

    def rows(self) -> Prepared:
        if self._rows is None:
            # What is on the bus, as announced; tuples, which the collector untracks, so a
            # reply of 1000 rows promotes nothing into the old generation.
            self._rows = Prepared(fix_value([o.row() for o in self.objects.values()]))
        return self._rows


def _list(f: BusFrontend, call: Call) -> Prepared:
    return f.rows()


def _get(f: BusFrontend, call: Call, name: str) -> str:
    return f.object_of(name).path


def _by_pid(f: BusFrontend, call: Call, pid: int) -> str:
    return session_path(f.manager.by_pid(pid).name)


async def _create(
    f: BusFrontend, call: Call, name: str, preset: str, cwd: str, options: dict[str, Variant]
) -> str:
    req = parse_options({k: (v.signature, v.value) for k, v in options.items()})
    uid = await f.auth.caller_uid(call.sender)
    session = await f.manager.create(uid, name, preset, cwd, req)
    return session_path(session.name)


async def _resume(f: BusFrontend, call: Call, name: str) -> str:
    obj = f.object_of(name)
    await obj.authorize(call)
    await f.manager.lifecycle.resume(name)
    return obj.path


async def _stop(f: BusFrontend, call: Call, name: str) -> None:
    obj = f.object_of(name)
    await obj.authorize(call)
    await f.manager.lifecycle.stop(name)


async def _kill(f: BusFrontend, call: Call, name: str, whom: str, signal: int) -> None:
    obj = f.object_of(name)
    await obj.authorize(call)
    await f.manager.lifecycle.kill(name, whom, signal)


async def _remove(f: BusFrontend, call: Call, name: str) -> None:
    obj = f.object_of(name)
    await obj.authorize(call)
    await f.manager.lifecycle.remove(name)


def _presets(f: BusFrontend, call: Call) -> list[list[Any]]:
    return [
        [p.name, p.description, p.command]
        for p in sorted(f.manager.presets.values(), key=lambda p: p.name)
    ]


async def _wait_any(
    f: BusFrontend, call: Call, names: list[str], activities: list[str], timeout: int
) -> tuple[str, str]:
    return await f.manager.terminal.wait_for_activity(names, activities, timeout)


async def _reload(f: BusFrontend, call: Call) -> None:
    uid = await f.auth.caller_uid(call.sender)
    if uid not in (0, f.daemon_uid()):
        raise AccessDenied("Only root may reload hostagent's configuration.")
    f.reload_fn()


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
        ),
        Method("ResumeSession", [("name", "s")], [("path", "o")], _resume),
        Method("StopSession", [("name", "s")], [], _stop),
        Method("KillSession", [("name", "s"), ("whom", "s"), ("signal", "i")], [], _kill),
        Method("RemoveSession", [("name", "s")], [], _remove),
        Method("ListPresets", [], [("presets", "a(ssas)")], _presets),
        Method(
            "WaitAny",
            [("names", "as"), ("activities", "as"), ("timeout_usec", "t")],
            [("name", "s"), ("activity", "s")],
            _wait_any,
        ),
        Method("Reload", [], [], _reload),
    ],
    properties=[
        Property("Version", "s", lambda f: __version__, "const"),
        Property("Mode", "s", lambda f: "system" if f.manager.system else "user", "const"),
        Property("BootID", "s", lambda f: f.manager.boot_id, "const"),
    ],
    signals=[
        Signal("SessionNew", [("name", "s"), ("path", "o")]),
        Signal("SessionRemoved", [("name", "s"), ("path", "o")]),
    ],
)

__all__ = ["MANAGER", "SESSION_INTERFACE", "BusFrontend"]
