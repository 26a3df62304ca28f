"""Who may do what: every permission rule of the daemon, as pure functions.

Reading is open to every local user, as ``ps`` is. Acting on a session is for its owner, root,
or a caller polkit authorises for ``org.hostagent.HostAgent1.manage-any`` (the bus asks polkit:
daemon/bus/auth.py). A session is created for its caller; only root, on the system bus, may
create one for another user. The admin's caps bind everyone but root (and, where the admin
allows it, polkit's admins); root's own sessions are neither capped nor counted. Only root (or
the user a user daemon runs as) may reload the configuration. A hook report is believed only
from inside the session's scope, with the session's secret.

Pure, so that the lifecycle, admission and the hooks ask the same rules the bus does, and the
fast layer (and dev/mutants) checks every one of them.
"""

from __future__ import annotations

import hmac

from hostagent.errors import AccessDenied, InvalidArgs


def owner_may_act(caller_uid: int, owner_uid: int) -> bool:
    """The cheap rule that needs no polkit: the owner and root."""
    return caller_uid in (0, owner_uid)


def create_owner(caller_uid: int, requested: int | None, system: bool, daemon_uid: int) -> int:
    """Whose session a create makes: the caller's on the system bus, the daemon's user on a
    session bus; another user's only when root asks for it on the system bus."""
    owner = caller_uid if system else daemon_uid
    if requested is not None and requested != owner:
        if caller_uid != 0 or not system:
            raise InvalidArgs("Only root may create a session for another user ('user').")
        owner = requested
    return owner


def exempt_from_caps(caller_uid: int, system: bool) -> bool:
    """Whether the admin's caps bind this caller at all: not root, and not the one user of a
    user daemon. (polkit's admins may also pass them where users.admins_exceed says so.)"""
    return caller_uid == 0 or not system


def capped(owner_uid: int) -> bool:
    """Whether a user's sessions count against users.sessions and share a capped slice: root's
    do not."""
    return owner_uid != 0


def require_reload(caller_uid: int, daemon_uid: int) -> None:
    if caller_uid not in (0, daemon_uid):
        raise AccessDenied("Only root may reload hostagent's configuration.")


TOKEN_ENV = "HOSTAGENT_HOOK_TOKEN"  # the session's hook secret, in its processes' environment


def token_matches(given: str, expected: str) -> bool:
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def require_inside(
    caller_unit: str | None, unit: str, name: str, token: str, expected_token: str
) -> None:
    """A hook report must come from a process inside the session's own scope that knows the
    session's secret: a pid alone can be reused by another user's process."""
    inside = bool(unit) and caller_unit == unit
    if not inside or (expected_token and not token_matches(token, expected_token)):
        raise AccessDenied(
            f"Only a process inside session '{name}' may report its hooks; "
            "run 'hostagentctl hook' from the agent's hook."
        )
