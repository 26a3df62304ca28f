"""Every installable agent CLI, for real, as a user drives it through the system daemon: its
first-run dialogs read blocked, a turn reads working, its own approval dialog reads blocked,
approving reads working then idle, its conversation id is learned, stop and resume continue the
same conversation, a session stopped before its first prompt resumes cleanly, and after a
reboot every session is dormant and resumes into its conversation. Each session is created with
no sandboxing word at all, so it runs under the agent profile (hostagent/profile.py), as a
user's agent does: each of these also shows its CLI works confined, Claude Code included.

The CLIs come from their own registries (dev/agents); the model behind them is
tests/modelapi.py on the machine's loopback. A CLI that dev/agents could not install is skipped
with the reason, never passed; in CI (HOSTAGENT_REQUIRE_AGENTS) it fails the run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import yaml

from hostagent.usage import Usage
from tests.integration.busclient import wait_for_property, with_client
from tests.integration.helpers import create, props, until, usage_counting
from tests.integration.real_agents import (
    AGENTS,
    ENTER,
    RealAgent,
    control,
    hide_machine_installs,
    installed,
    log_size,
    outside_scopes,
    program_name,
    requests_since,
    set_up_user,
    start_model_api,
)
from tests.modelscript import SERVED, tool_outputs
from tests.sandbox import Sandbox
from tests.sandbox_roots import DEFAULT_SYSTEM

pytestmark = pytest.mark.real_cli  # The real-CLI lane (dev/test).

WAIT = "120"  # seconds, a bound for each wait on an event: a Node CLI starts in a few
SCREEN_WAIT = 120.0


@pytest.fixture(scope="module")
def sandbox() -> Iterator[Sandbox]:
    """A machine of this module's own: its tests reboot it, and give its users agent CLIs."""
    with Sandbox() as sb:
        hide_machine_installs(sb)
        sb.daemon_start()
        yield sb


@pytest.fixture(scope="module")
def agents(sandbox: Sandbox) -> dict[str, tuple[str, str]]:
    found = installed()
    if not found:
        missing("no real agent CLI is installed: run dev/agents (CI does)")
    start_model_api(sandbox)
    return found


class Homes:
    """What a test may need that another test also makes, made on demand, so that no test
    depends on which ran before it: a user's home where a CLI's first run was answered, and a
    session of each CLI that had its approval turn."""

    def __init__(self, sb: Sandbox, agents: dict[str, tuple[str, str]]) -> None:
        self.sb, self.agents = sb, agents
        self.set_up: dict[str, str] = {}  # key -> the project directory of its user
        self.conversed: dict[str, tuple[RealAgent, str]] = {}  # key -> (agent, session)

    def create(self, agent: RealAgent, project: str, *options: str) -> str:
        """A session of agent's with no word: the agent profile confines it to its working
        tree, and its CLI's own state is all else it may write."""
        env = [x for k, v in agent.env.items() for x in ("-e", f"{k}={v}")]
        extra = [*env, *options, *(("--", *agent.args) if agent.args else ())]
        return create(self.sb, agent.preset, *extra, user=agent.user, cwd=project)

    def ensure_set_up(self, agent: RealAgent) -> str:
        """agent's user's home with the CLI's first run answered; the project directory."""
        if agent.key not in self.set_up:
            program = program_of(self.agents, agent)
            project = set_up_user(self.sb, agent, program, self.agents["node22"][1])
            name = self.create(agent, project)
            answer_first_run(self.sb, agent, name)
            self.sb.ctl("rm", name, user=agent.user, system=True).check()
            self.set_up[agent.key] = project
        return self.set_up[agent.key]

    def ensure_conversed(self, agent: RealAgent) -> str:
        """A running session of agent whose conversation holds the approval turn."""
        if agent.key not in self.conversed:
            name = self.create(agent, self.ensure_set_up(agent))
            screen(self.sb, agent, name, agent.ready)
            assert wait(self.sb, agent, name, "idle") == "idle"
            approval_turn(self.sb, agent, name, self.set_up[agent.key])
            self.conversed[agent.key] = (agent, name)
        return self.conversed[agent.key][1]


@pytest.fixture(scope="module")
def homes(sandbox: Sandbox, agents: dict[str, tuple[str, str]]) -> Homes:
    return Homes(sandbox, agents)


def wait(sb: Sandbox, agent: RealAgent, name: str, activities: str) -> str:
    result = sb.ctl(
        "wait",
        name,
        "--for",
        activities,
        "--timeout",
        WAIT,
        user=agent.user,
        system=True,
        timeout=float(WAIT) + 30,
    )
    if result.returncode != 0:
        why = sb.ctl("explain", name, user=agent.user, system=True).stdout
        shown = sb.ctl("capture", name, user=agent.user, system=True).stdout
        raise AssertionError(f"{agent.key} never reached {activities}:\n{why}\n{shown}")
    return result.stdout.strip()


def explain(sb: Sandbox, agent: RealAgent, name: str) -> dict:
    return json.loads(sb.ctl("--json", "explain", name, user=agent.user, system=True).stdout)


def screen(sb: Sandbox, agent: RealAgent, name: str, text: str) -> str:
    shown = sb.screen_showing(name, text, user=agent.user, timeout=SCREEN_WAIT)
    assert shown, (
        f"{text!r} never appeared on {agent.key}'s screen:\n"
        + sb.ctl("capture", name, user=agent.user, system=True).stdout
    )
    return shown


