"""hostagentctl's command line: its verbs, their options, and the options every verb takes.

Kept apart from the verbs themselves (ctl.py), so that the grammar reads in one place.
"""

from __future__ import annotations

import argparse
from typing import Any, NoReturn

from hostagent import __version__
from hostagent.cli.verbs import MANY, ONE, VERBS


class _HostAction(argparse.Action):
    """-H HOST, as systemctl has it; repeated, a fleet (ctl_fleet): ``host`` is the last one
    named, ``hosts`` all of them, in their order."""

    def __call__(self, p: Any, ns: argparse.Namespace, value: Any, opt: Any = None) -> None:
        ns.hosts = [*(getattr(ns, "hosts", None) or []), value]
        ns.host = value


def _global_options(p: argparse.ArgumentParser, after_verb: bool) -> None:
    """The options every verb takes. Like systemctl's, they go before or after the verb; after
    it their defaults are left out, so they never undo one given before it."""
    keep: dict[str, Any] = {"default": argparse.SUPPRESS} if after_verb else {}
    bus = p.add_mutually_exclusive_group()
    system_default: dict[str, Any] = keep or {"default": None}
    bus.add_argument("--system", dest="system", action="store_true", **system_default)
    bus.add_argument("--user", dest="system", action="store_false", **keep)
    p.add_argument("--address", help="connect to this D-Bus address instead", **keep)
    if not after_verb:
        p.set_defaults(host=None, hosts=[])
    p.add_argument(
        "-H",
        "--host",
        action=_HostAction,
        metavar="[USER@]HOST[:PORT]",
        help="operate on this host over ssh; repeated, on each of them at once",
        **keep,
    )
    p.add_argument(
        "--fleet",
        action="store_true",
        help="operate on every host of ~/.config/hostagent/hosts (or /etc/hostagent/hosts)",
        **keep,
    )
    p.add_argument("-M", "--machine", help="operate on a local container (machinectl list)", **keep)
    p.add_argument("--json", nargs="?", const="short", choices=["pretty", "short"], **keep)
    p.add_argument(
        "-o",
        "--output",
        choices=["short", "json", "json-pretty"],
        help="systemctl's spelling: json is --json, json-pretty is --json=pretty",
        **keep,
    )
    p.add_argument("--no-legend", action="store_true", **keep)
    p.add_argument(
        "--no-pager", action="store_true", help="accepted; output is never paged", **keep
    )
    p.add_argument("-q", "--quiet", action="store_true", **keep)
    p.add_argument(
        "--no-ask-password",
        action="store_true",
        help="never prompt for a password (polkit) on this terminal",
        **keep,
    )


class _Parser(argparse.ArgumentParser):
    """A usage error is one line and a pointer to --help, as systemctl prints it, not the
    whole usage."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}; see 'hostagentctl --help'.\n")


def _options(verb: str, sp: argparse.ArgumentParser) -> None:
    """A verb's own options, beside its session names (hostagent/cli/verbs.py)."""
    if verb == "list":
        sp.add_argument(
            "patterns", nargs="*", metavar="PATTERN", help="names, or globs such as 'claude-*'"
        )
        sp.add_argument("--state", help="only these states, e.g. running,failed")
        sp.add_argument("--owner", metavar="USER", help="only this user's sessions (a name or uid)")
    elif verb == "capture":
        sp.add_argument("-n", "--lines", type=int, default=0, help="scrollback lines")
    elif verb == "diff":
        sp.add_argument("--stat", action="store_true", help="a summary, as git diff --stat")
    elif verb == "kill":
        sp.add_argument("--whom", choices=["agent", "all"], default="all")
        sp.add_argument("-s", "--signal", default="TERM", help="a name or number")
    elif verb == "rm":
        sp.add_argument(
            "--force", action="store_true", help="remove the worktree even with changes"
        )
    elif verb == "new":
        _new_options(sp)
    elif verb == "send":
        sp.add_argument("text", nargs="+")
        sp.add_argument("--no-enter", action="store_true")
    elif verb == "inbox":
        sp.add_argument("--rules", action="store_true", help="show your answer rules")
        sp.add_argument(
            "--set-rules", metavar="FILE", help="keep this file's answer rules (- reads stdin)"
        )
    elif verb == "answer":
        sp.add_argument("choice", nargs="+", help="its number, or the words it starts with")
        sp.add_argument("--id", help="the question's id, as inbox -o json shows it")
    elif verb == "wait":
        sp.add_argument("--for", dest="activity", default="idle,blocked")
        sp.add_argument("--timeout", default="0", help="seconds; 0 waits forever")
    elif verb == "logs":
        sp.add_argument(
            "-n", "--lines", type=int, default=50, help="how many lines (journalctl -n)"
        )
        sp.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    elif verb == "hook":
        sp.add_argument("event")
        sp.add_argument(
            "--ask", action="store_true", help="wait for the question's answer and print it"
        )
    elif verb == "check-preset":
        sp.add_argument("file", metavar="FILE", help="the preset file (YAML)")
        sp.add_argument(
            "screens",
            nargs="*",
            metavar="SCREEN",
            help="captured screens: hostagentctl capture's output, or labelled",
        )
        sp.add_argument("--title", help="the window title to read plain captures with")
    elif verb == "usage":
        sp.add_argument("--since", default="today", help="today, -7d, 2026-12-01 or @EPOCH")
        sp.add_argument("--until", help="as --since; default now")
        sp.add_argument("--owner", metavar="USER", help="only this user's rows (a name or uid)")
    elif verb == "budget":
        sp.add_argument("action", choices=["lift"])
        sp.add_argument("user", metavar="USER", help="a name or uid")


