"""Logging for the journal: entries with fields of their own under systemd, where a session's
lines carry ``HOSTAGENT_SESSION=`` (so ``journalctl HOSTAGENT_SESSION=x`` and ``hostagentctl
logs x`` find them); ``LEVEL: message`` on a terminal.

The native protocol (one datagram per entry to journald's socket) needs nothing beyond the
standard library; where the socket cannot take an entry, it goes to stderr as before.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import sys
from collections.abc import Callable

from hostagent.escape import printable

_PRIORITY = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}


def message(record: logging.LogRecord) -> str:
    """The line's text, each of its arguments escaped: a value of a user's (a cwd, a command)
    carries no newline or escape into the journal, where it could forge a line of ours."""
    args = record.args
    if isinstance(args, tuple) and args:
        safe = tuple(printable(a) if isinstance(a, str) else a for a in args)
        return str(record.msg) % safe
    return record.getMessage()


class JournalFormatter(logging.Formatter):
    """``<N>message`` under systemd (JOURNAL_STREAM set), ``LEVEL: message`` on a terminal."""

    def __init__(self, journal: bool) -> None:
        super().__init__()
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        text = message(record)
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        if self.journal:
            prio = _PRIORITY.get(record.levelno, 6)
            return "\n".join(f"<{prio}>{line}" for line in text.splitlines())
        return f"{record.levelname.lower()}: {text}"


JOURNAL_SOCKET = "/run/systemd/journal/socket"
IDENTIFIER = "hostagent"


def _no_fields(name: str) -> dict[str, str]:
    return {}


# The fields of a session's lines beyond its name, from the daemon, which knows the owner and
# the conversation id (set_session_fields).
_session_fields: Callable[[str], dict[str, str]] = _no_fields


def set_session_fields(fields: Callable[[str], dict[str, str]]) -> None:
    global _session_fields
    _session_fields = fields


def fields_of(record: logging.LogRecord) -> dict[str, str]:
    """HOSTAGENT_SESSION= and friends for a line about one session ("session '%s': ..."), and
    the fields a line brings itself (``extra={"journal": {...}}``)."""
    own = getattr(record, "journal", None)
    own = own if isinstance(own, dict) else {}
    msg = record.msg if isinstance(record.msg, str) else ""
    if not msg.startswith("session '%s'") or not isinstance(record.args, tuple) or not record.args:
        return own
    name = str(record.args[0])
    return {"HOSTAGENT_SESSION": name, **_session_fields(name), **own}


def entry(fields: dict[str, str]) -> bytes:
    """The journal's native serialisation: KEY=value lines, and a length for multi-line values."""
    out = bytearray()
    for key, value in fields.items():
        data = value.encode(errors="replace")
        if b"\n" in data:
            out += key.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += key.encode() + b"=" + data + b"\n"
    return bytes(out)


class NativeJournalHandler(logging.Handler):
    def __init__(self, fallback: logging.Handler) -> None:
        super().__init__()
        self.fallback = fallback
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        # Never wait for journald on the event loop: a full queue sends the line to stderr.
        self.sock.setblocking(False)

    def emit(self, record: logging.LogRecord) -> None:
        text = message(record)
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        fields = {
            "MESSAGE": text,
            "PRIORITY": str(_PRIORITY.get(record.levelno, 6)),
            "SYSLOG_IDENTIFIER": IDENTIFIER,
            "CODE_FILE": record.pathname,
            "CODE_LINE": str(record.lineno),
            "CODE_FUNC": record.funcName,
            **fields_of(record),
        }
        try:
            self.sock.sendto(entry(fields), JOURNAL_SOCKET)
        except OSError:
            self.fallback.emit(record)  # too large, or no journald: the stream still has it


def setup(debug: bool) -> None:
    journal = bool(os.environ.get("JOURNAL_STREAM"))
    stream = logging.StreamHandler(sys.stderr)
    stream.setFormatter(JournalFormatter(journal))
    handler: logging.Handler = stream
    if journal and os.path.exists(JOURNAL_SOCKET):
        handler = NativeJournalHandler(stream)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)


def journal_argv(
    name: str, system: bool, lines: int, follow: bool, since_usec: int = 0
) -> list[str]:
    """journalctl for the daemon's lines about session name (the last lines, then new ones
    with follow); with since_usec, only those since then (a session's creation)."""
    unit = ["-u", "hostagent.service"] if system else ["--user-unit", "hostagent.service"]
    since = []
    if since_usec:
        seconds, usec = divmod(since_usec, 1_000_000)
        since = [f"--since=@{seconds}.{usec:06d}"]
    return [
        "journalctl",
        *unit,
        f"HOSTAGENT_SESSION={name}",
        *since,
        "-n",
        str(max(lines, 0)),
        *(["-f"] if follow else []),
    ]
