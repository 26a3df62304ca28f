"""What a blocked agent asks, read from its screen: the question's text, its choices in order,
which one is highlighted, and the keys that answer each; and a person's answer ("1", "Yes",
"no") matched to one choice.

The agent CLIs draw their dialogs in a few shapes, the same across them:

- a menu, one choice a line, the highlighted one marked by a cursor (``❯ 1. Yes``,
  ``› Trust and continue``, ``> Refactor it``, ``● 1. Allow once``), numbered or not, a
  choice's description on the lines under it indented further, often in a box (``│``);
- a line question with its answers in parentheses (Aider's ``Run shell command? (Y)es/(N)o/
  (D)on't ask again [Yes]:``) or brackets (``[y/N]``), the default in capitals or brackets;
- answers as keys side by side (Cline's ``[y] Approve   [n] Deny``).

A menu is answered by moving from the highlighted choice to the wanted one and pressing Enter
(every such menu takes the arrows), or, where none is shown highlighted, by its number; a line
question by its letter and Enter; keys side by side by the key. A dialog drawn in none of these
shapes (choices told apart by colour alone) reads as no question: it is answered in the
terminal. The daemon reads a question only from a session that reads ``blocked``, and checks
the screen still shows it before it sends an answer's keys.

Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LINES = 30  # the bottom of the screen a dialog is looked for in
BOTTOM = 15  # with no cursor drawn, the numbered choices are looked for in the last lines only
MAX_TEXT_LINES = 6  # the question's lines above its choices, at most
CURSORS = "❯›>●▶→"
_BORDER = re.compile(r"^[\s│┃|]*(.*?)[\s│┃|]*$")
_RULE = re.compile(r"^[╭╮╰╯┌┐└┘├┤─━═╌┄\-_\s]*[╭╮╰╯┌┐└┘├┤─━═╌┄]{3}[╭╮╰╯┌┐└┘├┤─━═╌┄\-_\s]*$")
_OPTION = re.compile(
    rf"^(?P<indent> *)(?P<cursor>[{CURSORS}] *)?(?P<number>\d{{1,2}}[.)] +)?(?P<label>\S.*)$"
)
_LINE_QUESTION = re.compile(
    r"^(?P<text>.*?\?)\s*(?P<answers>\(\w\)[^/\[\]]*(?:/\(\w\)[^/\[\]]*)+?)"
    r"\s*(?:\[(?P<default>[^\]]*)\])?:?\s*$"
)
_YES_NO = re.compile(r"^(?P<text>.*?\?)\s*[\[(](?P<y>[yY])/(?P<n>[nN])[\])]\s*:?\s*$")
_KEYS = re.compile(r"\[(?P<key>\w)\] *(?P<label>\w[\w' -]*?)(?= {2,}\[|\s*$)")


class AnswerProblem(ValueError):
    """An answer that names no choice, or more than one, said for the person who gave it."""


@dataclass(frozen=True)
class Choice:
    label: str  # as drawn, without its cursor or number
    number: int | None = None  # the number drawn before it, if any
    keys: tuple[str, ...] = ()  # tmux key names that answer it; () when it cannot be


@dataclass(frozen=True)
class Question:
    text: str
    choices: tuple[Choice, ...]
    selected: int = -1  # the highlighted choice's index; -1 when none is shown


def read(screen: str) -> Question | None:
    """The question the bottom of screen asks, or None when it shows none of the shapes."""
    drawn = screen.rstrip().split("\n")  # a screen's blank bottom is no part of its dialog
    lines = [_unboxed(line) for line in drawn[-LINES:]]
    return _keys_side_by_side(lines) or _line_question(lines) or _menu(lines)


def _unboxed(line: str) -> str:
    """line without a box's borders on either side, its indentation inside the box kept."""
    body = line.rstrip()
    stripped = body.lstrip(" ")
    if stripped[:1] in ("│", "┃", "|"):
        body = stripped[1:]
    body = body.rstrip()
    if body.endswith(("│", "┃")):
        body = body[:-1].rstrip()
    return body


