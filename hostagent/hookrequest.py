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
# What a question may show of the tool's input, whole or not at all: an answer must never
# approve what its sender did not see, so an input longer (a line, or lines) is not asked
# through the hook, and its dialog is read from the screen as any other's.
MAX_INPUT = 8000  # characters of the input's JSON, as hostagentctl passes it on (one more: cut)
MAX_LINE = 2000
MAX_LINES = 40
# The fields of a hook's JSON the question is made of, passed on as strings by hostagentctl.
FIELDS = ("tool_name", "tool_input")
# The input fields that say what a tool does, most telling first (Bash, Edit and Write, Fetch).
TELLING = ("command", "file_path", "path", "url", "pattern", "description")
# Tools whose dialog is not a yes or no: a question with choices of its own (AskUserQuestion),
# a plan to accept (ExitPlanMode). Their dialogs are read from the screen.
NOT_ASKED = ("AskUserQuestion", "ExitPlanMode")


def question(tool: str, tool_input: str) -> Question | None:
    """The question a hook's request asks: the tool and what it would do (tool_input: its
    JSON, as the hook passed it), answered Yes or No; None when it cannot be shown whole or
    is not a yes or no."""
    name = " ".join(tool.split())
    if name in NOT_ASKED or len(name) > MAX_LINE or len(tool_input) > MAX_INPUT:
        return None
    lines = [name or "a tool", *_told(tool_input)]
    if len(lines) > MAX_LINES or any(len(line) > MAX_LINE for line in lines):
        return None
    return Question(TEXT, CHOICES, selected=-1, detail="\n".join(lines))


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


def _told(tool_input: str) -> list[str]:
    """The input's telling fields, a line each of their lines (a command's line breaks kept:
    they are commands too); else the whole of it."""
    try:
        fields = json.loads(tool_input) if tool_input else {}
    except ValueError:
        return tool_input.splitlines()
    if not isinstance(fields, dict):
        return json.dumps(fields, ensure_ascii=False).splitlines()
    told = []
    for key in TELLING:
        value = fields.get(key)
        if value:
            first, *rest = str(value).rstrip("\n").split("\n")
            told += [f"{key}: {first}", *rest]
    if not told and fields:
        told = [json.dumps(fields, ensure_ascii=False, sort_keys=True)]
    return told
