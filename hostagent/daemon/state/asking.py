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

A question the agent asked through its hook (hookrequest.py: Claude Code's PermissionRequest,
which it asks as it draws the same dialog) comes first while its hook waits: it is answered
through the hook's reply, not with keys. It ends when the hook is answered, when its wait ends
(the dialog is the terminal's then, and read from the screen as any other), when the agent
reports it went on (another hook event), or when the dialog it drew leaves the screen (answered
in the terminal): the screen is still read meanwhile.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import dataclass, replace

from hostagent import question
from hostagent.question import Question

SOURCE_SCREEN = "screen"  # read from the dialog on the screen, by question.read
SOURCE_HOOK = "hook"  # asked by the agent's hook, which waits for the answer (hookrequest.py)
# How long an answered dialog may stay drawn before it is taken as asked again: a CLI redraws
# within a frame or two of a key it took, and one that dropped the keys (a dialog drawn
# before it reads input) asks again rather than waiting unseen.
ANSWER_TAKES = 2.0
# Reads in a row that show no dialog before a hook's question whose dialog was seen is taken
# as answered in the terminal: one read of a dialog mid-redraw does not end it.
GONE_READS = 2


@dataclass(frozen=True)
class Asked:
    """A question the session asks: what it is, since when, and where it was read."""

    id: str
    question: Question
    since: int  # µs since the epoch, when it was first read
    source: str = SOURCE_SCREEN
    # Its dialog is on the screen: a hook's question is, once the screen showed a dialog
    # while it waited (answer rules wait for that: a question no dialog stands behind is a
    # process of the session's asking in its hook's place).
    drawn: bool = True


class Asking:
    """The question one session asks now, if any (one per pane watch)."""

    def __init__(self) -> None:
        self.screen: Asked | None = None  # the dialog on the screen, read by question.read
        self.hooked: Asked | None = None  # the question a waiting hook asks
        self._reply: asyncio.Future[str] | None = None  # the hook's decision, "" for none
        self._missing = 0  # reads in a row without the hooked question's dialog, once seen
        self.expecting = False  # the hook reported at once that it asks: its question comes
        self.answering = False  # an answer holds the question while it is typed
        self._answered: Question | None = None  # still drawn, already answered
        self._answered_at = 0.0  # time.monotonic() of that answer
        self._any_answered = False  # a hook's answer: whatever dialog is still drawn is its

    @property
    def asked(self) -> Asked | None:
        """The question the session asks: its hook's while one waits, else its screen's (held
        back while the hook's is on its way: the dialog is drawn before it comes)."""
        return self.hooked or (None if self.expecting else self.screen)

    def see(self, blocked: bool, screen: str, at: float | None = None) -> bool:
        """Take a screen read (blocked: the session's verdict; at: its time.monotonic());
        whether the question asked changed."""
        before = self.asked
        now = question.read(screen) if blocked else None
        late = (time.monotonic() if at is None else at) - self._answered_at >= ANSWER_TAKES
        if now is None or late:
            self._answered = None
            self._any_answered = False
        elif self._any_answered or (
            self._answered is not None and question.same(now, self._answered)
        ):
            now = None
        if self.hooked is not None:
            self._missing = 0 if now is not None else self._missing + 1
            if now is not None and not self.hooked.drawn:
                self.hooked = replace(self.hooked, drawn=True)
            elif self.hooked.drawn and self._missing >= GONE_READS:  # answered in the terminal
                self.end_hook()
        if now is None:
            self.screen = None
        elif self.screen is not None and question.same(self.screen.question, now):
            self.screen = replace(self.screen, question=now)  # the highlight may have moved
        else:
            self.screen = Asked(secrets.token_hex(6), now, time.time_ns() // 1000)
        return self.asked != before

    def ask_hook(self, asks: Question) -> tuple[Asked, asyncio.Future[str]]:
        """A hook asks: the question, and the decision its hook will print ("" for none).
        One hook at a time: a second while one waits is left to the terminal at once."""
        reply: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.expecting = False
        asked = Asked(secrets.token_hex(6), asks, time.time_ns() // 1000, SOURCE_HOOK, False)
        if self.hooked is not None:
            reply.set_result("")
            return asked, reply
        self.hooked, self._reply, self._missing = asked, reply, 0
        return asked, reply

    def end_hook(self, id: str = "", decision: str = "") -> bool:
        """The hooked question (id's, or whichever) ends: its hook prints decision ("" leaves
        it to the terminal); whether one ended."""
        if self.hooked is None or (id and self.hooked.id != id):
            return False
        if self._reply is not None and not self._reply.done():
            self._reply.set_result(decision)
        self.hooked = self._reply = None
        return True

    def took(self, asked: Asked, decision: str = "", at: float | None = None) -> None:
        """asked was answered (at: time.monotonic()): it leaves, and stays out while its
        dialog is still drawn, for ANSWER_TAKES at most. A hook's question (decision: what its
        hook prints) leaves with whatever dialog is drawn: it was that dialog's."""
        self._answered_at = time.monotonic() if at is None else at
        if self.hooked is not None and self.hooked.id == asked.id:
            self.end_hook(asked.id, decision)
            self._any_answered = True
            self.screen = None
            return
        self._answered = asked.question
        if self.screen is not None and self.screen.id == asked.id:
            self.screen = None
