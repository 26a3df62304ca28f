"""The per-session bus object: org.hostagent.HostAgent1.Session.

Each handler reads its arguments, validates them, authorizes the caller, calls one function of
the daemon and packs the reply. The object keeps the values it last published, so one
PropertiesChanged carries exactly what changed.
"""

from __future__ import annotations

import contextlib
from typing import Any

from dbus_fast import Variant

from hostagent import SESSION_INTERFACE, SESSION_PATH_PREFIX, UINT64_MAX
from hostagent.bus.paths import path_encode
from hostagent.config import LIMIT_PROPERTIES, over_caps
from hostagent.daemon.bus import questions
from hostagent.daemon.bus.interface import Call, Interface, Method, Property
from hostagent.daemon.bus.replies import FileReply
from hostagent.daemon.bus.services import Services
from hostagent.daemon.bus.usage import usage_variants
from hostagent.daemon.follow.hooks.formats import check_event
from hostagent.daemon.follow.terminal import (
    MAX_CAPTURE_BYTES,
    MAX_TEXT,
    check_activities,
    check_capture,
    check_text,
)
from hostagent.daemon.follow.usage import usage_of
from hostagent.daemon.host.scope import check_signal
from hostagent.daemon.state.live import Session
from hostagent.errors import InvalidArgs, LimitsExceeded, quote
from hostagent.permissions import (
    answer_from_inside,
    exempt_from_caps,
    require_inside,
)
from hostagent.session import Limits

# Capture's inline reply; more goes through CaptureByFileDescriptor, so that replies a caller
# never reads hold little of the daemon's one bus connection.
MAX_INLINE_CAPTURE = 256 * 1024
REMOVE_FORCE = 1  # remove the session's worktree even when it has changes
REMOVE_FLAGS = REMOVE_FORCE


def session_path(name: str) -> str:
    return path_encode(SESSION_PATH_PREFIX, name)


class SessionObject:
    def __init__(self, session: Session, services: Services) -> None:
        self.session = session
        self.f = services
        self.path = session_path(session.name)
        self._published = self._values()

    async def authorize(self, call: Call) -> int:
        """The caller's uid, once it may act on this session; else raise."""
        uid = await self.f.auth.require_owner_or_admin(
            call.sender,
            self.session.record.owner,
            call.interactive,
            f"session '{self.session.name}'",
        )
        inside = await self.f.caller_session(call.sender)
        if inside is not None:
            self.f.act_from_inside(inside, self.session)
        return uid

    # ---- properties ---------------------------------------------------------------------

    def row(self) -> tuple[str, str, str, str, int, str]:
        """This session in ListSessions: name, preset, state, activity, owner, path."""
        s, record = self.session, self.session.record
        return (
            s.name,
            record.preset,
            record.state.value,
            s.activity.value,
            record.owner,
            self.path,
        )

    def _values(self) -> dict[str, Variant]:
        return {p.name: Variant(p.signature, p.getter(self)) for p in _CHANGING}

    def publish(self) -> None:
        values = self._values()
        changed = {k: v for k, v in values.items() if self._published.get(k) != v}
        self._published = values
        self.f.exporter.emit_changed(self.path, SESSION_INTERFACE, changed)

    async def _scope_counter(self, name: str) -> int:
        if self.session.record.state.value != "running":
            return UINT64_MAX
        record = self.session.record
        return await self.f.counters.read(record.unit, record.invocation_id, name)


def _limits(limits: Limits) -> dict[str, int]:
    """The session's limits by systemd's names, those that are set."""
    return {LIMIT_PROPERTIES[k]: v for k, v in vars(limits).items() if v}


def _r(field: str) -> Any:
    return lambda o: getattr(o.session.record, field)


def _enum(field: str) -> Any:
    return lambda o: getattr(o.session.record, field).value


