"""hostagentctl inbox and answer: every question an agent waits on, and its answer.

``inbox`` lists ListQuestions' questions, oldest first, each with its session, since when, its
text and its choices as a person types them (``--rules`` shows the caller's answer rules,
``--set-rules FILE`` keeps a file's); ``answer NAME CHOICE`` answers the question the
session asks now with a choice's number or the words it starts with. The daemon decides who
may answer (docs/security.md): from inside a session, never its own question nor its makers'.
"""

from __future__ import annotations

import argparse
import sys
import time

from hostagent.cli.ctl_options import UsageError
from hostagent.cli.ctl_output import emit_json
from hostagent.client.inbox import WaitingQuestion
from hostagent.client.library import Client
from hostagent.escape import printable


async def verb_inbox(c: Client, a: argparse.Namespace) -> int:
    if a.set_rules is not None:
        count = await c.set_answer_rules(_read(a.set_rules))
        if not a.quiet:
            print(f"{count} answer rule{'' if count == 1 else 's'} kept.")
        return 0
    if a.rules:
        print(await c.answer_rules(), end="")
        return 0
    show_inbox(a, await c.questions())
    return 0


def _read(path: str) -> str:
    """The rules file named (- for standard input), read as the caller."""
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"--set-rules: cannot read {path}: {e}") from None


def show_inbox(a: argparse.Namespace, waiting: list[WaitingQuestion]) -> None:
    if a.json:
        emit_json(a, [q._asdict() for q in waiting])
        return
    for q in waiting:
        print(shown(q))
    if not a.no_legend:
        count = len(waiting)
        print(
            f"\n{count} question{'' if count == 1 else 's'} waiting."
            if count
            else "No questions waiting."
        )


def shown(q: WaitingQuestion, now: float | None = None) -> str:
    """A question as inbox prints it: its session, how long it has waited and its text, then
    a line per choice, the highlighted one marked."""
    waited = int((now if now is not None else time.time()) - q.since / 1e6)
    head = f"{printable(q.session)} ({_ago(waited)}): {printable(q.text) or '(no text drawn)'}"
    about = [f"    | {printable(line)}" for line in q.detail.splitlines()]
    lines = [
        f"  {'>' if i == q.selected else ' '} {number}. {printable(label)}"
        for i, (number, label) in enumerate(zip(q.numbers, q.choices, strict=False))
    ]
    return "\n".join([head, *about, *lines])


def _ago(seconds: int) -> str:
    seconds = max(0, seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


async def verb_answer(c: Client, a: argparse.Namespace) -> int:
    label = await c.answer(a.name, " ".join(a.choice), a.id or "")
    if a.json:
        emit_json(a, {"name": a.name, "answered": label})
    elif not a.quiet:
        print(f"{a.name}: answered '{printable(label)}'")
    return 0
