"""What the daemon's usage helper runs as a session's owner: each conversation's record
found, opened and read into its ``Usage``, printed as JSON.

It runs as ``python -I -S -c PROGRAM FORMAT SPEC`` (``daemon/follow/usagehelper.py`` joins
``usage/__init__.py``, ``usage/readers.py`` and this module into PROGRAM): standard library only,
nothing of the owner's environment, no import of hostagent, so the owner needs no access to
the daemon's installation. SPEC maps each conversation id to the glob of its record. A record
is a file (Vibe's, two of one snapshot), or rows of a SQLite database (OpenCode's messages,
Hermes's session row). ``python -m hostagent.usage.records FORMAT SPEC`` runs it the same way.
"""

from __future__ import annotations

import glob
import json
import os
import sys
from typing import Any

from hostagent.usage.readers import READERS

READ_LIMIT = 64 << 20  # bytes of one record read; a longer one is counted from its start
# A database's rows of one conversation: OpenCode's messages (each a JSON document), Hermes's
# session row (its totals).
TABLES = {
    "opencode": "select id, data from message where session_id = ?",
    "hermes": "select * from sessions where id = ?",
}
BESIDE = {"vibe": "runtime-state.json"}  # a file read after the record, from its directory


def record_text(fmt: str, path: str, conversation: str) -> str:
    """The conversation's record as its reader takes it: a file's text (and the one beside
    it), or its rows as JSON lines. OSError, ValueError or sqlite3.Error when it cannot be
    read now."""
    if fmt in TABLES:
        import sqlite3  # only here: its import is a good part of a start

        db = sqlite3.connect("file:" + path + "?mode=ro", uri=True, timeout=2)
        try:
            db.row_factory = sqlite3.Row
            rows = [dict(r) for r in db.execute(TABLES[fmt], (conversation,)).fetchall()]
        finally:
            db.close()
        if fmt == "opencode":
            return "\n".join(json.dumps({"id": r["id"], **json.loads(r["data"])}) for r in rows)
        return "\n".join(json.dumps(r) for r in rows)
    text = ""
    beside = [os.path.join(os.path.dirname(path), BESIDE[fmt])] if fmt in BESIDE else []
    for one in [path, *beside]:
        with open(one, encoding="utf-8", errors="replace") as f:
            text += f.read(READ_LIMIT) + "\n"
    return text


def read_all(fmt: str, spec: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Each conversation's usage, from the newest file its glob finds (the one the CLI writes
    now); one with no record, or none readable now, is left out."""
    found: dict[str, dict[str, Any]] = {}
    for conversation, pattern in spec.items():
        paths = [p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p)]
        try:
            text = record_text(fmt, max(paths, key=os.path.getmtime), conversation)
        except Exception:  # OSError, ValueError, sqlite3.Error; max of none: not read now
            continue
        found[conversation] = READERS[fmt](text).to_dict()
    return found


def main(argv: list[str]) -> None:
    print(json.dumps(read_all(argv[1], json.loads(argv[2]))))


if __name__ == "__main__":
    main(sys.argv)
