"""A question an agent asks through its hook, and the hook's reply.

Claude Code runs its ``PermissionRequest`` hooks as it draws its permission dialog, and takes
the first of the two to decide: a hook that prints an allow or a deny answers the dialog, one
that prints nothing leaves it to the terminal. The hook's JSON names the tool and its input
(``tool_name``, ``tool_input``), so the question is read from what the agent asks, not from
how it draws it: its text says what would run, and its choices are the two a hook can give.

Pure: the daemon keeps the question (state/asking.py) and ``hostagentctl hook --ask`` prints
the reply.
"""

from __future__ import annotations

import json

from hostagent.question import Choice, Question

ALLOW, DENY = "allow", "deny"
# Claude Code's own first words for its dialog's two ways, numbered as a person reads them.
CHOICES = (Choice("Yes", 1), Choice("No", 2))
DECISIONS = (ALLOW, DENY)  # CHOICES' decisions, in order
TEXT = "Do you want to proceed?"
MAX_DETAIL = 2000  # characters of the tool's input shown; a question is read, not a file
MAX_LINES = 8
# The fields of a hook's JSON the question is made of, passed on as strings by hostagentctl.
FIELDS = ("tool_name", "tool_input")
# The input fields that say what a tool does, most telling first (Bash, Edit and Write, Fetch).
TELLING = ("command", "file_path", "path", "url", "pattern", "description")


def question(tool: str, tool_input: str) -> Question:
    """The question a hook's request asks: the tool and what it would do (tool_input: its
    JSON, as the hook passed it), answered Yes or No."""
    return Question(TEXT, CHOICES, selected=-1, detail=_detail(tool, tool_input))


def decision(index: int) -> str:
    """The hook's decision for choice index of CHOICES."""
    return DECISIONS[index]


def reply(event: str, behavior: str, message: str) -> dict[str, object]:
    """What the hook prints for behavior (ALLOW or DENY): a deny stops the agent's turn, as
    "No" in its dialog does, with message for it to read."""
    said: dict[str, object] = {"behavior": behavior}
    if behavior == DENY:
        said.update(message=message, interrupt=True)
    return {"hookSpecificOutput": {"hookEventName": event, "decision": said}}


def _detail(tool: str, tool_input: str) -> str:
    name = " ".join(tool.split())[:80] or "a tool"
    try:
        fields = json.loads(tool_input) if tool_input else {}
    except ValueError:
        fields = tool_input
    if isinstance(fields, dict):
        told = [f"{k}: {' '.join(str(fields[k]).split())}" for k in TELLING if fields.get(k)]
        if not told and fields:
            told = [json.dumps(fields, ensure_ascii=False, sort_keys=True)]
    else:
        told = [" ".join(str(fields).split())]
    lines = [name, *(line[:MAX_DETAIL] for line in told[: MAX_LINES - 1])]
    return "\n".join(line for line in lines if line)