def keys(sb: Sandbox, agent: RealAgent, name: str, text: str) -> None:
    sb.ctl("send", "--no-enter", name, text, user=agent.user, system=True).check()


def type_line(sb: Sandbox, agent: RealAgent, name: str, text: str) -> None:
    """Type text, see it drawn, then press Enter: a CLI that takes a burst of input for a paste
    (Codex) would make the Enter a newline of the prompt. A CLI still settling after a start
    (Gemini loading a resumed session) can drop what is typed: then it is typed again."""
    for _ in range(3):
        keys(sb, agent, name, text)
        if sb.screen_showing(name, text, user=agent.user, timeout=15):
            keys(sb, agent, name, ENTER)
            return
    screen(sb, agent, name, text)


def reads_working(sb: Sandbox, agent: RealAgent, name: str) -> None:
    """Working, and ExplainActivity says so. The Enter's own output reads working at once, and
    a CLI that draws nothing more until its first streamed words (Aider, which can take a
    while to send its request) reads idle for that moment: then the next working is awaited."""
    deadline = time.monotonic() + SCREEN_WAIT
    while True:
        assert wait(sb, agent, name, "working") == "working"
        if explain(sb, agent, name)["activity"] == "working":
            return
        assert time.monotonic() < deadline, f"{agent.key} never stayed working"


def blocked_by_rule(sb: Sandbox, agent: RealAgent, name: str) -> dict:
    """Blocked, and ExplainActivity names what said so: the preset's screen rule that saw the
    dialog, or (a CLI with hooks, which may report before the dialog is drawn) its hook."""
    assert wait(sb, agent, name, "blocked") == "blocked"
    why = explain(sb, agent, name)
    assert why["activity"] == "blocked"
    by_hook = agent.hooks and why["source"] == "hook"
    assert by_hook or why["rule"].startswith(f"{agent.preset} rule"), why
    return why


def program_of(agents: dict[str, tuple[str, str]], agent: RealAgent) -> str:
    if not agent.runs_here():
        pytest.skip(f"{agent.key} runs on the {agent.system} machine (HOSTAGENT_SANDBOX_OS)")
    if agent.key not in agents:
        missing(f"{agent.key} did not install (dev/agents keeps its log in the cache)")
    if "node22" not in agents:
        missing("Node 22 did not install, and the newest CLIs need it")
    return agents[agent.key][1]


def missing(why: str) -> NoReturn:
    """A CLI that is not there: in CI (.ci/run sets HOSTAGENT_REQUIRE_AGENTS; dev/agents installs
    every one) a failure, else a skip. A skip in CI would pass the run with fewer CLIs than the
    suite claims to drive."""
    if os.environ.get("HOSTAGENT_REQUIRE_AGENTS"):
        pytest.fail(why, pytrace=False)
    pytest.skip(why)


def answer_first_run(sb: Sandbox, agent: RealAgent, name: str) -> None:
    for text, answer in agent.first_run:
        screen(sb, agent, name, text)
        blocked_by_rule(sb, agent, name)
        keys(sb, agent, name, answer)
    screen(sb, agent, name, agent.ready)
    assert wait(sb, agent, name, "idle") == "idle"


def conversation_continues(sb: Sandbox, agent: RealAgent, name: str, earlier: str) -> None:
    """A new prompt reaches the model together with the turn from before (the CLI replayed
    its own transcript of the conversation)."""
    offset = log_size(sb)
    hello = f"hello again {secrets.token_hex(3)}"  # never on the screen before: a new answer
    type_line(sb, agent, name, hello)
    screen(sb, agent, name, f"You said: {hello}")
    assert wait(sb, agent, name, "idle") == "idle"
    sent = [json.dumps(r["body"]) for r in requests_since(sb, offset)]
    sent = [body for body in sent if hello in body]
    if not any(earlier in body for body in sent):
        lines = [x for x in sb.journal(lines=400).splitlines() if f"'{name}'" in x]
        asked = [
            f"{r['path']} {len(r['body'].get('messages', []))} {json.dumps(r['body'])[-300:]}"
            for r in requests_since(sb, offset)
        ]
        files = sb.sh(
            f"ls -la --time-style=+%T /home/{agent.user}/.gemini/tmp/*/chats/ 2>&1 | tail -20",
            user=agent.user,
        ).stdout
        raise AssertionError(
            f"{agent.key} started a new conversation:\n" + "\n".join([*lines, *asked, files])
        )


# What each call the stand-in answers carries, as hostagent counts it: input with its cached
# parts, and the cache write only where the wire format has one (Anthropic's). Aider counts
# tokens itself while it streams and ignores what the server says (docs/presets.md).
def per_call(agent: RealAgent) -> Usage | None:
    if agent.preset == "aider":
        return None
    write = SERVED["cache_write"] if agent.preset == "claude" else 0
    return Usage(SERVED["input"], SERVED["output"], SERVED["cache_read"], write, None, 1)