def _new_options(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--preset", default="shell")
    sp.add_argument("--name")
    sp.add_argument("--cwd")
    sp.add_argument("-e", "--env", action="append", metavar="KEY=VALUE")
    sp.add_argument("-p", "--property", action="append", metavar="PROP=VALUE")
    sp.add_argument(
        "--unconfined",
        action="store_true",
        help="ask for none of the agent profile's sandbox (where the admin allows it)",
    )
    sp.add_argument("--agent-session", help="resume this existing agent conversation id")
    sp.add_argument(
        "--prompt", help="a first message for the agent, given once (a resume never repeats it)"
    )
    sp.add_argument(
        "--worktree",
        nargs="?",
        const="",
        metavar="BRANCH",
        help="run in a git worktree of its own, on BRANCH (default hostagent/NAME)",
    )
    sp.add_argument("--base", metavar="REF", help="where the worktree's branch starts (HEAD)")
    sp.add_argument(
        "--mcp",
        action=argparse.BooleanOptionalAction,
        help="give the agent hostagent's session tools over MCP (default: the preset's)",
    )
    sp.add_argument(
        "--uid", dest="user_id", metavar="USER", help="owner, a name or uid (root only)"
    )
    sp.add_argument(
        "--replace-command",
        action="store_true",
        help="ARGV replaces the preset's command instead of adding arguments",
    )
    sp.add_argument("argv", nargs=argparse.REMAINDER)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hostagentctl", description="Drive hostagent sessions.")
    _global_options(p, after_verb=False)
    p.add_argument("--version", action="version", version=f"hostagentctl {__version__}")
    p.add_argument("--list-verbs", action="store_true", help=argparse.SUPPRESS)
    common = _Parser(add_help=False)
    _global_options(common, after_verb=True)
    sub = p.add_subparsers(dest="verb", metavar="VERB")
    for verb in VERBS:
        sp = sub.add_parser(verb.name, help=verb.help, parents=[common])
        if verb.takes == ONE:
            sp.add_argument("name")
        elif verb.takes == MANY:
            sp.add_argument("names", nargs="+", metavar="NAME")
        _options(verb.name, sp)
    return p


# Options that take the next word as their value, wherever they stand.
_TAKES_VALUE = frozenset(
    {
        *("--address", "-H", "--host", "-M", "--machine", "-o", "--output"),
        *("--preset", "--name", "--cwd", "-e", "--env", "-p", "--property"),
        *("--agent-session", "--uid", "-n", "--lines", "--whom", "-s", "--signal"),
        *("--for", "--timeout", "--state", "--owner", "--since", "--until", "--id", "--set-rules"),
    }
)


_MOMENTS = frozenset({"--since", "--until"})


def bare_json_is_short(argv: list[str]) -> list[str]:
    """ "--json" alone means short JSON; only "--json=MODE" takes a value, as in systemctl.
    "--since -7d" is a moment, as journalctl takes it. The agent's own command line after
    ``new`` (or after "--") is left as it is."""
    out: list[str] = []
    verb = ""
    for i, word in enumerate(argv):
        is_value = bool(out) and out[-1] in _TAKES_VALUE
        if word == "--" or (verb == "new" and not is_value and not word.startswith("-")):
            return out + argv[i:]
        if word == "--json" and not is_value:
            word = "--json=short"
        elif is_value and out[-1] in _MOMENTS and word.startswith("-"):
            out[-1] = f"{out[-1]}={word}"  # "--since -7d": a moment, not an option
            continue
        elif not verb and not is_value and not word.startswith("-"):
            verb = word
        out.append(word)
    return out
