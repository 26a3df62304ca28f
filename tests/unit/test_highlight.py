"""Choices side by side told apart by colour alone (highlight.py): OpenCode's and Kilo's
permission prompts, read as plain text by question.py and their highlight from a capture with
its colours; answered with the arrows from there (follow/answering.py).

tests/data/coloured-screens/ holds real captures (``tmux capture-pane -e -p``) of OpenCode
1.18.33 and Kilo 7.7.7 asking to run a command against the stand-in model, with the highlight
on the first, second and third choice (-1, -2, -3): moved there with the arrows, as drawn.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hostagent import highlight, question
from hostagent.daemon.follow import answering
from hostagent.errors import NoQuestion
from hostagent.options import CreateRequest
from tests.unit.fakes import Host, ShownWatch, me, run

COLOURED = Path(__file__).resolve().parent.parent / "data" / "coloured-screens"
CAPTURES = sorted(COLOURED.glob("*/*.ansi"))
LABELS = ["Allow once", "Allow always", "Reject"]
ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


def plain(coloured: str) -> str:
    """The screen as capture-pane -p prints it: without its colours."""
    return ESCAPES.sub("", coloured)


def test_a_row_of_that_shape_above_another_dialog_is_text_not_the_dialog() -> None:
    """An agent's output that looks like such a row, above a real dialog, does not take its
    place: the row must be the dialog's last."""
    screen = (
        "Approve   Deny   Later   use select then confirm\n"
        "Bash command\n  rm -rf build/\nDo you want to proceed?\n❯ 1. Yes\n  2. No\n"
    )
    q = question.read(screen)
    assert q is not None and not q.sideways and [c.label for c in q.choices] == ["Yes", "No"]


def test_the_corpus_has_each_highlight_of_both_clis() -> None:
    assert {p.parent.name for p in CAPTURES} == {"opencode", "kilo"}
    assert len(CAPTURES) == 6


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_real_prompt_is_read_plain_and_its_highlight_from_its_colours(path: Path) -> None:
    coloured = path.read_text()
    q = question.read(plain(coloured))
    assert q is not None and q.sideways and q.text == "△ Permission required"
    assert [c.label for c in q.choices] == LABELS and q.selected == -1
    assert q.detail == "# Shell command\n$ touch approved-by-user.txt"
    wanted = int(path.stem.rsplit("-", 1)[1]) - 1
    assert highlight.selected(coloured, LABELS) == wanted


@pytest.mark.parametrize(
    "line, labels, found",
    [
        ("\x1b[44m A \x1b[0m   B   C", ["A", "B", "C"], 0),
        ("A   \x1b[7mB\x1b[27m   C", ["A", "B", "C"], 1),  # reverse video
        ("\x1b[48;2;1;2;3mA\x1b[49m   B   \x1b[48;5;4mC", ["A", "B", "C"], -1),  # two stand out
        ("\x1b[41mA\x1b[0m   B", ["A", "B"], -1),  # of two, neither is the odd one out
        ("A   B   C", ["A", "B", "C"], -1),  # nothing drawn differently
        ("\x1b[38;5;44mA\x1b[0m   B   C", ["A", "B", "C"], -1),  # a foreground only
        ("A   C", ["A", "B", "C"], -1),  # not every label on the line
        ("\x1b[44mA\x1b[0m   B   C\nlast row", ["A", "B", "C"], -1),  # not the last row
        ("\x1b]0;title\x07\x1b[42mA\x1b[m   B   C", ["A", "B", "C"], 0),  # OSC passed over
    ],
)
def test_the_highlight_is_the_one_background_that_stands_out(
    line: str, labels: list[str], found: int
) -> None:
    assert highlight.selected(f"above\n{line}\n  ┃  \n", labels) == found


@pytest.mark.parametrize(
    "at, wanted, keys",
    [(0, 0, ("Enter",)), (0, 2, ("Right", "Right", "Enter")), (2, 0, ("Left", "Left", "Enter"))],
)
def test_the_arrows_go_from_the_highlight_never_round(
    at: int, wanted: int, keys: tuple[str, ...]
) -> None:
    assert highlight.moves(at, wanted) == keys


def test_an_answer_moves_from_the_highlight_the_colours_show(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        session = host.registry.get("a")
        watch = ShownWatch()
        host.registry.watched(session, watch)
        coloured = (COLOURED / "opencode" / "1.18.33-permission-highlight-2.ansi").read_text()
        fake = host.scopes.tmux
        fake.screens["a"] = (plain(coloured), "")
        fake.coloured["a"] = coloured
        watch.asking.see(True, plain(coloured))
        asked = session.asked
        assert asked is not None
        chosen = await answering.answer(fake, session, asked.id, "reject")
        assert chosen.label == "Reject" and fake.pressed == [("a", ("Right", "Enter"))]
        # The capture with colours is the check too: a question gone from it types nothing.
        watch.asking.see(False, "")
        watch.asking.see(True, plain(coloured))
        replaced = session.asked
        assert replaced is not None
        fake.coloured["a"] = coloured.replace("Shell command", "Other command")
        with pytest.raises(NoQuestion, match="left the screen"):
            await answering.answer(fake, session, replaced.id, "1")
        fake.coloured["a"] = coloured
        # Where no highlight stands out, nothing is typed: the terminal answers.
        watch.asking.see(False, "")
        watch.asking.see(True, plain(coloured))
        fake.coloured["a"] = plain(coloured)
        again = session.asked
        assert again is not None
        with pytest.raises(Exception, match="can only be chosen in its terminal"):
            await answering.answer(fake, session, again.id, "1")
        assert len(fake.pressed) == 1

    run(body())