def _menu(lines: list[str]) -> Question | None:
    """A menu: the choices around the cursor's line, else (no cursor drawn) a numbered run."""
    at = _cursor_line(lines)
    options: list[tuple[int, re.Match[str]]] = []
    if at is not None:
        cursor = _OPTION.match(lines[at])
        assert cursor is not None  # _cursor_line matched it
        options = _siblings(lines, at, _label_column(cursor))
    numbered = _numbered_run(lines)
    # No cursor, a lone arrow in the text ("→ 1 question"), or a cursor higher up than the
    # numbered choices at the bottom (a side panel's "▶" row beside the dialog): the dialog is
    # the lowest of them.
    if len(options) < 2 or (len(numbered) > 1 and numbered[-1][0] > options[-1][0]):
        options = numbered
    if len(options) < 2:
        return None
    matches = [m for _, m in options]
    selected = next((i for i, m in enumerate(matches) if m.group("cursor")), -1)
    numbers = [_number(m) if m.group("number") else None for m in matches]
    choices = tuple(
        Choice(_clean(m.group("label")), number, _menu_keys(i, selected, number))
        for i, (m, number) in enumerate(zip(matches, numbers, strict=True))
    )
    return Question(_text_above(lines, options[0][0]), choices, selected)


def _cursor_line(lines: list[str]) -> int | None:
    """The lowest line that a cursor marks as a choice: indented, or numbered (a prompt's own
    mark stands in column 0 with the person's text after it)."""
    for row in range(len(lines) - 1, -1, -1):
        m = _OPTION.match(lines[row])
        if m and m.group("cursor") and (m.group("indent") or m.group("number")):
            return row
    return None


def _label_column(m: re.Match[str]) -> int:
    return m.start("number") if m.group("number") else m.start("label")


def _siblings(lines: list[str], at: int, column: int) -> list[tuple[int, re.Match[str]]]:
    """The cursor's choice and the choices above and below it: lines whose number (numbered
    too, where it is) or label starts at its column. A deeper line is a choice's description; a shallower one or two
    blank lines end the menu; a rule between two choices is passed over."""
    found: dict[int, re.Match[str]] = {at: _OPTION.match(lines[at])}  # type: ignore[dict-item]
    numbered = bool(found[at].group("number"))  # a numbered choice's siblings are numbered
    for step in (-1, 1):
        row, blank = at + step, False
        while 0 <= row < len(lines):
            line = lines[row]
            m = _OPTION.match(line)
            if not line.strip() or _RULE.match(line):
                if blank and not line.strip():
                    break
                blank = blank or not line.strip()
            elif m and _label_column(m) == column and bool(m.group("number")) == numbered:
                found[row], blank = m, False
            elif len(line) - len(line.lstrip(" ")) <= column:
                break  # the question above, or the keys' help below
            row += step
    return sorted(found.items())


def _numbered_run(lines: list[str]) -> list[tuple[int, re.Match[str]]]:
    """With no cursor drawn (the highlight a colour): the lowest run of lines numbered 1, 2,
    ... at one column, among the last BOTTOM lines (a numbered list higher up is text)."""
    rows: list[tuple[int, re.Match[str]]] = []
    for row in range(len(lines) - 1, max(len(lines) - BOTTOM, 0) - 1, -1):
        m = _OPTION.match(lines[row])
        if not (m and m.group("number")):
            continue
        number = int(m.group("number").strip()[:-1])
        if rows and (
            number != _number(rows[0][1]) - 1 or m.start("number") != rows[0][1].start("number")
        ):
            continue
        rows.insert(0, (row, m))
        if number == 1:
            return rows if len(rows) > 1 else []
    return []


def _number(m: re.Match[str]) -> int:
    return int(m.group("number").strip()[:-1])


def _text_above(lines: list[str], first: int) -> str:
    """The question: the lines just above the first choice (past blank lines and rules), up
    to a blank line or MAX_TEXT_LINES."""
    row = first - 1
    while row >= 0 and (not lines[row].strip() or _RULE.match(lines[row])):
        row -= 1
    text: list[str] = []
    while (
        row >= 0
        and lines[row].strip()
        and not _RULE.match(lines[row])
        and len(text) < MAX_TEXT_LINES
    ):
        text.insert(0, lines[row].strip())
        row -= 1
    return " ".join(text)


