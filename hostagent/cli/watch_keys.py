"""What ``hostagentctl watch`` shows and what its keys do, apart from the terminal.

The rows, the filter and the colour of each activity are decided here, and the keys are a small
state machine: a key either moves the selection, opens a one-line prompt (a new session, a line
to type, a filter), asks for a y before something that ends work (stop, kill, remove), or hands
back a command for watch to run with hostagentctl. None of it touches curses' screen, so the
tables in the tests drive it directly.
"""

from __future__ import annotations

import curses
import enum
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from hostagent.cli.ctl_list import indented
from hostagent.cli.ctl_output import human_bytes, human_nsec, human_span, usage_cells, user_name
from hostagent.client.follow import SessionView

HEADER = (
    "NAME",
    "OWNER",
    "PRESET",
    "STATE",
    "ACTIVITY",
    "MEMORY",
    "CPU",
    "TOKENS",
    "COST",
    "AGE",
    "BRANCH",
)
FLEET_HEADER = ("HOST", *HEADER)  # a fleet's: an owner is a uid, which only its host can name
ACTIVITY_COLUMN = HEADER.index("ACTIVITY")
KEYS = (
    "↑↓ select  ⏎ attach  1-9 answer  n new  t type  / filter  s stop  x kill  d remove  "
    "r resume  q quit"
)
# curses' colour numbers, one per activity; the ones not here are drawn plainly.
ACTIVITY_COLOURS = {
    "working": curses.COLOR_GREEN,
    "blocked": curses.COLOR_RED,
    "idle": curses.COLOR_CYAN,
    "exited": curses.COLOR_YELLOW,
}
# A key as curses' get_wch gives it: a character, or the number of a special key.
Key = str | int
ESCAPE = "\x1b"
ENTERS: tuple[Key, ...] = ("\n", "\r", curses.KEY_ENTER)
BACKSPACES: tuple[Key, ...] = ("\b", "\x7f", curses.KEY_BACKSPACE)
# What each confirmed verb runs, after "hostagentctl ... VERB".
CONFIRMED = {
    "stop": ("stop",),
    "kill": ("kill", "--whom", "all", "-s", "TERM"),
    "remove": ("rm",),
}


def rows(
    sessions: list[SessionView],
    now: float,
    fleet: bool = False,
    depths: dict[str, int] | None = None,
) -> list[tuple[str, ...]]:
    """The table's rows; in a fleet, each begins with its host (FLEET_HEADER). depths: how far
    under another session each one is (its key's), as list shows it."""
    return [
        (
            *((s.host,) if fleet else ()),
            indented(s.name, (depths or {}).get(s.key, 0)),
            user_name(s.owner) if not fleet else str(s.owner),
            s.preset,
            s.state,
            s.activity,
            human_bytes(s.memory),
            human_nsec(s.cpu_nsec),
            *usage_cells(s.usage),
            human_span(s.age(now)) if s.state == "running" else "-",
            s.branch or "-",
        )
        for s in sessions
    ]


def matches(session: SessionView, words: str) -> bool:
    """Whether every word of a filter is in the session's name, owner, preset, state or
    activity (case ignored)."""
    text = " ".join(
        (session.name, user_name(session.owner), session.preset, session.state, session.activity)
    ).lower()
    return all(word in text for word in words.lower().split())


class Prompt(enum.StrEnum):
    NEW = "new session (PRESET [NAME]): "
    TYPE = "type into {name}: "
    FILTER = "filter: "


@dataclass(frozen=True)
class Command:
    """What watch must do for a key: quit, attach to a session, or run hostagentctl with
    args and show its outcome."""

    kind: str  # "quit", "attach" or "ctl"
    args: tuple[str, ...] = ()
    session: str = ""  # the session it acts on; "" for a new one


