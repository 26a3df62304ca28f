"""The tmux edge: each session is its own tmux server on a private socket, run as its owner.

Every command runs as the session's owner, so the daemon never touches a user's tmux server with
root's rights; and inside the session (inside.py), since a tmux server can make its clients run
programs and open files, and the session commands its server (enclosure.py). The server reads no config file (``-f /dev/null``): a user's tmux.conf could
rename or renumber what we address, and the pane is always found as session ``main``.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Protocol

from hostagent.daemon.host import procfs
from hostagent.daemon.host.enclosure import Enclosure
from hostagent.daemon.host.inside import NoEnclosure
from hostagent.identity import Owner

SESSION = "main"


def tmux_binary() -> str:
    return shutil.which("tmux") or "/usr/bin/tmux"


class TmuxError(Exception):
    pass


# Where a pane's end is reported: the owner's hooks FIFO, with the session's name and the token
# from the server's environment. Paths with other characters get no hook (see died_hook).
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_./-]+")


def died_hook(fifo: Path, name: str, event: str) -> str | None:
    """tmux's pane-died hook: one line into the hooks FIFO (opened read-write, so it never
    blocks), in the hookpipe format. None when fifo is not a plain path."""
    if not _PLAIN_PATH.fullmatch(str(fifo)) or not _PLAIN_PATH.fullmatch(name):
        return None
    line = f'printf "%s\\t%s\\t{event}\\t\\t\\t\\n" {name} "$HOSTAGENT_HOOK_TOKEN" 1<>{fifo}'
    return f"run-shell -b '{line}'"


# tmux 3.4 and later, when built with systemd (Debian 13, Fedora, Arch), have each new pane ask
# the user's own service manager for a scope of its own, over the user bus that these variables
# name in the *server's* environment; the agent would leave the session's scope and its limits.
# So the server runs without them, and the session's panes get them from tmux instead.
PANE_ONLY_ENV = ("DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR")


def split_env(env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(the tmux server's environment, what only the session's panes get)."""
    server = {k: v for k, v in env.items() if k not in PANE_ONLY_ENV}
    return server, {k: env[k] for k in PANE_ONLY_ENV if k in env}


def new_session_argv(
    sock: Path,
    columns: int,
    rows: int,
    argv: list[str],
    output: Path | None = None,
    died: str | None = None,
    pane_env: dict[str, str] | None = None,
) -> list[str]:
    """Start the server with the session; it prints the server's pid and the pane's. With
    output, the pane's output is copied into that FIFO from the start, in the same tmux call.
    With died (a tmux command), the pane stays when its program exits, and died runs then.
    pane_env is set in the session's environment, which its panes get and the server lacks."""
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
        "#{pid} #{pane_pid}",
        "-s",
        SESSION,
        "-x",
        str(columns),
        "-y",
        str(rows),
        *(f"-e{k}={v}" for k, v in (pane_env or {}).items()),
        "--",
        *argv,
    ]
    if output is not None:
        cmd += [";", "pipe-pane", "-t", SESSION, _pipe_command(output)]
    if died is not None:
        cmd += [";", "set-option", "-g", "remain-on-exit", "on"]
        cmd += [";", "set-hook", "-g", "pane-died", died]
    return cmd


def _pipe_command(fifo: Path) -> str:
    return f"exec cat > '{fifo}'"


# The pane's first process, its foreground job's name and its title; then the screen.
_READ_SCREEN = (
    "display-message",
    "-p",
    "-t",
    SESSION,
    "#{pane_pid}\t#{pane_current_command}\t#{pane_title}",
    ";",
    "capture-pane",
    "-p",
    "-t",
    SESSION,
)


def _screen_and_title(out: str, leads: Callable[[int], bool]) -> tuple[str, str, str]:
    """_READ_SCREEN's answer; leads(pane's pid, as tmux numbers it): does the pane's first
    program have the terminal?"""
    head, _, screen = out.partition("\n")
    pane_pid, _, head = head.partition("\t")
    command, _, title = head.partition("\t")
    if pane_pid.isdigit() and leads(int(pane_pid)):
        command = ""
    return screen, title, command


def attach_argv(sock: Path) -> list[str]:
    return [tmux_binary(), "-S", str(sock), "attach-session", "-t", SESSION]


class Executor(Protocol):
    """Runs argv as owner: exit code, stdout and stderr, or None past the timeout;
    OutputTooLarge past limit bytes of output (0: the helpers' own bound). Given stdout (a
    descriptor), the command writes its output there instead."""

    def __call__(
        self,
        owner: Owner,
        argv: list[str],
        timeout: float,
        stdin: bytes | None,
        *,
        limit: int = 0,
        stdout: int = -1,
    ) -> Awaitable[tuple[int, bytes, bytes] | None]: ...