def _menu_keys(index: int, selected: int, number: int | None) -> tuple[str, ...]:
    if selected >= 0:
        move = "Down" if index > selected else "Up"
        return (*[move] * abs(index - selected), "Enter")
    return (str(number),) if number is not None and number < 10 else ()


def _clean(label: str) -> str:
    """label as drawn, without what a side panel draws on the same row (past a wide gap)."""
    return re.sub(r"\s{2,}", "  ", re.split(r"\s{8,}", label.strip())[0])


def _line_question(lines: list[str]) -> Question | None:
    """Aider's "Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]:" and "Proceed? [y/N]",
    on the last line that has text."""
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    m = _LINE_QUESTION.match(last)
    if m:
        labels = [a for a in m.group("answers").split("/") if a]
        words = [re.sub(r"\((\w)\)", r"\1", a).strip() for a in labels]
        default = (m.group("default") or "").lower()
        choices = tuple(Choice(w, None, (w[0].lower(), "Enter")) for w in words)
        selected = next((i for i, w in enumerate(words) if w.lower() == default), -1)
        return Question(m.group("text").strip(), choices, selected)
    m = _YES_NO.match(last)
    if m:
        choices = (Choice("Yes", None, ("y", "Enter")), Choice("No", None, ("n", "Enter")))
        selected = 0 if m.group("y") == "Y" else 1 if m.group("n") == "N" else -1
        return Question(m.group("text").strip(), choices, selected)
    return None


def _keys_side_by_side(lines: list[str]) -> Question | None:
    """Cline's "[y] Approve   [n] Deny": two or more bracketed keys on one line."""
    for row in range(len(lines) - 1, -1, -1):
        found = list(_KEYS.finditer(lines[row]))
        if len(found) >= 2:
            choices = tuple(
                Choice(m.group("label").strip(), None, (m.group("key"),)) for m in found
            )
            return Question(_text_above(lines, row), choices)
    return None


def same(a: Question, b: Question) -> bool:
    """Whether a and b are one question: its text and its choices, wherever the highlight
    stands (moving it is not asking again)."""
    return a.text == b.text and [c.label for c in a.choices] == [c.label for c in b.choices]


def number_of(question: Question, index: int) -> int:
    """What a person types for choice index: the number drawn before it, else its place."""
    drawn = question.choices[index].number
    return drawn if drawn is not None else index + 1


def choose(question: Question, answer: str) -> int:
    """The index of the choice answer names: its number (or, where none is drawn, its place:
    1 for the first), else the words it starts with, case-insensitive, or a letter alone its
    first; a choice whose whole label is the answer wins over those it only begins.
    AnswerProblem says why not."""
    said = " ".join(answer.split()).lower()
    if not said:
        raise AnswerProblem("Give a choice: its number or the words it starts with.")
    if said.isdigit():
        wanted = int(said)
        for index in range(len(question.choices)):
            if number_of(question, index) == wanted:
                return index
        raise AnswerProblem(f"No choice {wanted}; the choices are {_listed(question)}.")
    exact = [i for i, c in enumerate(question.choices) if c.label.lower() == said]
    if exact:
        return exact[0]
    starts = [i for i, c in enumerate(question.choices) if _begins(c.label.lower(), said)]
    if not starts and len(said) == 1 and said.isalpha():
        # A letter alone, as a y/n prompt takes it: the choice that starts with it.
        starts = [i for i, c in enumerate(question.choices) if c.label.lower().startswith(said)]
    if len(starts) == 1:
        return starts[0]
    if not starts:
        raise AnswerProblem(
            f"No choice starts with '{answer}'; the choices are {_listed(question)}."
        )
    shown = " or ".join(f"'{question.choices[i].label}'" for i in starts)
    raise AnswerProblem(f"'{answer}' could be {shown}; give its number or more of its words.")


def _begins(label: str, said: str) -> bool:
    """label starts with said, ending at a word's end ("yes" begins "yes, and ..." but
    not "yesterday")."""
    return label.startswith(said) and (len(label) == len(said) or not label[len(said)].isalnum())


def _listed(question: Question) -> str:
    return ", ".join(f"{number_of(question, i)}. {c.label}" for i, c in enumerate(question.choices))
