"""The approval inbox on a real systemd and bus: a blocked agent's question read from its
screen, listed by ``hostagentctl inbox``, answered once by ``hostagentctl answer`` as the
agent takes it; the races around an answer; and who may answer (never a session its own
question nor its makers')."""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator

import pytest

from hostagent.errors import NoQuestion
from tests.integration.busclient import with_client
from tests.integration.helpers import create, props, until, wait_screen
from tests.sandbox import Sandbox

WAIT = 30_000_000
ALICE = {"user": "alice", "system": True}


def inbox(sb: Sandbox, user: str | None = "alice") -> list[dict]:
    return json.loads(sb.ctl("inbox", "-o", "json", user=user, system=True).check().stdout)


def asks(sb: Sandbox, name: str, user: str | None = "alice") -> dict:
    """The question session name asks, once inbox lists it."""
    found: list[dict] = []

    def listed() -> bool:
        found[:] = [q for q in inbox(sb, user) if q["session"] == name]
        return bool(found)

    until(listed, f"{name}'s question in the inbox")
    return found[0]


def blocked(sb: Sandbox, name: str) -> None:
    reached = with_client(sb, lambda c: c.wait(name, ["blocked"], WAIT))
    assert reached == "blocked"


def ask(sb: Sandbox, name: str) -> dict:
    """The stand-in agent asks its y/n question; that question as the inbox shows it."""
    sb.ctl("send", name, "/ask", **ALICE).check()
    blocked(sb, name)
    return asks(sb, name)


@pytest.fixture
def agent(sb: Sandbox) -> Iterator[str]:
    name = create(sb, "demo-agent", "-e", "DEMO_AGENT_THINK=0", user="alice")
    with_client(sb, lambda c: c.wait(name, ["idle"], WAIT))
    yield name
    sb.ctl("rm", "--force", name)


def test_a_question_is_listed_answered_once_and_logged(sb: Sandbox, agent: str) -> None:
    q = ask(sb, agent)
    assert q["text"] == "Do you want to proceed?"
    assert q["choices"] == ["Yes", "No"] and q["numbers"] == [1, 2]
    assert q["source"] == "screen" and q["id"]
    # The property names the question; on the system bus its words are for those who may act.
    shown = props(sb, agent, user="alice")["Question"]
    assert shown["id"] == q["id"] and shown["count"] == 2 and "text" not in shown
    listed = sb.ctl("inbox", **ALICE).check().stdout
    assert f"{agent} (" in listed and "Do you want to proceed?" in listed and "2. No" in listed
    # bob sees nothing of it and may not answer it.
    assert all(x["session"] != agent for x in inbox(sb, "bob"))
    refused = sb.ctl("answer", agent, "yes", user="bob", system=True)
    assert refused.returncode != 0 and f"Failed to answer session '{agent}'" in refused.stderr
    out = sb.ctl("answer", agent, "yes", **ALICE).check().stdout
    assert f"{agent}: answered 'Yes'" in out
    wait_screen(sb, agent, "Proceeding.")
    assert with_client(sb, lambda c: c.wait(agent, ["idle"], WAIT)) == "idle"
    assert all(x["session"] != agent for x in inbox(sb))
    again = sb.ctl("answer", "--id", q["id"], agent, "no", **ALICE)
    assert again.returncode != 0 and "asks nothing now" in again.stderr
    assert "Cancelled." not in sb.ctl("capture", agent, **ALICE).stdout
    logs = sb.ctl("logs", agent).check().stdout
    assert f"question {q['id']} (Do you want to proceed?) answered 'Yes' by uid" in logs
    assert "(hostagentctl), from outside every session" in logs


