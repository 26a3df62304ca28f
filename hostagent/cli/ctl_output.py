"""What hostagentctl prints: tables with their legend, and failures as one line with a hint.

Apart from the verbs (ctl.py) so that every verb's output follows the same rules.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from hostagent.errors import HostAgentError

EXIT_FAILURE = 1

HINTS = {
    "NoSuchPreset": "'hostagentctl presets' lists the presets.",
    "AccessDenied": "only the session's owner, root or a polkit-authorised admin may do this.",
    "InteractiveAuthorizationRequired": "run it from a desktop session with a polkit agent, "
    "or as root.",
    "ServiceUnknown": "is hostagent running? 'systemctl status hostagent' "
    "(or 'systemctl --user status hostagent').",
}


def show_table(
    args: argparse.Namespace, header: list[str], rows: list[list[Any]], noun: str, where: str = ""
) -> None:
    if args.json:
        items = [dict(zip([h.lower() for h in header], r, strict=True)) for r in rows]
        print(json.dumps(items, indent=2 if args.json == "pretty" else None))
        return
    widths = [max([len(h)] + [len(str(r[i])) for r in rows]) for i, h in enumerate(header)]
    if not args.no_legend and rows:
        print("  ".join(h.upper().ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    if not args.no_legend:
        where = f" {where}" if where else ""
        print(
            f"\n{len(rows)} {noun}{'' if len(rows) == 1 else 's'} listed{where}."
            if rows
            else f"No {noun}s{where}."
        )


_VERB_WORDS = {"new": "create", "rm": "remove", "send": "send to", "status": "get status of"}


def fail(verb: str, name: str | None, err: HostAgentError) -> int:
    short = err.dbus_name.rsplit(".", 1)[-1]
    verb = _VERB_WORDS.get(verb, verb)
    what = f"{verb} session '{name}'" if name else verb
    hint = HINTS.get(short)
    print(
        f"Failed to {what}: {err.message}"
        + (f" Hint: {hint}" if hint and hint not in err.message else ""),
        file=sys.stderr,
    )
    return EXIT_FAILURE


def daemon_named(a: argparse.Namespace) -> str:
    """Which daemon answered, for a listing's legend: there may be two on one host."""
    if a.host or a.machine or a.address:
        return f"on {a.host or a.machine or a.address}"
    if a.system_bus:
        return "on the system daemon"
    return "on your own daemon (--user; --system lists the host's)"
