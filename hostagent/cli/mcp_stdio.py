"""hostagentctl mcp's lines on stdin and stdout: each line a request answered in a task of its
own (a wait must not hold up a ping), its answer written whole when it is ready; an overlong
line refused, and stdin read to its end whatever it is (a pipe, a file, /dev/null, closed).
What each line means is mcp_protocol.py's; the tools are mcp.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import sys
from typing import Any, BinaryIO

from hostagent.cli.mcp_protocol import MAX_LINE, PARSE_ERROR, Server, error_line

EOF_GRACE = 2.0  # seconds the answers in flight get once stdin has ended


async def serve(server: Server, reader: asyncio.StreamReader, write: Any) -> None:
    """Answer each line of reader until it ends, each request in a task of its own (a wait
    must not hold up a ping), its answer written whole when it is ready."""
    pending: set[asyncio.Task[None]] = set()

    async def one(line: bytes) -> None:
        answer = await server.answer(line)
        if answer is not None:
            write(answer + b"\n")

    while True:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as e:
            line = e.partial  # the last line, without its newline; b"" at the end
            if not line.strip():
                break
        except asyncio.LimitOverrunError:
            await _skip_line(reader)
            write(error_line(None, PARSE_ERROR, f"a message is at most {MAX_LINE} bytes") + b"\n")
            continue
        if line.strip():
            task = asyncio.create_task(one(line.strip()))
            pending.add(task)
            task.add_done_callback(pending.discard)
    # The client closed its end, which is how it ends the server: what is answered within a
    # moment is still written (it may read on until we exit); a wait that goes on is cancelled.
    if pending:
        _, waiting = await asyncio.wait(set(pending), timeout=EOF_GRACE)
        for task in waiting:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*waiting, return_exceptions=True)


async def _skip_line(reader: asyncio.StreamReader) -> None:
    """Read past the rest of an overlong line."""
    while True:
        try:
            await reader.readuntil(b"\n")
            return
        except asyncio.LimitOverrunError as e:
            await reader.readexactly(e.consumed)
        except asyncio.IncompleteReadError:
            return


async def input_reader(stream: BinaryIO | None) -> asyncio.StreamReader:
    """A reader of stream's lines that ends when stream does. A pipe or a socket is waited on
    in the event loop; anything else (a file, /dev/null, a terminal) is read on a thread, and
    no stream at all (stdin closed) has ended already."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE)
    if stream is None:
        reader.feed_eof()
        return reader
    try:
        mode = os.fstat(stream.fileno()).st_mode
    except (OSError, ValueError):
        reader.feed_eof()  # input that cannot be read has ended
        return reader
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stream)
        return reader
    # asyncio takes a character device such as /dev/null and only fails later, when epoll
    # refuses it, in a callback: the reader would never end.
    task = loop.create_task(_feed(reader, stream))
    _FEEDING.add(task)
    task.add_done_callback(_FEEDING.discard)
    return reader


_FEEDING: set[asyncio.Task[None]] = set()


async def _feed(reader: asyncio.StreamReader, stream: BinaryIO) -> None:
    loop = asyncio.get_running_loop()
    try:
        while chunk := await loop.run_in_executor(None, os.read, stream.fileno(), 65536):
            reader.feed_data(chunk)
    except (OSError, ValueError):
        pass  # input that cannot be read has ended
    reader.feed_eof()


async def serve_stdio(server: Server) -> None:
    """serve on this process's stdin and stdout."""
    reader = await input_reader(sys.stdin.buffer if sys.stdin is not None else None)
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)
        out.flush()

    await serve(server, reader, write)