def test_two_answers_at_once_one_wins(sb: Sandbox, agent: str) -> None:
    q = ask(sb, agent)

    async def both(c):  # type: ignore[no-untyped-def]
        return await asyncio.gather(
            c.answer(agent, "yes", q["id"]), c.answer(agent, "no", q["id"]), return_exceptions=True
        )

    results = with_client(sb, both)
    won = [r for r in results if isinstance(r, str)]
    lost = [r for r in results if isinstance(r, NoQuestion)]
    assert len(won) == 1 and len(lost) == 1, results
    shown = "Proceeding." if won[0] == "Yes" else "Cancelled."
    wait_screen(sb, agent, shown)
    with_client(sb, lambda c: c.wait(agent, ["idle"], WAIT))
    screen = sb.ctl("capture", agent, **ALICE).stdout
    assert screen.count("Proceeding.") + screen.count("Cancelled.") == 1, screen


def test_an_answer_typed_in_the_terminal_wins_and_the_question_is_replaced(
    sb: Sandbox, agent: str
) -> None:
    """The user answers in the terminal before the inbox's answer comes: that one is refused
    and nothing is typed. The agent asks again: the new question has a new id, and the old
    id does not answer it."""
    first = ask(sb, agent)
    sb.ctl("send", agent, "n", **ALICE).check()  # as if pressed in the terminal
    wait_screen(sb, agent, "Cancelled.")
    late = sb.ctl("answer", "--id", first["id"], agent, "yes", **ALICE)
    assert late.returncode != 0 and "Failed to answer" in late.stderr
    assert "nothing was typed" in late.stderr or "asks nothing now" in late.stderr
    with_client(sb, lambda c: c.wait(agent, ["idle"], WAIT))
    second = ask(sb, agent)
    assert second["id"] != first["id"]
    stale = sb.ctl("answer", "--id", first["id"], agent, "yes", **ALICE)
    assert stale.returncode != 0 and "another question" in stale.stderr
    sb.ctl("answer", "--id", second["id"], agent, "1", **ALICE).check()
    wait_screen(sb, agent, "Proceeding.")


def test_a_question_waiting_across_a_daemon_restart_is_read_again(sb: Sandbox, agent: str) -> None:
    ask(sb, agent)
    sb.daemon_restart()
    again = asks(sb, agent)
    assert again["text"] == "Do you want to proceed?"
    sb.ctl("answer", agent, "No", **ALICE).check()
    wait_screen(sb, agent, "Cancelled.")


def said(sb: Sandbox, name: str, command: str) -> str:
    """What command printed, typed into alice's session name (through /dev/shm)."""
    out = f"/dev/shm/hostagent-inbox-{secrets.token_hex(4)}"
    sb.ctl("send", name, f"{{ {command}; }} > {out}.tmp 2>&1; mv {out}.tmp {out}", **ALICE).check()
    until(lambda: sb.run("test", "-e", out).returncode == 0, f"{command!r} ran in {name}", 60)
    text = sb.run("cat", out).check().stdout
    sb.run("rm", "-f", out)
    return text.strip()


QUESTION = "read -p 'Do you want to proceed? [y/N] ' a; echo got-$a"


