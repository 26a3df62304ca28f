"""What a session's agent has used: tokens by kind, and money where the CLI states it. Pure.

Every CLI keeps its own record of what each model call used, each in its own shape and with
its own traps (a call written twice, running sums beside per-call figures, input with or
without its cached part). ``usage.readers`` reads each shape into the one ``Usage`` of this
module, with the same meaning whatever the CLI:

- ``input``: every token sent, the part read from or written to the provider's cache included;
- ``output``: every token received, reasoning included;
- ``cache_read``, ``cache_write``: of ``input``, what the cache served and what it stored;
- ``cost_usd``: the money the CLI says the calls cost, or None where it says nothing (never a
  guess: a price an admin sets is applied elsewhere);
- ``calls``: the model calls counted.

A reader takes a conversation's whole record as the CLI wrote it, so reading it again gives the
same figures: the daemon keeps one ``Usage`` per conversation and adds those up, which is how
totals survive restarts, resumes and a conversation id that changes. docs/presets.md, "Usage",
says where each CLI's figures come from and what each leaves out.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Usage:
    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    cost_usd: float | None = None
    calls: int = 0
    model: str = ""  # the model of the last call counted

    def __add__(self, other: Usage) -> Usage:
        # A cost stays unknown only while no part of the sum states one: one CLI states it
        # for every call or for none.
        cost = None
        if self.cost_usd is not None or other.cost_usd is not None:
            cost = (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cache_read + other.cache_read,
            self.cache_write + other.cache_write,
            cost,
            self.calls + other.calls,
            other.model or self.model,
        )

    @property
    def tokens(self) -> int:
        return self.input + self.output

    def to_dict(self) -> dict[str, Any]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_read": self.cache_read,
            "cache_write": self.cache_write,
            "cost_usd": self.cost_usd,
            "calls": self.calls,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Usage:
        cost = data.get("cost_usd")
        return cls(
            count(data.get("input")),
            count(data.get("output")),
            count(data.get("cache_read")),
            count(data.get("cache_write")),
            float(cost) if isinstance(cost, int | float) and cost >= 0 else None,
            count(data.get("calls")),
            str(data.get("model") or ""),
        )


def total(usages: Iterable[Usage]) -> Usage:
    result = Usage()
    for usage in usages:
        result = result + usage
    return result


def since(before: Usage, after: Usage) -> Usage:
    """What after adds to before, never less than nothing (a record the CLI rewrote shorter
    takes nothing back)."""
    cost = None
    if after.cost_usd is not None:
        cost = max(after.cost_usd - (before.cost_usd or 0.0), 0.0)
    return Usage(
        max(after.input - before.input, 0),
        max(after.output - before.output, 0),
        max(after.cache_read - before.cache_read, 0),
        max(after.cache_write - before.cache_write, 0),
        cost,
        max(after.calls - before.calls, 0),
        after.model,
    )


def count(value: object) -> int:
    """A token count from a record's value: a positive int, else 0 (a bool, a float, text)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
