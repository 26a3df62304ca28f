"""A small object exporter over dbus-fast's low-level message API.

dbus-fast's ServiceInterface hides the calling message, and with it the sender that
authorization needs; its error path also differs between 1.84 (traceback sent to the caller)
and 5.x. So hostagent declares its interfaces as tables (``daemon/bus/interface.py``) and this module serves
them: method dispatch with signature checks, Properties (Get, GetAll, PropertiesChanged),
introspection with annotations and child nodes, and the one place where exceptions become
error replies.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from dbus_fast import Message, MessageFlag, MessageType, Variant
from dbus_fast.aio import MessageBus

from hostagent.bus.call import DBUS, PROPERTIES, add_match, close_fds
from hostagent.bus.compat import PremarshalledReply, fix_body, fix_str
from hostagent.daemon.bus.intake import METHOD_CALL, NEVER, SIGNAL, Header
from hostagent.daemon.bus.interface import LARGEST_CALL, Call, Interface, Method, Property
from hostagent.daemon.bus.replies import FileReply, Prepared
from hostagent.daemon.bus.turns import Turns
from hostagent.errors import HostAgentError, LimitsExceeded

log = logging.getLogger(__name__)

INTROSPECTABLE = "org.freedesktop.DBus.Introspectable"
PEER = "org.freedesktop.DBus.Peer"
_ALLOW_INTERACTIVE = 0x4
# A signal the daemon listens to (systemd's, the bus's) is a few kilobytes at most; anyone may
# send one to the daemon, so a larger one is dropped unread, and so is any signal of a sender
# it does not listen to (a local user's unicast flood, posing as systemd, cost every caller).
LARGEST_SIGNAL = 1024 * 1024
INVALID_ARGS = "org.freedesktop.DBus.Error.InvalidArgs"


class _BusError(HostAgentError):
    """A standard error of the Properties interface, answered like any HostAgentError."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.dbus_name = name


_STANDARD_XML = """  <interface name="org.freedesktop.DBus.Peer">
    <method name="Ping"/>
    <method name="GetMachineId"><arg name="machine_uuid" type="s" direction="out"/></method>
  </interface>
  <interface name="org.freedesktop.DBus.Introspectable">
    <method name="Introspect"><arg name="xml_data" type="s" direction="out"/></method>
  </interface>
  <interface name="org.freedesktop.DBus.Properties">
    <method name="Get"><arg name="interface_name" type="s" direction="in"/>
      <arg name="property_name" type="s" direction="in"/>
      <arg name="value" type="v" direction="out"/></method>
    <method name="GetAll"><arg name="interface_name" type="s" direction="in"/>
      <arg name="props" type="a{sv}" direction="out"/></method>
    <method name="Set"><arg name="interface_name" type="s" direction="in"/>
      <arg name="property_name" type="s" direction="in"/>
      <arg name="value" type="v" direction="in"/></method>
    <signal name="PropertiesChanged"><arg type="s" name="interface_name"/>
      <arg type="a{sv}" name="changed_properties"/>
      <arg type="as" name="invalidated_properties"/></signal>
  </interface>"""

_DOCTYPE = (
    '<!DOCTYPE node PUBLIC "-//freedesktop//DTD D-BUS Object Introspection 1.0//EN"\n'
    ' "http://www.freedesktop.org/standards/dbus/1.0/introspect.dtd">\n'
)


