"""Where a session's runtime files live: at the bottom of the daemon, so that the registry and
the edges (tmux, the pane watch, the hooks) name them alike without importing one another.

All of them are in the session's own directory, NAME.d, in the owner's 0700 runtime directory
(/run/hostagent/UID on the system daemon), which survives daemon restarts, so a restarted
daemon finds every live session's terminal again. NAME.sock beside it links to the socket, for
the owner's own tmux commands.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

# What tmux's pane-died hook writes into the owner's hooks FIFO (tmux.py writes it, hookpipe.py
# reads it): the one event that does not come from the agent.
PANE_DIED = "PaneDied"
# The system daemon's root-owned directory for the hooks files of CLIs that read one only when
# root owns it and every directory above it (Gemini CLI's), under its runtime root.
ROOT_HOOKS_DIR = "hooks"


def hooks_fifo(runtime_dir: Path) -> Path:
    """The owner's hooks FIFO: every hook of the owner's sessions writes a line into it."""
    return runtime_dir / "hooks.fifo"


def session_dir(runtime_dir: Path, name: str) -> Path:
    """The session's own directory: everything of it that runs inside it, so that a sandboxed
    session is shown this directory of its owner's runtime directory and no other."""
    return runtime_dir / f"{name}.d"


def socket_path(runtime_dir: Path, name: str) -> Path:
    """The session's tmux server's socket."""
    return session_dir(runtime_dir, name) / "tmux.sock"


def owner_link(runtime_dir: Path, name: str) -> Path:
    """The owner's way to the socket, as it has always been spelled: a link to it."""
    return runtime_dir / f"{name}.sock"


LINK_TARGET = "{name}.d/tmux.sock"  # owner_link's target, relative: it holds in any mount


def fifo_path(runtime_dir: Path, name: str) -> Path:
    """The FIFO tmux copies the pane's output into, for the daemon to read."""
    return session_dir(runtime_dir, name) / "out"


def hooks_file(runtime_dir: Path, name: str) -> Path:
    """The agent CLI's hooks settings, whose hooks write to the owner's hooks FIFO."""
    return session_dir(runtime_dir, name) / "hooks.json"


def mcp_file(runtime_dir: Path, name: str) -> Path:
    """The CLI's file naming hostagent's MCP server, for the CLIs that read one."""
    return session_dir(runtime_dir, name) / "mcp.json"


def runtime_dirs(runtime_root: Path, system: bool) -> list[Path]:
    """Every owner's runtime directory there is: one per uid under the system daemon's root,
    the root itself for a user's daemon."""
    if not system:
        return [runtime_root]
    try:
        return [d for d in runtime_root.iterdir() if d.name.isdigit() and d.is_dir()]
    except OSError:
        return []


@dataclass(frozen=True)
class SessionPaths:
    """A session's runtime files, computed once."""

    runtime_dir: Path
    directory: Path  # the session's own (session_dir); runtime_dir itself for a legacy one
    socket: Path
    fifo: Path
    hooks_file: Path
    mcp_file: Path

    @property
    def legacy(self) -> bool:
        return self.directory == self.runtime_dir

    @classmethod
    def of(cls, runtime_dir: Path, name: str) -> SessionPaths:
        return cls(
            runtime_dir,
            session_dir(runtime_dir, name),
            socket_path(runtime_dir, name),
            fifo_path(runtime_dir, name),
            hooks_file(runtime_dir, name),
            mcp_file(runtime_dir, name),
        )

    @classmethod
    def found(cls, runtime_dir: Path, name: str) -> SessionPaths:
        """Where the session's files are now: a session that an older hostagent started, and
        still runs, has them side by side in runtime_dir, its socket at owner_link's place;
        every start since makes them in its own directory."""
        try:
            legacy = stat.S_ISSOCK(os.lstat(owner_link(runtime_dir, name)).st_mode)
        except OSError:
            legacy = False
        if not legacy:
            return cls.of(runtime_dir, name)
        return cls(
            runtime_dir,
            runtime_dir,
            owner_link(runtime_dir, name),
            runtime_dir / f"{name}.out",
            runtime_dir / f"{name}.hooks.json",
            runtime_dir / f"{name}.mcp.json",
        )
