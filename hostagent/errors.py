"""Every error hostagent reports, each bound once to its D-Bus error name.

The hierarchy is flat: ``HostAgentError`` and one subclass per wire name. The daemon raises these
from anywhere below the bus; ``daemon.bus.export`` turns them into error replies; ``client`` maps the
names back into the same classes, so both ends speak one vocabulary (as systemd's
bus-common-errors does).

    HostAgentError
    ├── NoSuchSession, NoSessionForPID, SessionExists, NoSuchPreset, AgentNotFound
    ├── InvalidName, InvalidCwd, InvalidArgs
    ├── AlreadyRunning, NotRunning, Busy
    ├── SpawnFailed (a create's start), ResumeFailed (a resume's), StopFailed
    ├── Timeout, LimitsExceeded, StorageFull
    ├── WorktreeFailed, BadConfiguration
    └── AccessDenied, InteractiveAuthorizationRequired
"""

from __future__ import annotations

from hostagent.escape import printable

ERROR_PREFIX = "org.hostagent.HostAgent1.Error."


class HostAgentError(Exception):
    """Base class; ``dbus_name`` is what goes on the wire."""

    dbus_name = "org.freedesktop.DBus.Error.Failed"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _own(name: str) -> str:
    return ERROR_PREFIX + name


class NoSuchSession(HostAgentError):
    dbus_name = _own("NoSuchSession")


class NoSessionForPID(HostAgentError):
    dbus_name = _own("NoSessionForPID")


class SessionExists(HostAgentError):
    dbus_name = _own("SessionExists")


class NoSuchPreset(HostAgentError):
    dbus_name = _own("NoSuchPreset")


class InvalidName(HostAgentError):
    dbus_name = _own("InvalidName")


class InvalidCwd(HostAgentError):
    dbus_name = _own("InvalidCwd")


class AlreadyRunning(HostAgentError):
    dbus_name = _own("AlreadyRunning")


class NotRunning(HostAgentError):
    dbus_name = _own("NotRunning")


class Busy(HostAgentError):
    """Another operation holds the session (stopping, being removed)."""

    dbus_name = _own("Busy")


class SpawnFailed(HostAgentError):
    dbus_name = _own("SpawnFailed")


class AgentNotFound(HostAgentError):
    """The preset's program is not where its owner would find it (the login PATH)."""

    dbus_name = _own("AgentNotFound")


class ResumeFailed(HostAgentError):
    dbus_name = _own("ResumeFailed")


class Timeout(HostAgentError):
    dbus_name = _own("Timeout")


class LimitsExceeded(HostAgentError):
    dbus_name = _own("LimitsExceeded")


class BudgetExceeded(HostAgentError):
    """The owner's sessions, or the session, reached a day's budget the admin set."""

    dbus_name = _own("BudgetExceeded")


class StorageFull(HostAgentError):
    """A record could not be written (no space, a read-only or failing disk)."""

    dbus_name = _own("StorageFull")


class WorktreeFailed(HostAgentError):
    """A session's git worktree could not be made (not a repository, the branch taken, a base
    that does not resolve, the setup command failed, git missing)."""

    dbus_name = _own("WorktreeFailed")


class StopFailed(HostAgentError):
    """systemd did not stop the session's scope; the session is as systemd says."""

    dbus_name = _own("StopFailed")


class BadConfiguration(HostAgentError):
    """The daemon's configuration file is broken; it answers every call with this until a
    reload finds the file good."""

    dbus_name = _own("BadConfiguration")


class NoQuestion(HostAgentError):
    """The question an answer names is not the one the session asks now: it was answered
    (from here, or in its terminal), replaced by another, or never asked."""

    dbus_name = _own("NoQuestion")


class InvalidArgs(HostAgentError):
    dbus_name = "org.freedesktop.DBus.Error.InvalidArgs"


class AccessDenied(HostAgentError):
    dbus_name = "org.freedesktop.DBus.Error.AccessDenied"


class InteractiveAuthorizationRequired(HostAgentError):
    dbus_name = "org.freedesktop.DBus.Error.InteractiveAuthorizationRequired"


ALL_ERRORS: tuple[type[HostAgentError], ...] = (
    NoSuchSession,
    NoSessionForPID,
    SessionExists,
    NoSuchPreset,
    InvalidName,
    InvalidCwd,
    AlreadyRunning,
    NotRunning,
    Busy,
    SpawnFailed,
    AgentNotFound,
    ResumeFailed,
    Timeout,
    LimitsExceeded,
    BudgetExceeded,
    StorageFull,
    StopFailed,
    WorktreeFailed,
    BadConfiguration,
    NoQuestion,
    InvalidArgs,
    AccessDenied,
    InteractiveAuthorizationRequired,
)

BY_DBUS_NAME: dict[str, type[HostAgentError]] = {e.dbus_name: e for e in ALL_ERRORS}


def quote(text: str, limit: int = 80) -> str:
    """A caller's string, quoted for a one-line message: control characters escaped, cut."""
    return f"'{printable(text[:limit])}'" + ("…" if len(text) > limit else "")


def from_dbus(name: str, message: str) -> HostAgentError:
    """The error class for a wire name; unknown names keep their name in a plain HostAgentError."""
    cls = BY_DBUS_NAME.get(name)
    if cls is not None:
        return cls(message)
    err = HostAgentError(message)
    err.dbus_name = name
    return err