class Exporter:
    """Serves Interfaces at object paths on one bus connection."""

    def __init__(self, bus: MessageBus, listens_to: Callable[[str], bool]) -> None:
        """listens_to(sender): whether the daemon listens to that unique name's signals (the
        bus itself always): the systemd client's sends."""
        self.bus = bus
        self._objects: dict[str, tuple[Interface, Any]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._turns = Turns()  # method calls in flight, by sender
        self._waits: set[asyncio.Task[None]] = set()
        self.listens_to = listens_to
        bus.add_message_handler(self._on_message)

    async def follow_callers(self) -> None:
        """Learn when callers leave the bus, to drop the waits they left behind."""
        await add_match(
            self.bus, f"type='signal',sender='{DBUS}',member='NameOwnerChanged',arg2=''"
        )

    def export(self, path: str, interface: Interface, target: Any) -> None:
        self._objects[path] = (interface, target)

    def unexport(self, path: str) -> None:
        self._objects.pop(path, None)

    def emit(self, path: str, interface: str, member: str, signature: str, body: list[Any]) -> None:
        self.bus.send(Message.new_signal(path, interface, member, signature, fix_body(body)))

    def emit_changed(self, path: str, interface: str, changed: dict[str, Variant]) -> None:
        if changed:
            self.emit(path, PROPERTIES, "PropertiesChanged", "sa{sv}as", [interface, changed, []])

    # ---- dispatch -----------------------------------------------------------------------

    def largest(self, header: Header) -> int | None:
        """The largest body header's message may have; None for replies, which the bus
        delivers only to the call that asked for them."""
        if header.kind == SIGNAL:
            heard = header.sender == DBUS or self.listens_to(header.sender)
            return LARGEST_SIGNAL if heard else NEVER
        if header.kind != METHOD_CALL:
            return None
        method = self._method(header.path, header.interface, header.member)
        return LARGEST_CALL if method is None else method.largest

    def _method(self, path: str, interface: str, member: str) -> Method | None:
        entry = self._objects.get(path)
        if entry is None or interface not in ("", entry[0].name):
            return None
        return entry[0].method_by_name.get(member)

    def refuse(self, header: Header, limit: int) -> None:
        """Answer a call whose arguments are over its method's limit; its body was never read."""
        if not header.wants_reply:
            return
        method = self._method(header.path, header.interface, header.member)
        advice = method.too_big if method and method.too_big else "Send less."
        self._reply_error(
            header.serial,
            header.sender,
            INVALID_ARGS,
            f"{advice} ({header.member or 'A call'}'s arguments may take at most "
            f"{_size(limit)} on the bus; these took {_size(header.body_len)}.)",
        )

    def _on_message(self, msg: Message) -> bool | None:
        if msg.unix_fds and msg.message_type in (MessageType.METHOD_CALL, MessageType.SIGNAL):
            # No method or signal of ours takes a descriptor; kept, each would stay open here,
            # and a caller could fill the daemon's table with them.
            close_fds(list(msg.unix_fds))
            msg.unix_fds = []
        if msg.message_type == MessageType.SIGNAL:
            self._on_signal(msg)
            return None
        if msg.message_type != MessageType.METHOD_CALL or msg.path is None:
            return None
        if msg.interface == INTROSPECTABLE and msg.member == "Introspect":
            xml = self._introspect(msg.path)
            if xml is None:
                return None
            self._reply(msg, Message.new_method_return(msg, "s", fix_body([xml])))
            return True
        entry = self._objects.get(msg.path)
        if entry is None or msg.interface == PEER:
            return None
        interface, target = entry
        if msg.interface == PROPERTIES:
            self._run(msg, self._properties(msg, interface, target))
            return True
        method = interface.method_by_name.get(msg.member or "")
        if method is None or msg.interface not in (None, interface.name):
            return None
        if msg.signature != method.in_sig:
            self._error(
                msg,
                INVALID_ARGS,
                f"{method.name} takes '{method.in_sig}', not '{msg.signature}'.",
            )
            return True
        call = Call(msg.sender or "", bool(int(msg.flags) & _ALLOW_INTERACTIVE))
        if self._turns.full(call.sender):
            self._error(
                msg,
                LimitsExceeded.dbus_name,
                f"{self._turns.in_flight} calls of yours are already in flight; wait for them.",
            )
            return True

        def start() -> asyncio.Task[None]:
            task = self._run(msg, self._invoke(msg, method, target, call))
            if method.waits:
                self._waits.add(task)
                task.add_done_callback(self._waits.discard)
            return task

        self._turns.take(call.sender, start, method.waits)
        return True

    def _on_signal(self, msg: Message) -> None:
        """A caller left the bus: its waits would never be answered; drop them."""
        if msg.member != "NameOwnerChanged" or msg.sender != DBUS or len(msg.body) != 3:
            return
        name, _, new_owner = msg.body
        if new_owner or not name.startswith(":"):
            return
        self._turns.left(name)
        for task in self._turns.tasks(name):
            if task in self._waits:
                task.cancel()

    async def _invoke(self, msg: Message, method: Method, target: Any, call: Call) -> Message:
        result = method.handler(target, call, *msg.body)
        if inspect.isawaitable(result):
            result = await result
        if isinstance(result, Prepared):
            return PremarshalledReply(msg, method.out_sig, result.body(method.out_sig))
        if isinstance(result, FileReply):
            return Message.new_method_return(msg, "h", [0], [result.fd])
        if not method.out_args:
            body: list[Any] = []
        elif len(method.out_args) == 1:
            body = [result]
        else:
            body = list(result)
        return Message.new_method_return(msg, method.out_sig, fix_body(body))

    async def _properties(self, msg: Message, interface: Interface, target: Any) -> Message:
        member, body = msg.member, msg.body
        if member == "GetAll" and msg.signature == "s":
            if body[0] not in ("", interface.name):
                return Message.new_method_return(msg, "a{sv}", [{}])
            return Message.new_method_return(
                msg, "a{sv}", fix_body([await _get_all(interface, target)])
            )
        if member == "Get" and msg.signature == "ss":
            prop = interface.property_by_name.get(body[1])
            if body[0] not in ("", interface.name) or prop is None:
                raise _BusError(
                    "org.freedesktop.DBus.Error.UnknownProperty",
                    f"No property '{body[1]}' on '{body[0]}'.",
                )
            return Message.new_method_return(
                msg, "v", [Variant(prop.signature, await _get(prop, target))]
            )
        if member == "Set":
            raise _BusError(
                "org.freedesktop.DBus.Error.PropertyReadOnly",
                "All hostagent properties are read-only.",
            )
        raise _BusError(
            "org.freedesktop.DBus.Error.UnknownMethod",
            f"No method '{member}' with signature '{msg.signature}'.",
        )

    def _run(self, msg: Message, coro: Awaitable[Message]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(self._finish(msg, coro))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _finish(self, msg: Message, coro: Awaitable[Message]) -> None:
        try:
            reply = await coro
        except HostAgentError as e:
            self._error(msg, e.dbus_name, e.message)
            return
        except Exception:
            log.exception("Failed to handle %s.%s from %s", msg.interface, msg.member, msg.sender)
            self._error(
                msg,
                "org.freedesktop.DBus.Error.Failed",
                "Internal error in hostagent; see 'journalctl -u hostagent'.",
            )
            return
        self._reply(msg, reply)

    def _error(self, msg: Message, name: str, text: str) -> None:
        self._reply(msg, _error_reply(msg.serial, msg.sender, name, text))

    def _reply_error(self, serial: int, sender: str, name: str, text: str) -> None:
        self.bus.send(_error_reply(serial, sender, name, text))

    def _reply(self, msg: Message, reply: Message) -> None:
        fds = list(reply.unix_fds)
        if int(msg.flags) & int(MessageFlag.NO_REPLY_EXPECTED):
            close_fds(fds)
            return
        sent = self.bus.send(reply)
        if fds:  # the writer sends them with the reply; closed once it is written (or failed)
            sent.add_done_callback(lambda _: close_fds(fds))

    # ---- introspection ------------------------------------------------------------------

    def _introspect(self, path: str) -> str | None:
        prefix = "/" if path == "/" else path + "/"
        children = sorted(
            {p[len(prefix) :].split("/")[0] for p in self._objects if p.startswith(prefix)}
        )
        entry = self._objects.get(path)
        if entry is None and not children:
            return None
        parts = [_DOCTYPE + "<node>"]
        if entry is not None:
            parts += [_STANDARD_XML, entry[0].xml()]
        parts += [f'  <node name="{c}"/>' for c in children]
        parts.append("</node>")
        return "\n".join(parts)


def _error_reply(serial: int, sender: str | None, name: str, text: str) -> Message:
    # Built by hand: Message.new_error insists on an exact str, which fix_str may not be.
    return Message(
        message_type=MessageType.ERROR,
        reply_serial=serial,
        destination=sender,
        error_name=name,
        signature="s",
        body=[fix_str(text)],
    )


def _size(n: int) -> str:
    return f"{n >> 10} KiB" if n >= 4096 else f"{n} bytes"


async def _get_all(interface: Interface, target: Any) -> dict[str, Variant]:
    """Every property's value; those that ask someone else (systemd's counters) at once."""
    values = [p.getter(target) for p in interface.properties]
    waits = [i for i, v in enumerate(values) if inspect.isawaitable(v)]
    for i, got in zip(waits, await asyncio.gather(*(values[i] for i in waits)), strict=True):
        values[i] = got
    return {
        p.name: Variant(p.signature, v) for p, v in zip(interface.properties, values, strict=True)
    }


async def _get(prop: Property, target: Any) -> Any:
    value = prop.getter(target)
    if inspect.isawaitable(value):
        value = await value
    return value
