"""Finding an agent's conversation id on disk, for CLIs that cannot be told one (Codex's
rollout files, for example).

The look is done by a small program run as the session's owner, so nothing under a user's home
is ever opened as root. It picks the newest file that matches the preset's glob, was written
(by its modification or inode change time, whichever is later) since the session's last start
(``run_began``: on a clock stepped back since, that start moves back with it; for a run that a
reboot ended, before this boot), is not claimed by another session, and (where the preset says
which JSON field of its first line holds the working directory) belongs to the session's cwd.
Newest wins, so a rotation that starts a new file is followed too.

A CLI that keeps its conversations in a database (OpenCode's SQLite) is asked instead: its own
listing (``discover.command``), run as the owner in the session's cwd, prints a JSON list, and
the same choice is made among the objects it lists.
"""

from __future__ import annotations

import json
import logging
import sys

from hostagent.daemon.host.owner import OutputTooLarge
from hostagent.daemon.host.ports import OwnerPort
from hostagent.identity import Owner
from hostagent.launch import cwd_dashed
from hostagent.presets import Discovery

log = logging.getLogger(__name__)

_FIND = r"""
import glob, json, os, re, sys
pattern, id_re, field, cwd, since, until = sys.argv[1:7]
claimed = set(sys.argv[7:])
rx = re.compile(id_re)
best = None
for path in glob.glob(pattern, recursive=True):
    m = rx.search(path)
    if not m or m.group(1) in claimed:
        continue
    try:
        st = os.stat(path)
    except OSError:
        continue
    # Written since the start by its inode's change time too, which only the kernel's clock
    # sets: a file whose modification time was set back (a tool that keeps times) is still
    # this run's. Before the boot and newest by its modification time, the agent's own word.
    mtime = st.st_mtime
    if max(mtime, st.st_ctime) < float(since) or (float(until) and mtime > float(until)):
        continue
    if field:
        try:
            with open(path, encoding="utf-8") as f:
                value = json.loads(f.readline())
            for key in field.split("."):
                value = value[key]
        except (OSError, ValueError, KeyError, TypeError, IndexError):
            continue
        if value != cwd:
            continue
    if best is None or (mtime, st.st_ctime) > best[0]:
        best = ((mtime, st.st_ctime), m.group(1))
if best:
    print(best[1])
"""


def run_began(started_at: int, started_boottime: int, now: int, boot_now: int) -> int:
    """When the run began, on the wall clock as it reads now (µs): its start stamp, or earlier
    when the clock was stepped back since, by as much as the steady boot-time clock says. A
    file the agent wrote after such a step is older than the stamp, not than this. A step
    forward needs nothing: what was written since is newer than the stamp all the same."""
    if not started_boottime or started_boottime > boot_now:
        return started_at  # a record from before boot times were kept, or another boot's run
    return min(started_at, now - (boot_now - started_boottime))


def render_glob(template: str, home: str, cwd: str) -> str:
    return template.replace("{home}", home).replace("{cwd_dashed}", cwd_dashed(cwd))


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


def pick_listed(
    listing: object, rule: Discovery, cwd: str, since: float, claimed: set[str], until: float = 0
) -> str:
    """The newest listed conversation of cwd created since `since` (seconds), and not after
    `until` when that is set, and unclaimed."""
    best: tuple[float, str] | None = None
    for item in listing if isinstance(listing, list) else []:
        if not isinstance(item, dict):
            continue
        agent_id, where, when = (
            item.get(f) for f in (rule.id_field, rule.cwd_field, rule.time_field)
        )
        if not isinstance(agent_id, str) or not agent_id or agent_id in claimed or where != cwd:
            continue
        if not isinstance(when, (int, float)) or isinstance(when, bool):
            continue
        seconds = when / 1000 if when > 1e11 else float(when)  # milliseconds, by magnitude
        if seconds < since or (until and seconds > until):
            continue
        if best is None or seconds > best[0]:
            best = (seconds, agent_id)
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
    if out is None:
        log.warning("Failed to list conversations with '%s'", " ".join(rule.command))
        return ""
    try:
        listing = json.loads(out)
    except ValueError:
        log.warning("'%s' did not print a JSON list", " ".join(rule.command))
        return ""
    return pick_listed(listing, rule, cwd, since_usec / 1e6 - 1, claimed, until_usec / 1e6)


async def discover(
    owners: OwnerPort,
    rule: Discovery,
    owner: Owner,
    cwd: str,
    since_usec: int,
    claimed: set[str],
    until_usec: int = 0,
) -> str:
    """The conversation id found on disk, or "". An until_usec of 0 sets no upper bound."""
    argv = [
        sys.executable,
        "-I",
        "-S",
        "-c",
        _FIND,
        render_glob(rule.glob, owner.home, cwd),
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
