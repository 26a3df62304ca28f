"""hostagentctl's verbs that run over one bus client (hostagent/cli/verbs.py names them all;
list, usage, logs, doctor and watch live in modules of their own)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from hostagent import __version__, hookrequest, values
from hostagent.cli import attaching
from hostagent.cli.ctl_options import UsageError, build_options
from hostagent.cli.ctl_output import (
    EXIT_FAILURE,
    as_json,
    emit_json,
    fail,
    show_status,
    show_table,
    status_unknown,
)
from hostagent.client.library import Client
from hostagent.client.transport import ssh_argv
from hostagent.errors import AlreadyRunning, HostAgentError, NoSuchSession, NotRunning
from hostagent.escape import printable


async def verb_status(c: Client, a: argparse.Namespace) -> int:
    try:
        props = await c.properties(a.name)
    except NoSuchSession as e:
        return status_unknown(a.name, e)
    return show_status(a, props, local=not (a.host or a.machine))


async def verb_explain(c: Client, a: argparse.Namespace) -> int:
    """Why the session has its activity: the rule, its source and the text it matched."""
    info = await c.explain(a.name)
    if a.json:
        emit_json(a, info)
    else:
        for key in ("activity", "source", "rule", "matched", "last_hook"):
            if info.get(key):
                print(f"{key:>9}: {printable(info[key])}")
    return 0


async def verb_new(c: Client, a: argparse.Namespace) -> int:
    # For another user, no --cwd means their home (the daemon's default), never ours.
    cwd = os.path.abspath(a.cwd) if a.cwd else ("" if a.user_id is not None else os.getcwd())
    path = await c.create(a.name or "", a.preset, cwd, build_options(a))
    name = c.session_name(path)
    if a.json:
        emit_json(a, {"name": name, "path": path})
    elif not a.quiet:
        print(name)
    return 0


async def _each(a: argparse.Namespace, verb: str, fn: Callable[[str], Awaitable[Any]]) -> int:
    rc = 0
    for name in a.names:
        try:
            await fn(name)
        except HostAgentError as e:
            rc = fail(verb, name, e)
    return rc


async def verb_stop(c: Client, a: argparse.Namespace) -> int:
    async def stop(name: str) -> None:
        # As systemctl stop: a session that is not running is already where it was asked to be.
        with contextlib.suppress(NotRunning):
            await c.stop(name)

    return await _each(a, "stop", stop)


async def verb_resume(c: Client, a: argparse.Namespace) -> int:
    async def resume(name: str) -> None:
        # As systemctl start on an active unit: nothing to do, and no failure.
        with contextlib.suppress(AlreadyRunning):
            await c.resume(name)

    return await _each(a, "resume", resume)


async def verb_rm(c: Client, a: argparse.Namespace) -> int:
    async def remove(name: str) -> None:
        note = await c.remove_with_flags(name, a.force)
        if note:
            print(note, file=sys.stderr)

    return await _each(a, "remove", remove)


async def verb_diff(c: Client, a: argparse.Namespace) -> int:
    text = await c.diff(a.name, a.stat)
    sys.stdout.write(text + ("\n" if text else ""))
    return 0


async def verb_kill(c: Client, a: argparse.Namespace) -> int:
    try:
        number = values.parse_signal(a.signal)
    except values.ValueProblem as e:
        raise UsageError(f"-s: {e}") from None
    return await _each(a, "kill", lambda n: c.kill(n, a.whom, number))


async def verb_capture(c: Client, a: argparse.Namespace) -> int:
    sys.stdout.write(await c.capture(a.name, a.lines))
    return 0


async def verb_send(c: Client, a: argparse.Namespace) -> int:
    await c.send_text(a.name, " ".join(a.text), not a.no_enter)
    return 0


async def verb_wait(c: Client, a: argparse.Namespace) -> int:
    activities = [x for x in a.activity.split(",") if x]
    try:
        timeout = int(values.parse_seconds(a.timeout) * 1_000_000)
    except values.ValueProblem as e:
        raise UsageError(f"--timeout: {e}") from None
    name, activity = await c.wait_any(a.names, activities, timeout)
    if a.json:
        emit_json(a, {"name": name, "activity": activity})
    else:
        print(f"{name} {activity}" if len(a.names) > 1 else activity)
    return 0


async def verb_attach(c: Client, a: argparse.Namespace) -> int:
    argv = await c.tmux_attach_command(a.name)  # also: may this caller attach at all
    c.close()
    bus = "--system" if a.system_bus else "--user"
    if a.host:  # the terminal is on that host: attach there, through a tty of ssh's
        argv = ssh_argv(a.host, ["hostagentctl", bus, "attach", a.name], tty=True)
    elif a.machine and a.machine != ".host":
        argv = ["machinectl", "shell", a.machine, "/usr/bin/hostagentctl", bus, "attach", a.name]
    else:  # this host's tmux client, kept from what the session's server tells it (attaching.py)
        try:
            attaching.exec_confined(argv)
        except (attaching.AttachRefused, OSError) as e:
            print(f"hostagentctl: cannot attach to {a.name}: {e}", file=sys.stderr)
            return EXIT_FAILURE
    os.execvp(argv[0], argv)
    return EXIT_FAILURE  # not reached


async def verb_presets(c: Client, a: argparse.Namespace) -> int:
    """Every preset, and whether its agent is installed for the caller (and which version)."""
    found = await c.agents()
    rows, searched = [], set()
    for name, description, cmd in await c.presets():
        program, version, problem = found.get(name, ("", "", ""))
        installed = version or (program and "yes") or ("-" if cmd else "(login shell)")
        where, path = problem_and_path(problem)
        if path and not a.json:  # the same PATH on every row: said once, below the table
            problem = where
            searched.add(path)
        rows.append(
            [name, " ".join(cmd) or "(login shell)", installed, program or problem, description]
        )
    show_table(a, ["Preset", "Command", "Installed", "Path", "Description"], rows, "preset")
    for path in sorted(searched):
        print(f"Searched your login PATH: {printable(path)}")
    return 0


def problem_and_path(problem: str) -> tuple[str, str]:
    """("not found in the login PATH", PATH) from the daemon's "… (PATH)"; else (problem, "")."""
    head, _, rest = problem.partition(" (")
    if head.endswith("login PATH") and rest.endswith(")"):
        return head, rest[:-1]
    return problem, ""


