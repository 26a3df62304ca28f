"""Values written as systemd's own tools take them: sizes, time spans, signals and users. Pure.

``hostagentctl new -p MemoryMax=4G -p RuntimeMaxSec=1h``, ``kill -s TERM`` and ``--uid alice``
read the way ``systemd-run -p`` and ``systemctl kill`` do, and hostagent.yaml takes the same
sizes and spans. Every error says what was typed and what would do.
"""

from __future__ import annotations

import math
import pwd

from hostagent import UINT64_MAX

INFINITY = UINT64_MAX  # systemd's "infinity": no limit, as opposed to 0, "not given"

# Patterns, not compiled here: re (and signal's enum) are imported where a value is parsed, so
# that printing one (hostagentctl status) does not pay for them; re keeps what it compiles.
_SIZE = r"(\d+(?:\.\d+)?)\s*([KMGTPE]?)(?:i?B)?"
_SIZE_UNITS = " KMGTPE"
# systemd's time span units, in seconds; "m" is minutes and "M" months, as in systemd.time(7).
_SPAN_UNITS: dict[str, float] = {
    **dict.fromkeys(("us", "usec", "µs"), 1e-6),
    **dict.fromkeys(("ms", "msec"), 1e-3),
    **dict.fromkeys(("s", "sec", "second", "seconds"), 1),
    **dict.fromkeys(("m", "min", "minute", "minutes"), 60),
    **dict.fromkeys(("h", "hr", "hour", "hours"), 3600),
    **dict.fromkeys(("d", "day", "days"), 86400),
    **dict.fromkeys(("w", "week", "weeks"), 7 * 86400),
    **dict.fromkeys(("M", "month", "months"), 2629800),
    **dict.fromkeys(("y", "year", "years"), 31557600),
}
_SPAN_PART = r"(\d+(?:\.\d+)?)\s*([A-Za-zµ]*)\s*"


class ValueProblem(ValueError):
    """A value that does not read; its message says what was typed and what would do."""


def parse_size(text: str, physical: int | None = None) -> int:
    """Bytes, from "512M", "4G", "1.5G", "2048", "infinity", or "50%" of physical bytes
    (None when the host's memory is not known here, as for another host)."""
    value = text.strip()
    if value.lower() == "infinity":
        return INFINITY
    if value.endswith("%"):
        if physical is None:
            raise ValueProblem(f"'{text}': a percentage needs this host's memory; give a size")
        try:
            percent = float(value[:-1])
        except ValueError:
            raise ValueProblem(f"'{text}' is not a percentage (e.g. 50%)") from None
        if not 0 < percent <= 100:
            raise ValueProblem(f"'{text}' must be a percentage above 0 and at most 100")
        return int(physical * percent / 100)
    import re

    m = re.fullmatch(_SIZE, value, re.IGNORECASE)
    if not m:
        raise ValueProblem(f"'{text}' is not a size (e.g. 512M, 4G, 50%, infinity)")
    size = float(m.group(1)) * (1 << (10 * _SIZE_UNITS.index(m.group(2).upper() or " ")))
    if size >= INFINITY:
        raise ValueProblem(f"'{text}' is more than the largest size (16E); use infinity")
    return int(size)


def parse_timespan(text: str) -> int:
    """Whole seconds (rounded up), from "90", "90s", "30min", "1h 30min", "2d" or "infinity"."""
    import re

    span_part = re.compile(_SPAN_PART)
    value = text.strip()
    if value.lower() == "infinity":
        return INFINITY
    if not value:
        raise ValueProblem("an empty time span; give one such as 90s, 30min or 1h")
    total, pos = 0.0, 0
    while pos < len(value):
        m = span_part.match(value, pos)
        unit = m.group(2) if m else ""
        if not m or (unit and unit not in _SPAN_UNITS and unit.lower() not in _SPAN_UNITS):
            raise ValueProblem(f"'{text}' is not a time span (e.g. 90s, 30min, 1h 30min)")
        factor = _SPAN_UNITS.get(unit, _SPAN_UNITS.get(unit.lower(), 1)) if unit else 1
        total += float(m.group(1)) * factor
        pos = m.end()
    if total >= INFINITY / 1e6:
        raise ValueProblem(f"'{text}' is longer than systemd can count; use infinity")
    return math.ceil(total)


def format_size(size: int) -> str:
    """A size as systemd shows one: 2G, 1.5G, 512M, 100B; infinity."""
    if size >= INFINITY:
        return "infinity"
    for power in range(len(_SIZE_UNITS) - 1, 0, -1):
        factor = 1024**power
        if size >= factor:
            value = size / factor
            shown = f"{value:.0f}" if size % factor == 0 else f"{value:.1f}"
            return f"{shown}{_SIZE_UNITS[power]}"
    return f"{size}B"


def format_timespan(seconds: int) -> str:
    """Whole seconds as systemd shows a span: 8h, 1h 30min, 2min 5s, 0; infinity."""
    if seconds >= INFINITY:
        return "infinity"
    parts = []
    for unit, length in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if seconds >= length:
            parts.append(f"{seconds // length}{unit}")
            seconds %= length
    return " ".join(parts) or "0"


def format_limit(prop: str, value: int) -> str:
    """A resource-control property's value as systemctl shows it (MemoryMax=2G,
    RuntimeMaxSec=8h, TasksMax=4096)."""
    if prop.startswith("Memory"):
        return format_size(value)
    if prop.endswith("Sec"):
        return format_timespan(value)
    return "infinity" if value >= INFINITY else str(value)


def parse_signal(text: str) -> int:
    """A signal number, from "9", "KILL", "SIGKILL" or "kill"."""
    import signal

    value = text.strip()
    if value.isdigit():
        number = int(value)
        if 1 <= number < signal.NSIG:
            return number
        raise ValueProblem(f"'{text}' is not a signal number (1 to {signal.NSIG - 1})")
    name = value.upper()
    name = name if name.startswith("SIG") else f"SIG{name}"
    try:
        return int(signal.Signals[name])
    except KeyError:
        raise ValueProblem(f"'{text}' is not a signal (e.g. TERM, KILL, HUP, 9)") from None


def parse_user(text: str) -> int:
    """A uid, from a user name or a number."""
    value = text.strip()
    if value.isdigit():
        return int(value)
    try:
        return pwd.getpwnam(value).pw_uid
    except KeyError:
        raise ValueProblem(f"there is no user '{text}' here; give a user name or a uid") from None


def parse_seconds(text: str) -> float:
    """A wait's timeout in seconds: not negative, not endless (0 means no timeout)."""
    try:
        seconds = float(text)
    except ValueError:
        raise ValueProblem(f"'{text}' is not a number of seconds") from None
    if not math.isfinite(seconds) or seconds < 0 or seconds > 10 * 365 * 86400:
        raise ValueProblem(f"'{text}' must be between 0 (no timeout) and 10 years of seconds")
    return seconds
