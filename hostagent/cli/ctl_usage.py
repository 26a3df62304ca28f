"""hostagentctl's usage and budget verbs: what users' sessions used over a window, and an
admin's lift of a user's budgets for the day.

    hostagentctl usage [--since today|-7d|2026-12-01|@EPOCH] [--until ...] [--owner USER]
    hostagentctl budget lift USER
"""

from __future__ import annotations

import argparse
import datetime
import re
import time

from hostagent import values
from hostagent.cli.ctl_options import UsageError
from hostagent.cli.ctl_output import daemon_named, emit_json, show_table, user_name
from hostagent.client.library import Client
from hostagent.usage import Usage, total
from hostagent.usage.text import format_cost, format_tokens

_DAYS_AGO = re.compile(r"^-(\d+)d$")


class WhenProblem(ValueError):
    pass


def parse_when(text: str, now: float | None = None) -> int:
    """A moment as µs since the epoch: "today" (its midnight, local), "-Nd" (N days before
    today's midnight), a date (YYYY-MM-DD, local midnight) or "@SECONDS". Pure but for the
    local time zone."""
    now = time.time() if now is None else now
    today = datetime.datetime.fromtimestamp(now).replace(hour=0, minute=0, second=0, microsecond=0)
    days = _DAYS_AGO.match(text)
    if text == "today":
        moment = today.timestamp()
    elif days:
        moment = (today - datetime.timedelta(days=int(days[1]))).timestamp()
    elif text.startswith("@") and text[1:].isdigit():
        moment = float(text[1:])
    else:
        try:
            moment = datetime.datetime.strptime(text, "%Y-%m-%d").timestamp()
        except ValueError:
            raise WhenProblem(
                f"{text!r} is not a moment; give today, -7d, 2026-12-01 or @EPOCH"
            ) from None
    return int(moment * 1_000_000)


async def verb_usage(c: Client, a: argparse.Namespace) -> int:
    try:
        since = parse_when(a.since)
        until = parse_when(a.until) if a.until else 0
        owner = values.parse_user(a.owner) if a.owner else None
    except (WhenProblem, values.ValueProblem) as e:
        raise UsageError(str(e)) from None
    rows = [r for r in await c.usage(since, until) if owner is None or r[0] == owner]
    if a.json:
        emit_json(a, [{"owner": u, "preset": p, **used.to_dict()} for u, p, used in rows])
        return 0
    header = ["User", "Preset", "Calls", "Input", "Cached", "Output", "Cost"]
    table = [_row(user_name(u), p, used) for u, p, used in rows]
    if len(rows) > 1:
        table.append(_row("total", "", total(used for _, _, used in rows)))
    show_table(a, header, table, "row", daemon_named(a))
    return 0


def _row(user: str, preset: str, used: Usage) -> list[str]:
    return [
        user,
        preset,
        str(used.calls),
        format_tokens(used.input),
        format_tokens(used.cache_read + used.cache_write),
        format_tokens(used.output),
        format_cost(used.cost_usd),
    ]


async def verb_budget(c: Client, a: argparse.Namespace) -> int:
    try:
        uid = values.parse_user(a.user)
    except values.ValueProblem as e:
        raise UsageError(f"USER: {e}") from None
    resumed = await c.lift_budget(uid)
    if not a.quiet:
        print(
            f"Budgets of {a.user} lifted for today"
            + (f"; resumed {', '.join(resumed)}." if resumed else ".")
        )
    return 0
