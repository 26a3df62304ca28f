"""The bus side of the approval inbox: a session's ``Question`` property, its ``Answer``
method, and the Manager's ``ListQuestions``.

A question's words are the session's screen, which only those who may Capture it may read:
on the system bus, where every local user may read every session's properties, the
``Question`` property carries the question's id, since, source and highlight, and its text and
choices go only to those who may act on the session, through ``ListQuestions``. On a user's
own bus the property carries the whole question.

An answer is taken by the same rules as ``SendText`` (bus/session.py authorize), and one more:
a session never answers its own question nor one of its makers' (permissions.py). Every answer
is one journal line: who, from where, the question, the choice.

A user's answer rules (answerrules.py) are hers to set and read, and set only from outside
every session: rules an agent could write would be its own approvals.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any, Protocol

from dbus_fast import Variant

from hostagent import answerrules
from hostagent.answerrules import RulesProblem
from hostagent.daemon.bus.interface import Call
from hostagent.daemon.bus.services import Services
from hostagent.daemon.follow import answering
from hostagent.daemon.host import procfs
from hostagent.daemon.state.asking import Asked
from hostagent.daemon.state.live import Session
from hostagent.errors import AccessDenied, Busy, InvalidArgs
from hostagent.permissions import answer_from_inside, owner_may_act
from hostagent.question import number_of

log = logging.getLogger(__name__)


class Front(Protocol):
    """The Manager's object (bus/manager.py's BusFrontend), as ListQuestions uses it."""

    services: Services


class Target(Protocol):
    """A Session object (bus/session.py's SessionObject), as Answer uses it."""

    session: Session
    f: Services

    async def authorize(self, call: Call) -> int: ...


def question_variants(asked: Asked | None, words: bool) -> dict[str, Variant]:
    """The Question property: empty when the session asks nothing; its text and choices only
    where words (whoever reads it may read the session's screen)."""
    if asked is None:
        return {}
    q = asked.question
    shown = {
        "id": Variant("s", asked.id),
        "since": Variant("t", asked.since),
        "source": Variant("s", asked.source),
        "selected": Variant("i", q.selected),
        "count": Variant("u", len(q.choices)),
    }
    if words:
        shown["text"] = Variant("s", q.text)
        shown["detail"] = Variant("s", q.detail)
        shown["choices"] = Variant("as", [c.label for c in q.choices])
        shown["numbers"] = Variant("au", [number_of(q, i) for i in range(len(q.choices))])
    return shown


async def list_questions(f: Front, call: Call) -> list[list[Any]]:
    """(name, question) for every question the caller may answer or read, oldest first: her
    own sessions' (root's and polkit's admins': everyone's); from inside a session, its tree's."""
    s = f.services
    inside = await s.caller_session(call.sender)
    asking = sorted(
        (session for session in s.registry.sessions.values() if session.asked is not None),
        key=lambda session: session.asked.since if session.asked else 0,
    )
    caller = await s.auth.caller_uid(call.sender)
    admin: bool | None = None  # polkit is asked once, and only for another's question
    found = []
    for session in asking:
        if inside is not None:
            try:  # its tree (or its owner's, with her rights), at least as confined as it
                s.act_from_inside(inside, session)
            except AccessDenied:
                continue
        if not owner_may_act(caller, session.record.owner):
            if admin is None:
                admin = await s.auth.is_admin(call.sender, interactive=False)
            if not admin:
                continue
        found.append([session.name, question_variants(session.asked, True)])
    return found


async def answer(o: Target, call: Call, id: str, choice: str) -> str:
    """Answer the session's question id with choice; the label of the choice answered."""
    uid = await o.authorize(call)
    inside = await o.f.caller_session(call.sender)
    if inside is not None:
        answer_from_inside(inside.record, o.session.record, o.f.registry.lineage(inside))
    asked = o.session.asked
    chosen = await answering.answer(o.f.terminal.tmux, o.session, id, choice)
    o.f.registry.announce(o.session)
    where = f"inside session '{inside.name}'" if inside is not None else "outside every session"
    log.info(
        "session '%s': question %s (%s) answered '%s' by uid %d (%s), from %s",
        o.session.name,
        id,
        asked.question.text if asked is not None else "",
        chosen.label,
        uid,
        await _program(o.f, call.sender),
        where,
    )
    return chosen.label


async def set_answer_rules(f: Front, call: Call, text: str) -> int:
    """Keep text as the caller's answer rules (an empty text: none); how many were kept."""
    s = f.services
    if not s.settings.config.answer_rules:
        raise AccessDenied(
            "The admin keeps answer rules off on this host (answers: {rules: false} in "
            "hostagent.yaml); answer each question yourself."
        )
    inside = await s.caller_session(call.sender)
    if inside is not None:
        raise AccessDenied(
            f"Answer rules are set from outside every session, not from inside session "
            f"'{inside.name}': rules an agent writes would be its own approvals."
        )
    uid = await s.auth.caller_uid(call.sender)
    try:
        rules = s.answers.set(uid, text)
    except RulesProblem as e:
        raise InvalidArgs(f"{e} Nothing was changed.") from None
    except OSError as e:
        raise Busy(f"The rules could not be written ({e.strerror}); try again.") from None
    log.info("uid %d set %d answer rules (%s)", uid, len(rules), await _program(s, call.sender))
    return len(rules)


async def get_answer_rules(f: Front, call: Call) -> str:
    """The caller's answer rules, as set_answer_rules takes them; not to a session, which
    would learn what it must look like to be approved."""
    s = f.services
    inside = await s.caller_session(call.sender)
    if inside is not None:
        raise AccessDenied(
            f"Answer rules are read from outside every session, not from inside session "
            f"'{inside.name}'."
        )
    return answerrules.dump(s.answers.rules(await s.auth.caller_uid(call.sender)))


async def _program(s: Services, sender: str) -> str:
    """The program that made the caller's connection (hostagentctl, Cockpit's bridge,
    hostagent-notify), for the journal: a name a process gives itself, so it says where,
    never who."""
    opener = await s.auth.caller_process(sender)
    if opener.pidfd >= 0:
        os.close(opener.pidfd)
    cmdline = procfs.read_small(f"/proc/{opener.pid}/cmdline") if opener.pid else None
    return program_name(cmdline.split("\0")) if cmdline else "?"


INTERPRETERS = re.compile(r"(python[0-9.]*|sh|bash|dash|node|perl)")


def program_name(argv: list[str]) -> str:
    """A command line's program: an interpreter's script or module (python3 -m X: X), else
    its first word; by base name. Pure."""
    words = [w for w in argv if w]
    if not words:
        return "?"
    name = os.path.basename(words[0])
    if INTERPRETERS.fullmatch(name):
        rest = words[1:]
        if "-m" in rest[:-1]:
            return rest[rest.index("-m") + 1]
        if "-c" in rest:
            return name  # a command line, not a script
        script = next((w for w in rest if not w.startswith("-")), "")
        if script:
            return os.path.basename(script)
    return name
