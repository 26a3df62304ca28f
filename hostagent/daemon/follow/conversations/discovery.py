"""Finding an agent's conversation id on disk, for CLIs that cannot be told one (Codex's
rollout files, for example).

The look is done by a small program run as the session's owner (finder.py), so nothing under a
user's home is ever opened as root. It picks the newest file that matches the preset's glob
(which may start from the CLI's own variable, ``{$HERMES_HOME:-{home}/.hermes}``), was written
since the session's last start (``run_began``: on a clock stepped back since, that start moves
back with it; for a run that a reboot ended, before this boot), is not claimed by another
session, and (where the preset names the JSON field that holds the working directory) belongs
to the session's cwd. Newest wins, so a rotation that starts a new file is followed too.

A CLI that keeps its conversations in a database (OpenCode's SQLite) is asked instead: its own
listing (``discover.command``), run as the owner in the session's cwd, prints JSON (a list, JSON
lines, or an object holding the list at ``list_field``), and the same choice is made among the
objects it lists. Where the CLI prints no such listing, its SQLite table is read as one
(``discover.database``, by dblisting.py run as the owner).
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

from hostagent.daemon.follow.conversations import dblisting, finder
from hostagent.daemon.follow.conversations.finder import field_at, seconds
from hostagent.daemon.host.owner import OutputTooLarge
from hostagent.daemon.host.ports import OwnerPort
from hostagent.identity import Owner
from hostagent.launch import conversation_glob
from hostagent.presets.discovery import Discovery

log = logging.getLogger(__name__)


def run_began(started_at: int, started_boottime: int, now: int, boot_now: int) -> int:
    """When the run began, on the wall clock as it reads now (µs): its start stamp, or earlier
    when the clock was stepped back since, by as much as the steady boot-time clock says. A
    file the agent wrote after such a step is older than the stamp, not than this. A step
    forward needs nothing: what was written since is newer than the stamp all the same."""
    if not started_boottime or started_boottime > boot_now:
        return started_at  # a record from before boot times were kept, or another boot's run
    return min(started_at, now - (boot_now - started_boottime))


_FINDER = Path(finder.__file__).read_text(encoding="utf-8")  # run as the owner: its text
_DB_LISTING = Path(dblisting.__file__).read_text(encoding="utf-8")  # so is this


def database_listing(rule: Discovery, home: str, cwd: str, env: dict[str, str]) -> list[str]:
    """The command that lists the rows of a preset's conversation table as JSON objects."""
    path = conversation_glob(rule.database, "", home, cwd, env)
    columns = (rule.table, rule.id_field, rule.cwd_field, rule.time_field)
    return [sys.executable, "-I", "-S", "-c", _DB_LISTING, path, *columns]


LIST_TIMEOUT = 30.0  # a CLI's own listing starts a Node program: seconds, not milliseconds
# Run argv in a directory, as sh would: a CLI's listing answers for its cwd.
_IN_DIR = 'cd -- "$1" || exit 125; shift; exec "$@"'


async def run_listing(
    owners: OwnerPort, owner: Owner, cwd: str, command: list[str], env: dict[str, str]
) -> str | None:
    """What the CLI's listing command prints, run as the owner in cwd; None if it failed."""
    argv = ["/bin/sh", "-c", _IN_DIR, "sh", cwd, *command]
    try:
        result = await owners.run(
            owner, argv, LIST_TIMEOUT, env=env, runs_user_code="session listing"
        )
    except OutputTooLarge:
        return None
    if result is None or result[0] != 0:
        return None
    return result[1].decode(errors="replace")


def listed(out: str, list_field: str = "") -> list[object]:
    """The objects a listing printed: a JSON list, JSON lines, or the list at list_field of a
    JSON object; [] when it printed none of those."""
    try:
        document: object = json.loads(out)
    except ValueError:
        try:
            document = [json.loads(line) for line in out.splitlines() if line.strip()]
        except ValueError:
            return []
    items = field_at(document, list_field)
    return items if isinstance(items, list) else []


def pick_listed(
    items: list[object],
    rule: Discovery,
    cwd: str,
    since: float,
    claimed: set[str],
    until: float = 0,
) -> str:
    """The newest listed conversation of cwd created since `since` (seconds), and not after
    `until` when that is set, and unclaimed."""
    best: tuple[float, str] | None = None
    for item in items:
        agent_id, where = (field_at(item, f) for f in (rule.id_field, rule.cwd_field))
        when = seconds(field_at(item, rule.time_field))
        if not isinstance(agent_id, str) or not agent_id or agent_id in claimed or where != cwd:
            continue
        if when is None or when < since or (until and when > until):
            continue
        if best is None or when > best[0]:
            best = (when, agent_id)
    return best[1] if best else ""


async def discover_listed(
    owners: OwnerPort,
    rule: Discovery,
    owner: Owner,
    cwd: str,
    since_usec: int,
    claimed: set[str],
    env: dict[str, str],
    command: list[str],
    until_usec: int = 0,
) -> str:
    """The conversation id the CLI's own listing names, or ""."""
    out = await run_listing(owners, owner, cwd, command, env)
    what = rule.database or " ".join(rule.command)
    if out is None:
        log.warning("Failed to list conversations with '%s'", what)
        return ""
    items = listed(out, rule.list_field)
    if not items:
        log.debug("'%s' listed no conversations", what)
        return ""
    return pick_listed(items, rule, cwd, since_usec / 1e6 - 1, claimed, until_usec / 1e6)


async def discover(
    owners: OwnerPort,
    rule: Discovery,
    owner: Owner,
    cwd: str,
    since_usec: int,
    claimed: set[str],
    env: dict[str, str],
    until_usec: int = 0,
) -> str:
    """The conversation id found on disk, or "". env is the session's environment, which the
    glob may start from; an until_usec of 0 sets no upper bound."""
    pattern = conversation_glob(rule.glob, "", owner.home, cwd, env)
    if not pattern.startswith("/"):
        log.warning("Not looking for a conversation under %r: not an absolute path", pattern)
        return ""
    argv = [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _FINDER,
        pattern,
        rule.id_pattern,
        rule.cwd_field,
        cwd,
        str(since_usec / 1e6 - 1),  # file times can trail the clock we stamped by a little
        str(until_usec / 1e6),
        *sorted(claimed),
    ]
    result = await owners.run(owner, argv)
    if result is None or result[0] != 0:
        code = -1 if result is None else result[0]
        log.warning("Failed to look for a conversation id under %s (exit %d)", rule.glob, code)
        return ""
    return result[1].decode(errors="replace").strip()
