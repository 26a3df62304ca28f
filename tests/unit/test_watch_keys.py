"""watch's keys and rows, without a terminal."""

from __future__ import annotations

import curses

import pytest

from hostagent.cli.watch import wants_colour
from hostagent.cli.watch_actions import outcome
from hostagent.cli.watch_keys import Command, Keys, Prompt, matches
from hostagent.client.follow import SessionView

NAMES = ["a", "b", "c"]


def press(keys: Keys, *typed: str | int) -> list[Command | None]:
    out = []
    for key in typed:
        if isinstance(key, str) and len(key) > 1:  # a word typed at a prompt
            out += [keys.key(ch, NAMES) for ch in key]
        else:
            out.append(keys.key(key, NAMES))
    return out


@pytest.mark.parametrize(
    ("typed", "command"),
    [
        (["q"], Command("quit")),
        (["\n"], Command("attach", ("a",))),
        ([curses.KEY_DOWN, "a"], Command("attach", ("b",))),
        ([curses.KEY_DOWN, curses.KEY_DOWN, curses.KEY_DOWN, "a"], Command("attach", ("c",))),
        ([curses.KEY_UP, "a"], Command("attach", ("a",))),
        (["r"], Command("ctl", ("resume", "a"), "a")),
        (["s", "y"], Command("ctl", ("stop", "a"), "a")),
        (["x", "y"], Command("ctl", ("kill", "--whom", "all", "-s", "TERM", "a"), "a")),
        (["j", "d", "Y"], Command("ctl", ("rm", "b"), "b")),
        (["s", "n"], None),
        (["x", "\x1b"], None),
        (["t", "fix the bug", "\n"], Command("ctl", ("send", "a", "--", "fix the bug"), "a")),
        (["t", "-rf", "\n"], Command("ctl", ("send", "a", "--", "-rf"), "a")),
        (["t", "\n"], None),
        (["t", "oops", "\x1b"], None),
        (
            ["n", "demo-agent", "\n"],
            Command("ctl", ("new", "--preset", "demo-agent", "--cwd", "/w")),
        ),
        (
            ["n", "shell two", "\n"],
            Command("ctl", ("new", "--preset", "shell", "--name", "two", "--cwd", "/w")),
        ),
        (
            ["n", "shelx", "\x7f", "l", "\n"],
            Command("ctl", ("new", "--preset", "shell", "--cwd", "/w")),
        ),
        (["n", "a b c", "\n"], None),
        (["n", "'open", "\n"], None),
    ],
)
def test_each_key_does_one_thing(typed: list[str | int], command: Command | None) -> None:
    keys = Keys(cwd="/w")
    assert press(keys, *typed)[-1] == command
    assert keys.prompt is None and keys.confirming is None


def test_a_confirmation_and_a_prompt_say_what_they_wait_for() -> None:
    keys = Keys()
    press(keys, "x")
    assert keys.prompt_line() == "kill a? (y/n)"
    press(keys, "n")
    assert keys.message == "kill a: not done" and keys.prompt_line() == ""
    press(keys, "t", "hi")
    assert keys.prompt is Prompt.TYPE and keys.prompt_line() == "type into a: hi"
    press(keys, "\x1b", "n", "sh")
    assert keys.prompt_line() == "new session (PRESET [NAME]): sh"


def test_the_filter_narrows_as_it_is_typed_and_escape_clears_it() -> None:
    keys = Keys()
    press(keys, "/", "blo")
    assert keys.filter == "blo" and keys.prompt is Prompt.FILTER
    press(keys, "\n")
    assert keys.filter == "blo" and keys.prompt is None
    press(keys, "/", "\x1b")
    assert keys.filter == ""


@pytest.mark.parametrize(
    ("words", "shown"),
    [("", True), ("blocked", True), ("BLOCKED demo", True), ("idle", False), ("root", True)],
)
def test_a_filter_matches_every_word_anywhere(words: str, shown: bool) -> None:
    session = SessionView(
        "fix-1", "/p", owner=0, preset="demo-agent", state="running", activity="blocked"
    )
    assert matches(session, words) is shown


@pytest.mark.parametrize(
    ("environ", "colour"), [({}, True), ({"NO_COLOR": "1"}, False), ({"NO_COLOR": ""}, True)]
)
def test_no_color_turns_colour_off(environ: dict[str, str], colour: bool) -> None:
    assert wants_colour(environ) is colour


@pytest.mark.parametrize(
    ("args", "code", "stdout", "stderr", "said"),
    [
        (("stop", "a"), 0, "", "", "stop a: done"),
        (("new", "--preset", "shell"), 0, "t-1\n", "", "new t-1: done"),
        (("send", "a", "--", "hi"), 0, "", "", "typed into a: done"),
        (
            ("stop", "a"),
            1,
            "",
            "Failed to stop session 'a': it belongs to root\n",
            "Failed to stop session 'a': it belongs to root",
        ),
        (("stop", "a"), 130, "", "", "stop a: cancelled"),  # Ctrl-C at the password prompt
        (("rm", "a"), 1, "", "", "rm a: failed (exit status 1)"),
    ],
)
def test_an_actions_outcome_on_the_status_line(
    args: tuple[str, ...], code: int, stdout: str, stderr: str, said: str
) -> None:
    assert outcome(args, code, stdout, stderr) == said


@pytest.mark.parametrize(
    "asking, key, command",
    [
        ({"b": "q1"}, "2", Command("ctl", ("answer", "b", "2", "--id", "q1"), "b")),
        ({}, "2", None),  # the selected session asks nothing: a digit does nothing
        ({"a": "q0"}, "2", None),  # another session's question is not the selected one's
        ({"b": "q1"}, "0", None),
    ],
)
def test_a_digit_answers_the_selected_sessions_question(
    asking: dict[str, str], key: str, command: Command | None
) -> None:
    keys = Keys(selected=1)
    assert keys.key(key, ["a", "b"], asking) == command
