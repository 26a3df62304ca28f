"""Finding an agent's conversation id on disk, for CLIs that cannot be told one (Codex's
rollout files, for example).

The look is done by a small program run as the session's owner, so nothing under a user's home
is ever opened as root. It picks the newest file that matches the preset's glob, was written
since the session's last start, is not claimed by another session, and (where the preset says
which JSON field of its first line holds the working directory) belongs to the session's cwd.
Newest wins, so a rotation that starts a new file is followed too.
"""

from __future__ import annotations

import logging
import sys

from hostagent.daemon.owner import Owner, run_as_owner
from hostagent.launch import cwd_dashed
from hostagent.presets import Discovery

log = logging.getLogger(__name__)

_FIND = r"""
import glob, json, os, re, sys
pattern, id_re, field, cwd, since = sys.argv[1:6]
claimed = set(sys.argv[6:])
rx = re.compile(id_re)
best = None
for path in glob.glob(pattern, recursive=True):
    m = rx.search(path)
    if not m or m.group(1) in claimed:
        continue
    try:
        mtime = os.stat(path).st_mtime
    except OSError:
        continue
    if mtime < float(since):
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
    if best is None or mtime > best[0]:
        best = (mtime, m.group(1))
if best:
    print(best[1])
"""


def render_glob(template: str, home: str, cwd: str) -> str:
    return template.replace("{home}", home).replace("{cwd_dashed}", cwd_dashed(cwd))


async def discover(
    rule: Discovery, owner: Owner, cwd: str, since_usec: int, claimed: set[str]
) -> str:
    """The conversation id found on disk, or ""."""
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
        *sorted(claimed),
    ]
    code, out = await run_as_owner(owner, argv)
    if code != 0:
        log.warning("Failed to look for a conversation id under %s (exit %d)", rule.glob, code)
        return ""
    return out.strip()
