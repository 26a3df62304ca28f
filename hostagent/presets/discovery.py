"""A preset's discovery: where its CLI keeps its conversations, read from ``agent_id.discover``.

The daemon finds a session's conversation id on disk with it (daemon/follow/conversations/discovery.py) when
the CLI cannot be told one: files matched by a glob, the CLI's own listing printing JSON, or a
table of its SQLite database. hostagent-presets(5) says what each field takes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from hostagent import yamlfile

_DISCOVER_KNOWN = {
    "glob",
    "id",
    "cwd_field",
    "command",
    "id_field",
    "time_field",
    "list_field",
    "database",
    "table",
}
_COLUMN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Discovery:
    """Where a CLI keeps its conversations, for finding the id of a session's: files on disk
    (glob), the CLI's own listing (command) printing JSON objects, or a table of its SQLite
    database (database, table; the fields are its columns). Fields are dotted paths and times
    are read as daemon/follow/conversations/finder.py says."""

    glob: str = ""  # with {$VAR:-…}, {home} and {cwd_dashed}; ** matches any depth
    id_pattern: str = ""  # a regular expression over the path; group 1 is the id
    cwd_field: str = ""  # a dotted path into a file's JSON (or a listed object's)
    command: tuple[str, ...] = ()  # run as the owner in the session's cwd
    id_field: str = ""  # a listed object's id (a dotted path, as the others)
    time_field: str = ""  # a listed object's creation time: seconds, milliseconds or ISO 8601
    list_field: str = ""  # where the list is in a listing that prints an object
    database: str = ""  # a path template of a SQLite database (as glob's)
    table: str = ""  # the database's table of conversations


def parse_discovery(doc: yamlfile.Document, value: object) -> Discovery:
    rule = yamlfile.expect_mapping(doc, value, "agent_id.discover")
    yamlfile.reject_unknown(doc, rule, _DISCOVER_KNOWN, "agent_id.discover")
    if "command" in rule:
        return _parse_listing(doc, rule)
    if "database" in rule:
        return _parse_database(doc, rule)
    glob, pattern, cwd_field = (rule.get(k, "") for k in ("glob", "id", "cwd_field"))
    if not _under_home(glob):
        raise doc.error(
            "agent_id.discover.glob", "must be a glob that starts with {home}/ or {$VAR:-…}"
        )
    try:
        if not isinstance(pattern, str) or re.compile(pattern).groups < 1:
            raise re.error("no group")
    except re.error:
        raise doc.error(
            "agent_id.discover.id", "must be a regular expression whose group 1 is the id"
        ) from None
    if not isinstance(cwd_field, str):
        raise doc.error("agent_id.discover.cwd_field", "must be a dotted field path")
    return Discovery(glob, pattern, cwd_field)


def _under_home(template: object) -> bool:
    return isinstance(template, str) and template.startswith(("{home}/", "{$"))


def _parse_database(doc: yamlfile.Document, rule: dict[str, object]) -> Discovery:
    fld = "agent_id.discover"
    if not _under_home(rule["database"]):
        raise doc.error(f"{fld}.database", "must be a path that starts with {home}/ or {$VAR:-…}")
    names = {}
    for key in ("table", "id_field", "cwd_field", "time_field"):
        value = rule.get(key, "")
        if not isinstance(value, str) or not _COLUMN.fullmatch(value):
            raise doc.error(
                f"{fld}.{key}",
                "must name a table or column of the database ([A-Za-z_][A-Za-z0-9_]*)",
            )
        names[key] = value
    if {"glob", "id", "command", "list_field"} & set(rule):
        raise doc.error(fld, "takes a database, a command or a glob, only one")
    return Discovery(
        database=str(rule["database"]),
        table=names["table"],
        id_field=names["id_field"],
        cwd_field=names["cwd_field"],
        time_field=names["time_field"],
    )


def _parse_listing(doc: yamlfile.Document, rule: dict[str, object]) -> Discovery:
    fld = "agent_id.discover"
    command = yamlfile.expect_str_list(doc, rule["command"], f"{fld}.command")
    if not command:
        raise doc.error(f"{fld}.command", "must name the CLI's listing command")
    fields = {}
    for key in ("id_field", "cwd_field", "time_field"):
        value = rule.get(key, "")
        if not isinstance(value, str) or not value:
            raise doc.error(f"{fld}.{key}", "must name a field of the listed objects")
        fields[key] = value
    list_field = rule.get("list_field", "")
    if not isinstance(list_field, str):
        raise doc.error(f"{fld}.list_field", "must be the dotted path of the listed objects")
    if "glob" in rule or "id" in rule or "database" in rule:
        raise doc.error(fld, "takes a database, a command or a glob, only one")
    return Discovery(command=tuple(command), list_field=list_field, **fields)
