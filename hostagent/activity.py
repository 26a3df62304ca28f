"""What an agent is doing, read from what its terminal shows and what its hooks say. Pure.

The rules come from the preset (hostagent-presets(5)), so an agent can be added or fixed
without code. A rule looks at one thing: the last non-empty lines of the screen, the window
title, the last OSC 9;4 progress state, the pane's foreground job (a command the shell
started), or whether output is still flowing. The first rule
that matches wins; when none does, a quiet screen is the preset's fallback (``idle``), never
``blocked``: blocked needs a matched question or approval screen. A screen with nothing on it
is ``unknown``, whatever the fallback and the hooks say: an agent that has drawn nothing yet is
still starting, and a message sent on an idle there lands in whatever it asks first.

Hooks, where the CLI has them, override the screen, with two exceptions learned from herdr and
the Claude docs: a rule marked ``visible`` (the screen plainly shows a spinner or a dialog) beats
a hook report, and a hook's ``working`` goes stale once the screen has been quiet for a while,
because no hook fires when the user interrupts a turn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hostagent.session import Activity

HOOK_STALE_SEC = 10.0  # a working agent redraws its spinner far more often than this
DEFAULT_LINES = 10

# OSC 9;4 ; state [; progress] terminated by BEL or ST (ConEmu's progress, used by Grok and
# others): 0 none, 1 value, 2 error, 3 indeterminate, 4 paused.
_OSC_PROGRESS = re.compile(rb"\x1b\]9;4;([0-4])(?:;[0-9]*)?(?:\x07|\x1b\\)")


@dataclass(frozen=True)
class Rule:
    activity: Activity
    name: str  # how ExplainActivity names it, e.g. "claude rule 3"
    screen: tuple[re.Pattern[str], ...] = ()  # each must match the bottom `lines` lines
    lines: int = DEFAULT_LINES
    title: re.Pattern[str] | None = None
    progress: frozenset[int] = frozenset()
    output: bool = False  # matches while output is flowing
    command: re.Pattern[str] | None = None  # the pane's foreground job (View.command)
    visible: bool = False  # plain on screen: beats a hook report

    @property
    def source(self) -> str:
        if self.screen:
            return "screen"
        if self.title is not None:
            return "title"
        if self.progress:
            return "progress"
        if self.command is not None:
            return "command"
        return "output"


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...] = ()
    hooks: dict[str, Activity] = field(default_factory=dict)  # "Event" or "Event:subtype"
    fallback: Activity = Activity.IDLE


@dataclass(frozen=True)
class View:
    """What the daemon saw of a running session's terminal at one moment."""

    screen: str
    title: str = ""
    progress: int | None = None  # the last OSC 9;4 state, None if never seen
    output_flowing: bool = False
    # The foreground job's name, as tmux reports it: "" while the pane's first program (the
    # shell, or a program started in its place) has the terminal itself.
    command: str = ""


@dataclass(frozen=True)
class Verdict:
    activity: Activity
    source: str  # screen, title, progress, output, fallback, hook, lifecycle
    rule: str
    matched: str
    visible: bool = False

    def explain(self) -> dict[str, str]:
        return {
            "activity": self.activity.value,
            "source": self.source,
            "rule": self.rule,
            "matched": self.matched,
        }


NOTHING_DRAWN = "nothing drawn yet"

GENERIC = Rules(rules=(Rule(Activity.WORKING, "generic output", output=True),))


def bottom_lines(screen: str, n: int) -> str:
    """The last n non-empty lines of screen, right-stripped, joined by newlines."""
    lines = [line.rstrip() for line in screen.splitlines()]
    return "\n".join([line for line in lines if line][-n:])


def _match(rule: Rule, view: View) -> str | None:
    """The text the rule matched on, or None."""
    if rule.screen:
        bottom = bottom_lines(view.screen, rule.lines)
        found = [p.search(bottom) for p in rule.screen]
        if all(found):
            return " … ".join(m.group(0) for m in found if m)
        return None
    if rule.title is not None:
        m = rule.title.search(view.title)
        return m.group(0) if m else None
    if rule.progress:
        return f"OSC 9;4;{view.progress}" if view.progress in rule.progress else None
    if rule.command is not None:
        m = rule.command.search(view.command)
        return f"foreground: {view.command}" if m else None
    return "output is flowing" if rule.output and view.output_flowing else None


def classify(rules: Rules, view: View) -> Verdict:
    for rule in rules.rules:
        matched = _match(rule, view)
        if matched is not None:
            return Verdict(rule.activity, rule.source, rule.name, matched, rule.visible)
    if not view.screen.strip():
        return Verdict(Activity.UNKNOWN, "screen", NOTHING_DRAWN, "")
    return Verdict(rules.fallback, "fallback", "no rule matched", "")


def hook_verdict(rules: Rules, event: str, subtype: str) -> Verdict | None:
    """What a hook event means, by the preset's hooks.activity table; None when nothing."""
    for key in (f"{event}:{subtype}" if subtype else None, event):
        if key and key in rules.hooks:
            return Verdict(rules.hooks[key], "hook", f"hook {key}", event)
    return None


def combine(screen: Verdict, hook: Verdict | None, quiet_sec: float) -> Verdict:
    """One verdict from the screen's and the last hook's."""
    if hook is None or screen.visible:
        return screen
    if screen.rule == NOTHING_DRAWN and hook.activity is Activity.IDLE:
        return screen  # a start-up hook fires before the agent has drawn its prompt
    if hook.activity is Activity.WORKING and quiet_sec >= HOOK_STALE_SEC:
        return screen
    return hook


def last_progress(chunk: bytes) -> int | None:
    """The last OSC 9;4 state in a chunk of terminal output, or None."""
    found = _OSC_PROGRESS.findall(chunk)
    return int(found[-1]) if found else None


@dataclass(frozen=True)
class HookReport:
    """What one hook of the agent reported."""

    event: str
    agent_session: str  # "" when the hook did not name one
    source: str  # SessionStart's source: startup, resume, clear, compact
    subtype: str  # Notification's notification_type, e.g. permission_prompt
