"""Who is calling, and what they may do: every permission rule of the daemon lives here.

Reading is open to every local user, as ``ps`` is. Acting on a session is for its owner, root,
or a caller polkit authorises for ``org.hostagent.HostAgent1.manage-any``. The polkit check is
asynchronous (interactive authentication can take minutes); when polkit is not on the bus, only
root may act on other users' sessions. A session is created for its caller; only root, on the
system bus, may create one for another user. The admin's caps bind everyone but root (and, where
the admin allows it, polkit's admins); root's own sessions are neither capped nor counted. Only
root (or the user a user daemon runs as) may reload the configuration. A hook report is believed
only from inside the session's scope.
"""

from __future__ import annotations

import collections
import hmac
import logging

from dbus_fast import Variant
from dbus_fast.aio import MessageBus

from hostagent.bus.call import CallError, call
from hostagent.errors import AccessDenied, InteractiveAuthorizationRequired, InvalidArgs

log = logging.getLogger(__name__)

ACTION_MANAGE_ANY = "org.hostagent.HostAgent1.manage-any"
POLKIT = "org.freedesktop.PolicyKit1"
POLKIT_PATH = "/org/freedesktop/PolicyKit1/Authority"
POLKIT_IFACE = "org.freedesktop.PolicyKit1.Authority"
_CACHE_MAX = 4096
_POLKIT_TIMEOUT = 300.0  # a person may be typing a password


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


class Authorizer:
    def __init__(self, bus: MessageBus, use_polkit: bool) -> None:
        self.bus = bus
        self.use_polkit = use_polkit
        # Unique names are never reused on a bus, so uid-by-sender can be cached safely.
        self._uids: collections.OrderedDict[str, int] = collections.OrderedDict()

    async def caller_uid(self, sender: str) -> int:
        uid = self._uids.get(sender)
        if uid is None:
            (uid,) = await call(
                self.bus,
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "GetConnectionUnixUser",
                "s",
                [sender],
            )
            self._uids[sender] = uid
            while len(self._uids) > _CACHE_MAX:
                self._uids.popitem(last=False)
        return int(uid)

    async def caller_pid(self, sender: str) -> int:
        """The pid of the process that opened sender's connection; 0 when the bus cannot say.
        dbus-daemon 1.15 and later hold that process by a pidfd and refuse to name a pid once
        it has exited, so a pid another process may have taken since is never reported."""
        try:
            (pid,) = await call(
                self.bus,
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "GetConnectionUnixProcessID",
                "s",
                [sender],
            )
        except CallError as e:
            log.debug("No pid for %s: %s", sender, e.text or e.name)
            return 0
        return int(pid)

    async def require_owner_or_admin(
        self, sender: str, owner_uid: int, interactive: bool, what: str
    ) -> int:
        """The caller's uid, once it may act on something owner_uid owns; else raise."""
        uid = await self.caller_uid(sender)
        if owner_may_act(uid, owner_uid):
            return uid
        await self.require_polkit(sender, ACTION_MANAGE_ANY, interactive, what)
        return uid

    async def is_admin(self, sender: str, interactive: bool) -> bool:
        """Whether polkit authorises sender for manage-any (asking for a password only when
        the caller allowed interaction)."""
        try:
            await self.require_polkit(sender, ACTION_MANAGE_ANY, interactive, "this")
        except (AccessDenied, InteractiveAuthorizationRequired):
            return False
        return True

    async def require_polkit(self, sender: str, action: str, interactive: bool, what: str) -> None:
        if not self.use_polkit:
            raise AccessDenied(f"Access denied: {what} belongs to another user.")
        subject = ["system-bus-name", {"name": Variant("s", sender)}]
        try:
            ((authorized, challenge, _),) = await call(
                self.bus,
                POLKIT,
                POLKIT_PATH,
                POLKIT_IFACE,
                "CheckAuthorization",
                "(sa{sv})sa{ss}us",
                [subject, action, {}, 1 if interactive else 0, ""],
                timeout=_POLKIT_TIMEOUT,
            )
        except CallError as e:
            log.warning("Failed to ask polkit about %s: %s; allowing root only", action, e)
            raise AccessDenied(f"Access denied: {what} belongs to another user.") from None
        if authorized:
            return
        # The D-Bus rule: InteractiveAuthorizationRequired only tells a caller that did not
        # allow interaction that allowing it could help. A caller that did, and still got a
        # challenge, had no polkit agent to answer it.
        if challenge and not interactive:
            raise InteractiveAuthorizationRequired(
                f"Authentication is required to act on {what}; "
                "retry with interactive authorization allowed (e.g. from a polkit agent)."
            )
        if challenge:
            raise AccessDenied(
                f"Access denied: {what} belongs to another user, and no polkit agent "
                "answered the request to authenticate as an administrator."
            )
        raise AccessDenied(f"Access denied: {what} belongs to another user.")