def used(sb: Sandbox, agent: RealAgent, name: str, calls: int) -> Usage:
    """The session's Usage once it counts at least calls model calls (it is read when a turn
    ends), checked to be exactly what the stand-in served for each."""
    got, each = usage_counting(sb, name, agent.user, calls, timeout=60), per_call(agent)
    if each is None:
        assert got.input > 0 and got.output > 0, got
    else:
        figures = (got.input, got.output, got.cache_read, got.cache_write)
        assert figures == tuple(
            n * got.calls for n in (each.input, each.output, each.cache_read, each.cache_write)
        ), got
    return got


def taken(sb: Sandbox, agent: RealAgent, name: str) -> bool:
    """Whether the dialog took its answer: the session left blocked within 10 s, or its dialog
    is gone and the agent is still busy with it (the caller waits on)."""
    moved = sb.ctl(
        "wait",
        name,
        "--for",
        "working,idle",
        "--timeout",
        "10",
        user=agent.user,
        system=True,
        timeout=40,
    )
    if moved.returncode == 0:
        return True
    return agent.approval not in sb.ctl("capture", name, user=agent.user, system=True).stdout


# CLIs whose approval its PermissionRequest hook asks, with the command it would run.
ASKED_BY_HOOK = {"claude"}
ALLOWING = ("yes", "allow", "approve", "continue", "run", "proceed")


def asked_in_inbox(sb: Sandbox, agent: RealAgent, name: str, other_than: str = "") -> dict:
    """The question session name asks, once its user's inbox lists it (other_than: an id
    already answered)."""
    found: list[dict] = []

    def listed() -> bool:
        out = sb.ctl("inbox", "-o", "json", user=agent.user, system=True).check().stdout
        found[:] = [q for q in json.loads(out) if q["session"] == name and q["id"] != other_than]
        return bool(found)

    until(listed, f"{agent.key}'s question in {agent.user}'s inbox", SCREEN_WAIT)
    return found[0]


def answer_from_inbox(sb: Sandbox, agent: RealAgent, name: str) -> None:
    """The approval reaches the inbox in the CLI's own words and choices, the first of which
    allows; `hostagentctl answer NAME 1` takes it as a key pressed in the terminal would, and
    the session leaves blocked. A dialog drawn before it takes keys drops them: it is asked
    again (a new id) and answered again."""
    answered = ""
    for _ in range(3):
        q = asked_in_inbox(sb, agent, name, answered)
        assert len(q["choices"]) >= 2 and q["choices"][0].lower().startswith(ALLOWING), q
        if agent.preset in ASKED_BY_HOOK:
            assert q["source"] == "hook" and "touch approved-by-user.txt" in q["detail"], q
        out = sb.ctl("answer", "--id", q["id"], name, "1", user=agent.user, system=True)
        assert out.returncode == 0, out.stderr
        assert f"answered '{q['choices'][0]}'" in out.stdout, out.stdout
        answered = q["id"]
        if taken(sb, agent, name):
            return
    raise AssertionError(f"{agent.key}'s dialog took none of three answers from the inbox")


def approval_turn(sb: Sandbox, agent: RealAgent, name: str, project: str) -> None:
    """The CLI's own approval dialog reads blocked; approving it from the inbox runs the
    command, then the held answer reads working, then idle."""
    control(sb, "hold")
    type_line(sb, agent, name, agent.approval_prompt)
    screen(sb, agent, name, agent.approval)
    blocked_by_rule(sb, agent, name)
    answer_from_inbox(sb, agent, name)
    if agent.answers_after_tool:
        assert wait(sb, agent, name, "working") == "working"
        control(sb, "release")
        screen(sb, agent, name, "Done: the command ran.")
    else:
        control(sb, "release")
        screen(sb, agent, name, "Running touch approved-by-user.txt")
    assert wait(sb, agent, name, "idle") == "idle"
    assert sb.run("test", "-e", f"{project}/approved-by-user.txt").returncode == 0


@pytest.mark.parametrize("agent", AGENTS, ids=[a.key for a in AGENTS])
def test_a_real_cli_from_first_run_to_resume(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes, agent: RealAgent
) -> None:
    sb = sandbox
    program = program_of(agents, agent)
    project = set_up_user(sb, agent, program, agents["node22"][1])
    before = outside_scopes(sb, agent.user)
    name = homes.create(agent, project)
    # Found as the user's own terminal finds it: in ~/.local/bin, through the login PATH.
    assert (
        props(sb, name, agent.user)["Command"][0]
        == f"/home/{agent.user}/.local/bin/{program_name(agent)}"
    )

    answer_first_run(sb, agent, name)
    homes.set_up[agent.key] = project

    # A turn: working while the model holds its reply, idle once it has answered.
    control(sb, "hold")
    type_line(sb, agent, name, "slow please")
    reads_working(sb, agent, name)
    control(sb, "release")
    screen(sb, agent, name, "Finished now.")
    assert wait(sb, agent, name, "idle") == "idle"
    if agent.preset != "aider":
        # Learned while the session runs, those a CLI chooses itself (Codex, OpenCode) too.
        until(
            lambda: props(sb, name, agent.user)["AgentSessionId"],
            f"{agent.key}'s conversation id learned after a turn, while it runs",
        )
    first = used(sb, agent, name, 1)

    approval_turn(sb, agent, name, project)
    if agent.hooks:
        assert explain(sb, agent, name).get("last_hook"), f"{agent.key}'s hooks never reported"
    # The approval turn is two calls where the CLI answers after the tool ran, else one.
    second = used(sb, agent, name, first.calls + (2 if agent.answers_after_tool else 1))
    sb.daemon_restart()  # a new daemon counts on from what the session used
    assert used(sb, agent, name, second.calls).calls >= second.calls

    sb.ctl("stop", name, user=agent.user, system=True).check()
    stopped = props(sb, name, agent.user)
    assert stopped["State"] == "stopped"
    # Nothing of the agent's is left outside its scope: no service of the user's own either
    # (Codex's look for a screen reader started the accessibility bus).
    assert outside_scopes(sb, agent.user) - before == set()
    if agent.preset != "aider":  # Aider has no conversation ids: its history file resumes
        assert stopped["AgentSessionId"], f"{agent.key}'s conversation id was never learned"

    assert used(sb, agent, name, second.calls).calls >= second.calls

    sb.ctl("resume", name, user=agent.user, system=True).check()
    screen(sb, agent, name, agent.ready)
    assert wait(sb, agent, name, "idle") == "idle"
    conversation_continues(sb, agent, name, agent.approval_prompt)
    used(sb, agent, name, second.calls + 1)  # the resumed run counts on
    homes.conversed[agent.key] = (agent, name)