def test_a_session_never_answers_its_own_question_nor_its_makers(sb: Sandbox) -> None:
    """Shell sessions have their owner's rights, so the maker's own rules let them act on
    every session of hers: the inbox's rule holds all the same. From inside the child, its
    maker's question and its own are refused (Answer, and SendText into its own terminal);
    the maker answers its child's; alice answers both from outside."""
    maker = create(sb, "shell", user="alice")
    child = f"child-{secrets.token_hex(3)}"
    out = f"/dev/shm/hostagent-self-{secrets.token_hex(4)}"
    try:
        said(sb, maker, f"hostagentctl new --preset shell --name {child} --cwd /tmp")
        sb.ctl("send", maker, QUESTION, **ALICE).check()
        blocked(sb, maker)
        refused = said(sb, child, f"hostagentctl answer {maker} y")
        assert f"may not answer or type into its maker '{maker}''s terminal" in refused
        # The child asks, and from inside itself waits for its own question to answer it.
        tries = (
            f"hostagentctl wait {child} --for blocked --timeout 60; "
            f"hostagentctl answer {child} y; echo answer=$?; "
            f"hostagentctl send {child} y; echo send=$?"
        )
        sb.ctl("send", child, f"( {tries} ) > {out} 2>&1 & {QUESTION}", **ALICE).check()
        until(lambda: "send=" in sb.run("cat", out).stdout, "the child tried to answer itself")
        tried = sb.run("cat", out).stdout
        assert "answer=1" in tried and "send=1" in tried, tried
        assert "may not answer or type into its own terminal" in tried, tried
        assert asks(sb, child)["text"] == "Do you want to proceed?"
        # The maker answers its child (its own question answered from outside first).
        sb.ctl("answer", maker, "no", **ALICE).check()
        wait_screen(sb, maker, "got-n")
        assert "answered 'Yes'" in said(sb, maker, f"hostagentctl answer {child} yes")
        wait_screen(sb, child, "got-y")
        logs = sb.ctl("logs", child).check().stdout
        assert f"from inside session '{maker}'" in logs
    finally:
        sb.run("rm", "-f", out)
        for name in (maker, child):
            sb.ctl("rm", "--force", name)


RULES = "rules:\n  - {preset: demo-agent, question: '*want to proceed*', answer: yes}\n"


def set_rules(sb: Sandbox, text: str, user: str = "alice") -> str:
    result = sb.sh("hostagentctl --system inbox --set-rules -", input=text, user=user)
    return result.stdout + result.stderr


def test_an_answer_rule_kept_outside_every_session_answers_for_its_user(
    sb: Sandbox, agent: str
) -> None:
    """alice keeps a rule; her agent's matching question is answered by it, said in the
    journal. The rules are the daemon's file, which no session of hers can write; from inside
    a session they are refused; an admin can turn rules off."""
    helper = create(sb, "shell", user="alice")
    try:
        assert "1 answer rule kept." in set_rules(sb, RULES)
        assert "want to proceed" in sb.ctl("inbox", "--rules", **ALICE).check().stdout
        uid = sb.run("id", "-u", "alice").check().stdout.strip()
        kept = f"/var/lib/hostagent/answers/{uid}.yaml"
        assert sb.run("stat", "-c", "%U %a", kept).check().stdout.split() == ["root", "600"]
        assert (
            sb.sh(f"test -w {kept} || test -w {kept.rsplit('/', 1)[0]}", user="alice").returncode
            != 0
        )
        refused = said(sb, helper, "echo 'rules: []' | hostagentctl inbox --set-rules -")
        assert "from outside every session" in refused, refused
        unread = said(sb, helper, "hostagentctl inbox --rules")
        assert "read from outside every session" in unread, unread
        sb.ctl("send", agent, "/ask", **ALICE).check()
        wait_screen(sb, agent, "Proceeding.")
        logs = sb.ctl("logs", agent).check().stdout
        assert f"answered 'Yes' by rule 1 of uid {uid}'s answer rules" in logs, logs
        # The admin turns rules off: her rule answers nothing, and new ones are refused.
        with_client(sb, lambda c: c.wait(agent, ["idle"], WAIT))
        sb.sh("cat > /etc/hostagent/hostagent.yaml", input="answers:\n  rules: false\n").check()
        sb.ctl("reload").check()
        assert "keeps answer rules off" in set_rules(sb, RULES)
        second = ask(sb, agent)
        # Still there to be answered by hand: no rule answered it meanwhile.
        sb.ctl("answer", "--id", second["id"], agent, "no", **ALICE).check()
        wait_screen(sb, agent, "Cancelled.")
    finally:
        sb.run("rm", "-f", "/etc/hostagent/hostagent.yaml")
        sb.ctl("reload")
        set_rules(sb, "")
        sb.ctl("rm", "--force", helper)
