"""hostagentctl new's options as the bus's CreateSession options: ``-p`` properties read as
systemd-run reads them, ``-e``, ``--uid`` and the agent's own arguments.

Apart from the verbs (ctl.py): this is where what a user typed becomes what the daemon takes.
"""

from __future__ import annotations

import argparse

from dbus_fast import Variant

from hostagent import profile, resources, sandbox, values

_PROPS = {  # -p NAME=VALUE -> option key, and how the value reads (as systemd-run's -p)
    "MemoryMax": ("memory_max", "size"),
    "MemoryHigh": ("memory_high", "size"),
    "CPUWeight": ("cpu_weight", "number"),
    "TasksMax": ("tasks_max", "count"),
    "RuntimeMaxSec": ("runtime_max_sec", "span"),
    "Columns": ("columns", "cells"),
    "Rows": ("rows", "cells"),
}


class UsageError(Exception):
    pass


def parse_size(text: str, physical: int | None = None) -> int:
    try:
        return values.parse_size(text, physical)
    except values.ValueProblem as e:
        raise UsageError(str(e)) from None


def _property(key: str, value: str, physical: int | None) -> Variant:
    """-p KEY=VALUE as the bus option's value: sizes with K/M/G/T, % and infinity, time spans
    such as 1h, counts or infinity."""
    kind = _PROPS[key][1]
    try:
        if kind == "size":
            return Variant("t", values.parse_size(value, physical))
        if kind == "span":
            return Variant("t", values.parse_timespan(value))
        if kind == "count" and value.strip().lower() == "infinity":
            return Variant("t", values.INFINITY)
        number = int(value)
    except values.ValueProblem as e:
        raise UsageError(f"-p {key}: {e}") from None
    except ValueError:
        raise UsageError(f"-p {key} needs a whole number, not '{value}'") from None
    if kind == "cells":
        if not 0 < number < 1 << 16:
            raise UsageError(f"-p {key} needs a number of cells, not '{value}'")
        return Variant("q", number)
    if not 0 < number < values.INFINITY:
        raise UsageError(f"-p {key} needs a positive whole number, not '{value}'")
    return Variant("t", number)


def local_memory(args: argparse.Namespace) -> int | None:
    """This host's memory in bytes, for MemoryMax=50%; None for another host's daemon."""
    if args.host or args.machine or args.address:
        return None
    return resources.physical_memory()


def build_options(args: argparse.Namespace) -> dict[str, Variant]:
    options: dict[str, Variant] = {}
    env = {}
    for item in args.env or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise UsageError(f"-e takes KEY=VALUE, not '{item}'")
        env[key] = value
    if env:
        options["env"] = Variant("a{ss}", env)
    # The words that undo the agent profile, before any -p: those still tighten what is left.
    assigned: list[str] = list(profile.UNCONFINED) if args.unconfined else []
    for item in args.property or []:
        key, sep, value = item.partition("=")
        if sep and key in resources.PROPERTIES:
            try:
                # Only read here: a percentage is of the memory of the daemon's host.
                wire = resources.parse(key, value, local_memory(args) or 1 << 30)
            except resources.ResourceProblem as e:
                raise UsageError(f"-p {key}: {e}") from None
            # A percentage stays one: the daemon's host resolves it.
            assigned.append(f"{key}={wire.shown}")
            continue
        if sep and sandbox.is_word(key):
            try:
                assigned.append(sandbox.check(item))
            except sandbox.SandboxProblem as e:
                raise UsageError(f"-p {key}: {e}") from None
            continue
        if not sep or key not in _PROPS:
            known = ", ".join([*_PROPS, *resources.PROPERTIES, *sandbox.WORDS])
            raise UsageError(f"-p takes NAME=VALUE for one of {known}; not '{item}'")
        options[_PROPS[key][0]] = _property(key, value, local_memory(args))
    if assigned:
        options["properties"] = Variant("as", assigned)
    argv = list(args.argv or [])
    if argv and argv[0] == "--":
        argv = argv[1:]
    if argv:
        options["command" if args.replace_command else "args"] = Variant("as", argv)
    if args.agent_session:
        options["agent_session"] = Variant("s", args.agent_session)
    if args.prompt:
        options["prompt"] = Variant("s", args.prompt)
    if args.worktree is not None:
        options["worktree"] = Variant("s", args.worktree)
    if args.base:
        options["base"] = Variant("s", args.base)
    if args.mcp is not None:
        options["mcp"] = Variant("b", args.mcp)
    if args.user_id is not None:
        try:
            options["user"] = Variant("u", values.parse_user(args.user_id))
        except values.ValueProblem as e:
            raise UsageError(f"--uid: {e}") from None
    return options