_CONST = [
    Property("Name", "s", _r("name"), "const"),
    Property("Uuid", "s", _r("uuid"), "const"),
    Property("Preset", "s", _r("preset"), "const"),
    Property("Owner", "u", _r("owner"), "const"),
    Property("Cwd", "s", _r("cwd"), "const"),
    Property("Worktree", "s", _r("worktree"), "const"),
    Property("Branch", "s", _r("branch"), "const"),
    Property("BaseRef", "s", _r("base_ref"), "const"),
    Property("Limits", "a{st}", lambda o: _limits(o.session.record.limits), "const"),
    Property("Properties", "as", _r("properties"), "const"),
    Property("Mcp", "b", _r("mcp"), "const"),
    Property("Profile", "s", _r("profile"), "const"),
    Property("Loosened", "as", _r("loosened"), "const"),
    Property("Parent", "s", lambda o: o.f.registry.name_of(o.session.record.parent), "false"),
]
_CHANGING = [
    Property("State", "s", _enum("state")),
    Property("Activity", "s", lambda o: o.session.activity.value),
    Property("AgentSessionId", "s", _r("agent_session")),
    Property("Containment", "s", _r("containment")),
    Property("Unit", "s", _r("unit")),
    Property("Leader", "u", _r("leader_pid")),
    Property("BootID", "s", _r("boot_id")),
    Property("StartedAt", "t", _r("started_at")),
    Property("StoppedAt", "t", _r("stopped_at")),
    Property("DormantReason", "s", _enum("dormant_reason")),
    Property("LastError", "s", _r("last_error")),
    Property("Result", "s", _r("result")),
    Property("ExitStatus", "i", _r("exit_status")),
    Property("ExitSignal", "i", _r("exit_signal")),
    Property("ResumeCount", "u", _r("resume_count")),
    Property("Command", "as", _r("last_argv")),
    Property("Usage", "a{sv}", lambda o: usage_variants(usage_of(o.session))),
    Property(
        "Question", "a{sv}", lambda o: questions.question_variants(o.session.asked, not o.f.system)
    ),
]
_COUNTERS = [
    Property("MemoryCurrent", "t", lambda o: o._scope_counter("MemoryCurrent"), "false"),
    Property("CPUUsageNSec", "t", lambda o: o._scope_counter("CPUUsageNSec"), "false"),
]


# Handlers, shared with the Manager's methods that take a name (bus/manager.py).


async def stop(o: SessionObject, call: Call) -> None:
    await o.authorize(call)
    await o.f.lifecycle.stop(o.session)


async def kill(o: SessionObject, call: Call, whom: str, signal: int) -> None:
    check_signal(whom, signal)
    await o.authorize(call)
    await o.f.lifecycle.kill(o.session, whom, signal)


async def resume(o: SessionObject, call: Call) -> None:
    uid = await o.authorize(call)
    await o.f.lifecycle.resume(o.session, await _exempt(o, call, uid))


async def _exempt(o: SessionObject, call: Call, uid: int) -> bool:
    """Whether this resume may keep limits above today's caps: as at a create, root (and the
    one user of a user daemon), or polkit's admins where the admin allows it and the session
    asks for more than the caps."""
    if exempt_from_caps(uid, o.f.system):
        return True
    config = o.f.settings.config
    return bool(
        config.users.admins_exceed
        and over_caps(o.session.record.limits, config.limits)
        and await o.f.auth.is_admin(call.sender, call.interactive)
    )


async def remove(o: SessionObject, call: Call) -> None:
    await o.authorize(call)
    await o.f.lifecycle.remove(o.session)


async def remove_with_flags(o: SessionObject, call: Call, flags: int) -> str:
    if flags & ~REMOVE_FLAGS:
        raise InvalidArgs(f"Unknown flags {flags:#x}; the only one is 1 (force).")
    await o.authorize(call)
    return await o.f.lifecycle.remove(o.session, force=bool(flags & REMOVE_FORCE))


async def _diff(o: SessionObject, call: Call, stat: bool) -> str:
    await o.authorize(call)
    return await o.f.lifecycle.diff(o.session, stat)


async def _capture(o: SessionObject, call: Call, lines: int) -> str:
    check_capture(lines)
    uid = await o.authorize(call)
    # No more than the inline limit is read: a caller who asks for a long history here and
    # never reads the reply costs the daemon that much, not the history.
    text = await o.f.terminal.capture(o.session, lines, uid, MAX_INLINE_CAPTURE)
    if text is None:
        raise LimitsExceeded(
            f"Session '{o.session.name}': the capture is more than Capture answers inline "
            f"({MAX_INLINE_CAPTURE // 1024} KiB); ask for fewer lines, or call "
            "CaptureByFileDescriptor (hostagentctl capture does)."
        )
    return text


async def _capture_fd(o: SessionObject, call: Call, lines: int) -> FileReply:
    check_capture(lines)
    uid = await o.authorize(call)
    fd = await o.f.terminal.capture_file(o.session, lines, uid)
    if fd is None:
        raise InvalidArgs(
            f"Session '{o.session.name}': {lines} lines of scrollback are more than "
            f"{MAX_CAPTURE_BYTES // (1024 * 1024)} MiB; ask for fewer lines."
        )
    return FileReply(fd)


async def _journal(o: SessionObject, call: Call, lines: int, follow: bool) -> FileReply:
    """The daemon's journal lines about this session, for whoever may act on it: its owner
    cannot read a system service's journal herself."""
    if lines < 0:
        raise InvalidArgs(f"lines must be 0 or more, not {lines}.")
    uid = await o.authorize(call)
    record = o.session.record
    return FileReply(await o.f.journal.open(uid, o.session.name, record.created_at, lines, follow))


async def _send(o: SessionObject, call: Call, text: str, enter: bool) -> None:
    check_text(text)
    await o.authorize(call)
    inside = await o.f.caller_session(call.sender)
    if inside is not None:
        answer_from_inside(inside.record, o.session.record, o.f.registry.lineage(inside))
    await o.f.terminal.send_text(o.session, text, enter)


