"""A blocked session's question as the daemon keeps it while it runs.

The pane watch (panewatch.py) hands every screen it reads to the session's ``Asking``: a
session that reads ``blocked`` asks what question.read finds at the bottom of its screen. The
question keeps its id while the screen shows the same text and choices (a highlight moved is
not a new question), and gets a new one when they change: an answer names the id it saw, so it
never answers a question that replaced the one its sender read.

An answer (follow/answering.py) is taken once: it holds the question while it is typed. Once
answered, the question stays out of the inbox while the screen still shows it (the CLI has not
redrawn yet), and a read that shows no question ends that; a dialog still drawn ANSWER_TAKES
after its answer dropped the keys, and is asked again (the watch reads it again then). An
answer typed in the terminal ends the question the same way: the next read shows something
else.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace

from hostagent import question
from hostagent.question import Question

SOURCE_SCREEN = "screen"  # read from the dialog on the screen, by question.read
# How long an answered dialog may stay drawn before it is taken as asked again: a CLI redraws
# within a frame or two of a key it took, and one that dropped the keys (a dialog drawn
# before it reads input) asks again rather than waiting unseen.
ANSWER_TAKES = 2.0


@dataclass(frozen=True)
class Asked:
    """A question the session asks: what it is, since when, and where it was read."""

    id: str
    question: Question
    since: int  # µs since the epoch, when it was first read
    source: str = SOURCE_SCREEN


class Asking:
    """The question one session asks now, if any (one per pane watch)."""

    def __init__(self) -> None:
        self.asked: Asked | None = None
        self.answering = False  # an answer holds the question while it is typed
        self._answered: Question | None = None  # still drawn, already answered
        self._answered_at = 0.0  # time.monotonic() of that answer

    def see(self, blocked: bool, screen: str, at: float | None = None) -> bool:
        """Take a screen read (blocked: the session's verdict; at: its time.monotonic());
        whether the question changed."""
        now = question.read(screen) if blocked else None
        late = (time.monotonic() if at is None else at) - self._answered_at >= ANSWER_TAKES
        if now is None or late:
            self._answered = None
        elif self._answered is not None and question.same(now, self._answered):
            now = None
        before = self.asked
        if now is None:
            self.asked = None
        elif before is not None and question.same(before.question, now):
            self.asked = replace(before, question=now)  # the highlight may have moved
        else:
            self.asked = Asked(secrets.token_hex(6), now, time.time_ns() // 1000)
        return self.asked != before

    def took(self, asked: Asked, at: float | None = None) -> None:
        """asked was answered (at: time.monotonic()): it leaves, and stays out while its
        dialog is still drawn, for ANSWER_TAKES at most."""
        self._answered = asked.question
        self._answered_at = time.monotonic() if at is None else at
        if self.asked is not None and self.asked.id == asked.id:
            self.asked = None