@pytest.mark.parametrize("agent", AGENTS, ids=[a.key for a in AGENTS])
def test_a_real_cli_stopped_before_its_first_prompt_resumes(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes, agent: RealAgent
) -> None:
    """The seed bug: Gemini and Grok refuse both `--resume ID` of a session without a turn
    and a new session under that id; it must start fresh instead of failing."""
    sb = sandbox
    name = homes.create(agent, homes.ensure_set_up(agent))
    try:
        screen(sb, agent, name, agent.ready)
        sb.ctl("stop", name, user=agent.user, system=True).check()
        sb.ctl("resume", name, user=agent.user, system=True).check()
        screen(sb, agent, name, agent.ready)
        assert wait(sb, agent, name, "idle") == "idle"
        after = props(sb, name, agent.user)
        assert after["State"] == "running" and not after["LastError"], after
    finally:
        sb.ctl("rm", name, user=agent.user, system=True)


# Every CLI at once: after the reboot each resumes and answers in turn (12 CLIs), and a CLI
# whose first-run test did not run (-k) is set up and conversed here first.
@pytest.mark.bound(900)
def test_after_a_reboot_every_real_cli_is_dormant_and_resumes_its_conversation(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes
) -> None:
    sb = sandbox
    for agent in AGENTS:
        if agent.key in agents and "node22" in agents and agent.runs_here():
            homes.ensure_conversed(agent)
    if not homes.conversed:
        pytest.skip("no real CLI is installed")
    sessions = list(homes.conversed.values())
    before = {name: used(sb, agent, name, 1) for agent, name in sessions}
    sb.reboot()
    sb.daemon_start()
    start_model_api(sb)
    for agent, name in sessions:
        after = props(sb, name, agent.user)
        assert after["State"] == "dormant" and after["DormantReason"] == "reboot", after
        used(sb, agent, name, before[name].calls)  # what it used is still there
    for agent, name in sessions:
        sb.ctl("resume", name, user=agent.user, system=True).check()
    for agent, name in sessions:
        screen(sb, agent, name, agent.ready)
        assert wait(sb, agent, name, "idle") == "idle"
        conversation_continues(sb, agent, name, agent.approval_prompt)
        used(sb, agent, name, before[name].calls + 1)


# The CLIs whose model can ask the user a question with choices through a tool of their own.
# These tests and the slow Codex one run after the reboot: a session of theirs in the project
# of a session the reboot ended would be a newer conversation of that cwd, and discovery
# (Codex, OpenCode) takes the newest one the ended run could have written.
QUESTIONING = [
    a
    for a in AGENTS
    if a.key
    in (
        "claude",
        "gemini",
        "opencode",
        "copilot",
        "codex",
        "kilo",
        "pi",
        "hermes",
        "cline",
        "continue",
        "vibe",
    )
]
# Codex offers request_user_input in Plan mode only (its default mode answers the model that
# the tool is unavailable): the test switches to it first, as a user does.
PLAN_MODE = {"codex": "/plan"}


def screen_only(sb: Sandbox, agent: RealAgent) -> RealAgent:
    """agent with a copy of its preset that gives the CLI no hooks and reads no terminal title
    (an admin's preset in /etc/hostagent/presets.d), so that only the screen can say what it
    does."""
    builtin = Path(__file__).parents[2] / "hostagent" / "builtin-presets" / f"{agent.preset}.yaml"
    preset = yaml.safe_load(builtin.read_text())
    preset.pop("hooks", None)
    if preset.get("mcp", {}).get("format") in ("gemini", "qwen"):
        preset.pop("mcp")  # given in the hooks file, which this copy has not
    if "activity" in preset:  # else the rules of the preset it extends, which has no hooks
        rules = preset["activity"]["rules"]
        preset["activity"]["rules"] = [r for r in rules if "screen" in r or "title" not in r]
    preset["name"] = f"{agent.preset}-screen-only"
    path = f"/etc/hostagent/presets.d/{preset['name']}.yaml"
    sb.sh(
        f"mkdir -p /etc/hostagent/presets.d && cat > {path}", input=yaml.safe_dump(preset)
    ).check()
    sb.ctl("reload").check()
    return dataclasses.replace(agent, preset=preset["name"], hooks=False)


