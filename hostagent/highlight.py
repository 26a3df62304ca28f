"""Which of a row of choices is highlighted, where only colour tells: OpenCode's and Kilo's
permission prompts draw "Allow once   Allow always   Reject" side by side, the highlighted
one on a background of its own, and move the highlight with the arrows, round from the last to
the first. A screen read as plain text (question.py) has the choices; a capture with its
colours (tmux capture-pane -e) has the highlight.

Only the background and reverse video are followed, from the SGR sequences (ESC [ ... m) of
the capture; every other escape is passed over. Of three choices or more, the highlighted one
is the one whose background differs from all the others'; two drawn differently cannot be
told apart, and read as none.

Pure.
"""

from __future__ import annotations

import re
from collections import Counter

from hostagent.question import STATUS

_ESCAPE = re.compile(r"\x1b\[([0-9;:]*)([A-Za-z])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b.")
MAX_LINE = 4000  # characters of a coloured line read: a screen line with its escapes
BORDERS = " │┃|"  # a row with only these is blank: a dialog's box drawn down its side


def selected(coloured: str, labels: list[str]) -> int:
    """The index of the highlighted one of labels, drawn side by side on the last row of
    coloured (a capture with its escapes) that has text, as question.py reads the dialog's
    row; -1 when that row does not show them all or no one stands out."""
    for line in reversed(coloured.split("\n")):
        text, looks = _cells(line[:MAX_LINE])
        if len(text) - len(text.lstrip(BORDERS)) >= STATUS or not text.strip(BORDERS):
            continue  # blank, or a status line drawn far right
        starts = _starts(text, labels)
        if starts is None:
            return -1
        seen = [looks[at] for at in starts]
        counts = Counter(seen)
        alone = [i for i, look in enumerate(seen) if counts[look] == 1]
        return alone[0] if len(labels) >= 3 and len(alone) == 1 else -1
    return -1


def plain(coloured: str) -> str:
    """coloured without its escapes: the screen as read without its colours."""
    return _ESCAPE.sub("", coloured)


def moves(highlighted: int, wanted: int) -> tuple[str, ...]:
    """The keys from the highlighted choice to the wanted one, then Enter: Right or Left,
    never round the end (whether the arrows wrap is the CLI's choice)."""
    step = "Right" if wanted > highlighted else "Left"
    return (step,) * abs(wanted - highlighted) + ("Enter",)


def _starts(text: str, labels: list[str]) -> list[int] | None:
    """Where each label starts on text, in order, or None when text does not hold them all."""
    starts, at = [], 0
    for label in labels:
        found = text.find(label, at)
        if found < 0:
            return None
        starts.append(found)
        at = found + len(label)
    return starts


def _cells(line: str) -> tuple[str, list[str]]:
    """line's text without its escapes, and each character's look (background, reverse)."""
    text: list[str] = []
    looks: list[str] = []
    background, reverse = "", False
    at = 0
    for m in _ESCAPE.finditer(line):
        chunk = line[at : m.start()]
        text.append(chunk)
        looks += [f"{background}{'/r' if reverse else ''}"] * len(chunk)
        at = m.end()
        if m.group(2) == "m":
            background, reverse = _sgr(m.group(1) or "0", background, reverse)
    chunk = line[at:]
    text.append(chunk)
    looks += [f"{background}{'/r' if reverse else ''}"] * len(chunk)
    return "".join(text), looks


def _sgr(params: str, background: str, reverse: bool) -> tuple[str, bool]:
    """The background and reverse video after one SGR sequence's parameters."""
    codes = params.replace(":", ";").split(";")
    i = 0
    while i < len(codes):
        code = codes[i] or "0"
        if code == "0":
            background, reverse = "", False
        elif code == "7":
            reverse = True
        elif code == "27":
            reverse = False
        elif code == "49":
            background = ""
        elif code in ("38", "48", "58"):  # an extended colour: 5;N or 2;R;G;B
            width = 3 if codes[i + 1 : i + 2] == ["5"] else 5
            if code == "48":
                background = ";".join(codes[i + 1 : i + width])
            i += width - 1
        elif code.isdigit() and (40 <= int(code) <= 47 or 100 <= int(code) <= 107):
            background = code
        i += 1
    return background, reverse
