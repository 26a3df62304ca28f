"""The daemon's journal entries: native fields, a session's lines
findable by HOSTAGENT_SESSION=, and the command hostagentctl logs runs."""

from __future__ import annotations

import asyncio
import logging
import os
import struct

import pytest

from hostagent import log
from hostagent.daemon.host import journal
from hostagent.errors import LimitsExceeded
from tests.unit.fakes import run


def record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("x", logging.INFO, "f.py", 1, msg, args, None)


def test_a_sessions_lines_carry_its_fields() -> None:
    log.set_session_fields(lambda name: {"HOSTAGENT_OWNER_UID": "1001"})
    try:
        assert log.fields_of(record("session '%s': created", "a")) == {
            "HOSTAGENT_SESSION": "a",
            "HOSTAGENT_OWNER_UID": "1001",
        }
        assert log.fields_of(record("Recovery: %d adopted", 3)) == {}
    finally:
        log.set_session_fields(lambda name: {})


def test_the_native_entry_format() -> None:
    assert log.entry({"MESSAGE": "hi", "PRIORITY": "6"}) == b"MESSAGE=hi\nPRIORITY=6\n"
    two = log.entry({"MESSAGE": "a\nb"})
    assert two == b"MESSAGE\n" + struct.pack("<Q", 3) + b"a\nb\n"


def test_logs_asks_journalctl_for_the_sessions_lines() -> None:
    assert log.journal_argv("a", True, 20, False) == [
        "journalctl",
        "-u",
        "hostagent.service",
        "HOSTAGENT_SESSION=a",
        "-n",
        "20",
    ]
    assert log.journal_argv("a", False, 5, True)[1:3] == ["--user-unit", "hostagent.service"]
    # For an owner, only what was logged since her session was created: a name used before
    # by someone else shows nothing of theirs.
    assert "--since=@1700000000.000042" in log.journal_argv("a", True, 5, False, 1700000000000042)


def test_a_users_value_cannot_forge_a_journal_line() -> None:
    """A cwd with a newline in it would otherwise show as a line of its own with
    ``journalctl -o cat``; our own format text and numbers are kept as they are."""
    forged = record(
        "session '%s': cwd %s, %d tries", "a", "/tmp/x\nsession 'b': removed by root", 2
    )
    assert (
        log.message(forged) == "session 'a': cwd /tmp/x\\x0asession 'b': removed by root, 2 tries"
    )
    assert "\x1b" not in log.message(record("%s", "\x1b]0;t\x07"))
    assert log.message(record("plain %%")) == "plain %%"  # no arguments: not formatted


def test_journal_readers_are_bounded_per_user() -> None:
    """One user's follows cannot take every reader: the fifth of hers is refused with a
    named error, and another user still gets one."""

    async def body() -> None:
        readers = journal.JournalReaders(system=True, command=lambda *a: ["sleep", "30"])
        fds = [await readers.open(1001, "a", 0, 10, True) for _ in range(4)]
        with pytest.raises(LimitsExceeded, match="4 journal readers open already"):
            await readers.open(1001, "a", 0, 10, True)
        fds.append(await readers.open(1002, "b", 0, 10, True))
        for fd in fds:
            os.close(fd)
        for task in list(readers._running):
            task.cancel()
        await asyncio.gather(*readers._running, return_exceptions=True)

    run(body())