async def _wait(o: SessionObject, call: Call, activities: list[str], timeout: int) -> str:
    wanted = check_activities(activities)
    _, activity = await o.f.terminal.wait_for_activity([o.session.name], wanted, timeout)
    return activity


async def _explain(o: SessionObject, call: Call) -> dict[str, str]:
    """Anyone may ask why a session has its activity, as anyone may read it; but the text the
    rule matched is the session's screen, which only those who may Capture it may read."""
    explanation = o.session.verdict.explain()
    if explanation.get("matched") and not await o.f.auth.may_act(
        call.sender, o.session.record.owner
    ):
        explanation["matched"] = ""
    hook = o.session.last_hook
    if hook is not None:
        explanation["last_hook"] = hook.event + (f":{hook.subtype}" if hook.subtype else "")
    return explanation


async def _report_hook(o: SessionObject, call: Call, event: str, data: dict[str, Any]) -> None:
    values = await _from_hook(o, call, event, data)
    await o.f.hooks.report_hook(o.session, event, values)


async def _ask_hook(o: SessionObject, call: Call, event: str, data: dict[str, Any]) -> str:
    """A hook that asks (hookrequest.py) and waits: what it prints ("" leaves the dialog to
    the terminal). Only the session's own preset's asking event asks."""
    values = await _from_hook(o, call, event, data)
    preset = o.f.settings.preset(o.session.record.preset)
    if preset is None or preset.hooks_ask != event:
        raise InvalidArgs(
            f"Session '{o.session.name}' asks through no hook event {quote(event)}; report "
            "it with ReportHook."
        )
    return await o.f.hooks.ask(o.session, event, values)


async def _from_hook(
    o: SessionObject, call: Call, event: str, data: dict[str, Any]
) -> dict[str, Any]:
    """A hook's values, once its caller is shown to be a process of the session's own."""
    check_event(event)
    values = {k: v.value for k, v in data.items() if isinstance(v, Variant)}
    token = values.pop("token", "")
    # Not authorize(): whoever the user is, the caller must be a process inside the session.
    unit = await o.f.placement.unit(call.sender)
    record = o.session.record
    require_inside(
        unit,
        record.unit,
        o.session.name,
        token if isinstance(token, str) else "",
        record.hook_token,
    )
    # A hook takes this way when the owner's hooks FIFO is gone: make it again.
    with contextlib.suppress(OSError, KeyError):
        o.f.hooks.open_pipe(o.session)
    return values


async def _attach(o: SessionObject, call: Call) -> list[str]:
    """The command a person or a program (Cockpit's terminal) runs to attach: hostagentctl's,
    whose tmux client the session's server cannot command (attaching.py)."""
    await o.authorize(call)
    o.f.terminal.attach_argv(o.session)  # NotRunning for a session with no terminal
    return ["hostagentctl", "--system" if o.f.system else "--user", "attach", o.session.name]


async def _tmux_attach(o: SessionObject, call: Call) -> list[str]:
    await o.authorize(call)
    return o.f.terminal.attach_argv(o.session)


SESSION = Interface(
    SESSION_INTERFACE,
    methods=[
        Method("Stop", [], [], stop),
        Method("Kill", [("whom", "s"), ("signal", "i")], [], kill),
        Method("Resume", [], [], resume),
        Method("Remove", [], [], remove),
        Method("RemoveWithFlags", [("flags", "t")], [("note", "s")], remove_with_flags),
        Method("Diff", [("stat", "b")], [("diff", "s")], _diff),
        Method("Capture", [("lines", "i")], [("text", "s")], _capture),
        Method("CaptureByFileDescriptor", [("lines", "i")], [("fd", "h")], _capture_fd),
        Method("OpenJournal", [("lines", "i"), ("follow", "b")], [("fd", "h")], _journal),
        Method(
            "SendText",
            [("text", "s"), ("enter", "b")],
            [],
            _send,
            largest=MAX_TEXT + 1024,
            too_big=f"Send at most {MAX_TEXT >> 10} KiB of text at once.",
        ),
        Method("Answer", [("id", "s"), ("choice", "s")], [("label", "s")], questions.answer),
        Method(
            "WaitForActivity",
            [("activities", "as"), ("timeout_usec", "t")],
            [("activity", "s")],
            _wait,
            waits=True,
        ),
        Method("ExplainActivity", [], [("explanation", "a{ss}")], _explain),
        Method("GetAttachCommand", [], [("argv", "as")], _attach),
        Method("GetTmuxAttachCommand", [], [("argv", "as")], _tmux_attach),
        Method("ReportHook", [("event", "s"), ("data", "a{sv}")], [], _report_hook),
        Method(
            "AskHook",
            [("event", "s"), ("data", "a{sv}")],
            [("decision", "s")],
            _ask_hook,
            waits=True,
        ),
    ],
    properties=_CONST + _CHANGING + _COUNTERS,
)
