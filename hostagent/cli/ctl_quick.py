"""The quick path: ``hostagentctl list`` and ``status NAME`` in their everyday forms, on the
blocking client (client/quick.py), at systemctl's pace.

``recognise`` takes a command line only when every word of it is one it knows for sure: the
verb, its session names or patterns, and the few options whose meaning is plain (the bus, the
output format, the legend, list's --state). Anything else (another host, a container, an
address, --owner, --help, a word it has not seen) returns None, and argparse and the asyncio
client take the line as before, so an error there reads the same as ever. A unit test holds
that a recognised line means what argparse makes of it. The output is printed by the same
functions as the full path's (ctl_list, ctl_output).
"""

from __future__ import annotations

import os
import sys

from hostagent.cli.verbs import BY_NAME, NOTHING, ONE

TYPE_CHECKING = False  # typing's own import costs more than a quick verb's call
if TYPE_CHECKING:
    from typing import Any

    from hostagent.client.quick import QuickBus

MANAGER = ("/org/hostagent/HostAgent1", "org.hostagent.HostAgent1.Manager")
SESSION_INTERFACE = "org.hostagent.HostAgent1.Session"
PROPERTIES = "org.freedesktop.DBus.Properties"
# Options with no value: (attribute, value) as argparse sets them.
_FLAGS = {
    "--system": ("system", True),
    "--user": ("system", False),
    "--no-legend": ("no_legend", True),
    "--no-pager": ("no_pager", True),
    "-q": ("quiet", True),
    "--quiet": ("quiet", True),
    "--no-ask-password": ("no_ask_password", True),
    "--json": ("json", "short"),
    "--json=short": ("json", "short"),
    "--json=pretty": ("json", "pretty"),
}
OUTPUT = {"short": None, "json": "short", "json-pretty": "pretty"}  # -o: --json, as systemctl's


class Args:
    """What argparse would make of a recognised line, for the fields the verbs read."""

    def __init__(self) -> None:
        self.verb = "list"
        self.system: bool | None = None
        self.system_bus = False
        self.json: str | None = None
        self.no_legend = self.no_pager = self.quiet = self.no_ask_password = False
        self.host = self.machine = self.address = None
        self.patterns: list[str] = []
        self.state: str | None = None
        self.owner = None
        self.name = ""


def recognise(argv: list[str]) -> Args | None:
    """The line's meaning when the quick path is sure of it; else None."""
    a, words, seen = Args(), [], set()
    it = iter(argv)
    for word in it:
        option, _, value = word.partition("=")
        if word in _FLAGS:
            key, flag = _FLAGS[word]
            if key in seen:  # --system --user, or twice: argparse says what it makes of it
                return None
            seen.add(key)
            setattr(a, key, flag)
        elif option in ("-o", "--output", "--state"):
            key = "state" if option == "--state" else "json"
            value = value or next(it, "")
            if key in seen or not value or (key == "json" and value not in OUTPUT):
                return None
            seen.add(key)
            if key == "state":
                a.state = value
            else:
                a.json = OUTPUT[value]
        elif word.startswith("-") or not word:
            return None
        else:
            words.append(word)
    if not words:
        words = ["list"]  # a bare hostagentctl lists, as a bare systemctl does
    verb = BY_NAME.get(words[0])
    if verb is None or not verb.quick:
        return None
    a.verb, names = verb.name, words[1:]
    if verb.takes == ONE and len(names) == 1:
        a.name = names[0]
    elif verb.takes == NOTHING and verb.name == "list":
        a.patterns = names
    else:
        return None
    if a.state is not None and verb.name != "list":
        return None
    return a


