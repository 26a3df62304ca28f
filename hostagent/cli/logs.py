"""hostagentctl logs: the daemon's journal lines about one session.

root, and a user of her own daemon, read the journal with journalctl itself (its pager and
colours included). Anyone else cannot read a system service's journal, so the system daemon
reads it for them (OpenJournal), for the sessions they may act on.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import os
import sys

from hostagent.cli.ctl_output import EXIT_FAILURE
from hostagent.client.library import Client
from hostagent.log import journal_argv


def reads_journal_itself(a: argparse.Namespace) -> bool:
    """root reads every journal, and a user's own daemon writes to her own; anyone else asks
    the system daemon, which reads the lines of the sessions they may act on."""
    return not a.system_bus or os.geteuid() == 0


def logs(a: argparse.Namespace) -> int:
    argv = journal_argv(a.name, a.system_bus, a.lines, a.follow)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        print(f"Failed to run journalctl: {e.strerror}", file=sys.stderr)
    return EXIT_FAILURE


async def verb_logs(c: Client, a: argparse.Namespace) -> int:
    """The daemon's journal lines about one session, read by the system daemon for its owner.
    The pipe is read by the event loop, so that Ctrl-C (which asyncio turns into cancelling
    this task) ends a follow at once; closing the pipe tells the daemon to stop reading."""
    fd = await c.journal(a.name, a.lines, a.follow)
    pipe = os.fdopen(fd, "rb", buffering=0)
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        while chunk := await reader.read(65536):
            sys.stdout.write(decoder.decode(chunk))
            sys.stdout.flush()
    finally:
        transport.close()
    return 0