class InsideExecutor(Protocol):
    """Executor's work, done inside the session that inside names (inside.exec_inside)."""

    def __call__(
        self,
        owner: Owner,
        argv: list[str],
        inside: Enclosure,
        timeout: float,
        stdin: bytes | None,
        *,
        limit: int = 0,
        stdout: int = -1,
    ) -> Awaitable[tuple[int, bytes, bytes] | None]: ...


class Tmux:
    """Commands against sessions' tmux servers. With locate (which session a socket is, and
    where to enter it: inside.Insides.locate), each runs inside its session; the daemon's are
    always so. ``execute`` runs one argv as an owner without it; it is the seam where fast
    tests put a scripted terminal."""

    def __init__(
        self,
        execute: Executor,
        execute_inside: InsideExecutor,
        locate: Callable[[Path], Awaitable[Enclosure]] | None = None,
    ) -> None:
        self.execute = execute
        self.locate = locate
        self.execute_inside = execute_inside

    async def run(
        self,
        owner: Owner,
        sock: Path,
        *args: str,
        timeout: float = 10.0,
        stdin: bytes | None = None,
        limit: int = 0,
        stdout: int = -1,
    ) -> str:
        """One tmux command against the session's server, as its owner; its stdout
        (OutputTooLarge past limit bytes, when given; written to stdout, when given)."""
        inside = await self._inside(sock)
        return await self._run(owner, sock, args, inside, timeout, stdin, limit, stdout)

    async def _inside(self, sock: Path) -> Enclosure | None:
        """Where the session's client runs (None without a locator: a scripted terminal)."""
        if self.locate is None:
            return None
        try:
            return await self.locate(sock)
        except NoEnclosure as e:
            raise TmuxError(str(e)) from None

    async def _run(
        self,
        owner: Owner,
        sock: Path,
        args: tuple[str, ...],
        inside: Enclosure | None,
        timeout: float = 10.0,
        stdin: bytes | None = None,
        limit: int = 0,
        stdout: int = -1,
    ) -> str:
        argv = [tmux_binary(), "-S", str(sock), *args]
        if inside is None:
            result = await self.execute(owner, argv, timeout, stdin, limit=limit, stdout=stdout)
        else:
            result = await self.execute_inside(
                owner, argv, inside, timeout, stdin, limit=limit, stdout=stdout
            )
        if result is None:
            raise TmuxError(f"tmux {args[0]} timed out")
        code, out, err = result
        if code != 0:
            raise TmuxError(err.decode(errors="replace").strip() or f"tmux {args[0]} failed")
        return out.decode(errors="replace")

    async def _number(self, owner: Owner, sock: Path, fmt: str) -> int:
        out = await self.run(owner, sock, "display-message", "-p", "-t", SESSION, fmt)
        try:
            return int(out.strip())
        except ValueError:
            raise TmuxError(f"tmux printed {out.strip()!r} for {fmt}") from None

    async def server_pid(self, owner: Owner, sock: Path) -> int:
        return await self._number(owner, sock, "#{pid}")

    async def pane_end(self, owner: Owner, sock: Path) -> tuple[bool, int | None, int | None]:
        """Whether the pane's program has ended, with its exit status or signal."""
        out = await self.run(
            owner,
            sock,
            "display-message",
            "-p",
            "-t",
            SESSION,
            "#{pane_dead} #{pane_dead_status} #{pane_dead_signal}",
        )
        dead, status, signal = ([*out.strip().split(" "), "", "", ""])[:3]
        return (
            dead == "1",
            int(status) if status.isdigit() else None,
            (int(signal) if signal.isdigit() else None),
        )

    async def pane_pid(self, owner: Owner, sock: Path) -> int:
        """The pid of the process in the pane: the agent."""
        return await self._number(owner, sock, "#{pane_pid}")

    async def capture(self, owner: Owner, sock: Path, scrollback: int, limit: int = 0) -> str:
        """The screen and scrollback lines above it; OutputTooLarge past limit bytes, read no
        further than that."""
        start = f"-{scrollback}" if scrollback > 0 else "0"
        return await self.run(
            owner, sock, "capture-pane", "-p", "-J", "-t", SESSION, "-S", start, limit=limit
        )

    async def coloured_screen(self, owner: Owner, sock: Path) -> str:
        """The visible screen with its colours and attributes, as escape sequences: what a
        dialog that tells its choices apart by colour alone shows (highlight.py)."""
        return await self.run(owner, sock, "capture-pane", "-p", "-e", "-t", SESSION)

    async def capture_to(self, owner: Owner, sock: Path, scrollback: int, fd: int) -> None:
        """What capture returns, written by tmux into fd, so that the daemon never holds it."""
        start = f"-{scrollback}" if scrollback > 0 else "0"
        await self.run(
            owner, sock, "capture-pane", "-p", "-J", "-t", SESSION, "-S", start, stdout=fd
        )

    async def screen_and_title(self, owner: Owner, sock: Path) -> tuple[str, str, str]:
        """The visible screen, the pane's title and its foreground job, in one tmux call.
        The job is the name of the program in the terminal's foreground when the pane's own
        first program (a shell, or an agent started in its place) has given the terminal to
        one it started; "" while that first program has it itself."""
        return await self._screen(owner, sock, _READ_SCREEN)

    async def pipe_output(self, owner: Owner, sock: Path, fifo: Path) -> tuple[str, str, str]:
        """Copy everything the pane prints into fifo (replacing an earlier pipe, if any), and
        read the screen as it is then (screen_and_title's answer), in one tmux call: after a
        restart a thousand sessions are followed again, and every tmux call is a process."""
        pipe = ("pipe-pane", "-t", SESSION, _pipe_command(fifo))
        return await self._screen(owner, sock, (*pipe, ";", *_READ_SCREEN))

    async def _screen(
        self, owner: Owner, sock: Path, args: tuple[str, ...]
    ) -> tuple[str, str, str]:
        """_READ_SCREEN's answer, the pane's pid read as the session's tmux numbers it (in its
        own PID namespace, if it has one: under the process the client entered)."""
        inside = await self._inside(sock)
        out = await self._run(owner, sock, args, inside)
        if inside is None:
            return _screen_and_title(out, procfs.leads_its_terminal)
        root = inside.pid
        return _screen_and_title(out, lambda n: procfs.leads_its_terminal(procfs.numbered(root, n)))

    async def send_text(self, owner: Owner, sock: Path, text: str, enter: bool) -> None:
        """Type text into the pane as it is (newlines stay newlines, no bracketed paste), then
        Enter. The text goes through stdin into a buffer of its own, since a command line
        could not carry it (tmux's message size, the kernel's limit on one argument)."""
        args: list[str] = []
        if text:
            buffer = f"hostagent-{secrets.token_hex(4)}"
            args += ["load-buffer", "-b", buffer, "-", ";"]
            args += ["paste-buffer", "-d", "-r", "-b", buffer, "-t", SESSION]
        if enter:
            args += [";"] if args else []
            args += ["send-keys", "-t", SESSION, "Enter"]
        if args:
            await self.run(owner, sock, *args, stdin=text.encode() if text else None)

    async def send_keys(self, owner: Owner, sock: Path, keys: tuple[str, ...]) -> None:
        """Press keys (tmux's names: the arrows, Enter, a letter or a digit) in the pane."""
        bad = [k for k in keys if not _KEY.fullmatch(k)]
        if bad or not keys:
            raise ValueError(f"not keys a dialog takes: {bad or keys}")
        await self.run(owner, sock, "send-keys", "-t", SESSION, *keys)


