"""The agent profile (hostagent/profile.py, daemon/ops/confining.py): the words an agent's
session starts from, what asking for less is, and who may ask for it. Shown on the real
systemd by tests/integration/test_profile.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from hostagent import profile, sandbox
from hostagent.config import Config
from hostagent.daemon.ops.confining import asked_less, prepare, profile_words, told, wide_cwd
from hostagent.errors import AccessDenied, InvalidArgs
from hostagent.identity import Owner
from hostagent.options import CreateRequest, Maker
from hostagent.presets import Preset
from hostagent.profile import AgentProfile
from tests.unit.fakes import Host, me

REPO = Path(__file__).resolve().parents[2]
ALICE = Owner(1001, 1001, "alice", "/home/alice", "/bin/sh", ())
CODEX = Preset(name="codex", state=["{$CODEX_HOME:-{home}/.codex}/"])
CLAUDE = Preset(name="claude", state=["{$CLAUDE_CONFIG_DIR:-{home}/.claude}/"])
AGY = Preset(name="agy", state=["{home}/.gemini/antigravity-cli/"])
GEMINI = Preset(name="gemini", state=["{home}/.gemini/"])
SHELL = Preset(name="shell", confined=False)
ALL = [CODEX, CLAUDE, AGY, GEMINI, SHELL]


def test_the_built_in_profile_is_the_one_the_example_config_shows() -> None:
    text = (REPO / "units/hostagent.yaml").read_text()
    block = text[text.index("#sandbox:") :].split("\n\n")[0]
    example = yaml.safe_load("\n".join(line[1:] for line in block.splitlines()))
    agents = example["sandbox"]["agents"]
    assert agents["words"] == list(profile.WORDS)
    assert agents["caches"] == list(profile.CACHES)
    assert (agents["loosen"], agents["relocate"]) == (True, True)


def test_an_agent_starts_from_the_profile_its_caches_writable_other_clis_hidden() -> None:
    words = profile_words(AgentProfile(), CODEX, ALL, ALICE, CreateRequest())
    assert words[: len(profile.WORDS)] == list(profile.WORDS)
    box = sandbox.read(words)
    assert (box.protect_system, box.protect_home, box.private_tmp) == ("strict", "read-only", True)
    assert box.no_new_privileges and {"%{cwd}", "-%{gitdir}", "-%h/.cache", "-%h/.npm"} <= set(
        box.read_write
    )
    assert {"-%h/.ssh", "-%h/.aws", "-%h/.claude", "-%h/.gemini"} <= set(box.inaccessible)
    assert "-%h/.codex" not in box.inaccessible  # its own state


@pytest.mark.parametrize(
    ("preset", "hidden", "kept"),
    [
        (AGY, ["-%h/.claude", "-%h/.codex"], ["-%h/.gemini", "-%h/.gemini/antigravity-cli"]),
        (GEMINI, ["-%h/.claude"], ["-%h/.gemini/antigravity-cli"]),
    ],
    ids=["inside another's", "holding another's"],
)
def test_another_clis_state_that_holds_or_lies_in_its_own_is_not_hidden(
    preset: Preset, hidden: list[str], kept: list[str]
) -> None:
    box = sandbox.read(profile_words(AgentProfile(), preset, ALL, ALICE, CreateRequest()))
    assert set(hidden) <= set(box.inaccessible)
    assert not set(kept) & set(box.inaccessible)


def test_a_preset_env_but_never_a_creators_chooses_the_state_hidden() -> None:
    assert profile.state_word("{$CODEX_HOME:-{home}/.codex}/", {}) == "%h/.codex"
    assert profile.state_word("{$CODEX_HOME:-{home}/.codex}/", {"CODEX_HOME": "/x"}) == "/x"
    # Only paths in the home are hidden: a preset's env pointing elsewhere hides nothing.
    assert profile.others_state([], ["/x", "%h/.codex"]) == ["%h/.codex"]


@pytest.mark.parametrize(
    ("preset", "agents", "user", "expected"),
    [
        (SHELL, AgentProfile(), "alice", []),
        (CODEX, AgentProfile(users={"alice": []}), "alice", []),
        (CODEX, AgentProfile(users={"bob": []}), "alice", None),
        (CODEX, AgentProfile(words=["ProtectSystem=full"], caches=[]), "alice", None),
    ],
    ids=["a person's shell", "emptied for her", "emptied for another", "the admin's words"],
)
def test_who_gets_which_words(
    preset: Preset, agents: AgentProfile, user: str, expected: list[str] | None
) -> None:
    words = profile_words(agents, preset, [preset], ALICE, CreateRequest())
    if expected is not None:
        assert words == expected
    else:
        assert words[: len(agents.words)] == agents.words and words


LESS = [
    (["ProtectHome=no"], ["ProtectHome=no"]),
    (["ReadWritePaths=%h/x"], ["ReadWritePaths=%h/x"]),
    (["InaccessiblePaths="], ["InaccessiblePaths="]),
    (["ProtectHome=tmpfs", "MemoryMax=1G"], []),
    (["InaccessiblePaths=-%h/secret", "ProtectSystem=strict"], []),
    (
        list(profile.UNCONFINED),
        [
            "ProtectSystem=no",
            "ProtectHome=no",
            "PrivateTmp=no",
            "NoNewPrivileges=no",
            "ReadWritePaths=",
            "InaccessiblePaths=",
        ],
    ),
]


@pytest.mark.parametrize(("asked", "less"), LESS)
def test_the_words_that_ask_for_less_are_named_each_read_after_the_profile(
    asked: list[str], less: list[str]
) -> None:
    # An emptied ReadWritePaths= takes writing away, and ReadOnlyPaths= adds none: neither
    # is less; the profile's ReadWritePaths= emptied is counted only where it was not.
    expected = [w for w in less if w != "ReadWritePaths="]
    assert profile.loosening(list(profile.WORDS), asked) == expected


def test_asking_for_less_is_said_refused_by_policy_and_never_from_inside() -> None:
    words = list(profile.WORDS)
    req = CreateRequest(properties=["ProtectHome=no"])
    assert asked_less(AgentProfile(), words, req, "s") == ["ProtectHome=no"]
    with pytest.raises(AccessDenied, match=r"sandbox\.agents\.loosen"):
        asked_less(AgentProfile(loosen=False), words, req, "s")
    inside = CreateRequest(
        properties=["ProtectHome=no"],
        asked=["ProtectHome=no"],
        maker=Maker("planner", "/home/alice/p", "", [], []),
    )
    with pytest.raises(AccessDenied, match="from inside session 'planner'"):
        asked_less(AgentProfile(), words, inside, "s")
    # A maker's own words are not the child's asking: only what the caller asked counts.
    inherited = CreateRequest(properties=["ProtectHome=no"], asked=[], maker=inside.maker)
    assert asked_less(AgentProfile(), words, inherited, "s") == []


def test_a_child_of_a_confined_maker_has_the_profile_pinned_to_the_makers_tree() -> None:
    maker = Maker("planner", "/home/alice/p", "", ["ReadWritePaths=/home/alice/p"], [])
    words = profile_words(AgentProfile(), CODEX, [CODEX], ALICE, CreateRequest(maker=maker))
    assert "ReadWritePaths=/home/alice/p -/home/alice/p/.git" in words
    free = Maker("shell", "/home/alice", "", [], [])
    words = profile_words(AgentProfile(), CODEX, [CODEX], ALICE, CreateRequest(maker=free))
    assert "ReadWritePaths=%{cwd} -%{gitdir}" in words


# On the daemon's core: words a sandbox in a test's temporary directory can be made with.
FAKE_PROFILE = AgentProfile(words=["NoNewPrivileges=yes", "ProtectSystem=full"], caches=[])


def test_a_create_records_the_profile_and_a_changed_one_applies_to_new_sessions(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        config = Config()
        config.sandbox.agents = FAKE_PROFILE
        host = await Host.started(tmp_path, config, profile=True)
        first = await host.create(me(), "a", "assigned", str(tmp_path), CreateRequest())
        assert first.record.profile == "agent" and first.record.loosened == []
        assert first.record.properties == FAKE_PROFILE.words
        config.sandbox.agents = AgentProfile(words=["ProtectSystem=strict"], caches=[])
        second = await host.create(me(), "b", "assigned", str(tmp_path), CreateRequest())
        assert second.record.properties == ["ProtectSystem=strict"]
        assert host.registry.sessions["a"].record.properties == FAKE_PROFILE.words
        less = CreateRequest(properties=list(profile.UNCONFINED))
        third = await host.create(me(), "c", "assigned", str(tmp_path), less)
        assert third.record.loosened == ["ProtectSystem=no"]
        assert not sandbox.read(third.record.properties).confined

    asyncio.run(body())


def test_another_clis_state_the_create_names_writable_is_not_hidden() -> None:
    req = CreateRequest(properties=["ReadWritePaths=-%h/.codex"])
    box = sandbox.read(profile_words(AgentProfile(), CLAUDE, ALL, ALICE, req))
    assert "-%h/.codex" not in box.inaccessible and "-%h/.gemini" in box.inaccessible


class RunsHere:
    """An OwnerPort's run, as the test's own user (whose home the test made)."""

    def __init__(self) -> None:
        self.ran: list[list[str]] = []

    async def run(
        self, owner: Owner, argv: list[str], timeout: float = 10.0
    ) -> tuple[int, bytes, bytes]:
        self.ran.append(argv)
        done = subprocess.run(argv, capture_output=True, check=False)
        return done.returncode, done.stdout, done.stderr


RELOCATING = Preset(
    name="claude",
    command=["hostagent-test-no-such-program"],
    state=["{$CLAUDE_CONFIG_DIR:-{home}/.claude}/"],
    relocate=[("{home}/.claude.json", "{$CLAUDE_CONFIG_DIR:-{home}/.claude}/.config.json")],
)


def test_a_clis_file_is_moved_once_as_the_owner_and_the_caches_made(tmp_path: Path) -> None:
    owner = Owner(os.getuid(), os.getgid(), "me", str(tmp_path), "/bin/sh", ())
    (tmp_path / ".claude.json").write_text('{"theme": "dark"}')
    agents = AgentProfile(caches=["%h/.npm", "%h/.cargo/registry"])
    words, notes = told(agents, RELOCATING, [RELOCATING], owner)
    assert notes == [
        "~/.claude.json is moved into ~/.claude/.config.json at your first confined claude "
        "session, with every claude of yours quit"
    ]
    port = RunsHere()
    asyncio.run(prepare("s", words, RELOCATING, owner, agents, port))  # type: ignore[arg-type]
    assert (tmp_path / ".claude/.config.json").read_text() == '{"theme": "dark"}'
    assert not (tmp_path / ".claude.json").exists()
    assert (tmp_path / ".npm").is_dir() and (tmp_path / ".cargo/registry").is_dir()
    assert told(agents, RELOCATING, [RELOCATING], owner)[1] == []  # nothing left to move
    # Made once: a second create runs nothing as the owner.
    port.ran.clear()
    asyncio.run(prepare("t", words, RELOCATING, owner, agents, port))  # type: ignore[arg-type]
    assert port.ran == []


def test_a_file_not_moved_names_the_one_command_to_run(tmp_path: Path) -> None:
    owner = Owner(os.getuid(), os.getgid(), "me", str(tmp_path), "/bin/sh", ())
    (tmp_path / ".claude.json").write_text("{}")
    agents = AgentProfile(caches=[], relocate=False)
    words = list(profile.WORDS)
    with pytest.raises(InvalidArgs, match=r"run 'mv ~/\.claude\.json ~/\.claude/\.config\.json'"):
        asyncio.run(prepare("s", words, RELOCATING, owner, agents, RunsHere()))  # type: ignore[arg-type]
    assert (tmp_path / ".claude.json").exists()
    # Where the home is left writable, Claude saves the file where it is: nothing to move.
    open_home = ["ProtectHome=no", "ProtectSystem=strict"]
    asyncio.run(prepare("s", open_home, RELOCATING, owner, agents, RunsHere()))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cwd", "words", "refused"),
    [
        ("/home/alice/proj", list(profile.WORDS), False),
        ("/home/alice", list(profile.WORDS), True),
        ("/home/alice/", list(profile.WORDS), True),
        ("/home", list(profile.WORDS), True),
        ("/", list(profile.WORDS), True),
        ("/home/alicia", list(profile.WORDS), False),  # a neighbour's name is not her home
        ("/home/alice", [*profile.WORDS, "ProtectHome=no"], False),  # her home is hers anyway
        ("/home/alice", [*profile.WORDS, "ReadWritePaths="], False),  # nothing writable
    ],
)
def test_an_agents_tree_may_not_hold_its_owners_whole_home(
    cwd: str, words: list[str], refused: bool
) -> None:
    assert bool(wide_cwd(words, cwd, ALICE)) == refused


def test_a_session_made_before_the_profile_keeps_what_it_had_across_a_restart_and_resume(
    tmp_path: Path,
) -> None:
    """The upgrade: a session an older hostagent made (no profile, no words) is not given the
    profile by a daemon that has one, at its adoption, its stop and its resume."""

    async def body() -> None:
        old = await Host.started(tmp_path, Config())  # no profile: as before the upgrade
        made = await old.create(me(), "old", "assigned", str(tmp_path), CreateRequest())
        assert made.record.properties == [] and made.record.profile == ""
        new = old.restart()
        new.config.sandbox.agents = FAKE_PROFILE  # the upgraded daemon has the profile
        await new.core.recover()
        session = new.registry.get("old")
        await new.lifecycle.stop(session)
        await new.lifecycle.resume(session)
        assert session.record.properties == [] and session.record.profile == ""
        fresh = await new.create(me(), "fresh", "assigned", str(tmp_path), CreateRequest())
        assert fresh.record.properties == FAKE_PROFILE.words

    asyncio.run(body())
