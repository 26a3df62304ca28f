"""systemd's resource-control properties a session's scope may carry besides hostagent's own
limits (MemoryMax, MemoryHigh, CPUWeight, TasksMax, RuntimeMaxSec, which the admin caps).

``hostagentctl new -p CPUQuota=50% -p AllowedCPUs=0-3`` takes them as systemd-run does; the
record keeps them in systemd's words, the scope gets them at every start, and status shows them
back the same way. On the system daemon a user's scope sits in her own slice, so each of these
can only narrow what she already has (a protection or a weight counts among her own sessions
only, an address list adds to what her slice's own lists allow): none needs a cap.

Not taken: access controls over devices, sockets, network interfaces and BPF programs, and
delegation (DeviceAllow=, SocketBindAllow=, BPFProgram=, Delegate=, ...), which are the admin's to
set on the slice; and what Debian 12's systemd 252 does not know (MemoryZSwapMax=, the
Startup* memory limits).

Each is read by ``parse`` into the value StartTransientUnit takes and the text shown back.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from hostagent import values

MAX_PROPERTIES = 64  # -p assignments one session may carry
_CPUS = 4096  # the most CPUs (or memory nodes) an AllowedCPUs= list may name


def physical_memory() -> int:
    """This host's memory in bytes: what MemoryMax=50% is a share of, as for systemd."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class ResourceProblem(ValueError):
    """A value systemd would refuse, said for the caller."""


@dataclass(frozen=True)
class Wire:
    """One property as StartTransientUnit takes it, and as status shows it back."""

    name: str  # systemd's name on the bus (CPUQuota is CPUQuotaPerSecUSec there)
    signature: str
    value: Any
    shown: str  # the value in systemd's words, normalized


def _size(text: str, physical: int | None) -> tuple[Any, str]:
    size = values.parse_size(text, physical)
    if text.strip().endswith("%"):
        return size, text.strip()  # of the memory of the host it starts on, as systemd reads it
    shown = values.format_size(size) if size else "0"
    return size, shown if values.parse_size(shown) == size else str(size)


def _weight(text: str, physical: int | None) -> tuple[Any, str]:
    if not text.isdigit() or not 1 <= int(text) <= 10000:
        raise ResourceProblem(f"needs a weight from 1 to 10000, not '{text}'")
    return int(text), str(int(text))


def _percent(text: str, physical: int | None) -> tuple[Any, str]:
    m = re.fullmatch(r"(\d+)%", text.strip())
    if not m or int(m.group(1)) == 0:
        raise ResourceProblem(f"needs a percentage of one CPU, such as 50% or 200%, not '{text}'")
    percent = int(m.group(1))
    return percent * 10_000, f"{percent}%"  # microseconds of CPU time per second


def _usec(text: str, physical: int | None) -> tuple[Any, str]:
    """A short time span in systemd's words (100ms, 1s, 500us) as microseconds."""
    m = re.fullmatch(r"(\d+)\s*(us|usec|ms|msec|s|sec)?", text.strip())
    if not m or int(m.group(1)) == 0:
        raise ResourceProblem(f"needs a time span such as 100ms or 1s, not '{text}'")
    factor = {"us": 1, "usec": 1, "ms": 1000, "msec": 1000, "s": 10**6, "sec": 10**6}
    usec = int(m.group(1)) * factor[m.group(2) or "s"]
    if usec % 10**6 == 0:
        return usec, f"{usec // 10**6}s"
    return usec, f"{usec // 1000}ms" if usec % 1000 == 0 else f"{usec}us"


def _boolean(text: str, physical: int | None) -> tuple[Any, str]:
    word = text.strip().lower()
    if word in ("yes", "true", "on", "1"):
        return True, "yes"
    if word in ("no", "false", "off", "0"):
        return False, "no"
    raise ResourceProblem(f"takes yes or no, not '{text}'")


_ADDRESS_WORDS = {  # systemd's names for address ranges
    "any": ("0.0.0.0/0", "::/0"),
    "localhost": ("127.0.0.0/8", "::1/128"),
    "link-local": ("169.254.0.0/16", "fe80::/64"),
    "multicast": ("224.0.0.0/4", "ff00::/8"),
}


def _addresses(text: str, physical: int | None) -> tuple[Any, str]:
    """IPAddressAllow=/IPAddressDeny=: addresses with prefixes, or systemd's words."""
    found: list[list[Any]] = []  # (family, address, prefix) structs, as dbus-fast takes them
    words = text.split()
    if not words:
        raise ResourceProblem("needs addresses such as 10.0.0.0/8, localhost or any")
    for word in words:
        for item in _ADDRESS_WORDS.get(word, (word,)):
            try:
                net = ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ResourceProblem(
                    f"needs addresses such as 10.0.0.0/8, localhost or any, not '{word}'"
                ) from None
            family = socket.AF_INET if net.version == 4 else socket.AF_INET6
            found.append([family, net.network_address.packed, net.prefixlen])
    return found, " ".join(words)


