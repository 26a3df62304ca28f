"""A session record's form on disk: what it must hold, how it proves itself whole, and which
write of the session it is.

A record names its format version, carries every field it needs, and (from version 2 on) ends
with a checksum of its content. ``revision`` counts the writes of one session's record, so
that of two copies the newer is known without trusting a clock. Reading is defensive: a file
that is not a regular one, does not parse, lacks a field, fails its checksum, names another
session or comes from a future schema raises RecordError.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from hostagent.session import (
    SCHEMA_VERSION,
    DormantReason,
    Limits,
    SessionRecord,
    State,
    name_problem,
)
from hostagent.usage import Usage
from hostagent.yamlfile import LOADER

# What a YAML loader will not take raw inside a double-quoted string: characters outside
# YAML's printable set, those it reads as line breaks (NEL, LS, PS) and the byte order mark.
# JSON leaves them raw; dump escapes them as \uXXXX, which YAML reads back as the same text.
_YAML_UNSAFE = re.compile(
    "[^\t\n\r\x20-\x7e\xa0-\u2027\u202a-\ud7ff\ue000-\ufefe\uff00-\ufffd\U00010000-\U0010ffff]"
)

SUFFIX = ".yaml"
CHECKSUM = "checksum"  # the last key of a version 2 record: sha256 of everything before it
# Which write of a session's record this is, counted by the store (not a field of the session):
# it tells the newer of a record and its copy. Records from before it count as 0.
REVISION = "revision"
# Fields every record has had since version 1; a record without one of them was cut short.
REQUIRED = ("name", "uuid", "owner", "preset", "cwd", "state", "unit", "boot_id", "created_at")


class RecordError(Exception):
    """A sidecar that cannot be trusted."""


def checksum(data: dict[str, Any]) -> str:
    """The checksum of a record's fields, independent of how YAML laid them out."""
    fields = {k: v for k, v in data.items() if k != CHECKSUM}
    canonical = json.dumps(fields, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


_FIELDS = dataclasses.fields(SessionRecord)
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode


def record_to_dict(record: SessionRecord, revision: int = 0) -> dict[str, Any]:
    """The record as it is written, its checksum last."""
    # A shallow copy: the text is made from it at once, and dataclasses.asdict's deep walk
    # cost more than the rest of a write.
    data = {f.name: getattr(record, f.name) for f in _FIELDS}
    data["limits"] = vars(record.limits).copy()
    data["state"] = record.state.value
    data["dormant_reason"] = record.dormant_reason.value
    data[REVISION] = revision
    data[CHECKSUM] = checksum(data)
    return data


def revision_of(data: Any) -> int:
    value = data.get(REVISION, 0) if isinstance(data, dict) else 0
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def record_from_dict(data: Any, expected_name: str | None = None) -> SessionRecord:
    if not isinstance(data, dict):
        raise RecordError("not a mapping")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise RecordError(f"bad schema_version {version!r}")
    if version > SCHEMA_VERSION:
        raise RecordError(f"schema_version {version} is newer than {SCHEMA_VERSION}")
    if version >= 2 and data.get(CHECKSUM) != checksum(data):
        raise RecordError("its checksum is missing or wrong (cut short, or changed by hand)")
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise RecordError(f"field {missing[0]!r} is missing (cut short?)")
    fields = {f.name: f for f in dataclasses.fields(SessionRecord)}
    defaults = SessionRecord()
    values: dict[str, Any] = {}
    for key, value in data.items():
        if key not in fields:
            continue  # written by a newer minor version; harmless to drop
        values[key] = _coerce(key, value, getattr(defaults, key))
    record = SessionRecord(**values)
    problem = name_problem(record.name)
    if problem:
        raise RecordError(f"name {record.name!r} {problem}")
    if expected_name is not None and record.name != expected_name:
        raise RecordError(f"holds session {record.name!r}, not {expected_name!r}")
    return record


def _coerce(key: str, value: Any, default: Any) -> Any:
    try:
        if isinstance(default, State):
            return State(value)
        if isinstance(default, DormantReason):
            return DormantReason(value or "")
        if isinstance(default, Limits):
            if not isinstance(value, dict):
                raise TypeError
            return Limits(**{k: int(v) for k, v in value.items() if hasattr(default, k)})
        if key in _USAGE_FIELDS:
            return _usage_value(key, value)
        # bool is an int to Python, not to a record: neither stands for the other.
        if isinstance(value, bool) != isinstance(default, bool):
            raise TypeError
        if not isinstance(value, type(default)):
            raise TypeError
        if isinstance(default, list) and not all(isinstance(x, str) for x in value):
            raise TypeError
        if isinstance(default, dict) and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise TypeError
    except (TypeError, ValueError):
        raise RecordError(f"field {key!r} has a bad value {value!r}") from None
    return value


_USAGE_FIELDS = frozenset({"usage", "usage_base", "usage_today", "usage_logged"})


def _usage_value(key: str, value: Any) -> Any:
    """A usage field as the record keeps it: Usage's fields (one Usage, or one per
    conversation id under "usage"), whatever of them made sense."""
    if not isinstance(value, dict):
        raise TypeError
    if key != "usage":
        return Usage.from_dict(value).to_dict() if value else {}
    if not all(isinstance(k, str) and isinstance(v, dict) for k, v in value.items()):
        raise TypeError
    return {k: Usage.from_dict(v).to_dict() for k, v in value.items()}


def dump(record: SessionRecord, revision: int) -> str:
    """The record's text, as the store writes it: JSON, which is YAML (parse reads it with
    json, and older hostagents with their YAML loader), written by Python's C encoder. PyYAML's
    dumper walks a record in Python at about a millisecond a write, and a create writes two."""
    # One key a line, each value on it in JSON's flow form: json's indent would leave the C
    # encoder for its Python one, which cost as much as the rest of the write.
    lines = ",\n".join(
        f"  {_ENCODE(key)}: {_ENCODE(value)}"
        for key, value in record_to_dict(record, revision).items()
    )
    return _YAML_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", "{\n" + lines + "\n}") + "\n"


def read(path: Path) -> str:
    """The text of the record file at path; RecordError when it is not a regular file
    (OSError, UnicodeDecodeError when it cannot be read)."""
    # O_NONBLOCK: a FIFO planted here must not hang the daemon's start.
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RecordError("not a regular file")
    with os.fdopen(fd, encoding="utf-8") as f:
        return f.read()


def parse(text: str, name: str) -> tuple[SessionRecord, int]:
    """The record named name in text, and its revision; RecordError (or yaml.YAMLError) when
    it cannot be trusted."""
    # The store writes JSON (dump), which json reads twenty times faster than the C YAML
    # loader: a third of a second of the daemon's start with a thousand records. A record
    # written by hand, or by a hostagent from before JSON, is YAML.
    try:
        data = json.loads(text)
    except ValueError:
        data = yaml.load(text, Loader=LOADER)  # a safe loader, C or Python
    return record_from_dict(data, expected_name=name), revision_of(data)
