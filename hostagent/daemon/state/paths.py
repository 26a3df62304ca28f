"""Where a session's runtime files live: at the bottom of the daemon, so that the registry and
the edges (tmux, the pane watch, the hooks) name them alike without importing one another.

All of them are in the owner's 0700 runtime directory (/run/hostagent/UID on the system
daemon), which survives daemon restarts, so a restarted daemon finds every live session's
terminal again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# What tmux's pane-died hook writes into the owner's hooks FIFO (tmux.py writes it, hookpipe.py
# reads it): the one event that does not come from the agent.
PANE_DIED = "PaneDied"


def hooks_fifo(runtime_dir: Path) -> Path:
    """The owner's hooks FIFO: every hook of the owner's sessions writes a line into it."""
    return runtime_dir / "hooks.fifo"


def socket_path(runtime_dir: Path, name: str) -> Path:
    """The session's tmux server's socket."""
    return runtime_dir / f"{name}.sock"


def fifo_path(runtime_dir: Path, name: str) -> Path:
    """The FIFO tmux copies the pane's output into, for the daemon to read."""
    return runtime_dir / f"{name}.out"


def hooks_file(runtime_dir: Path, name: str) -> Path:
    """The agent CLI's hooks settings, whose hooks write to the owner's hooks FIFO."""
    return runtime_dir / f"{name}.hooks.json"


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
    socket: Path
    fifo: Path
    hooks_file: Path

    @classmethod
    def of(cls, runtime_dir: Path, name: str) -> SessionPaths:
        return cls(
            runtime_dir,
            socket_path(runtime_dir, name),
            fifo_path(runtime_dir, name),
            hooks_file(runtime_dir, name),
        )
