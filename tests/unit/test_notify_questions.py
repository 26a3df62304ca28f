"""hostagent-notify and the inbox: a question told with a button per choice, answered by its
button, withdrawn when it goes, and told again with --remind; against a stand-in desktop
(the calls the notifier makes) and a stand-in daemon (its questions and answers)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from dbus_fast import Message, MessageType

from hostagent.cli import notify
from hostagent.cli.notify import NOTIFICATIONS, Notifier, question_alert
from hostagent.client.follow import Link, SessionView
from hostagent.client.inbox import WaitingQuestion
from hostagent.errors import NoQuestion

ASKED = WaitingQuestion(
    "a",
    "q1",
    "Do you want to proceed?",
    "Bash command\nrm -rf <build> && ls",
    ["Yes", "Yes, and don't ask again for rm", "No"],
    [1, 2, 3],
    0,
    0,
    "screen",
)


def test_a_question_is_told_with_a_button_per_choice_then_attach() -> None:
    alert = question_alert("a", ASKED)
    # What it asks about, then its question; escaped, as markup would read the agent's words.
    assert alert.summary == "a asks"
    assert alert.body == "Bash command\nrm -rf &lt;build&gt; &amp;&amp; ls\nDo you want to proceed?"
    assert alert.actions == (
        ("answer:q1:1", "1. Yes"),
        ("answer:q1:2", "2. Yes, and don't ask again for rm"),
        ("answer:q1:3", "3. No"),
        ("attach", "Attach"),
    )
    long = ASKED._replace(choices=["Yes, and always allow access to /tmp/cap/proj from here"])
    assert question_alert("a", long).actions[0][1].endswith("…")
    assert len(question_alert("a", long).actions[0][1]) == notify.LABEL_MAX


class Daemon:
    """The daemon as the notifier's client sees it."""

    def __init__(self) -> None:
        self.waiting = [ASKED]
        self.answers: list[tuple[str, str, str]] = []

    async def questions(self) -> list[WaitingQuestion]:
        return list(self.waiting)

    async def answer(self, name: str, choice: str, id: str = "") -> str:
        if not any(q.id == id for q in self.waiting):
            raise NoQuestion("Session 'a' asks nothing now.")
        self.answers.append((name, choice, id))
        self.waiting = []
        return "Yes"


def _notifier(
    monkeypatch: pytest.MonkeyPatch, remind: float = 0.0
) -> tuple[Notifier, SessionView, Daemon, list[tuple[str, list[Any]]]]:
    calls: list[tuple[str, list[Any]]] = []

    async def call(
        bus: Any,
        dest: str,
        path: str,
        iface: str,
        member: str,
        sig: str,
        body: list[Any],
        timeout: float = 0,
    ) -> list[Any]:
        calls.append((member, body))
        return [len(calls)] if member == "Notify" else []

    monkeypatch.setattr(notify, "call", call)
    daemon = Daemon()
    view = SessionView("a", "/p/a", owner=1000, state="running", activity="idle")
    follower = SimpleNamespace(
        link=Link.CONNECTED, sessions={"a": view}, client_for=lambda key: (daemon, key)
    )
    notifier = Notifier(None, follower, ["term"], 1000, remind)  # type: ignore[arg-type]
    notifier.changed()  # first sight
    return notifier, view, daemon, calls


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def _signal(member: str, *body: Any) -> Message:
    signature = "us" if member == "ActionInvoked" else "uu"
    return Message(
        message_type=MessageType.SIGNAL,
        path=notify.NOTIFICATIONS_PATH,
        interface=NOTIFICATIONS,
        member=member,
        signature=signature,
        body=list(body),
    )


def test_a_button_answers_the_question_and_its_going_withdraws_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        notifier, view, daemon, calls = _notifier(monkeypatch)
        view.activity, view.question = "blocked", {"id": "q1", "count": 3}
        notifier.changed()
        await _settle()
        notified = [b for m, b in calls if m == "Notify"]
        assert len(notified) == 1, calls  # the question, not "needs you" as well
        assert notified[0][3] == "a asks" and "answer:q1:2" in notified[0][5]
        notifier.on_message(_signal("ActionInvoked", 1, "answer:q1:1"))
        await _settle()
        assert daemon.answers == [("a", "1", "q1")]
        assert ("CloseNotification", [1]) in calls
        # A question answered elsewhere: its notification goes with it.
        daemon.waiting = [ASKED._replace(id="q2")]
        view.question = {"id": "q2", "count": 3}
        notifier.changed()
        await _settle()
        told = notifier.by_session["a"]
        calls.clear()
        view.activity, view.question = "working", {}
        notifier.changed()
        await _settle()
        assert calls == [("CloseNotification", [told])], calls

    asyncio.run(body())


def test_a_question_still_waiting_is_told_again_with_remind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        notifier, view, _, calls = _notifier(monkeypatch, remind=0.05)
        view.activity, view.question = "blocked", {"id": "q1", "count": 3}
        notifier.changed()
        told_again = asyncio.Event()
        real = notifier._notify

        async def counted(alert: notify.Alert) -> int:
            nid = await real(alert)
            if sum(m == "Notify" for m, _ in calls) >= 2:
                told_again.set()
            return nid

        notifier._notify = counted  # type: ignore[method-assign]
        await asyncio.wait_for(told_again.wait(), 5)
        replaced = [b for m, b in calls if m == "Notify"][1]
        assert replaced[1] == 1  # in place of the first, not beside it

    asyncio.run(body())
