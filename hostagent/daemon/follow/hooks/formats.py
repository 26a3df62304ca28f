"""Lifecycle hooks: the per-session settings file that makes an agent CLI report to us, and
the pure reading of what a hook reports.

A CLI with hooks (Claude Code, and CLIs that copy its settings format) is started with a
settings file of its own, next to the session's tmux socket, so the user's own settings are
never touched. Each hook writes one line, carrying the session's secret token, into its owner's
hooks FIFO (daemon/hookpipe.py); ``hostagentctl hook EVENT`` over the bus is believed only from
a process inside the session's scope that knows the token, so nobody else can forge a
conversation id.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from hostagent.activity import HookReport
from hostagent.daemon.host.runtimedir import write_file
from hostagent.daemon.state.paths import ROOT_HOOKS_DIR
from hostagent.errors import InvalidArgs, quote

# The events each format's settings file subscribes to (docs/agent-clis.md). Claude's
# SessionStart carries the conversation id, also after /clear and compaction, which replace it.
# Gemini CLI and Qwen Code (its fork) read the same shape of file, with their own event names.
FORMAT_EVENTS = {
    "claude": (
        "SessionStart",
        "UserPromptSubmit",
        "PreToolUse",
        "PostToolUse",
        "PermissionRequest",
        "Notification",
        "Stop",
        "SessionEnd",
    ),
    "gemini": ("SessionStart", "BeforeAgent", "AfterAgent", "Notification", "SessionEnd"),
}
# Qwen Code took Claude's event names (permission_prompt, idle_prompt), not Gemini's.
FORMAT_EVENTS["qwen"] = FORMAT_EVENTS["claude"]
# A hook's timeout: Claude reads seconds; Gemini CLI and Qwen Code 0.15 read milliseconds, so
# 10 there killed every hook at once. Qwen Code 0.24 reads seconds again: 10000 is then only
# a generous ceiling for a hook that returns at once.
HOOK_TIMEOUT = {"claude": 10, "gemini": 10_000, "qwen": 10_000}
# Formats whose file the CLI reads only when root owns it and every directory above it.
ROOT_OWNED_FORMATS = ("gemini",)

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
_ID_KEYS = ("session_id", "sessionId", "conversation_id")
_EVENT_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")


def root_hooks_file(runtime_root: Path, name: str) -> Path:
    """A hooks file in the system daemon's own root-owned directory (0755)."""
    directory = runtime_root / ROOT_HOOKS_DIR
    directory.mkdir(mode=0o755, exist_ok=True)
    os.chmod(directory, 0o755)
    return directory / f"{name}.json"


def settings(
    fmt: str,
    hook_command: list[str],
    base: dict[str, object],
    ask: tuple[str, list[str], int] | None = None,
) -> dict[str, object]:
    """A settings file of format fmt with one command hook per event, over base (an admin's
    defaults file, kept because ours takes its place); ask: (event, command, timeout in
    seconds), a second hook for that event that waits for the question's answer, beside the
    one that reports at once (the CLI runs an event's hooks side by side)."""
    command = " ".join(_sh_quote(a) for a in hook_command)
    ours = {
        event: [{"hooks": [_hook(f"{command} {event}", HOOK_TIMEOUT[fmt])]}]
        for event in FORMAT_EVENTS[fmt]
    }
    if ask is not None:
        event, argv, timeout = ask
        ours[event][0]["hooks"].append(_hook(" ".join(_sh_quote(a) for a in argv), timeout))
    if fmt == "gemini":
        base = _keep_sessions(base)
    theirs = base.get("hooks")
    merged = dict(theirs) if isinstance(theirs, dict) else {}
    for event, groups in ours.items():
        earlier = merged.get(event)
        merged[event] = [*(earlier if isinstance(earlier, list) else []), *groups]
    return {**base, "hooks": merged}


def _hook(command: str, timeout: int) -> dict[str, object]:
    return {"type": "command", "command": command, "timeout": timeout}


def _keep_sessions(base: dict[str, object]) -> dict[str, object]:
    """Gemini's session cleanup, unless the admin's defaults say otherwise, is off: a Gemini
    starting in a project deletes the transcript of another one resumed there (seen with
    0.61), and a session the daemon will resume must keep its conversation."""
    general = base.get("general")
    general = dict(general) if isinstance(general, dict) else {}
    general.setdefault("sessionRetention", {"enabled": False})
    return {**base, "general": general}


def _sh_quote(arg: str) -> str:
    if re.fullmatch(r"[A-Za-z0-9_./=:-]+", arg):
        return arg
    return "'" + arg.replace("'", "'\\''") + "'"


def write_settings(path: Path, settings: dict[str, object]) -> None:
    """Write the hooks file inside a directory its owner controls (runtimedir.write_file)."""
    write_file(path, json.dumps(settings, indent=1))


def check_event(event: str) -> None:
    problem = event_problem(event)
    if problem:
        raise InvalidArgs(f"Hook event {quote(event)} {problem}.")


def event_problem(event: str) -> str | None:
    return None if _EVENT_RE.fullmatch(event) else "must be a hook event name such as SessionStart"


def read_report(event: str, data: dict[str, object]) -> HookReport:
    """What a hook said, keeping only well-formed values."""
    agent_session = ""
    for key in _ID_KEYS:
        value = data.get(key)
        if isinstance(value, str) and _ID_RE.fullmatch(value):
            agent_session = value
            break
    source = data.get("source")
    subtype = data.get("notification_type")
    return HookReport(
        event,
        agent_session,
        source if isinstance(source, str) else "",
        subtype if isinstance(subtype, str) and _EVENT_RE.fullmatch(subtype) else "",
    )
