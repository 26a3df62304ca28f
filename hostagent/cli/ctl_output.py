"""What hostagentctl prints: tables with their legend, and failures as one line with a hint.

Apart from the verbs so that every verb's output follows the same rules. The quick verbs
(ctl_quick.py) print through this module too, so it imports at its top only what they need:
JSON, regular expressions and the usage figures' types are imported where they are used.
"""

from __future__ import annotations

import pwd
import sys
import time

from hostagent import UINT64_MAX
from hostagent.errors import HostAgentError
from hostagent.escape import printable

TYPE_CHECKING = False  # typing's own import costs more than a quick verb's call
if TYPE_CHECKING:
    import argparse
    from typing import Any

    from hostagent.usage import Usage

EXIT_FAILURE, EXIT_USAGE = 1, 2
LSB_NOT_RUNNING, LSB_UNKNOWN = 3, 4  # status's exit codes, as systemctl status has them
UNKNOWN = UINT64_MAX  # what the daemon sends for a figure systemd does not have

HINTS = {
    "NoSuchPreset": "'hostagentctl presets' lists the presets.",
    "AccessDenied": "only the session's owner, root or a polkit-authorised admin may do this.",
    "InteractiveAuthorizationRequired": "run it from a desktop session with a polkit agent, "
    "or as root.",
    "ServiceUnknown": "no hostagent answers here; 'hostagentctl doctor' says what is missing.",
}