@pytest.mark.parametrize("agent", QUESTIONING, ids=[a.key for a in QUESTIONING])
def test_a_real_clis_question_tool_reads_blocked_from_its_screen(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes, agent: RealAgent
) -> None:
    """The question a CLI's own tool draws (Claude's AskUserQuestion, Copilot's ask_user
    form, Gemini's ask_user, OpenCode's question, Codex's request_user_input) is blocked by
    the preset's screen rule alone: the session runs a copy of the preset without hooks and
    without title rules. It stays blocked after a daemon restart with the question open.
    Answering it goes on to the model's reply and idle."""
    sb = sandbox
    program_of(agents, agent)
    project = homes.ensure_set_up(agent)
    plan = PLAN_MODE.get(agent.key)
    agent = screen_only(sb, agent)
    name = homes.create(agent, project)
    try:
        screen(sb, agent, name, agent.ready)
        assert wait(sb, agent, name, "idle") == "idle"
        type_line(sb, agent, name, "say hello")
        screen(sb, agent, name, "You said")
        assert wait(sb, agent, name, "idle") == "idle"
        assert explain(sb, agent, name)["source"] != "hook"  # no hook reported the turn
        if plan:
            type_line(sb, agent, name, plan)
            screen(sb, agent, name, "Plan mode")
        type_line(sb, agent, name, "ask me with the question tool")
        screen(sb, agent, name, "Leave it")
        for restart in (True, False):
            assert wait(sb, agent, name, "blocked") == "blocked"
            why = explain(sb, agent, name)
            assert why["source"] == "screen", why
            if restart:
                sb.daemon_restart()
        # Read again after the restart, and answered from the inbox by its first words.
        q = asked_in_inbox(sb, agent, name)
        shown = sb.ctl("capture", name, user=agent.user, system=True).stdout
        # A choice's description may follow its label on its line ("  ", " - ").
        first = {c.split("  ")[0].split(" - ")[0] for c in q["choices"]}
        assert {"Refactor it", "Leave it"} <= first, f"{q}\n{shown}"
        sb.ctl("answer", name, "refactor", user=agent.user, system=True).check()
        screen(sb, agent, name, "go with your choice")
        assert wait(sb, agent, name, "idle") == "idle"
    finally:
        sb.ctl("rm", name, user=agent.user, system=True)


# Every CLI with a permission dialog (one version of each): a hook's reply (Claude Code), a
# menu (Copilot, Codex, Gemini...), a line question (Aider), keys side by side (Cline), choices
# told by colour (OpenCode, Kilo).
DENYING = [a for a in AGENTS if a.key not in ("claude-old", "qwen-old")]
REFUSING = ("no", "reject", "deny", "cancel", "block", "decline", "abort", "skip")


@pytest.mark.parametrize("agent", DENYING, ids=[a.key for a in DENYING])
def test_a_real_cli_denied_from_the_inbox_does_not_run_the_tool(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes, agent: RealAgent
) -> None:
    """The approval answered "no" from the inbox: the CLI goes on as if its user had said no
    in its terminal, and the command it asked to run does not run. A second answer to the
    same question is refused."""
    sb = sandbox
    program_of(agents, agent)
    project = homes.ensure_set_up(agent)
    done = f"{project}/approved-by-user.txt"
    sb.run("rm", "-f", done).check()
    name = homes.create(agent, project)
    try:
        screen(sb, agent, name, agent.ready)
        assert wait(sb, agent, name, "idle") == "idle"
        control(sb, "hold")
        type_line(sb, agent, name, agent.approval_prompt)
        screen(sb, agent, name, agent.approval)
        blocked_by_rule(sb, agent, name)
        q = asked_in_inbox(sb, agent, name)
        no = next(i for i, c in enumerate(q["choices"]) if c.lower().startswith(REFUSING))
        said = str(q["numbers"][no])
        out = sb.ctl("answer", "--id", q["id"], name, said, user=agent.user, system=True)
        answered = f"answered '{q['choices'][no]}'"
        assert out.returncode == 0 and answered in out.stdout, out.stdout + out.stderr
        again = sb.ctl("answer", "--id", q["id"], name, "yes", user=agent.user, system=True)
        assert again.returncode != 0, again.stdout
        control(sb, "release")
        assert wait(sb, agent, name, "idle,blocked") in ("idle", "blocked")
        assert sb.run("test", "-e", done).returncode != 0, f"{agent.key} ran a denied command"
    finally:
        control(sb, "release")
        sb.ctl("rm", name, user=agent.user, system=True)


def test_codex_with_a_slow_first_request_reads_working_while_it_waits(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes
) -> None:
    """Codex started with a prompt in a trusted folder sends it at once, and redraws "Working
    (Ns • esc to interrupt)" without a pause while the model holds its reply: the pane is
    read all the same, so the session is working during the wait, not unknown until the
    turn ends."""
    sb = sandbox
    agent = next(a for a in AGENTS if a.key == "codex")
    program_of(agents, agent)
    project = homes.ensure_set_up(agent)
    env = [x for k, v in agent.env.items() for x in ("-e", f"{k}={v}")]
    control(sb, "hold")
    name = create(sb, agent.preset, *env, "--", "slow please", user=agent.user, cwd=project)
    try:
        assert wait(sb, agent, name, "working") == "working"
        assert explain(sb, agent, name)["activity"] == "working"
        control(sb, "release")
        screen(sb, agent, name, "Finished now.")
        assert wait(sb, agent, name, "idle") == "idle"
    finally:
        control(sb, "release")
        sb.ctl("rm", name, user=agent.user, system=True)


