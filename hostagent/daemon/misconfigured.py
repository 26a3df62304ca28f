"""The daemon while its configuration file is broken: it holds its bus name and says why.

A bus-activated service that exits at start leaves its callers hanging. dbus-daemon asks
systemd to start the unit, is not told that the start failed, and holds each call until its
activation timeout (25 s on the system bus); the next call starts the daemon again. So a daemon
whose hostagent.yaml is broken stays up and answers every call at once with BadConfiguration:
one line naming the file, line and field, and the fix. A reload (``systemctl reload``, SIGHUP or
the Reload method) reads the file again; once it is good the daemon starts for real. Sessions
are not touched meanwhile: their scopes run on and are adopted at that start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Generic, TypeVar

from dbus_fast import Message, MessageFlag, MessageType
from dbus_fast.aio import MessageBus

from hostagent import MANAGER_INTERFACE
from hostagent.daemon.bus.auth import Authorizer
from hostagent.errors import BadConfiguration, Busy, HostAgentError, InvalidArgs
from hostagent.permissions import require_reload
from hostagent.yamlfile import SettingsError

log = logging.getLogger(__name__)

PEER = "org.freedesktop.DBus.Peer"  # answered by dbus-fast itself: a ping says the daemon is up

S = TypeVar("S")


def refusal(error: SettingsError, system: bool) -> str:
    """The one line every caller gets while the file is broken."""
    user = "" if system else " --user"
    return f"{error}; fix it, then run 'systemctl{user} reload hostagent'"


class Misconfigured(Generic[S]):
    """Answers the bus until ``load`` succeeds; ``fixed`` then holds its result.

    ``load`` raises SettingsError while the files are broken. The Reload call that found them
    good is answered only once the daemon serves (``answer_reload``), as a normal reload is
    answered once the new files are in use."""

    def __init__(
        self,
        bus: MessageBus,
        error: SettingsError,
        load: Callable[[], S],
        auth: Authorizer,
        daemon_uid: int,
        system: bool,
        on_status: Callable[[str], None],
    ) -> None:
        self.bus = bus
        self.error = error
        self.load = load
        self.auth = auth
        self.daemon_uid = daemon_uid
        self.system = system
        self.on_status = on_status
        self.fixed: asyncio.Future[S] = asyncio.get_running_loop().create_future()
        self.reload_call: Message | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        bus.add_message_handler(self._on_message)

    @property
    def status(self) -> str:
        """The unit's STATUS= line meanwhile."""
        return f"Refusing every call: {refusal(self.error, self.system)}"

    def retry(self) -> bool:
        """Read the files again; True once they are good."""
        if self.fixed.done():
            return True
        try:
            settings = self.load()
        except SettingsError as e:
            self.error = e
            log.error("Configuration still broken, refusing every call: %s", e)
            self.on_status(self.status)
            return False
        log.info("Configuration is good now; starting")
        self.fixed.set_result(settings)
        return True

    def close(self) -> None:
        """Stop answering; the daemon's own exporter serves from here on."""
        self.bus.remove_message_handler(self._on_message)

    def answer_reload(self) -> None:
        if self.reload_call is not None:
            self.bus.send(Message.new_method_return(self.reload_call))
            self.reload_call = None

    def _on_message(self, msg: Message) -> bool | Message | None:
        if msg.message_type != MessageType.METHOD_CALL or msg.interface == PEER:
            return None
        if msg.flags & MessageFlag.NO_REPLY_EXPECTED:
            return True
        if msg.interface == MANAGER_INTERFACE and msg.member == "Reload":
            task = asyncio.get_running_loop().create_task(self._reload(msg))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
            return True
        if self.fixed.done():
            return _error(
                msg, Busy("hostagent is starting with its fixed configuration; try again")
            )
        return _error(msg, BadConfiguration(refusal(self.error, self.system)))

    async def _reload(self, msg: Message) -> None:
        try:
            require_reload(await self.auth.caller_uid(msg.sender or ""), self.daemon_uid)
        except HostAgentError as e:
            self.bus.send(_error(msg, e))
            return
        if not (self.fixed.done() or self.retry()):
            self.bus.send(_error(msg, InvalidArgs(f"Configuration not reloaded: {self.error}")))
        elif self.reload_call is None:
            self.reload_call = msg
        else:
            self.bus.send(_error(msg, Busy("hostagent is already starting; try again")))


def _error(msg: Message, error: HostAgentError) -> Message:
    return Message.new_error(msg, error.dbus_name, error.message)
