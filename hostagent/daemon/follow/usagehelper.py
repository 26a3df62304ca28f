"""The program the daemon runs as a session's owner to read her CLI's usage records.

It is ``python -I -S -c PROGRAM FORMAT SPEC``: no site directories, no environment, nothing of
the owner's; SPEC maps each conversation id to the glob of its record. The program is
``hostagent/usage.py`` and ``hostagent/usagereaders.py`` (standard library only) joined into one
text, then the lines below, which open each record (OpenCode's and Hermes's are SQLite rows;
Vibe's is two files of one snapshot) and print every conversation's ``Usage`` as JSON. It runs
from its text, not from an import of hostagent, so the owner needs no access to the daemon's
installation.
"""

from __future__ import annotations

from pathlib import Path

from hostagent import usage, usagereaders

READ_LIMIT = 64 << 20  # bytes of one record read; a longer one is counted from its start
_MAIN = f"""
import glob as _glob, os as _os, sys as _sys
_TABLES = {{  # OpenCode's messages (each a JSON document), Hermes's session row (its totals)
    "opencode": "select id, data from message where session_id = ?",
    "hermes": "select * from sessions where id = ?",
}}
_BESIDE = {{"vibe": "runtime-state.json"}}  # a file read after the record, from its directory
_fmt, _spec = _sys.argv[1], json.loads(_sys.argv[2])
_out = {{}}
for _cid, _pattern in _spec.items():
    _paths = [p for p in _glob.glob(_pattern, recursive=True) if _os.path.isfile(p)]
    if not _paths:
        continue
    _path = max(_paths, key=_os.path.getmtime)  # the one the CLI writes now
    try:
        if _fmt in _TABLES:  # a database: the rows of this conversation
            import sqlite3 as _sqlite3  # only here: its import is a good part of a start
            _db = _sqlite3.connect("file:" + _path + "?mode=ro", uri=True, timeout=2)
            _db.row_factory = _sqlite3.Row
            _rows = [dict(r) for r in _db.execute(_TABLES[_fmt], (_cid,)).fetchall()]
            _text = "\\n".join(json.dumps(
                {{"id": r["id"], **json.loads(r["data"])}} if _fmt == "opencode" else r) for r in _rows)
        else:
            _text = ""
            for _one in [_path] + ([_os.path.join(_os.path.dirname(_path), _BESIDE[_fmt])]
                                   if _fmt in _BESIDE else []):
                with open(_one, encoding="utf-8", errors="replace") as _f:
                    _text += _f.read({READ_LIMIT}) + "\\n"
    except Exception:  # OSError, ValueError, sqlite3.Error: this record is not read now
        continue
    _out[_cid] = READERS[_fmt](_text).to_dict()
print(json.dumps(_out))
"""


def _joined(*modules: Path) -> str:
    """The modules as one text: a later module's ``from __future__`` and ``from hostagent``
    imports go, since what they import is defined above it."""
    texts = []
    for n, module in enumerate(modules):
        lines = module.read_text(encoding="utf-8").splitlines(keepends=True)
        drop = ("from __future__ ", "from hostagent")
        texts.append("".join(x for x in lines if not (n and x.startswith(drop))))
    return "".join(texts)


PROGRAM = _joined(Path(usage.__file__), Path(usagereaders.__file__)) + _MAIN
