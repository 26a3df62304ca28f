"""The attach's tmux client in a domain of its own (hostagent/cli/attaching.py)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

from hostagent.cli.attaching import (
    EXECUTE,
    IOCTL_DEV,
    NO_SERVER_DIR,
    READ_DIR,
    READ_FILE,
    REFER,
    TRUNCATE,
    WRITE_FILE,
    client_env,
    elf_interpreter,
    handled,
    landlock_abi,
    rules,
)


@pytest.mark.parametrize(
    ("abi", "extra"),
    [
        (1, 0),
        (2, REFER),
        (3, REFER | TRUNCATE),
        (4, REFER | TRUNCATE),
        (5, REFER | TRUNCATE | IOCTL_DEV),
        (7, REFER | TRUNCATE | IOCTL_DEV),
    ],
)
def test_every_right_the_kernel_knows_is_denied_but_where_allowed(abi: int, extra: int) -> None:
    assert handled(abi) == (1 << 13) - 1 | extra


def test_the_client_runs_tmux_reads_the_system_and_writes_its_terminal_alone() -> None:
    allowed = dict(rules("/usr/bin/tmux", "/lib64/ld.so", "/dev/pts/3", 6))
    assert allowed.pop("/usr/bin/tmux") == EXECUTE | READ_FILE
    assert allowed.pop("/lib64/ld.so") == EXECUTE | READ_FILE
    assert (
        allowed.pop("/dev/pts/3") == allowed.pop("/dev/null") == IOCTL_DEV | READ_FILE | WRITE_FILE
    )
    assert set(allowed.values()) == {READ_FILE | READ_DIR}  # the system's trees: read only
    assert "/home" not in allowed and "/run" not in allowed and "/tmp" not in allowed
    assert dict(rules("/usr/bin/tmux", None, None, 4))["/dev/null"] == READ_FILE | WRITE_FILE


def _elf64(interp: bytes | None) -> bytes:
    import struct

    head = bytearray(512)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<Q", head, 0x20, 64)  # e_phoff
    struct.pack_into("<HH", head, 0x36, 56, 1)  # e_phentsize, e_phnum
    kind = 3 if interp is not None else 1
    struct.pack_into("<II", head, 64, kind, 4)
    struct.pack_into("<Q", head, 64 + 8, 200)
    struct.pack_into("<Q", head, 64 + 32, len(interp or b"") + 1)
    head[200 : 200 + len(interp or b"")] = interp or b""
    return bytes(head)


@pytest.mark.parametrize(
    ("head", "interp"),
    [
        (_elf64(b"/lib64/ld-linux-x86-64.so.2"), "/lib64/ld-linux-x86-64.so.2"),
        (_elf64(None), None),  # static
        (b"#!/bin/sh\n", None),
        (b"\x7fELF\x09", None),
        (_elf64(b"/lib/ld.so")[:100], None),  # cut short
    ],
)
def test_the_loader_is_read_from_the_elf_header(head: bytes, interp: str | None) -> None:
    assert elf_interpreter(head) == interp


def test_tmux_executed_again_finds_no_server_of_the_callers() -> None:
    env = client_env({"TMUX": "/tmp/tmux-1001/default,1,0", "TMUX_PANE": "%1", "TERM": "xterm"})
    assert env == {"TERM": "xterm", "TMUX_TMPDIR": NO_SERVER_DIR}


@pytest.mark.skipif(landlock_abi() < 1, reason="this kernel has no Landlock")
@pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux")
def test_a_confined_client_runs_tmux_and_nothing_else() -> None:
    """What a server's MSG_EXEC or MSG_LOCK would have it do: exec a shell, or write a file."""
    tmux = shutil.which("tmux")
    probe = textwrap.dedent(f"""
        import os, sys
        from hostagent.cli.attaching import confine
        confine({tmux!r})
        for what, act in (("exec", lambda: os.execv("/bin/sh", ["sh", "-c", "exit 0"])),
                          ("write", lambda: open(os.path.expanduser("~/.hostagent-escaped"), "w")),
                          ("read", lambda: open(os.path.expanduser("~/.profile")).read())):
            try:
                act()
                print(what, "allowed")
            except PermissionError:
                print(what, "denied")
            except FileNotFoundError:
                print(what, "denied")  # a missing file is as good as a refused one here
        os.execv({tmux!r}, ["tmux", "-V"])
    """)
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[:3] == ["exec denied", "write denied", "read denied"], out
    assert lines[3].startswith("tmux "), out
