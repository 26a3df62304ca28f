"""The program that lists a CLI's conversations from its SQLite database, as the session's
owner: for a CLI that keeps them in a table of its own and prints no JSON listing (Hermes's
``state.db``), so that a preset names the table and its columns instead of a command.

discovery.py runs this file's text with ``python -I -S -c``, as the owner, so nothing under a
user's home is opened as root; so it imports the standard library only. Its arguments: the
database's path, the table, then the id, cwd and time columns. It prints a JSON list of the
newest rows (by rowid), each an object of those three columns, which discovery.py chooses
among as among a listing's objects; nothing when the database cannot be read (not there yet,
locked for longer than a moment, another schema).
"""

from __future__ import annotations

import json
import re
import sys

ROWS = 200  # the newest rows looked at: a session's conversation is among the last started
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def rows(argv: list[str]) -> list[dict[str, object]]:
    path, table, *columns = argv
    if not all(_NAME.fullmatch(n) for n in (table, *columns)):
        return []  # presets/__init__.py refuses such names; never put one into SQL
    import sqlite3  # only here: a good part of the program's start

    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2)
        try:
            names = ", ".join(f'"{c}"' for c in columns)
            query = f'select {names} from "{table}" order by rowid desc limit {ROWS}'
            found = db.execute(query).fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return []
    return [dict(zip(columns, row, strict=True)) for row in found]


if __name__ == "__main__":
    print(json.dumps(rows(sys.argv[1:])))