_KEY = re.compile(r"Up|Down|Left|Right|Enter|[0-9A-Za-z]")


def remove_socket(sock: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(sock)


FINAL_BYTES = 64 * 1024  # of a final screen at most, from the end: one per session is kept


# tmux's line under a pane whose program exited (remain-on-exit), written on the bottom row.
_PANE_IS_DEAD = re.compile(r"Pane is dead( \(.*\))?")


def agent_screen(screen: str) -> str:
    """What the agent drew on a pane's screen: without tmux's "Pane is dead" line and the
    blank rows tmux pads down to it; "" when that is all there is."""
    lines = screen.rstrip().split("\n")
    if lines and _PANE_IS_DEAD.fullmatch(lines[-1].strip()):
        lines.pop()
    return "\n".join(lines).rstrip()


def final_screen(capture: str, last_seen: str) -> str:
    """What a session that ended shows (capture, watch's preview, the Cockpit page): the
    screen its agent left; when the agent cleared the terminal on its way out (a full-screen
    program leaving the alternate screen), the last screen the daemon saw it draw. At most
    FINAL_BYTES, from the end, ending in one newline."""
    text = agent_screen(capture) or agent_screen(last_seen)
    return text.encode()[-FINAL_BYTES:].decode(errors="ignore") + "\n"