def show_table(
    args: argparse.Namespace, header: list[str], rows: list[list[Any]], noun: str, where: str = ""
) -> None:
    if args.json:
        items = [dict(zip([h.lower() for h in header], r, strict=True)) for r in rows]
        emit_json(args, items)
        return
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(header)]
    if not args.no_legend and rows:
        print("  ".join(h.upper().ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if not args.no_legend:
        where = f" {where}" if where else ""
        print(
            f"\n{len(rows)} {noun}{'' if len(rows) == 1 else 's'} listed{where}."
            if rows
            else f"No {noun}s{where}."
        )


def show_status(a: argparse.Namespace, props: dict[str, Any], local: bool) -> int:
    """status's lines (or JSON) for a session's properties; its LSB exit code."""
    if a.json:
        emit_json(a, as_json(props))
    else:
        for line in status_lines(props, local):
            print(line)
    return 0 if props.get("State") == "running" else LSB_NOT_RUNNING


def status_unknown(name: str, err: HostAgentError) -> int:
    """status of a session that does not exist, as systemctl status of an unknown unit."""
    from hostagent.errors import quote

    print(f"Session {quote(name)} not found: {printable(err.message)}", file=sys.stderr)
    return LSB_UNKNOWN


_VERB_WORDS = {
    "new": "create",
    "rm": "remove",
    "send": "send to",
    "status": "get status of",
    "logs": "read the journal of",
}


# The daemon names its bus options; the user typed these.
TYPED = {
    "memory_max": "MemoryMax",
    "memory_high": "MemoryHigh",
    "cpu_weight": "CPUWeight",
    "tasks_max": "TasksMax",
    "runtime_max_sec": "RuntimeMaxSec",
    "columns": "Columns",
    "rows": "Rows",
    "user": "--uid",
    "env": "-e",
    "agent_session": "--agent-session",
    "worktree": "--worktree",
    "base": "--base",
}


def in_their_words(message: str) -> str:
    for key, typed in TYPED.items():
        message = message.replace(f"Option '{key}'", typed)
    return message


def fail(verb: str, name: str | None, err: HostAgentError) -> int:
    short = err.dbus_name.rsplit(".", 1)[-1]
    verb = _VERB_WORDS.get(verb, verb)
    what = f"{verb} session '{name}'" if name else verb
    hint = HINTS.get(short)
    print(
        f"Failed to {what}: {printable(in_their_words(err.message))}"
        # One pointer to what to do: the daemon's message usually has one already.
        + (f" Hint: {hint}" if hint and "hostagentctl" not in err.message else ""),
        file=sys.stderr,
    )
    return EXIT_FAILURE


def daemon_named(a: argparse.Namespace) -> str:
    """Which daemon answered, for a listing's legend: there may be two on one host."""
    if a.host or a.machine or a.address:
        return f"on {a.host or a.machine or a.address}"
    if a.system_bus:
        return "on the system daemon"
    return "on your own daemon (--user; --system lists the host's)"


_SNAKE_EXCEPTIONS = {"CPUUsageNSec": "cpu_usage_nsec"}


def snake(name: str) -> str:
    """A bus property's name as the JSON output's key: StartedAt -> started_at."""
    import re

    if name in _SNAKE_EXCEPTIONS:
        return _SNAKE_EXCEPTIONS[name]
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


_ENDED = ("stopped", "failed")


def as_json(props: dict[str, Any]) -> dict[str, Any]:
    """Properties in the one JSON shape every verb uses: snake_case keys, null for what is
    not known or not set (the bus's 0, "" and UINT64_MAX for those), as list --json has it."""
    return {snake(k): _json_value(k, v, props) for k, v in props.items()}


def _unset(key: str, value: Any, props: dict[str, Any]) -> bool:
    """A property that says nothing: null in --json, left out of status."""
    if value is None or value == UNKNOWN or value == "" or (key == "Question" and not value):
        return True
    if value == 0 and (key.endswith("At") or key == "ExitSignal"):
        return True  # a time that has not come, no signal
    if key == "Leader" and props.get("State") != "running":
        return True  # the pid of a server that is gone is nobody's
    # No exit yet, or the agent was killed rather than exiting.
    return key == "ExitStatus" and (
        props.get("State") not in _ENDED or bool(props.get("ExitSignal"))
    )


def _json_value(key: str, value: Any, props: dict[str, Any]) -> Any:
    if key == "Usage":
        return usage_json(value)
    return None if _unset(key, value, props) else value


def usage_json(value: Any) -> dict[str, Any] | None:
    """The Usage property in JSON: every key, cost_usd null where no one states it; null
    from a daemon too old to say."""
    if nothing_used(value):
        return dict(NOTHING_USED)
    from hostagent.usage import Usage

    return Usage.from_dict(value).to_dict() if isinstance(value, dict) else None


# Usage().to_dict(), which a unit test holds it to: a shell's usage, or an agent's before its
# first call, is shown without importing the usage module (its parsers cost a quick verb more
# than its call to the daemon).
NOTHING_USED = {
    "input": 0,
    "output": 0,
    "cache_read": 0,
    "cache_write": 0,
    "cost_usd": None,
    "calls": 0,
    "model": "",
}


def nothing_used(value: Any) -> bool:
    """A Usage property that says nothing was used and no cost is known."""
    return (
        isinstance(value, dict)
        and value.get("cost_usd") is None
        and not any(value.get(k) for k in NOTHING_USED)
    )


def usage_cells(value: Any) -> tuple[str, str]:
    """list's Tokens and Cost: 12.3k and $0.42; "-" for what is not known."""
    if not isinstance(value, dict) or nothing_used(value):
        return "-", "-"
    from hostagent.usage import Usage
    from hostagent.usage.text import format_cost, format_tokens

    used = Usage.from_dict(value)
    if used is None or not (used.calls or used.tokens):
        return "-", format_cost(used.cost_usd) if used else "-"
    return format_tokens(used.tokens), format_cost(used.cost_usd)


def usage_line(used: Usage) -> str:
    """status's Usage line: 12.3k in (1.1k cache read, 2.2k cache write), 876 out, ..."""
    from hostagent.usage.text import format_cost, format_tokens

    cached = [
        f"{format_tokens(n)} cache {kind}"
        for n, kind in ((used.cache_read, "read"), (used.cache_write, "write"))
        if n
    ]
    parts = [f"{format_tokens(used.input)} in" + (f" ({', '.join(cached)})" if cached else "")]
    parts += [
        f"{format_tokens(used.output)} out",
        f"{used.calls} call{'' if used.calls == 1 else 's'}",
    ]
    parts.append(format_cost(used.cost_usd) if used.cost_usd is not None else "cost unknown")
    return ", ".join(parts) + (f"; {used.model}" if used.model else "")


def emit_json(args: argparse.Namespace, value: Any) -> None:
    import json

    print(json.dumps(value, indent=2 if args.json == "pretty" else None, default=str))


def listed(row: Any, props: dict[str, Any], branch: str, local: bool) -> dict[str, Any]:
    """One session as list --json shows it: snake_case keys, null for what is not known."""
    started = props.get("StartedAt") or None
    running = row.state == "running"
    item: dict[str, Any] = {
        "name": row.name,
        "preset": row.preset,
        "state": row.state,
        "activity": row.activity,
        "owner": row.owner,
        "user": user_name(row.owner) if local else str(row.owner),
        "started_at": started if running else None,
        "memory": _known(props.get("MemoryCurrent")) if running else None,
        "cpu_nsec": _known(props.get("CPUUsageNSec")) if running else None,
        "result": props.get("Result") or None,
        "last_error": props.get("LastError") or None,
        "usage": usage_json(props.get("Usage")),
    }
    if branch:
        item["branch"] = branch
    if props.get("Parent"):
        item["parent"] = props["Parent"]
    return item


def _known(value: Any) -> int | None:
    return None if value is None or value == UNKNOWN else int(value)


_NAMES: dict[int, str] = {}


def user_name(uid: int) -> str:
    if uid not in _NAMES:
        try:
            _NAMES[uid] = pwd.getpwuid(uid).pw_name
        except KeyError:
            _NAMES[uid] = str(uid)
    return _NAMES[uid]


def human_bytes(size: int | None) -> str:
    """As systemctl status prints memory: 512B, 12.3M, 1.5G; "-" when not known."""
    if size is None or size == UNKNOWN:
        return "-"
    value = float(size)
    for unit in ("B", "K", "M", "G", "T"):
        if value < 1024:
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return f"{value:.1f}P"


def human_span(seconds: float) -> str:
    s = int(seconds)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def human_nsec(nsec: int | None) -> str:
    """CPU time as systemctl status prints it below a second (123ms), else as a span."""
    if nsec is None or nsec == UNKNOWN:
        return "-"
    return f"{nsec // 1_000_000}ms" if nsec < 1_000_000_000 else human_span(nsec / 1e9)


def human_age(started_usec: int | None, now: float | None = None) -> str:
    if not started_usec:
        return "-"
    return human_span(max(0.0, (time.time() if now is None else now) - started_usec / 1e6))


# status leaves these out at zero or empty too: a clean exit's status 0 is said in JSON only.
_QUIET_AT_ZERO = ("Leader", "ExitStatus", "Limits", "Command", "Properties", "Mcp", "Loosened")
_TIMES = ("StartedAt", "StoppedAt")


def _shown(key: str, value: Any) -> str:
    """A property as status prints it: times local and with an age, sizes and CPU human."""
    if key in _TIMES:
        when = time.strftime("%a %Y-%m-%d %H:%M:%S %Z", time.localtime(value / 1e6))
        return f"{when}; {human_age(value)} ago"
    if key == "MemoryCurrent":
        return human_bytes(value)
    if isinstance(value, bool):
        return "yes" if value else "no"
    if key == "Limits":
        from hostagent.values import format_limit

        return " ".join(f"{k}={format_limit(k, v)}" for k, v in sorted(value.items()))
    if key == "CPUUsageNSec":
        return human_nsec(value)
    if key == "Usage":
        from hostagent.usage import Usage

        return usage_line(Usage.from_dict(value))
    if key == "Question":  # its words only on one's own bus: hostagentctl inbox has them
        return f"{value.get('text') or 'a choice of ' + str(value.get('count'))}; see inbox"
    return " ".join(value) if isinstance(value, list) else str(value)


def status_lines(props: dict[str, Any], local: bool = True) -> list[str]:
    """status's lines for a session's properties: the known ones, without empty or stale ones.
    The owner is named as list names it (by this host's passwd, so only when local)."""
    lines = []
    for key in (
        "Name",
        "State",
        "Activity",
        "Question",
        "Preset",
        "Owner",
        "Parent",
        "Mcp",
        "Cwd",
        "Worktree",
        "Branch",
        "BaseRef",
        "Unit",
        "Leader",
        "AgentSessionId",
        "DormantReason",
        "LastError",
        "Result",
        "ExitStatus",
        "ExitSignal",
        "ResumeCount",
        "Command",
        "Limits",
        "Profile",
        "Loosened",
        "Properties",
        "StartedAt",
        "StoppedAt",
        "MemoryCurrent",
        "CPUUsageNSec",
        "Usage",
    ):
        value: Any = props.get(key)
        if _unset(key, value, props) or (key in _QUIET_AT_ZERO and not value):
            continue
        if key == "Usage" and not (isinstance(value, dict) and value.get("calls")):
            continue  # nothing used yet, or a preset whose usage is not read
        shown = _shown(key, value)
        if key == "Owner" and local:
            shown = f"{user_name(value)} ({value})"
        lines.append(f"{key:>15}: {printable(shown)}")
    return lines
