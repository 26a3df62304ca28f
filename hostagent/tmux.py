"""The tmux edge: each session is its own tmux server on a private socket, run as its owner.

Every command runs as the session's owner, so the daemon never touches a user's tmux server with
root's rights. The server reads no config file (``-f /dev/null``): a user's tmux.conf could
rename or renumber what we address, and the pane is always found as session ``main``.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from .spawn import Owner, exec_as_owner, tmux_binary

SESSION = "main"


class TmuxError(Exception):
    pass


def socket_path(runtime_dir: Path, name: str) -> Path:
    return runtime_dir / f"{name}.sock"


def new_session_argv(
    sock: Path, columns: int, rows: int, argv: list[str], output: Path | None = None
) -> list[str]:
    """Start the server with the session; it prints the server's pid. With output, the pane's
    output is copied into that FIFO from the start, in the same tmux call."""
    cmd = [
        tmux_binary(),
        "-S",
        str(sock),
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-P",
        "-F",
        "#{pid}",
        "-s",
        SESSION,
        "-x",
        str(columns),
        "-y",
        str(rows),
        "--",
        *argv,
    ]
    if output is not None:
        cmd += [";", "pipe-pane", "-t", SESSION, _pipe_command(output)]
    return cmd


def _pipe_command(fifo: Path) -> str:
    return f"exec cat > '{fifo}'"


def attach_argv(sock: Path) -> list[str]:
    return [tmux_binary(), "-S", str(sock), "attach-session", "-t", SESSION]


async def run(owner: Owner, sock: Path, *args: str, timeout: float = 10.0) -> str:
    """One tmux command against the session's server, as its owner; its stdout."""
    result = await exec_as_owner(owner, [tmux_binary(), "-S", str(sock), *args], timeout)
    if result is None:
        raise TmuxError(f"tmux {args[0]} timed out")
    code, out, err = result
    if code != 0:
        raise TmuxError(err.decode(errors="replace").strip() or f"tmux {args[0]} failed")
    return out.decode(errors="replace")


async def server_pid(owner: Owner, sock: Path) -> int:
    out = await run(owner, sock, "display-message", "-p", "-t", SESSION, "#{pid}")
    return int(out.strip())


async def capture(owner: Owner, sock: Path, scrollback: int) -> str:
    start = f"-{scrollback}" if scrollback > 0 else "0"
    return await run(owner, sock, "capture-pane", "-p", "-J", "-t", SESSION, "-S", start)


async def screen_and_title(owner: Owner, sock: Path) -> tuple[str, str]:
    """The visible screen and the pane's title, in one tmux call."""
    out = await run(
        owner,
        sock,
        "display-message",
        "-p",
        "-t",
        SESSION,
        "#{pane_title}",
        ";",
        "capture-pane",
        "-p",
        "-t",
        SESSION,
    )
    title, _, screen = out.partition("\n")
    return screen, title


async def pipe_output(owner: Owner, sock: Path, fifo: Path) -> None:
    """Copy everything the pane prints into fifo (replacing an earlier pipe, if any)."""
    await run(owner, sock, "pipe-pane", "-t", SESSION, _pipe_command(fifo))


async def send_text(owner: Owner, sock: Path, text: str, enter: bool) -> None:
    if text:
        await run(owner, sock, "send-keys", "-t", SESSION, "-l", "--", text)
    if enter:
        await run(owner, sock, "send-keys", "-t", SESSION, "Enter")


def remove_socket(sock: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock)
