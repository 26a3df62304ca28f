"""Usage as people read it: tokens as 12.3k, money as $0.42, the same in hostagentctl, the
daemon's log and (written again in JavaScript) the Cockpit page. Kept apart from usage/__init__.py,
whose text is also a program run as a session's owner, which needs none of this."""

from __future__ import annotations


def format_tokens(count: int) -> str:
    """Tokens as people read them: 950, 12.3k, 4.1M; cut, never rounded up (1250 is 1.2k, as
    the Cockpit page writes it too)."""
    if count < 1000:
        return str(count)
    for unit, size in (("M", 1_000_000), ("k", 1000)):
        if count >= size:
            tenths = count * 10 // size
            return (
                f"{tenths // 10}.{tenths % 10}{unit}" if tenths < 1000 else f"{tenths // 10}{unit}"
            )
    return str(count)  # not reached


def format_cost(cost: float | None) -> str:
    """Dollars with cents ($0.42), more places below a cent; "-" when unknown."""
    if cost is None:
        return "-"
    if 0 < cost < 0.01:
        return f"${cost:.4f}"
    return f"${cost:.2f}"
