"""hostagentctl's verbs as one table, in the manner of machinectl's ``verbs[]``: each row says
what a verb acts on, the connection it needs, whether it runs on another host, and its help.

The parser (ctl_args.py), the dispatch (ctl.py), a fleet's name rules (ctl_fleet.py), the
quick path (ctl_quick.py) and the bash completion (``hostagentctl --list-verbs``) all read
this table, so a verb's facts are written once. It imports nothing: ``--help`` and the quick
verbs must not pay for the asyncio client.
"""

from __future__ import annotations

# What a verb's positional arguments name.
NOTHING, ONE, MANY = "", "NAME", "NAME..."
# The connection a verb needs: one bus client (the usual), its own that follows the daemon
# (watch), the journal of this host, read directly when the caller may (logs), or none: it
# reads files of this host (check-preset).
BUS, OWN, JOURNAL, LOCAL = "bus", "own", "journal", "local"


class Verb:
    """One row: name; takes (NOTHING, ONE or MANY session names); acting (it changes or
    reads the inside of a session, so only its owner or an admin may, and an admin may be
    asked for a password); remote (it runs on another host with -H and on a fleet); quick (the
    blocking client serves its simple forms, ctl_quick.py); run ("module:function", imported
    when the verb runs); help."""

    __slots__ = ("acting", "connection", "help", "name", "quick", "remote", "run", "takes")

    def __init__(
        self,
        name: str,
        takes: str,
        run: str,
        help: str,
        acting: bool = False,
        connection: str = BUS,
        remote: bool = True,
        quick: bool = False,
    ) -> None:
        self.name, self.takes, self.run, self.help = name, takes, run, help
        self.acting, self.connection, self.remote, self.quick = acting, connection, remote, quick

    @property
    def whose(self) -> str:
        """Whose sessions the completion offers: the caller's own for a verb that acts."""
        return "own" if self.acting else "all"


_CTL = "hostagent.cli.ctl_verbs:"
VERBS = (
    Verb("list", NOTHING, "hostagent.cli.ctl_list:verb_list", "list sessions", quick=True),
    Verb("status", ONE, _CTL + "verb_status", "a session's state, and why it ended", quick=True),
    Verb("new", NOTHING, _CTL + "verb_new", "create a session"),
    Verb("stop", MANY, _CTL + "verb_stop", "stop sessions (their records stay)", acting=True),
    Verb(
        "kill",
        MANY,
        _CTL + "verb_kill",
        "send a signal to sessions' agents or every process",
        acting=True,
    ),
    Verb(
        "resume",
        MANY,
        _CTL + "verb_resume",
        "start sessions again, into the same conversation",
        acting=True,
    ),
    Verb("rm", MANY, _CTL + "verb_rm", "stop and remove sessions", acting=True),
    Verb("diff", ONE, _CTL + "verb_diff", "what a session changed in its worktree", acting=True),
    Verb("attach", ONE, _CTL + "verb_attach", "attach this terminal to a session", acting=True),
    Verb("capture", ONE, _CTL + "verb_capture", "print a session's screen", acting=True),
    Verb("send", ONE, _CTL + "verb_send", "type text into a session", acting=True),
    Verb(
        "logs",
        ONE,
        "hostagent.cli.logs:verb_logs",
        "the daemon's journal lines about a session",
        connection=JOURNAL,
        remote=False,
    ),
    Verb("inbox", NOTHING, "hostagent.cli.ctl_inbox:verb_inbox", "questions agents wait on"),
    Verb(
        "answer",
        ONE,
        "hostagent.cli.ctl_inbox:verb_answer",
        "answer a session's question with a choice",
        acting=True,
    ),
    Verb("wait", MANY, _CTL + "verb_wait", "wait until a session reaches an activity"),
    Verb("explain", ONE, _CTL + "verb_explain", "why a session's activity is what it is"),
    Verb(
        "watch",
        NOTHING,
        "hostagent.cli.watch:watch",
        "a live table of sessions; keys attach, stop and resume",
        connection=OWN,
    ),
    Verb("presets", NOTHING, _CTL + "verb_presets", "list the presets"),
    Verb(
        "check-preset",
        NOTHING,
        "hostagent.cli.presetcheck:verb_check_preset",
        "check a preset file, and read captured screens with it",
        connection=LOCAL,
        remote=False,
    ),
    Verb("info", NOTHING, _CTL + "verb_info", "the daemon's version, mode and boot id"),
    Verb("doctor", NOTHING, "hostagent.cli.doctor:verb_doctor", "check this host's setup"),
    Verb("reload", NOTHING, _CTL + "verb_reload", "reread the configuration and presets"),
    Verb(
        "mcp",
        NOTHING,
        "hostagent.cli.mcp:verb_mcp",
        "serve the session tools to an agent over MCP, on stdin and stdout",
    ),
    Verb(
        "hook",
        NOTHING,
        _CTL + "verb_hook",
        "report an agent hook event (run from inside a session)",
    ),
    Verb(
        "usage",
        NOTHING,
        "hostagent.cli.ctl_usage:verb_usage",
        "tokens and cost of users' sessions over a window",
    ),
    Verb(
        "budget",
        NOTHING,
        "hostagent.cli.ctl_usage:verb_budget",
        "lift a user's budgets for today",
        acting=True,
    ),
)
BY_NAME = {v.name: v for v in VERBS}


def load(verb: Verb) -> object:
    """The function that runs verb."""
    import importlib

    module, _, function = verb.run.partition(":")
    return getattr(importlib.import_module(module), function)


def listing() -> str:
    """``hostagentctl --list-verbs``, for the bash completion: a line per verb, with what it
    takes and whose sessions it offers."""
    return "".join(f"{v.name} {v.takes or '-'} {v.whose}\n" for v in VERBS)
