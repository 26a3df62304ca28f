"""Who is calling, and whether polkit lets them: the bus's side of the permission rules.

The rules themselves are pure, in hostagent/permissions.py. Here: the caller's uid and pid as
the bus says them, and polkit's answer for ``org.hostagent.HostAgent1.manage-any``, which is
asynchronous (interactive authentication can take minutes); when polkit is not on the bus, only
root may act on other users' sessions.
"""

from __future__ import annotations

import collections
import logging

from dbus_fast import Variant
from dbus_fast.aio import MessageBus

from hostagent.bus.call import CallError, call, call_keeping_fds, close_fds
from hostagent.daemon.bus.placement import Opener
from hostagent.errors import AccessDenied, InteractiveAuthorizationRequired
from hostagent.permissions import owner_may_act

log = logging.getLogger(__name__)

ACTION_MANAGE_ANY = "org.hostagent.HostAgent1.manage-any"
POLKIT = "org.freedesktop.PolicyKit1"
POLKIT_PATH = "/org/freedesktop/PolicyKit1/Authority"
POLKIT_IFACE = "org.freedesktop.PolicyKit1.Authority"
_CACHE_MAX = 4096
_POLKIT_TIMEOUT = 300.0  # a person may be typing a password


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

    async def caller_process(self, sender: str) -> Opener:
        """The process that opened sender's connection, as the bus knows it: a pidfd of it
        where the bus holds one (dbus-daemon 1.15 and later, dbus-broker), else its pid, else
        neither (the bus cannot name it: see placement.py)."""
        try:
            (creds,), fds = await call_keeping_fds(
                self.bus,
                "org.freedesktop.DBus",
                "/org/freedesktop/DBus",
                "org.freedesktop.DBus",
                "GetConnectionCredentials",
                "s",
                [sender],
            )
        except CallError as e:
            log.debug("No credentials for %s: %s", sender, e.text or e.name)
            return Opener()
        index = _value(creds, "ProcessFD")
        pidfd = fds.pop(index) if isinstance(index, int) and 0 <= index < len(fds) else -1
        close_fds(fds)
        pid = _value(creds, "ProcessID")
        return Opener(pid if isinstance(pid, int) else 0, pidfd)

    async def require_owner_or_admin(
        self, sender: str, owner_uid: int, interactive: bool, what: str
    ) -> int:
        """The caller's uid, once it may act on something owner_uid owns; else raise."""
        uid = await self.caller_uid(sender)
        if owner_may_act(uid, owner_uid):
            return uid
        await self.require_polkit(sender, ACTION_MANAGE_ANY, interactive, what)
        return uid

    async def may_act(self, sender: str, owner_uid: int) -> bool:
        """Whether sender may act on what owner_uid owns, asking no one for a password: for
        what a caller is shown rather than refused."""
        if owner_may_act(await self.caller_uid(sender), owner_uid):
            return True
        return await self.is_admin(sender, interactive=False)

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


def _value(creds: object, key: str) -> object:
    value = creds.get(key) if isinstance(creds, dict) else None
    return value.value if isinstance(value, Variant) else None