def run(a: Args) -> int | None:
    """Run a recognised verb; None when no bus could be reached here, so that the full path
    runs it and says why.

    The bus is the one hostagentctl always uses: the one named; for root, the system bus;
    else the system daemon whenever it answers or can be activated there (the bus answers
    ServiceUnknown when neither), and the user's own daemon otherwise."""
    from hostagent.cli.ctl_output import fail
    from hostagent.cli.terminal_safe import closed_pipe, guard_output
    from hostagent.client.quick import QuickBus, Unsupported, bus_address
    from hostagent.errors import HostAgentError

    order = [a.system] if a.system is not None else [True, False]
    if a.system is None and os.geteuid() == 0:
        order = [True]
    guard_output()
    for i, system in enumerate(order):
        try:
            bus = QuickBus(bus_address(system))
        except (OSError, Unsupported):
            continue
        a.system_bus = system
        try:
            code = _list(bus, a) if a.verb == "list" else _status(bus, a)
            sys.stdout.flush()
        except HostAgentError as e:
            if e.dbus_name.endswith(".ServiceUnknown") and i + 1 < len(order):
                continue  # no system daemon: the user's own
            code = fail(a.verb, a.name or None, e)
        except BrokenPipeError:
            code = closed_pipe()
        finally:
            bus.close()
        return code
    return None


def exit_now(code: int) -> None:
    """End the program once its output is out: the interpreter's teardown (every module and
    object taken down one by one) would be a tenth of a quick verb's time, for nothing."""
    for stream in (sys.stdout, sys.stderr):
        try:  # noqa: SIM105 (contextlib would import collections and functools here)
            stream.flush()
        except (OSError, ValueError):
            pass  # a closed pipe: the verb has said what it could
    os._exit(code)


class _Row:
    """A row of ListSessions, as the library's SessionRow reads."""

    __slots__ = ("activity", "name", "owner", "path", "preset", "state")

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.name, self.preset, self.state, self.activity, self.owner, self.path = row


def _list(bus: QuickBus, a: Args) -> int:
    from hostagent.cli.ctl_list import owner_wanted, show_list, wanted
    from hostagent.cli.ctl_output import listed
    from hostagent.errors import HostAgentError

    owner = owner_wanted(a)  # type: ignore[arg-type]
    (rows,), (worktrees,) = bus.calls(
        (*MANAGER, "ListSessions", "", ()), (*MANAGER, "ListWorktrees", "", ())
    )
    sessions = sorted((r for r in map(_Row, rows) if wanted(r, a, owner)), key=lambda r: r.name)  # type: ignore[arg-type]
    branches = {w[0]: w[2] for w in worktrees}
    # One round trip for them all; a session removed meanwhile shows what its row says.
    answers = bus.answers(
        *((r.path, PROPERTIES, "GetAll", "s", (SESSION_INTERFACE,)) for r in sessions)
    )
    items = [
        listed(r, {} if isinstance(p, HostAgentError) else p[0], branches.get(r.name, ""), True)
        for r, p in zip(sessions, answers, strict=True)
    ]
    show_list(a, items)  # type: ignore[arg-type]
    return 0


def _status(bus: QuickBus, a: Args) -> int:
    from hostagent import SESSION_PATH_PREFIX
    from hostagent.bus.paths import path_encode
    from hostagent.cli.ctl_output import show_status, status_unknown
    from hostagent.errors import HostAgentError, NoSuchSession

    # The session's object path is its name, escaped: asked for straight away, which saves
    # GetSession's round trip. Without such an object (no such session, or one removed
    # meanwhile), GetSession says why, as the full path would.
    path = path_encode(SESSION_PATH_PREFIX, a.name)
    (answer,) = bus.answers((path, PROPERTIES, "GetAll", "s", (SESSION_INTERFACE,)))
    if isinstance(answer, HostAgentError):
        try:
            ((path,),) = bus.calls((*MANAGER, "GetSession", "s", (a.name,)))
        except NoSuchSession as e:
            return status_unknown(a.name, e)
        (answer,) = bus.calls((path, PROPERTIES, "GetAll", "s", (SESSION_INTERFACE,)))
    (props,) = answer
    return show_status(a, props, local=True)  # type: ignore[arg-type]
