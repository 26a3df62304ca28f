"""What a blocked agent asks, read from its screen: the question's text, what the dialog says
above it (the tool, the command: its detail, up to the dialog's edge), its choices in order,
which one is highlighted, and the keys that answer each; and a person's answer ("1", "Yes",
"no", "y") matched to one choice.

The agent CLIs draw their dialogs in a few shapes, the same across them:

- a menu, one choice a line, the highlighted one marked by a cursor (``❯ 1. Yes``,
  ``› Trust and continue``, ``> Refactor it``, ``● 1. Allow once``), numbered or not, a
  choice's description on the lines under it indented further, often in a box (``│``);
- a line question with its answers in parentheses (Aider's ``Run shell command? (Y)es/(N)o/
  (D)on't ask again [Yes]:``) or brackets (``[y/N]``), the default in capitals or brackets;
- answers as keys side by side (Cline's ``[y] Approve   [n] Deny``);
- choices side by side with a hint to move between them (OpenCode's and Kilo's ``Allow once
  Allow always   Reject   ⇆ select  enter confirm``), the highlighted one told by its colour.

A menu is answered by moving from the highlighted choice to the wanted one and pressing Enter
(every such menu takes the arrows), or, where none is shown highlighted, by its number; a line
question by its letter and Enter; keys side by side by the key; choices side by side by the
arrows from the highlighted one, which only a capture with its colours shows (highlight.py):
their keys are found when the answer comes. A dialog drawn in none of these shapes reads as no
question: it is answered in the terminal. The daemon reads a question only from a session
that reads ``blocked``, and checks the screen still shows it before it sends an answer's keys.

Pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

LINES = 30  # the bottom of the screen a dialog is looked for in
BOTTOM = 15  # with no cursor drawn, the numbered choices are looked for in the last lines only
MAX_TEXT_LINES = 6  # the question's lines above its choices, at most
MAX_DETAIL_LINES = 8  # the dialog's lines above its question (the tool, the command), at most
# Of each line, what is read: a screen is at most 1000 columns, and a dialog's words are far
# fewer; the patterns below read a line in time that grows with its length, never faster.
MAX_LINE = 400
FAR_RIGHT = 20  # columns past a row's start that text above it is drawn beside the dialog
STATUS = 40  # text that starts this far right on a row of its own is a status line's
CURSORS = "❯›>●▶→"
_RULE_CHARS = frozenset("╭╮╰╯┌┐└┘├┤─━═╌┄-_ ")
_BOX_CHARS = frozenset("╭╮╰╯┌┐└┘├┤─━═╌┄")
_OPTION = re.compile(
    rf"^(?P<indent> *)(?P<cursor>[{CURSORS}] *)?(?P<number>\d{{1,2}}[.)] +)?(?P<label>\S.*)$"
)
# Words separated by single spaces: no two parts of a pattern can take the same space, so a
# line that does not match is given up on after one pass, not after every split of it.
_WORDS = r"[\w',-]*(?: [\w',-]+)*"
_LINE_QUESTION = re.compile(
    rf"^(?P<text>.*?\?)\s*(?P<answers>\([A-Za-z0-9]\){_WORDS}(?:/\([A-Za-z0-9]\){_WORDS})+)"
    r"\s*(?:\[(?P<default>[^\]]{0,40})\])?:?\s*$"
)
_YES_NO = re.compile(r"^(?P<text>.*?\?)\s*[\[(](?P<y>[yY])/(?P<n>[nN])[\])]\s*:?\s*$")
_SELECT_HINT = re.compile(r"(?i)\bselect\b.{0,40}\bconfirm\b")
_SPREAD = re.compile(r" {3,}")
_LABEL = re.compile(r"\w[\w'-]*(?: [\w'-]+){0,5}")
_KEYS = re.compile(r"\[(?P<key>[A-Za-z0-9])\] *(?P<label>\w[\w'-]*(?: [\w'-]+)*)(?= {2,}\[| *$)")


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
    # The dialog's lines above its question, one a line: what it asks about (the tool, the
    # command, the file), which a person must see to answer and a rule may match.
    detail: str = ""
    sideways: bool = False  # choices side by side, moved between with the arrows (highlight.py)

    @property
    def words(self) -> str:
        """Everything the dialog says: its detail, then its question."""
        return f"{self.detail}\n{self.text}" if self.detail else self.text


def read(screen: str) -> Question | None:
    """The question the bottom of screen asks, or None when it shows none of the shapes."""
    drawn = [line[: MAX_LINE * 2] for line in screen.rstrip().split("\n")[-LINES:]]
    lines = [_unboxed(line)[:MAX_LINE] for line in drawn]  # a blank bottom is no dialog's
    edges = frozenset(row for row, line in enumerate(drawn) if _is_edge(line))
    return (
        _keys_side_by_side(lines, edges)
        or _select_row(lines, edges)
        or _line_question(lines, edges)
        or _menu(lines, edges)
    )


def _is_edge(line: str) -> bool:
    """A dialog's top edge as drawn: a box's top-left corner, or a solid rule from the left
    margin (Claude Code's); a rule inside a box, or a dashed one, is a separator within it."""
    if line.lstrip(" ")[:1] in ("╭", "┌"):
        return True
    return line[:1] in ("─", "━", "═") and _is_rule(line) and "╌" not in line


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


def _menu(lines: list[str], edges: frozenset[int]) -> Question | None:
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
    first = options[0][0]
    detail = _detail_above(lines, first, edges)
    return Question(_text_above(lines, first), choices, selected, detail)


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
            if not line.strip() or _is_rule(line):
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
    return " ".join(_block_above(lines, first)[1])


def _block_above(lines: list[str], first: int) -> tuple[int, list[str]]:
    """The lines of text just above row first (past blank lines and rules), up to a blank
    line, a rule or MAX_TEXT_LINES, stripped; and the row above them."""
    row = first - 1
    while row >= 0 and (not lines[row].strip() or _is_rule(lines[row])):
        row -= 1
    text: list[str] = []
    while row >= 0 and lines[row].strip() and not _is_rule(lines[row]):
        if len(text) == MAX_TEXT_LINES:
            break
        text.insert(0, lines[row].strip())
        row -= 1
    return row, text


def _detail_above(lines: list[str], first: int, edges: frozenset[int]) -> str:
    """What the dialog says above its question, whose first choice is row first."""
    return _lines_above(lines, _block_above(lines, first)[0], edges)


def _lines_above(lines: list[str], row: int, edges: frozenset[int], gap: int = 2) -> str:
    """What a dialog says from row up (the tool, the command): its lines of text, past rules
    and single blank lines and without a box's borders, up to its top edge, gap blank lines
    in a row, or MAX_DETAIL_LINES."""
    detail: list[str] = []
    blank = 0
    while row >= 0 and row not in edges and len(detail) < MAX_DETAIL_LINES:
        line = lines[row].strip(" │┃|")
        if not line:
            blank += 1
            if blank == gap:
                break
        elif not _is_rule(line):
            blank = 0
            detail.insert(0, line)
        row -= 1
    return "\n".join(detail)


def _is_rule(line: str) -> bool:
    """A line drawn of box lines and dashes alone (three box characters at the least)."""
    return set(line) <= _RULE_CHARS and sum(c in _BOX_CHARS for c in line) >= 3


def _menu_keys(index: int, selected: int, number: int | None) -> tuple[str, ...]:
    if selected >= 0:
        move = "Down" if index > selected else "Up"
        return (*[move] * abs(index - selected), "Enter")
    return (str(number),) if number is not None and number < 10 else ()


def _clean(label: str) -> str:
    """label as drawn, without what a side panel draws on the same row (past a wide gap)."""
    return re.sub(r"\s{2,}", "  ", re.split(r"\s{8,}", label.strip())[0])


def _line_question(lines: list[str], edges: frozenset[int]) -> Question | None:
    """Aider's "Run shell command? (Y)es/(N)o/(D)on't ask again [Yes]:" and "Proceed? [y/N]",
    on the last line that has text."""
    at = next((row for row in range(len(lines) - 1, -1, -1) if lines[row].strip()), -1)
    last = lines[at].strip() if at >= 0 else ""
    detail = _lines_above(lines, at - 1, edges, gap=1)  # no edge: the block just above
    m = _LINE_QUESTION.match(last)
    if m:
        labels = [a for a in m.group("answers").split("/") if a]
        words = [re.sub(r"\(([A-Za-z0-9])\)", r"\1", a).strip() for a in labels]
        default = (m.group("default") or "").lower()
        choices = tuple(Choice(w, None, (w[0].lower(), "Enter")) for w in words)
        selected = next((i for i, w in enumerate(words) if w.lower() == default), -1)
        return Question(m.group("text").strip(), choices, selected, detail)
    m = _YES_NO.match(last)
    if m:
        choices = (Choice("Yes", None, ("y", "Enter")), Choice("No", None, ("n", "Enter")))
        selected = 0 if m.group("y") == "Y" else 1 if m.group("n") == "N" else -1
        return Question(m.group("text").strip(), choices, selected, detail)
    return None


def _keys_side_by_side(lines: list[str], edges: frozenset[int]) -> Question | None:
    """Cline's "[y] Approve   [n] Deny": two or more bracketed keys on one line."""
    for row in range(len(lines) - 1, -1, -1):
        found = list(_KEYS.finditer(lines[row]))
        if len(found) >= 2:
            choices = tuple(
                Choice(m.group("label").strip(), None, (m.group("key"),)) for m in found
            )
            detail = _detail_above(lines, row, edges)
            return Question(_text_above(lines, row), choices, -1, detail)
    return None


def _select_row(lines: list[str], edges: frozenset[int]) -> Question | None:
    """OpenCode's and Kilo's "Allow once   Allow always   Reject   ⇆ select  enter confirm":
    choices side by side, then a hint to select and confirm, on the dialog's last row (the
    screen's last with text, a status drawn far right aside: a row of the same shape above a
    dialog is text, not a dialog). The question is the dialog's first line above them
    ("△ Permission required"), its detail the others."""
    row = next((r for r in range(len(lines) - 1, -1, -1) if _indent(lines[r]) < STATUS), -1)
    parts = _SPREAD.split(lines[row].strip()) if row >= 0 else []
    if len(parts) < 3 or not _SELECT_HINT.search(parts[-1]):
        return None
    if not all(_LABEL.fullmatch(label) for label in parts[:-1]):
        return None
    # Past blank rows, and text drawn far to the right of the dialog (its status line).
    above = row - 1
    while above >= 0 and _indent(lines[above]) > _indent(lines[row]) + FAR_RIGHT:
        above -= 1
    said = _lines_above(lines, above, edges).split("\n")
    choices = tuple(Choice(label) for label in parts[:-1])
    return Question(said[0], choices, -1, "\n".join(said[1:]), sideways=True)


def _indent(line: str) -> int:
    """Where line's text starts; a blank line's is past any line's end."""
    return len(line) - len(line.lstrip()) if line.strip() else MAX_LINE


def same(a: Question, b: Question) -> bool:
    """Whether a and b are one question: its words (what it asks about among them: another
    command is another question) and its choices, wherever the highlight stands (moving it is
    not asking again)."""
    return a.words == b.words and [c.label for c in a.choices] == [c.label for c in b.choices]


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