def _cpu_set(text: str, physical: int | None) -> tuple[Any, str]:
    """0-3,6 as systemd's bitmask (byte i bit j is CPU 8i+j)."""
    chosen: set[int] = set()
    for part in re.split(r"[\s,]+", text.strip()):
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ResourceProblem(f"needs a list of numbers and ranges such as 0-3,6, not '{text}'")
        low, high = int(m.group(1)), int(m.group(2) or m.group(1))
        if low > high or high >= _CPUS:
            raise ResourceProblem(f"names no CPUs systemd would take: '{part}'")
        chosen.update(range(low, high + 1))
    mask = bytearray(max(chosen) // 8 + 1)
    for cpu in chosen:
        mask[cpu // 8] |= 1 << (cpu % 8)
    return bytes(mask), _ranges(sorted(chosen))


def _ranges(numbers: list[int]) -> str:
    out: list[str] = []
    start = prev = numbers[0]
    for n in [*numbers[1:], -2]:
        if n != prev + 1:
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = n
        prev = n
    return ",".join(out)


def _per_device(read: Callable[[str, int | None], tuple[Any, str]]) -> Callable[..., Any]:
    """'/dev/sda 10M' as [(path, value)], the device's value read by read."""

    def parse(text: str, physical: int | None) -> tuple[Any, str]:
        path, _, value = text.strip().partition(" ")
        if not path.startswith("/dev/") or not value.strip():
            raise ResourceProblem(
                f"needs a device and a value, such as '/dev/sda 10M', not '{text}'"
            )
        number, shown = read(value.strip(), physical)
        return [[path, number]], f"{path} {shown}"  # dbus-fast takes a struct as a list

    return parse


def _count(text: str, physical: int | None) -> tuple[Any, str]:
    if not text.isdigit() or int(text) == 0:
        raise ResourceProblem(f"needs a positive whole number, not '{text}'")
    return int(text), str(int(text))


def _oom(text: str, physical: int | None) -> tuple[Any, str]:
    if text not in ("auto", "kill"):
        raise ResourceProblem(f"takes auto or kill, not '{text}'")
    return text, text


# -p NAME -> (systemd's name on the bus, its signature, how the value reads)
PROPERTIES: dict[str, tuple[str, str, Callable[[str, int | None], tuple[Any, str]]]] = {
    "CPUAccounting": ("CPUAccounting", "b", _boolean),
    "CPUQuota": ("CPUQuotaPerSecUSec", "t", _percent),
    "CPUQuotaPeriodSec": ("CPUQuotaPeriodUSec", "t", _usec),
    "AllowedCPUs": ("AllowedCPUs", "ay", _cpu_set),
    "AllowedMemoryNodes": ("AllowedMemoryNodes", "ay", _cpu_set),
    "StartupAllowedCPUs": ("StartupAllowedCPUs", "ay", _cpu_set),
    "StartupAllowedMemoryNodes": ("StartupAllowedMemoryNodes", "ay", _cpu_set),
    "StartupCPUWeight": ("StartupCPUWeight", "t", _weight),
    "IOAccounting": ("IOAccounting", "b", _boolean),
    "IOWeight": ("IOWeight", "t", _weight),
    "StartupIOWeight": ("StartupIOWeight", "t", _weight),
    "IODeviceWeight": ("IODeviceWeight", "a(st)", _per_device(_weight)),
    "IOReadBandwidthMax": ("IOReadBandwidthMax", "a(st)", _per_device(_size)),
    "IOWriteBandwidthMax": ("IOWriteBandwidthMax", "a(st)", _per_device(_size)),
    "IOReadIOPSMax": ("IOReadIOPSMax", "a(st)", _per_device(_count)),
    "IOWriteIOPSMax": ("IOWriteIOPSMax", "a(st)", _per_device(_count)),
    "IODeviceLatencyTargetSec": ("IODeviceLatencyTargetUSec", "a(st)", _per_device(_usec)),
    "MemoryAccounting": ("MemoryAccounting", "b", _boolean),
    "MemoryMin": ("MemoryMin", "t", _size),
    "MemoryLow": ("MemoryLow", "t", _size),
    "MemorySwapMax": ("MemorySwapMax", "t", _size),
    "TasksAccounting": ("TasksAccounting", "b", _boolean),
    "IPAddressAllow": ("IPAddressAllow", "a(iayu)", _addresses),
    "IPAddressDeny": ("IPAddressDeny", "a(iayu)", _addresses),
    "ManagedOOMSwap": ("ManagedOOMSwap", "s", _oom),
    "ManagedOOMMemoryPressure": ("ManagedOOMMemoryPressure", "s", _oom),
}


def parse(name: str, text: str, physical: int | None = None) -> Wire:
    """NAME=text, as systemd-run -p reads it; physical is the host's memory, for 50%."""
    known = PROPERTIES.get(name)
    if known is None:
        raise ResourceProblem(f"'{name}' is not a resource-control property hostagent sets")
    wire_name, signature, read = known
    try:
        value, shown = read(text, physical)
    except values.ValueProblem as e:
        raise ResourceProblem(str(e)) from None
    return Wire(wire_name, signature, value, shown)


def assignment(text: str, physical: int | None = None) -> tuple[str, Wire]:
    """One NAME=value as given to -p, read; its name and its wire form."""
    name, sep, value = text.partition("=")
    if not sep:
        raise ResourceProblem(f"'{text}' is not NAME=VALUE")
    return name, parse(name, value, physical)


def scope_properties(assigned: list[str], physical: int | None) -> list[Wire]:
    """What StartTransientUnit gets for the NAME=value assignments a session carries, in
    their order; a list property given several times (per device, per address) becomes one
    list, as systemd keeps it."""
    merged: dict[str, Wire] = {}
    for text in assigned:
        name, wire = assignment(text, physical)
        before = merged.get(name)
        if before is not None and wire.signature.startswith("a("):
            wire = Wire(wire.name, wire.signature, [*before.value, *wire.value], "")
        merged[name] = wire
    return list(merged.values())