async def verb_info(c: Client, a: argparse.Namespace) -> int:
    props = await c.manager_properties()
    rows = await c.list_sessions()
    info = {**props, "Sessions": len(rows), "ClientVersion": __version__}
    if a.json:
        emit_json(a, as_json(info))
    else:
        for k, v in info.items():
            print(f"{k:>13}: {printable(v)}")
    return 0


async def verb_reload(c: Client, a: argparse.Namespace) -> int:
    await c.reload()
    return 0


HOOK_FIELDS = ("session_id", "sessionId", "conversation_id", "source", "notification_type")


async def verb_hook(c: Client, a: argparse.Namespace) -> int:
    """Run by an agent's lifecycle hook inside its session: pass the event on, never fail it.
    With --ask, the hook asks (hookrequest.py): wait for the answer and print the reply.

    The hook's JSON arrives on stdin. A hook that exits non-zero can block the agent, so
    every problem is printed and the exit code is 0.
    """
    try:
        data = json.loads(sys.stdin.read() or "{}")
    except ValueError:
        data = {}
    if not isinstance(data, dict):
        data = {}
    fields = {k: str(data[k]) for k in HOOK_FIELDS if k in data}
    fields["token"] = os.environ.get("HOSTAGENT_HOOK_TOKEN", "")
    try:
        if not a.ask:
            await c.report_hook(a.event, fields)
            return 0
        for k in hookrequest.FIELDS:  # what it asks about, as the hook said it
            value = data.get(k, "")
            text = value if isinstance(value, str) else json.dumps(value)
            fields[k] = text[: hookrequest.MAX_INPUT + 1]  # one more: the daemon sees it cut
        decision = await c.ask_hook(a.event, fields)
    except HostAgentError as e:
        print(f"hostagentctl hook: {e.message}", file=sys.stderr)
        return 0
    if decision in hookrequest.DECISIONS:
        said = hookrequest.reply(a.event, decision, DENIED)
        print(json.dumps(said))
    return 0


DENIED = "Answered no in hostagent's inbox; stop and wait for what the user says."
