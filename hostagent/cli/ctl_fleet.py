"""hostagentctl across a fleet (``-H`` repeated, or ``--fleet``): list with a HOST column,
and the verbs that name sessions run on the host each session is on.

Every host is asked at once, each within its own time bound (``client/fleet.py``); a host that
gives no answer is one line on stderr saying why, and the exit code is 1 when any host failed,
while the others' answers are printed as usual.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import sys
from typing import Any

from hostagent.cli.ctl_inbox import show_inbox
from hostagent.cli.ctl_list import LIST_HEADER, list_items, list_row
from hostagent.cli.ctl_options import UsageError
from hostagent.cli.ctl_output import EXIT_FAILURE, EXIT_USAGE, emit_json, fail, show_table
from hostagent.cli.verbs import BY_NAME, MANY, ONE, VERBS, load
from hostagent.client.fleet import (
    HOST_DOWN,
    HOST_TIMEOUT,
    Answer,
    Host,
    ask,
    fleet_hosts,
    locate,
    split_name,
    why_down,
)
from hostagent.client.library import Client
from hostagent.client.transport import TransportError
from hostagent.errors import HostAgentError
from hostagent.escape import printable

# The verbs that name sessions (verbs.py): each runs on the host its session is on. wait has a
# fleet form of its own (fleet_wait): the first of its sessions on any host.
ONE_NAME = frozenset(v.name for v in VERBS if v.remote and v.takes == ONE)
MANY_NAMES = frozenset(v.name for v in VERBS if v.remote and v.takes == MANY) - {"wait"}


def hosts_of(args: argparse.Namespace) -> list[Host] | None:
    """The fleet this command line names, or None for one host (or this one)."""
    targets = list(args.hosts)
    if not args.fleet and len(targets) < 2:
        return None
    args.host = None
    return fleet_hosts(targets, from_files=args.fleet)


def report_down(answers: list[Answer[Any]]) -> int:
    """One line per host that gave no answer; EXIT_FAILURE if there was any."""
    down = [a for a in answers if a.down]
    for a in down:
        say_down(a.host, a.down)
    return EXIT_FAILURE if down else 0


def say_down(host: Host, why: str) -> None:
    print(f"{host.name}: {printable(why)}", file=sys.stderr)


async def fleet_list(args: argparse.Namespace, hosts: list[Host]) -> int:
    async def items(c: Client) -> list[dict[str, Any]]:
        return await list_items(c, args, local=False)

    answers = await ask(hosts, args.system_bus, items)
    every = [
        {"host": a.host.name, **item} for a in answers if a.value is not None for item in a.value
    ]
    if args.json:
        emit_json(args, every)
    else:
        up = sum(1 for a in answers if not a.down)
        rows = [[i["host"], *list_row(i)] for i in every]
        where = f"on {up} of {len(hosts)} host{'s' if len(hosts) != 1 else ''}"
        show_table(args, ["Host", *LIST_HEADER], rows, "session", where)
    return report_down(answers)


async def fleet_inbox(a: argparse.Namespace, hosts: list[Host]) -> int:
    """Every host's questions at once, each session named HOST:NAME, oldest first."""
    answers = await ask(hosts, a.system_bus, lambda c: c.questions())
    waiting = [
        q._replace(session=f"{answer.host.name}:{q.session}")
        for answer in answers
        if answer.value is not None
        for q in answer.value
    ]
    show_inbox(a, sorted(waiting, key=lambda q: q.since))
    return report_down(answers)


async def _names(c: Client) -> list[str]:
    return [r.name for r in await c.list_sessions()]


async def placed(
    names: list[str], args: argparse.Namespace, hosts: list[Host]
) -> tuple[dict[Host, list[str]], int]:
    """Each name's host: HOST:NAME says it, else the one host that has a session so named.
    Returns the names by host, and EXIT_FAILURE when a name was placed nowhere."""
    listings: dict[Host, list[str]] = {}
    if any(split_name(n, hosts)[0] is None for n in names):
        answers = await ask(hosts, args.system_bus, _names)
        listings = {a.host: a.value for a in answers if a.value is not None}
        report_down(answers)  # a session there cannot be found: say why
    by_host: dict[Host, list[str]] = {}
    rc = 0
    for name in names:
        try:
            host, bare = locate(name, listings, hosts)
        except HostAgentError as e:
            rc = fail(args.verb, name, e)
            continue
        by_host.setdefault(host, []).append(bare)
    return by_host, rc