def test_codex_on_its_owners_session_bus_is_flagged_for_the_bus_it_started(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]]
) -> None:
    """The codex preset keeps Codex off its owner's session bus (and the agent profile closes
    it). A user who gives the bus back (-e DBUS_SESSION_BUS_ADDRESS, unconfined) gets Codex's
    screen-reader check at its first run, which has the bus start the accessibility bus outside
    the session's scope, to outlive it: the session says so. bob has never run Codex, so his
    first run is this one."""
    sb = sandbox
    agent = dataclasses.replace(next(a for a in AGENTS if a.key == "codex"), user="bob")
    if agent.system != DEFAULT_SYSTEM:  # HOSTAGENT_EVERY_NODE_CLI on the other machine
        pytest.skip("the accessibility bus Codex starts is the Debian 12 machine's")
    project = set_up_user(sb, agent, program_of(agents, agent), agents["node22"][1])
    a11y = "at-spi-dbus-bus.service"
    sb.run("systemctl", "--user", "-M", "bob@", "stop", a11y)
    env = {**agent.env, "DBUS_SESSION_BUS_ADDRESS": sb.user_env("bob")["DBUS_SESSION_BUS_ADDRESS"]}
    given = [x for k, v in env.items() for x in ("-e", f"{k}={v}")]
    name = create(sb, agent.preset, *given, "--unconfined", user="bob", cwd=project)

    async def run(client):  # type: ignore[no-untyped-def]
        return await wait_for_property(
            client,
            name,
            "Containment",
            lambda said: "org.a11y.Bus" in said,
            lambda: None,
            60,
            already=True,
        )

    try:
        seen = with_client(sb, run)
        assert f"the owner's session bus start org.a11y.Bus ({a11y})" in seen[-1], seen
    finally:
        sb.ctl("rm", name, user="bob", system=True)
        sb.run("systemctl", "--user", "-M", "bob@", "stop", a11y)


def test_aider_is_never_idle_before_its_prompt(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes
) -> None:
    """Aider draws nothing for its first seconds, then notices, then its prompt: the session
    is idle only once the prompt is there (a message sent on an earlier idle went into its
    first question)."""
    sb = sandbox
    agent = next(a for a in AGENTS if a.key == "aider")
    program_of(agents, agent)
    name = homes.create(agent, homes.ensure_set_up(agent))
    try:
        assert wait(sb, agent, name, "idle") == "idle"
        shown = sb.ctl("capture", name, user=agent.user, system=True).check().stdout
        drawn = [line for line in shown.splitlines() if line.strip()]
        assert drawn and re.fullmatch(r"[\w-]*>\s*", drawn[-1]), f"idle on:\n{shown}"
    finally:
        sb.ctl("rm", name, user=agent.user, system=True)


def test_presets_say_which_agents_each_user_has_installed(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes
) -> None:
    """ListAgents answers for the caller: alice's ~/.local/bin has Claude, carol has none."""
    sb = sandbox
    homes.ensure_set_up(next(a for a in AGENTS if a.key == "claude"))
    mine = json.loads(sb.ctl("--json", "presets", user="alice", system=True).check().stdout)
    claude = next(row for row in mine if row["preset"] == "claude")
    assert claude["path"] == "/home/alice/.local/bin/claude"
    assert claude["installed"].startswith(agents["claude"][0]), claude
    theirs = json.loads(sb.ctl("--json", "presets", user="carol", system=True).check().stdout)
    claude = next(row for row in theirs if row["preset"] == "claude")
    assert claude["installed"] == "-" and "not found in the login PATH" in claude["path"]
    shell = next(row for row in theirs if row["preset"] == "shell")
    assert shell["installed"] == "(login shell)"
    # As a table, the PATH that every missing agent was looked for in is said once.
    table = sb.ctl("presets", user="carol", system=True).check().stdout
    assert table.count("/usr/local/bin:") == 1 and "Searched your login PATH: " in table


# What carol's CLIs leave in her home: gone before the next test makes her a fresh user again.
CAROLS_LEFTOVERS = " ".join(
    f"/home/carol/{p}"
    for p in (".local/bin", ".codex", ".qwen", ".pi", ".claude", ".claude.json", ".copilot")
)


@contextlib.contextmanager
def carols_session(
    sb: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes, fresh: RealAgent
) -> Iterator[str]:
    """A session of fresh as carol: another user than the suite's, so nothing its first-run
    test saved (a key, a trusted folder) applies. Removed afterwards, with what she kept."""
    homes.ensure_set_up(next(a for a in AGENTS if a.key == fresh.key))
    project = set_up_user(sb, fresh, agents[fresh.key][1], agents["node22"][1])
    name = create(sb, fresh.preset, user="carol", cwd=project)
    try:
        yield name
    finally:
        sb.ctl("rm", name, system=True)
        sb.sh(f"rm -rf {CAROLS_LEFTOVERS}")


