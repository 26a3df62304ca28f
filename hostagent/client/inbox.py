"""What the approval inbox gives a client: a question waiting, with the session that asks it,
as ListQuestions and the Question property have it (docs/dbus-api.md)."""

from __future__ import annotations

from typing import Any, NamedTuple


class WaitingQuestion(NamedTuple):
    """One question of ListQuestions: the session that asks it and the question, as the
    Question property has it whole."""

    session: str
    id: str
    text: str
    detail: str  # what the dialog says above its question: the tool, the command
    choices: list[str]
    numbers: list[int]  # what a person types for each choice
    selected: int  # the highlighted choice, -1 when none is shown
    since: int  # µs since the epoch
    source: str

    @classmethod
    def of(cls, session: str, q: dict[str, Any]) -> WaitingQuestion:
        choices = [str(c) for c in q.get("choices", [])]
        return cls(
            session,
            str(q.get("id", "")),
            str(q.get("text", "")),
            str(q.get("detail", "")),
            choices,
            [int(n) for n in q.get("numbers", range(1, len(choices) + 1))],
            int(q.get("selected", -1)),
            int(q.get("since", 0)),
            str(q.get("source", "")),
        )
