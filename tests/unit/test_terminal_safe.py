"""What hostagentctl prints of a session owner's text cannot drive the reader's terminal."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostagent.cli.ctl_output import status_lines
from hostagent.cli.terminal_safe import SafeStream
from hostagent.escape import printable, safe_lines


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("/home/bob/project", "/home/bob/project"),
        ("x\x1b]0;owned\x07", "x\\x1b]0;owned\\x07"),
        ("a\nOwner: 0", "a\\x0aOwner: 0"),
        ("tab\there", "tab\\x09here"),
        ("\x9b2J", "\\x9b2J"),  # C1 CSI: a terminal in 8-bit mode clears the screen
        ("\u202eevil", "\\u202eevil"),  # right-to-left override reorders what follows
        ("\x7f", "\\x7f"),
        ("naïve ✓", "naïve ✓"),
    ],
)
def test_a_value_is_one_printable_line(text: str, shown: str) -> None:
    assert printable(text) == shown


def test_the_stream_keeps_the_clis_own_layout() -> None:
    out = io.StringIO()
    SafeStream(out).write("NAME\tSTATE\nx\x1b[2J\r\n")
    assert out.getvalue() == "NAME\tSTATE\nx\\x1b[2J\\x0d\n"


@given(st.text())
def test_nothing_escapes_either_layer(text: str) -> None:
    assert printable(text).isprintable()
    assert all(c.isprintable() or c in "\n\t" for c in safe_lines(text))


def test_status_cannot_forge_a_line() -> None:
    lines = status_lines({"Name": "s", "Cwd": "/tmp/x\n          Owner: 0", "State": "running"})
    assert not any(line.strip().startswith("Owner") for line in lines)
    assert "\x1b" not in "".join(status_lines({"Command": ["sh", "-c", "\x1b[2J"]}))


def test_a_closed_pipe_ends_quietly() -> None:
    """`hostagentctl ... | head -1`: no traceback, the status a shell shows for SIGPIPE."""
    script = (
        "import sys\n"
        "from hostagent.cli.terminal_safe import closed_pipe, guard_output\n"
        "guard_output()\n"
        "try:\n"
        "    for i in range(100000):\n"
        "        print('line', i)\n"
        "    sys.stdout.flush()\n"
        "except BrokenPipeError:\n"
        "    sys.exit(closed_pipe())\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(30) == 141
    assert err == b""