def test_a_claude_signed_in_unconfined_stays_signed_in_once_confined(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes
) -> None:
    """carol approves her API key in a Claude of hers that is not confined; her first confined
    session moves ~/.claude.json into ~/.claude/.config.json (as she, the journal says so),
    takes a turn with no dialog and no "Not logged in", and her unconfined Claude afterwards
    is still signed in: both read and save the one file."""
    sb = sandbox
    agent = next(a for a in AGENTS if a.key == "claude")
    carol = dataclasses.replace(agent, user="carol")
    homes.ensure_set_up(agent)
    project = set_up_user(sb, carol, agents["claude"][1], agents["node22"][1])
    env = [x for k, v in carol.env.items() for x in ("-e", f"{k}={v}")]
    try:
        for turn, free in enumerate((("--unconfined",), (), ("--unconfined",))):
            name = create(sb, "claude", *env, *free, user="carol", cwd=project)
            if turn == 0:
                answer_first_run(sb, carol, name)  # her API key approved, not confined
            else:
                screen(sb, carol, name, carol.ready)  # no dialog: nothing asked again
                assert wait(sb, carol, name, "idle") == "idle"
            hello = f"hello {secrets.token_hex(3)}"
            type_line(sb, carol, name, hello)
            shown = screen(sb, carol, name, f"You said: {hello}")
            assert "Not logged in" not in shown, shown
            assert wait(sb, carol, name, "idle") == "idle"
            sb.ctl("rm", name, user="carol", system=True).check()
            moved = sb.run("test", "-s", "/home/carol/.claude/.config.json").returncode == 0
            assert moved == (turn > 0), f"after run {turn}: moved {moved}"
        assert sb.run("test", "-e", "/home/carol/.claude.json").returncode != 0
        owner = sb.sh("stat -c %U /home/carol/.claude/.config.json").stdout.strip()
        assert owner == "carol"
        said = "moved /home/carol/.claude.json to /home/carol/.claude/.config.json"
        assert said in sb.journal(lines=2000)
    finally:
        sb.sh(f"rm -rf {CAROLS_LEFTOVERS}")


# A CLI met without a key or provider: its sign-in or provider screen reads blocked.
SIGN_IN = [
    ("codex", {}, (), "Sign in with ChatGPT"),
    ("qwen", {}, (), "Connect a Provider"),
    ("qwen-old", {}, (), "Select Authentication Method"),
    ("pi", {}, (), "No models available"),
]


@pytest.mark.parametrize(("key", "env", "args", "text"), SIGN_IN, ids=[c[0] for c in SIGN_IN])
def test_a_real_cli_without_a_key_asks_to_sign_in_and_reads_blocked(
    sandbox: Sandbox,
    agents: dict[str, tuple[str, str]],
    key: str,
    env: dict[str, str],
    args: tuple[str, ...],
    text: str,
    homes: Homes,
) -> None:
    agent = next(a for a in AGENTS if a.key == key)
    fresh = RealAgent(key, agent.preset, "carol", env, args, configured=False)
    with carols_session(sandbox, agents, homes, fresh) as name:
        screen(sandbox, fresh, name, text)
        blocked_by_rule(sandbox, fresh, name)


