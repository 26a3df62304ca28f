"""The program that looks for a session's conversation file as the session's owner, and the
reading of JSON that it shares with the CLIs' listings (discovery.py).

discovery.py runs this file's text with ``python -I -S -c``, as the owner, so nothing under a
user's home is opened as root; so it imports the standard library only. Its arguments: the
glob, the id's regular expression (group 1), the cwd field's path ("" for none), the session's
cwd, the earliest and latest times (seconds; a latest of 0 sets none), then the ids other
sessions hold. It prints the id of the newest matching file that was written (by its
modification or inode change time, whichever is later) since the earliest time, is not
claimed, and (when a field path is given) names the cwd; nothing when there is none.

CLIs keep their conversations in every layout: JSON lines whose first record says the cwd
(Codex), one pretty-printed document (Cline, Vibe), listings that print a list, JSON lines or
an object holding the list, with times in seconds, milliseconds or ISO 8601. A field is named
by a dotted path (``payload.cwd``, ``sessions.0.id``: digits index a list), and a time is read
as seconds whichever way it is written.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from datetime import datetime

MAX_DOCUMENT = 4 << 20  # a conversation file read whole to find its cwd, at most (bytes)


def field_at(value: object, path: str) -> object:
    """The value at a dotted path ("" is the value itself); None where the path leads nowhere."""
    for key in path.split(".") if path else ():
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return None
    return value


def seconds(when: object) -> float | None:
    """A time as seconds since the epoch: a number of seconds or (by its magnitude) of
    milliseconds, or an ISO 8601 string (without a zone: the host's local time, as the CLI
    that wrote it saw it); None for anything else."""
    if isinstance(when, bool):
        return None
    if isinstance(when, (int, float)):
        return when / 1000 if when > 1e11 else float(when)
    if isinstance(when, str):
        try:
            return datetime.fromisoformat(when.strip()).timestamp()
        except ValueError:
            return None
    return None


def file_field(path: str, field: str) -> object:
    """The field of a conversation file: in its first line's JSON (a JSON lines file), or else
    in the whole file read as one document (up to MAX_DOCUMENT)."""
    with open(path, "rb") as f:
        head = f.read(MAX_DOCUMENT + 1)
    for text in (head.split(b"\n", 1)[0], head):
        try:
            found = field_at(json.loads(text), field)
        except ValueError:
            continue
        if found is not None:
            return found
    return None


def newest(argv: list[str]) -> str:
    """The id the module's docstring describes, or ""."""
    pattern, id_re, field, cwd, since, until = argv[:6]
    claimed = set(argv[6:])
    earliest, latest = float(since), float(until)
    rx = re.compile(id_re)
    best: tuple[tuple[float, float], str] | None = None
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
        if max(st.st_mtime, st.st_ctime) < earliest or (latest and st.st_mtime > latest):
            continue
        if field:
            try:
                if file_field(path, field) != cwd:
                    continue
            except OSError:
                continue
        if best is None or (st.st_mtime, st.st_ctime) > best[0]:
            best = ((st.st_mtime, st.st_ctime), m.group(1))
    return best[1] if best else ""


if __name__ == "__main__":
    found = newest(sys.argv[1:])
    if found:
        print(found)
