"""The tables hostagent declares its D-Bus interfaces in: each method with its arguments, its
handler and the most its arguments may take on the wire; each property and signal. The
exporter (daemon/bus/export.py) serves them, and dev/api_reference.py documents them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from xml.sax.saxutils import quoteattr

EMITS = "org.freedesktop.DBus.Property.EmitsChangedSignal"
# The most a call's arguments may take on the wire, unless its Method says otherwise: room for
# any name, preset or path the daemon takes. A larger call is refused from its header
# (daemon/bus/intake.py), before its body is read into memory.
LARGEST_CALL = 64 * 1024


@dataclass(frozen=True)
class Call:
    """What a handler knows about its caller."""

    sender: str
    interactive: bool


Handler = Callable[..., Awaitable[Any] | Any]


@dataclass
class Method:
    name: str
    in_args: list[tuple[str, str]]  # (name, signature)
    out_args: list[tuple[str, str]]
    handler: Handler  # handler(target, call, *args) -> body value (one out arg) or tuple
    waits: bool = False  # it only waits: dropped when its caller leaves the bus
    largest: int = LARGEST_CALL  # the most its arguments may take on the wire, in bytes
    too_big: str = ""  # what a caller over that should do instead

    @property
    def in_sig(self) -> str:
        return "".join(s for _, s in self.in_args)

    @property
    def out_sig(self) -> str:
        return "".join(s for _, s in self.out_args)


@dataclass
class Property:
    name: str
    signature: str
    getter: Callable[[Any], Any]  # getter(target) -> value; may be a coroutine function
    emits: str = "true"  # true | const | false


@dataclass
class Signal:
    name: str
    args: list[tuple[str, str]]


@dataclass
class Interface:
    name: str
    methods: list[Method] = field(default_factory=list)
    properties: list[Property] = field(default_factory=list)
    signals: list[Signal] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.method_by_name = {m.name: m for m in self.methods}
        self.property_by_name = {p.name: p for p in self.properties}

    def xml(self) -> str:
        parts = [f"  <interface name={quoteattr(self.name)}>"]
        for m in self.methods:
            parts.append(f"    <method name={quoteattr(m.name)}>")
            parts += [f'      <arg name="{n}" type="{s}" direction="in"/>' for n, s in m.in_args]
            parts += [f'      <arg name="{n}" type="{s}" direction="out"/>' for n, s in m.out_args]
            parts.append("    </method>")
        for s in self.signals:
            parts.append(f"    <signal name={quoteattr(s.name)}>")
            parts += [f'      <arg name="{n}" type="{t}"/>' for n, t in s.args]
            parts.append("    </signal>")
        for p in self.properties:
            parts.append(f'    <property name="{p.name}" type="{p.signature}" access="read">')
            parts.append(f'      <annotation name="{EMITS}" value="{p.emits}"/>')
            parts.append("    </property>")
        parts.append("  </interface>")
        return "\n".join(parts)