async def run_fleet(args: argparse.Namespace, hosts: list[Host]) -> int:
    """A verb across several hosts (ctl_fleet): their system daemons, as -H has it."""
    args.system_bus = args.system is not False
    try:
        if args.machine or args.address or args.verb == "logs":
            raise UsageError("works on one host: name it with -H HOST alone.")
        if args.verb == "mcp":
            from hostagent.cli.mcp_fleet import serve_fleet

            return await serve_fleet(hosts, args.system_bus)
        if args.verb == "watch":
            from hostagent.cli.watch import watch_fleet

            where = [w for t in args.hosts for w in ("-H", t)] + ["--fleet"] * args.fleet
            return await watch_fleet(args.system_bus, hosts, where)
        return await fleet_verb(args, hosts)
    except UsageError as e:
        print(f"hostagentctl {args.verb}: {e}", file=sys.stderr)
        return EXIT_USAGE


async def fleet_verb(args: argparse.Namespace, hosts: list[Host]) -> int:
    """A verb that names sessions, on each session's host; other verbs need one host."""
    if args.verb == "list":
        return await fleet_list(args, hosts)
    if args.verb == "wait":
        return await fleet_wait(args, hosts)
    if args.verb == "inbox":
        return await fleet_inbox(args, hosts)
    if args.verb not in ONE_NAME | MANY_NAMES:
        raise UsageError(f"{args.verb} runs on one host: name it with -H HOST.")
    names = args.names if args.verb in MANY_NAMES else [args.name]
    run_verb: Any = load(BY_NAME[args.verb])
    by_host, rc = await placed(names, args, hosts)

    async def on(host: Host, here: list[str]) -> int:
        one = copy.copy(args)
        one.host = None if host.local else host.target
        if args.verb in MANY_NAMES:
            one.names = here
        else:
            one.name = here[0]
        try:
            client = await host.connect(args.system_bus)
        except HOST_DOWN as e:
            say_down(host, why_down(e, HOST_TIMEOUT))
            return EXIT_FAILURE
        try:
            return await run_verb(client, one)  # type: ignore[no-any-return]
        except HostAgentError as e:
            return fail(args.verb, f"{host.name}:{here[0]}", e)
        finally:
            await client.aclose()

    # One host after another, in the order given: their output must not interleave.
    for host, here in by_host.items():
        rc = max(rc, await on(host, here))
    return rc


async def fleet_wait(args: argparse.Namespace, hosts: list[Host]) -> int:
    """The first of the named sessions, on whichever host, to reach one of the activities."""
    from hostagent import values

    by_host, rc = await placed(args.names, args, hosts)
    if rc or not by_host:
        return rc or EXIT_FAILURE
    try:
        timeout = int(values.parse_seconds(args.timeout) * 1_000_000)
    except values.ValueProblem as e:
        raise UsageError(f"--timeout: {e}") from None
    activities = [x for x in args.activity.split(",") if x]
    clients: dict[Host, Client] = {}

    async def on(host: Host, here: list[str]) -> tuple[Host, str, str] | None:
        try:
            clients[host] = c = await host.connect(args.system_bus)
            name, activity = await c.wait_any(here, activities, timeout)
        except (OSError, ValueError, EOFError, TransportError) as e:  # the host, or the way
            say_down(host, why_down(e, HOST_TIMEOUT))
            return None
        except HostAgentError as e:  # the daemon's answer: its timeout, a session removed
            fail("wait", f"{host.name}:{here[0]}", e)
            return None
        return host, name, activity

    tasks = [asyncio.ensure_future(on(h, n)) for h, n in by_host.items()]
    try:
        for finished in asyncio.as_completed(tasks):
            first = await finished
            if first is None:
                rc = EXIT_FAILURE
                continue
            host, name, activity = first
            if args.json:
                emit_json(args, {"host": host.name, "name": name, "activity": activity})
            else:
                print(f"{host.name}:{name} {activity}")
            return 0
        return rc or EXIT_FAILURE
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in clients.values():
            await c.aclose()
