"""hostagentctl list: the sessions of one daemon as a table or JSON, and the pieces of it that
a fleet's list (ctl_fleet) and the quick list (ctl_quick) share. Imports at its top only what
the quick list needs."""

from __future__ import annotations

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
from hostagent.errors import HostAgentError

TYPE_CHECKING = False  # typing's own import costs more than a quick list's call
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable
    from typing import Any, TypeVar

    from hostagent.client.library import Client, SessionRow

    T = TypeVar("T")


def wanted(row: SessionRow, a: argparse.Namespace, owner: int | None) -> bool:
    """Whether list shows row: its state among --state's, its owner --owner's, its name
    matching a pattern."""
    states = {s for s in (a.state or "").split(",") if s}
    if (states and row.state not in states) or (owner is not None and row.owner != owner):
        return False
    if not a.patterns:
        return True
    import fnmatch

    return any(fnmatch.fnmatchcase(row.name, p) for p in a.patterns)


async def list_items(c: Client, a: argparse.Namespace, local: bool) -> list[dict[str, Any]]:
    """The sessions list shows, as list --json has them, filtered by a's patterns and options."""
    import asyncio

    owner = owner_wanted(a)
    sessions = sorted(
        (r for r in await c.list_sessions() if wanted(r, a, owner)), key=lambda r: r.name
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


def owner_wanted(a: argparse.Namespace) -> int | None:
    """--owner's uid, or None."""
    if not a.owner:
        return None
    from hostagent import values
    from hostagent.cli.ctl_options import UsageError

    try:
        return values.parse_user(a.owner)
    except values.ValueProblem as e:
        raise UsageError(f"--owner: {e}") from None


LIST_HEADER = [
    "Name",
    "Preset",
    "State",
    "Activity",
    "User",
    "Age",
    "Memory",
    "CPU",
    "Tokens",
    "Cost",
]


def list_row(i: dict[str, Any]) -> list[str]:
    return [
        i["name"],
        i["preset"],
        i["state"],
        i["activity"],
        i["user"],
        human_age(i["started_at"]),
        human_bytes(i["memory"]),
        human_nsec(i["cpu_nsec"]),
        *usage_cells(i["usage"]),
    ]


async def verb_list(c: Client, a: argparse.Namespace) -> int:
    show_list(a, await list_items(c, a, local=not (a.host or a.machine or a.address)))
    return 0


def as_tree(
    items: list[T], name: Callable[[T], str], parent: Callable[[T], str]
) -> tuple[list[T], list[int]]:
    """items in their order, each session made from inside another listed one moved under
    it; and how deep each is (0: made from outside, or its parent is not listed)."""
    names = {name(i) for i in items}
    children: dict[str, list[T]] = {}
    for i in items:
        children.setdefault(parent(i), []).append(i)
    ordered: list[T] = []
    depths: list[int] = []
    placed: set[str] = set()

    def under(item: T, depth: int) -> None:
        if name(item) in placed:
            return
        placed.add(name(item))
        ordered.append(item)
        depths.append(depth)
        for child in children.pop(name(item), []):
            under(child, depth + 1)

    for i in items:
        if parent(i) not in names:
            under(i, 0)
    for rest in list(children.values()):  # a loop of parents, which no create makes
        for i in rest:
            under(i, 0)
    return ordered, depths


def indented(name: str, depth: int) -> str:
    """A session's name in a table, under the one it was made from inside."""
    return "  " * (depth - 1) + "└ " + name if depth else name


def show_list(a: argparse.Namespace, items: list[dict[str, Any]]) -> None:
    """The list's table, or its JSON."""
    if a.json:
        emit_json(a, items)
        return
    items, depths = as_tree(items, lambda i: i["name"], lambda i: i.get("parent") or "")
    header, rows = list(LIST_HEADER), [list_row(i) for i in items]
    for row, depth in zip(rows, depths, strict=True):
        row[0] = indented(row[0], depth)
    if any(i.get("branch") for i in items):
        header.append("Branch")
        rows = [[*row, i.get("branch", "")] for row, i in zip(rows, items, strict=True)]
    show_table(a, header, rows, "session", daemon_named(a))
