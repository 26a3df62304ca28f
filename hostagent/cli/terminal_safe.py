"""Nothing a session's owner wrote reaches the reader's terminal as a control sequence.

Two layers (the rules are in hostagent/escape.py): the CLI passes each value through
``printable`` before it puts it into a line, so its newlines cannot start a line of their own,
and ``SafeStream`` escapes every control character but the line breaks and tabs of whatever the
CLI writes, so a place that forgot the first still cannot move the cursor. JSON needs neither:
``json.dumps`` escapes control characters itself. And a reader that goes away (``| head -1``)
ends the CLI quietly.
"""

from __future__ import annotations

import os
import sys

from hostagent.escape import safe_lines

TYPE_CHECKING = False  # typing's own import costs more than a quick verb's call
if TYPE_CHECKING:
    from typing import TextIO


class SafeStream:
    """A text stream that writes through ``safe_lines``; everything else is the wrapped one's."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(safe_lines(text))

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def guard_output() -> None:
    """Make stdout and stderr safe for the rest of this process."""
    sys.stdout = SafeStream(sys.stdout)
    sys.stderr = SafeStream(sys.stderr)


def closed_pipe() -> int:
    """The reader of our output went away (``| head -1``): end quietly, as systemctl does,
    with the status a shell shows for SIGPIPE. Python would otherwise complain again when it
    flushes stdout at exit, so stdout now goes nowhere."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ else 1)
    except (OSError, ValueError):
        pass
    return 141