# A CLI that starts without a key and asks for a sign-in under its prompt (Copilot), or says so
# when a message is sent (Claude): blocked until the user acts; what she types there is hers.
NOT_SIGNED_IN = [
    (
        "claude",
        {"CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "DISABLE_AUTOUPDATER": "1"},
        "hello",
        "Please run /login",
    ),
    ("copilot", {"COPILOT_AUTO_UPDATE": "false"}, "", "Please use /login to sign in"),
]


@pytest.mark.parametrize(
    ("key", "env", "message", "text"), NOT_SIGNED_IN, ids=[c[0] for c in NOT_SIGNED_IN]
)
def test_a_real_cli_not_signed_in_reads_blocked_until_its_user_types(
    sandbox: Sandbox,
    agents: dict[str, tuple[str, str]],
    key: str,
    env: dict[str, str],
    message: str,
    text: str,
    homes: Homes,
) -> None:
    sb = sandbox
    agent = next(a for a in AGENTS if a.key == key)
    # The CLI's settings but no key, so not asked about one (Claude's question and the step
    # that answers it).
    asked = [i for i, (step, _) in enumerate(agent.first_run) if "API key" in step]
    steps = tuple(s for i, s in enumerate(agent.first_run) if not {i, i - 1} & set(asked))
    fresh = dataclasses.replace(agent, user="carol", env=env, first_run=steps)
    with carols_session(sb, agents, homes, fresh) as name:
        for step, answer in fresh.first_run:
            screen(sb, fresh, name, step)
            keys(sb, fresh, name, answer)
        if message:
            screen(sb, fresh, name, fresh.ready)
            type_line(sb, fresh, name, message)
        screen(sb, fresh, name, text)
        assert blocked_by_rule(sb, fresh, name)["source"] == "screen"
        keys(sb, fresh, name, "again")  # the user's own text at the prompt
        assert wait(sb, fresh, name, "idle") == "idle"


def delegation_requests(sb: Sandbox, offset: int) -> list[str]:
    """What the model was given in each request since offset: its tools, and the tool results."""
    shown = []
    for r in requests_since(sb, offset):
        body = r["body"]
        tools = [t.get("name") or t.get("function", {}).get("name") for t in body.get("tools", [])]
        tools += [
            d["name"] for t in body.get("tools", []) for d in t.get("functionDeclarations", [])
        ]
        shown.append(f"{r['path']} tools={tools} results={tool_outputs(body)}")
    return shown


# The CLIs that take an MCP server, each driven to hand work to a child session: the stand-in
# model, told "delegate TASK", calls hostagent's tools as the CLI names them
# (tests/modelscript.py, delegation).
DELEGATING = [a for a in AGENTS if a.key in ("claude", "codex", "gemini", "opencode")]


@pytest.mark.parametrize("agent", DELEGATING, ids=[a.key for a in DELEGATING])
def test_a_real_cli_hands_work_to_a_child_session_and_quotes_its_answer(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes, agent: RealAgent
) -> None:
    """Given hostagent's tools (--mcp), the CLI creates a child session of the stand-in agent
    with the task as its prompt, waits for it, and its own screen quotes the child's answer;
    each tool call its CLI asks about is approved, as its user would. The child is the
    parent's, and confined as it is. A child made from inside writes only what its maker
    may: the maker is given the stand-in agent's state, as its user would give it."""
    sb = sandbox
    program_of(agents, agent)
    child_state = ("-p", "ReadWritePaths=-%h/.demo-agent")  # not hidden once it is named
    name = homes.create(agent, homes.ensure_set_up(agent), "--mcp", *child_state)
    word = secrets.token_hex(3)
    try:
        screen(sb, agent, name, agent.ready)
        assert wait(sb, agent, name, "idle") == "idle"
        offset = log_size(sb)
        type_line(sb, agent, name, f"delegate say the word {word}")
        answered = f"answered: say the word {word}"
        deadline = time.monotonic() + SCREEN_WAIT
        while not sb.screen_showing(name, answered, user=agent.user, timeout=3):
            assert time.monotonic() < deadline, (
                f"{agent.key} never quoted its child:\n"
                + sb.ctl("capture", name, user=agent.user, system=True).stdout
                + "\n".join(delegation_requests(sb, offset))
            )
            if explain(sb, agent, name)["activity"] == "blocked":
                keys(sb, agent, name, agent.approve)
        rows = json.loads(sb.ctl("list", "-o", "json", user=agent.user, system=True).stdout)
        children = [r for r in rows if r.get("parent") == name]
        assert [c["preset"] for c in children] == ["demo-agent"], rows
        child = props(sb, children[0]["name"], agent.user)
        own = props(sb, name, agent.user)["Properties"]
        words = [w for w in own if w.partition("=")[0] in ("ProtectSystem", "ProtectHome")]
        assert all(w in child["Properties"] for w in words), (own, child["Properties"])
    finally:
        for row in json.loads(sb.ctl("list", "-o", "json", user=agent.user, system=True).stdout):
            if row.get("parent") == name:
                sb.ctl("rm", "--force", row["name"], user=agent.user, system=True)
        sb.ctl("rm", name, user=agent.user, system=True)


@pytest.mark.parametrize("agent", AGENTS, ids=[a.key for a in AGENTS])
def test_send_submits_in_every_real_cli(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes, agent: RealAgent
) -> None:
    """`hostagentctl send NAME TEXT` as a person or an agent types it: the text, then its Enter
    as a key of its own once the CLI has drawn the text, so that a CLI that reads a burst as a
    paste (Codex) submits it too."""
    sb = sandbox
    program_of(agents, agent)
    name = homes.create(agent, homes.ensure_set_up(agent))
    try:
        screen(sb, agent, name, agent.ready)
        assert wait(sb, agent, name, "idle") == "idle"
        said = f"sent {secrets.token_hex(3)}"
        sb.ctl("send", name, said, user=agent.user, system=True).check()
        screen(sb, agent, name, f"You said: {said}")
        assert wait(sb, agent, name, "idle") == "idle"
    finally:
        sb.ctl("rm", name, user=agent.user, system=True)


@pytest.mark.parametrize("agent", AGENTS, ids=[a.key for a in AGENTS])
def test_a_question_in_prose_and_the_numbered_reply_typed_under_it_read_idle(
    sandbox: Sandbox, agents: dict[str, tuple[str, str]], homes: Homes, agent: RealAgent
) -> None:
    """A numbered question the model asks in its answer is prose: the CLI waits at its prompt,
    idle; the number the user then types there ("2. the second") is the user's, not a choice
    the CLI drew, so it reads idle too (a selection cursor on a numbered option would read
    blocked)."""
    sb = sandbox
    program_of(agents, agent)
    name = homes.create(agent, homes.ensure_set_up(agent))
    try:
        screen(sb, agent, name, agent.ready)
        assert wait(sb, agent, name, "idle") == "idle"
        type_line(sb, agent, name, "ask me a question")
        screen(sb, agent, name, "No, the second")  # Aider draws the list as "2 No, …"
        until(lambda: explain(sb, agent, name)["activity"] == "idle", "the question read idle")
        keys(sb, agent, name, "2. the second")
        screen(sb, agent, name, "2. the second")
        until(lambda: explain(sb, agent, name)["activity"] == "idle", "the reply read idle")
    finally:
        sb.ctl("rm", name, user=agent.user, system=True)