@dataclass
class Keys:
    selected: int = 0
    filter: str = ""
    message: str = ""
    confirming: tuple[str, str] | None = None  # (verb, session) waiting for its y
    prompt: Prompt | None = None
    typed: str = ""  # the prompt's text so far
    target: str = ""  # the session a TYPE prompt types into
    cwd: str = "."  # where "new" creates a session

    def prompt_line(self) -> str:
        """The bottom line while a prompt or a confirmation is open, else ""."""
        if self.prompt is not None:
            return self.prompt.value.format(name=self.target) + self.typed
        if self.confirming is not None:
            verb, name = self.confirming
            return f"{verb} {name}? (y/n)"
        return ""

    def clamp(self, shown: int) -> int | None:
        """Keep the selection inside a table of shown rows; its index, None when empty."""
        self.selected = max(0, min(self.selected, shown - 1))
        return self.selected if shown else None

    def key(
        self, ch: Key, names: list[str], asking: Mapping[str, str] | None = None
    ) -> Command | None:
        """Act on one key; names are the sessions shown, in order, and asking the id of the
        question each asks (a digit answers the selected session's with that choice)."""
        at = self.clamp(len(names))
        current = names[at] if at is not None else None
        if self.prompt is not None:
            return self._prompt_key(ch)
        if self.confirming is not None:
            # Ending an agent's work waits for a y; any other key leaves it running.
            verb, name = self.confirming
            self.confirming = None
            if ch in ("y", "Y"):
                return Command("ctl", (*CONFIRMED[verb], name), name)
            self.message = f"{verb} {name}: not done"
            return None
        if ch in ("q", ESCAPE):
            return Command("quit")
        if ch in (curses.KEY_UP, "k"):
            self.selected = max(0, self.selected - 1)
        elif ch in (curses.KEY_DOWN, "j"):
            self.selected = min(max(0, len(names) - 1), self.selected + 1)
        elif ch == "n":
            self._open(Prompt.NEW)
        elif ch == "/":
            self._open(Prompt.FILTER, self.filter)
        elif current is None:
            return None
        elif ch in ("a", *ENTERS):
            return Command("attach", (current,))
        elif ch == "t":
            self._open(Prompt.TYPE)
            self.target = current
        elif ch in ("s", "x", "d"):
            self.confirming = ({"s": "stop", "x": "kill", "d": "remove"}[str(ch)], current)
        elif ch == "r":
            return Command("ctl", ("resume", current), current)
        elif isinstance(ch, str) and ch in "123456789" and (asking or {}).get(current):
            question = (asking or {})[current]
            return Command("ctl", ("answer", current, ch, "--id", question), current)
        return None

    def _open(self, prompt: Prompt, text: str = "") -> None:
        self.prompt, self.typed, self.message = prompt, text, ""

    def _prompt_key(self, ch: Key) -> Command | None:
        prompt = self.prompt
        if ch == ESCAPE:
            self.prompt = None
            if prompt is Prompt.FILTER:
                self.filter = ""
            return None
        if ch in BACKSPACES:
            self.typed = self.typed[:-1]
        elif ch in ENTERS:
            self.prompt = None
            return self._submit(prompt)
        elif isinstance(ch, str) and ch.isprintable():
            self.typed += ch
        if prompt is Prompt.FILTER:
            self.filter = self.typed  # the table narrows as the filter is typed
        return None

    def _submit(self, prompt: Prompt | None) -> Command | None:
        text = self.typed.strip()
        if prompt is Prompt.FILTER:
            self.filter, self.selected = text, 0
            return None
        if not text:
            return None
        if prompt is Prompt.TYPE:
            return Command("ctl", ("send", self.target, "--", self.typed), self.target)
        try:
            words = shlex.split(text)
        except ValueError as e:
            self.message = f"new: {e}"
            return None
        if len(words) > 2:
            self.message = "new: give a preset and at most a name"
            return None
        name = ("--name", words[1]) if len(words) == 2 else ()
        return Command("ctl", ("new", "--preset", words[0], *name, "--cwd", self.cwd))
