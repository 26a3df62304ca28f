"""The session model: the persisted record, its states, and the pure rules over them.

Nothing here does I/O. ``transition`` is the state machine (docs/architecture.md draws it); the
store persists ``SessionRecord``; the lifecycle applies transitions under the session lock.
"""

from __future__ import annotations

import enum
import re
import secrets
import signal
import string
import time
from dataclasses import dataclass, field
from typing import TypedDict, cast

SCHEMA_VERSION = 2  # 2: a checksum closes every record
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,62}$")
UNIT_PREFIX = "hostagent-"
UNIT_SUFFIX = ".scope"


class State(enum.StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    DORMANT = "dormant"
    FAILED = "failed"


class Activity(enum.StrEnum):
    WORKING = "working"
    BLOCKED = "blocked"
    IDLE = "idle"
    UNKNOWN = "unknown"
    EXITED = "exited"


class DormantReason(enum.StrEnum):
    NONE = ""
    REBOOT = "reboot"
    LOST = "lost"
    BUDGET = "budget"  # stopped at a turn's end: its owner, or it, reached a day's budget


class Event(enum.StrEnum):
    """What can happen to a session; the input of ``transition``."""

    START = "start"  # create or resume asked for a scope
    STARTED = "started"  # the scope job finished with "done"
    START_FAILED = "start-failed"
    STOP = "stop"  # a stop was asked for
    UNIT_GONE = "unit-gone"  # the unit went inactive while the daemon watched
    UNIT_LOST = "unit-lost"  # the unit was gone when the daemon looked (recovery)
    FAIL = "fail"  # the session ended, and not well: its agent failed, or systemd ended it
    ADOPT = "adopt"  # a live unit was found (recovery)
    OVER_BUDGET = "over-budget"  # a stop for a budget ended: dormant until a lift (budgets.py)


# Events that report what has already happened (systemd ended or adopted a unit, the agent
# failed, recovery looked): the change stands whatever the disk says. The others are asked for,
# and change nothing unless their record can be written (docs/decisions.md, "A full disk").
FACTS = frozenset(
    {
        Event.START_FAILED,
        Event.UNIT_GONE,
        Event.UNIT_LOST,
        Event.FAIL,
        Event.ADOPT,
        Event.OVER_BUDGET,
    }
)

LIVE_STATES = frozenset({State.STARTING, State.RUNNING, State.STOPPING})
RESUMABLE_STATES = frozenset({State.STOPPED, State.DORMANT, State.FAILED})

_TRANSITIONS: dict[tuple[State, Event], State] = {
    **{(s, Event.START): State.STARTING for s in RESUMABLE_STATES},
    (State.STARTING, Event.STARTED): State.RUNNING,
    (State.STARTING, Event.START_FAILED): State.FAILED,
    (State.RUNNING, Event.STOP): State.STOPPING,
    (State.STARTING, Event.STOP): State.STOPPING,
    **{(s, Event.UNIT_GONE): State.STOPPED for s in LIVE_STATES},
    **{(s, Event.UNIT_LOST): State.DORMANT for s in LIVE_STATES},
    **{(s, Event.FAIL): State.FAILED for s in LIVE_STATES},
    **{(s, Event.ADOPT): State.RUNNING for s in State},
    (State.STOPPING, Event.OVER_BUDGET): State.DORMANT,
}


class InvalidTransition(Exception):
    pass


def transition(state: State, event: Event) -> State:
    """The state after event; InvalidTransition when the event makes no sense in state."""
    try:
        return _TRANSITIONS[(state, event)]
    except KeyError:
        raise InvalidTransition(f"{event.value} is not possible while {state.value}") from None


# How a session ended: systemd's Result words ("success", "exit-code", "signal", "timeout",
# "oom-kill", "resources"), for the agent's end as for the unit's.
SUCCESS = "success"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# Signals that end a program cleanly, as systemd counts them for a service (SuccessExitStatus).
CLEAN_SIGNALS = frozenset({signal.SIGHUP, signal.SIGINT, signal.SIGTERM, signal.SIGPIPE})


def agent_end(status: int | None, signal_number: int | None) -> tuple[str, str]:
    """(result, why) for an agent whose pane died, from tmux's pane_dead_status and
    pane_dead_signal; why is "" for a clean exit (status 0, or a signal that asks to end)."""
    if signal_number in CLEAN_SIGNALS:
        return SUCCESS, ""
    if signal_number:
        return "signal", f"the agent was killed by {_signal_name(signal_number)}"
    if status:
        return "exit-code", f"the agent exited with status {status}"
    return SUCCESS, ""


def unit_end(unit_result: str, killed_with: int, runtime_max_sec: int) -> tuple[str, str]:
    """(result, why) for a unit that ended without its pane reporting: systemd's Result for the
    scope, or the signal a `kill` of every process sent."""
    if unit_result == "timeout":
        return "timeout", f"stopped by systemd after RuntimeMaxSec={runtime_max_sec}s"
    if unit_result == "oom-kill":
        return "oom-kill", "killed by the kernel's OOM killer (out of memory in its scope)"
    if killed_with and killed_with not in CLEAN_SIGNALS:
        return "signal", f"killed by {_signal_name(killed_with)} ('hostagentctl kill')"
    if unit_result and unit_result != SUCCESS:
        return "resources", f"its scope ended with systemd's result '{unit_result}'"
    return SUCCESS, ""


def now_usec() -> int:
    """A record's timestamps: microseconds of the wall clock, as systemd keeps them."""
    return time.time_ns() // 1000


def boot_usec() -> int:
    """Microseconds since this boot (CLOCK_BOOTTIME): a clock that is never stepped, to tell
    how long ago something of this boot happened whatever the wall clock did meanwhile."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 1000


def name_problem(name: str) -> str | None:
    """Why name is not a valid session name, or None when it is."""
    if not name:
        return "is empty"
    if len(name) > 63:
        return "is longer than 63 characters"
    if not NAME_RE.fullmatch(name):
        return "must match [a-z0-9][a-z0-9_.-]* (lowercase ASCII letters, digits, '_', '.', '-')"
    return None


def generate_name(preset: str, taken: set[str] | frozenset[str]) -> str:
    """``<preset>-<4 chars>``, unique among taken."""
    alphabet = string.ascii_lowercase + string.digits
    stem = re.sub(r"[^a-z0-9_.-]", "-", preset.lower())[:58] or "session"
    if not stem[0].isalnum():
        stem = "s" + stem[:57]
    while True:
        name = f"{stem}-{''.join(secrets.choice(alphabet) for _ in range(4))}"
        if name not in taken:
            return name


def unit_name(name: str) -> str:
    return f"{UNIT_PREFIX}{name}{UNIT_SUFFIX}"


def name_from_unit(unit: str) -> str | None:
    if unit.startswith(UNIT_PREFIX) and unit.endswith(UNIT_SUFFIX):
        name = unit[len(UNIT_PREFIX) : -len(UNIT_SUFFIX)]
        return name if name_problem(name) is None else None
    return None


@dataclass
class Limits:
    memory_max: int = 0
    memory_high: int = 0
    cpu_weight: int = 0
    tasks_max: int = 0
    runtime_max_sec: int = 0

    def merged_over(self, base: Limits) -> Limits:
        """These limits, each unset (0) one taken from base."""
        return Limits(**{k: getattr(self, k) or getattr(base, k) for k in vars(self)})

    def within(self, caps: Limits) -> Limits:
        """These limits, none above the matching cap (an unset or infinite one becomes it)."""
        return Limits(
            **{
                k: min(getattr(self, k) or cap, cap)
                if (cap := getattr(caps, k))
                else getattr(self, k)
                for k in vars(self)
            }
        )


@dataclass
class SessionRecord:
    """One session, as persisted in its sidecar. Persisted keys are never renamed."""

    schema_version: int = SCHEMA_VERSION
    name: str = ""
    uuid: str = ""
    owner: int = 0
    preset: str = ""
    cwd: str = ""
    command: list[str] = field(default_factory=list)  # the program and its preset arguments
    args: list[str] = field(default_factory=list)  # the caller's extra arguments
    argv: list[str] = field(default_factory=list)  # the first launch's full command line
    env: dict[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    columns: int = 200
    rows: int = 50
    agent_session: str = ""
    agent_session_source: str = ""
    agent_session_history: list[str] = field(default_factory=list)
    state: State = State.STARTING
    dormant_reason: DormantReason = DormantReason.NONE
    last_error: str = ""
    boot_id: str = ""
    invocation_id: str = ""
    unit: str = ""
    leader_pid: int = 0
    created_at: int = 0
    started_at: int = 0
    started_boottime: int = 0  # boot_usec() at the last start: the run's age on a steady clock
    stopped_at: int = 0
    resume_count: int = 0
    last_argv: list[str] = field(default_factory=list)
    # systemd resource-control assignments beyond limits (CPUQuota=50%), in systemd's words
    properties: list[str] = field(default_factory=list)
    auto_resume: bool = False  # the auto policy will resume it (kept across restarts)
    hook_token: str = ""  # the secret a hook report must carry; new for every start
    worktree: str = ""  # the session's own git worktree, when it has one
    branch: str = ""  # the worktree's branch
    base_ref: str = ""  # the commit the branch started from
    repo: str = ""  # the repository the worktree belongs to (its main worktree)
    result: str = ""  # how it last ended, in systemd's words: success, exit-code, signal, ...
    exit_status: int = 0  # the agent's exit status, when it exited
    exit_signal: int = 0  # the signal that killed the agent, when one did
    containment: str = ""  # processes that left the scope or outlived the agent (this start)
    path: str = ""  # the owner's login PATH the program was found in, used by every launch
    # What the agent used, per conversation id, as its CLI's own record says (usage.Usage's
    # fields); "" is a record without ids (Aider's), less what it held at the session's start.
    usage: dict[str, dict[str, object]] = field(default_factory=dict)
    usage_base: dict[str, object] = field(default_factory=dict)  # that record at the start
    usage_day: int = 0  # the day usage_today counts (budgets.day_of)
    usage_today: dict[str, object] = field(default_factory=dict)  # what it used that day
    usage_logged: dict[str, object] = field(default_factory=dict)  # totals at the last end line
    usage_read_at: int = 0  # when the record was last read after a run's end (now_usec)
    parent: str = ""  # the uuid of the session it was made from inside; "" for none
    mcp: bool = False  # hostagent's MCP server is registered in its CLI at every start
    profile: str = ""  # "agent": its words started from the agent profile (profile.py)
    loosened: list[str] = field(default_factory=list)  # the words that asked for less than it

    def launch_env(self) -> dict[str, str]:
        """The caller's environment over the login PATH found at creation."""
        return {**({"PATH": self.path} if self.path else {}), **self.env}


class RecordChange(TypedDict, total=False):
    """The fields a change may set (``Registry.change``), typed as ``SessionRecord`` types
    them: a misspelt field or a wrong type fails the type check, not a run. A unit test holds
    the two alike."""

    schema_version: int
    name: str
    uuid: str
    owner: int
    preset: str
    cwd: str
    command: list[str]
    args: list[str]
    argv: list[str]
    env: dict[str, str]
    limits: Limits
    columns: int
    rows: int
    agent_session: str
    agent_session_source: str
    agent_session_history: list[str]
    state: State
    dormant_reason: DormantReason
    last_error: str
    boot_id: str
    invocation_id: str
    unit: str
    leader_pid: int
    created_at: int
    started_at: int
    started_boottime: int
    stopped_at: int
    resume_count: int
    last_argv: list[str]
    properties: list[str]
    auto_resume: bool
    hook_token: str
    worktree: str
    branch: str
    base_ref: str
    repo: str
    result: str
    exit_status: int
    exit_signal: int
    containment: str
    path: str
    usage: dict[str, dict[str, object]]
    usage_base: dict[str, object]
    usage_day: int
    usage_today: dict[str, object]
    usage_logged: dict[str, object]
    usage_read_at: int
    parent: str
    mcp: bool
    profile: str
    loosened: list[str]


def news(record: SessionRecord, fields: RecordChange) -> RecordChange:
    """Those of fields whose value the record does not hold already."""
    return cast(RecordChange, {k: v for k, v in fields.items() if getattr(record, k) != v})
