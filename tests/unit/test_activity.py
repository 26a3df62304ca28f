"""The pure activity rules: classify, hooks, combine, OSC 9;4."""

from __future__ import annotations

import re

import pytest

from hostagent.activity import (
    GENERIC,
    HOOK_STALE_SEC,
    NOTHING_DRAWN,
    Rule,
    Rules,
    Verdict,
    View,
    bottom_lines,
    classify,
    combine,
    hook_verdict,
    last_progress,
)
from hostagent.session import Activity

W, B, IDLE, UNKNOWN = Activity.WORKING, Activity.BLOCKED, Activity.IDLE, Activity.UNKNOWN

RULES = Rules(
    rules=(
        Rule(B, "q", screen=(re.compile(r"^Proceed\? \(y/n\)$"),), lines=1, visible=True),
        Rule(B, "t", title=re.compile("Action Required")),
        Rule(W, "p", progress=frozenset({1, 3})),
        Rule(W, "o", output=True),
    ),
    hooks={"Stop": IDLE, "Notification:permission_prompt": B, "Notification": IDLE},
)


@pytest.mark.parametrize(
    ("view", "activity", "source"),
    [
        (View("> \n\n"), IDLE, "fallback"),
        (View("text\nProceed? (y/n)   \n\n\n"), B, "screen"),
        (View("You said: Proceed? (y/n)\n> "), IDLE, "fallback"),
        (View("", title="✋ Action Required"), B, "title"),
        (View("", progress=3), W, "progress"),
        (View("> ", progress=0), IDLE, "fallback"),
        (View("", output_flowing=True), W, "output"),
        # Nothing drawn yet: still starting, not idle (Aider's first seconds).
        (View(""), UNKNOWN, "screen"),
        (View("\n  \n\n", progress=0), UNKNOWN, "screen"),
    ],
)
def test_classify(view: View, activity: Activity, source: str) -> None:
    verdict = classify(RULES, view)
    assert (verdict.activity, verdict.source) == (activity, source)


def test_generic_rules_follow_output() -> None:
    assert classify(GENERIC, View("$ ", output_flowing=True)).activity is W
    assert classify(GENERIC, View("$ ")).activity is IDLE


def test_all_screen_patterns_must_match() -> None:
    rules = Rules((Rule(B, "two", screen=(re.compile("Apply"), re.compile("1. Yes"))),))
    assert classify(rules, View("Apply this?\n1. Yes")).matched == "Apply … 1. Yes"
    assert classify(rules, View("Apply this?")).activity is IDLE


@pytest.mark.parametrize(
    ("event", "subtype", "activity"),
    [
        ("Stop", "", IDLE),
        ("Notification", "permission_prompt", B),
        ("Notification", "idle_prompt", IDLE),
        ("UserPromptSubmit", "", None),
    ],
)
def test_hook_verdict(event: str, subtype: str, activity: Activity | None) -> None:
    verdict = hook_verdict(RULES, event, subtype)
    assert (verdict.activity if verdict else None) is activity


SCREEN_IDLE = Verdict(IDLE, "fallback", "no rule matched", "")
SCREEN_BLOCKED = Verdict(B, "screen", "q", "Proceed?", visible=True)
HOOK_WORKING = Verdict(W, "hook", "hook UserPromptSubmit", "UserPromptSubmit")
HOOK_IDLE = Verdict(IDLE, "hook", "hook Stop", "Stop")
SCREEN_BLANK = Verdict(UNKNOWN, "screen", NOTHING_DRAWN, "")


@pytest.mark.parametrize(
    ("screen", "hook", "quiet", "expected"),
    [
        (SCREEN_IDLE, None, 0.0, SCREEN_IDLE),
        (SCREEN_IDLE, HOOK_WORKING, 1.0, HOOK_WORKING),  # hooks override the screen
        (SCREEN_BLOCKED, HOOK_WORKING, 1.0, SCREEN_BLOCKED),  # unless the screen is plain
        (SCREEN_BLOCKED, HOOK_IDLE, 1.0, SCREEN_BLOCKED),
        (SCREEN_IDLE, HOOK_WORKING, HOOK_STALE_SEC, SCREEN_IDLE),  # an interrupted turn
        (SCREEN_IDLE, HOOK_IDLE, 999.0, HOOK_IDLE),
        (SCREEN_BLANK, HOOK_IDLE, 1.0, SCREEN_BLANK),  # a start-up hook before the first draw
        (SCREEN_BLANK, HOOK_WORKING, 1.0, HOOK_WORKING),
    ],
)
def test_combine(screen: Verdict, hook: Verdict | None, quiet: float, expected: Verdict) -> None:
    assert combine(screen, hook, quiet) == expected


def test_bottom_lines_skip_empty_ones() -> None:
    assert bottom_lines("a\n\nb  \nc\n\n\n", 2) == "b\nc"


@pytest.mark.parametrize(
    ("chunk", "state"),
    [
        (b"\x1b]9;4;3\x07", 3),
        (b"x\x1b]9;4;1;50\x1b\\y\x1b]9;4;0;0\x07", 0),
        (b"\x1b]9;4;7\x07", None),
        (b"plain text", None),
    ],
)
def test_last_progress(chunk: bytes, state: int | None) -> None:
    assert last_progress(chunk) == state


@pytest.mark.parametrize(
    ("command", "activity"),
    [
        ("bash", "idle"),
        ("-bash", "idle"),
        ("zsh", "idle"),
        ("sh", "idle"),
        ("sleep", "working"),
        ("make", "working"),
        ("bashful", "working"),
        ("", "idle"),
    ],
)
def test_a_shell_is_working_while_a_command_runs_in_its_foreground(
    command: str, activity: str
) -> None:
    from hostagent.activity import View, classify
    from hostagent.presets import BUILTIN_DIR, load_presets

    shell = load_presets([BUILTIN_DIR], strict=True)["shell"]
    assert classify(shell.activity, View("$ ", command=command)).activity.value == activity


@pytest.mark.parametrize(
    ("screen", "command", "activity"),
    [
        ("$ sudo apt install jq\nDo you want to continue? [Y/n] ", "apt", "blocked"),
        ("Do you want to continue? [Y/n] n\nAbort.\n$ ", "", "idle"),  # answered, prompt back
        ("Pick one\n❯ 1. Yes\n  2. No\n", "", "blocked"),
        ("$ cat notes\n> 1. first point\n$ ", "", "idle"),  # a quoted list is no choice
        ("Approach:\n❯ Refactor it\n  Leave it\n↑/↓ select · Enter to confirm", "", "blocked"),
        ("hermes ❯ ", "", "idle"),  # an agent started in the shell's place, at its prompt
    ],
)
def test_the_shell_preset_reads_the_shapes_agent_clis_share(
    screen: str, command: str, activity: str
) -> None:
    from hostagent.activity import View, classify
    from hostagent.presets import BUILTIN_DIR, load_presets

    shell = load_presets([BUILTIN_DIR], strict=True)["shell"]
    assert classify(shell.activity, View(screen, command=command)).activity.value == activity
