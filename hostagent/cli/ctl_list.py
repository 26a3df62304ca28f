"""hostagentctl list: the sessions of one daemon as a table or JSON, and the pieces of it that
a fleet's list (ctl_fleet) shares."""

from __future__ import annotations

import argparse
import asyncio
import fnmatch
from typing import Any

from hostagent import values
from hostagent.cli.ctl_options import UsageError
from hostagent.cli.ctl_output import (
    daemon_named,
    emit_json,
    human_age,
    human_bytes,
    human_nsec,
    listed,
    show_table,
    usage_cells,
)
from hostagent.client.library import Client, SessionRow
from hostagent.errors import HostAgentError


def _wanted(row: SessionRow, a: argparse.Namespace, owner: int | None) -> bool:
    states = {s for s in (a.state or "").split(",") if s}
    return (
        (not states or row.state in states)
        and (owner is None or row.owner == owner)
        and (not a.patterns or any(fnmatch.fnmatchcase(row.name, p) for p in a.patterns))
    )


async def list_items(c: Client, a: argparse.Namespace, local: bool) -> list[dict[str, Any]]:
    """The sessions list shows, as list --json has them, filtered by a's patterns and options."""
    owner = None
    if a.owner:
        try:
            owner = values.parse_user(a.owner)
        except values.ValueProblem as e:
            raise UsageError(f"--owner: {e}") from None
    sessions = sorted(
        (r for r in await c.list_sessions() if _wanted(r, a, owner)), key=lambda r: r.name
    )
    branches = await c.branches()
    slots = asyncio.Semaphore(16)

    async def details(row: SessionRow) -> dict[str, Any]:
        async with slots:
            try:
                return await c.properties(row.name)
            except HostAgentError:  # removed meanwhile
                return {}

    props = await asyncio.gather(*(details(r) for r in sessions))
    return [
        listed(r, p, branches.get(r.name, ""), local) for r, p in zip(sessions, props, strict=True)
    ]


LIST_HEADER = ["Name", "Preset", "State", "Activity", "User", "Age", "Memory", "CPU", "Tokens", "Cost"]  # fmt: skip


def list_row(i: dict[str, Any]) -> list[str]:
    return [
        i["name"], i["preset"], i["state"], i["activity"], i["user"], human_age(i["started_at"]),
        human_bytes(i["memory"]), human_nsec(i["cpu_nsec"]), *usage_cells(i["usage"]),
    ]  # fmt: skip


async def verb_list(c: Client, a: argparse.Namespace) -> int:
    items = await list_items(c, a, local=not (a.host or a.machine or a.address))
    if a.json:
        emit_json(a, items)
        return 0
    header, rows = list(LIST_HEADER), [list_row(i) for i in items]
    if any(i.get("branch") for i in items):
        header.append("Branch")
        rows = [[*row, i.get("branch", "")] for row, i in zip(rows, items, strict=True)]
    show_table(a, header, rows, "session", daemon_named(a))
    return 0
