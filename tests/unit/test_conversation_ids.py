"""Hook reports, the hooks file, and discovery on disk (run as the current user on tmp files)."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from hostagent.activity import Verdict
from hostagent.daemon.follow.conversations import dblisting
from hostagent.daemon.follow.conversations.conversation import looking
from hostagent.daemon.follow.conversations.discovery import (
    database_listing,
    discover,
    discover_listed,
    listed,
    pick_listed,
    run_began,
)
from hostagent.daemon.follow.conversations.transcript import conversation_state
from hostagent.daemon.follow.hooks import formats
from hostagent.daemon.host.owner import Helpers
from hostagent.daemon.host.owners import Owners
from hostagent.identity import Owner
from hostagent.launch import Conversation
from hostagent.options import CreateRequest
from hostagent.presets import BUILTIN_DIR, IdSource, Preset, load_presets
from hostagent.presets.discovery import Discovery
from hostagent.session import Activity, SessionRecord
from tests.unit.fakes import Host, ShownWatch, me, run

ID_A = "0b9c2a3e-1111-4222-8333-444455556666"
ID_B = "7d1f0c9e-aaaa-4bbb-8ccc-ddddeeeeffff"
OWNERS = Owners(False, Helpers())  # the real helpers, run as the current user on tmp files


@pytest.mark.parametrize(
    ("data", "agent_session", "source"),
    [
        ({"session_id": ID_A, "source": "clear"}, ID_A, "clear"),
        ({"sessionId": ID_A}, ID_A, ""),
        ({"conversation_id": ID_A}, ID_A, ""),
        ({"session_id": "../../etc/passwd"}, "", ""),
        ({"session_id": "x" * 200}, "", ""),
        ({"session_id": 42, "source": 7}, "", ""),
        ({}, "", ""),
    ],
)
def test_read_report_keeps_only_well_formed_ids(
    data: dict[str, object], agent_session: str, source: str
) -> None:
    report = formats.read_report("SessionStart", data)
    assert (report.agent_session, report.source) == (agent_session, source)


def hooks_of(settings: dict[str, object]) -> dict[str, Any]:
    """The settings file's hooks table."""
    table = settings["hooks"]
    assert isinstance(table, dict)
    return table


@pytest.mark.parametrize("event", ["", "Session Start", "x;rm -rf /", "a" * 65])
def test_bad_event_names(event: str) -> None:
    assert formats.event_problem(event)


def test_claude_settings_quote_the_command(tmp_path: Path) -> None:
    settings = formats.settings("claude", ["/opt/my tools/hostagentctl", "--system", "hook"], {})
    command = hooks_of(settings)["SessionStart"][0]["hooks"][0]["command"]
    assert command == "'/opt/my tools/hostagentctl' --system hook SessionStart"
    path = tmp_path / "s.hooks.json"
    formats.write_settings(path, settings)
    assert json.loads(path.read_text()) == settings
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_write_settings_replaces_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path = tmp_path / "s.hooks.json"
    path.symlink_to(victim)
    formats.write_settings(path, {"hooks": {}})
    assert victim.read_text() == "precious" and not path.is_symlink()


def _rollout(home: Path, day: str, stamp: str, agent_id: str, cwd: str, age: float) -> Path:
    path = home / ".codex/sessions" / day / f"rollout-{stamp}-{agent_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"type": "session_meta", "payload": {"id": agent_id, "cwd": cwd}}
    path.write_text(json.dumps(meta) + "\n")
    when = time.time() - age
    os.utime(path, (when, when))
    return path


def _me(home: Path) -> Owner:
    me = Owner.from_uid(os.getuid())
    return Owner(me.uid, me.gid, me.name, str(home), me.shell, me.groups)


def test_codex_rollouts_are_found_by_cwd_newest_first(tmp_path: Path) -> None:
    rule = load_presets([BUILTIN_DIR], strict=True)["codex"].discover
    assert rule is not None
    since = int((time.time() - 100) * 1e6)
    _rollout(tmp_path, "2026/11/29", "2026-11-29T10-00-00", ID_A, "/srv/app", 50)
    _rollout(tmp_path, "2026/11/30", "2026-11-30T10-00-00", ID_B, "/srv/app", 10)
    _rollout(tmp_path, "2026/11/30", "2026-11-30T11-00-00", "1" * 8 + ID_A[8:], "/srv/other", 1)
    owner = _me(tmp_path)
    assert asyncio.run(discover(OWNERS, rule, owner, "/srv/app", since, set(), {})) == ID_B
    # Claimed by another session: the next newest one that is free.
    assert asyncio.run(discover(OWNERS, rule, owner, "/srv/app", since, {ID_B}, {})) == ID_A
    # Written before this run started: not this run's conversation.
    late = int((time.time() + 2) * 1e6)
    assert asyncio.run(discover(OWNERS, rule, owner, "/srv/app", late, set(), {})) == ""
    # A run that a reboot ended: what was written after the boot (30 s ago) is not its.
    booted = int((time.time() - 30) * 1e6)
    assert asyncio.run(discover(OWNERS, rule, owner, "/srv/app", since, set(), {}, booted)) == ID_A


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ('{"cwd": "/srv/app", "n": 1}\n{"n": 2}\n', True),  # JSON lines: the first record
        ('{\n  "task": {\n    "cwd": "/srv/app"\n  }\n}\n', True),  # pretty-printed
        ('[\n  {"cwd": "/srv/app"}\n]\n', True),  # a document that is a list
        ('{\n  "task": {\n    "cwd": "/srv/other"\n  }\n}\n', False),
        ("not json at all\n", False),
    ],
)
def test_a_files_cwd_is_found_in_any_json_layout(tmp_path: Path, text: str, found: bool) -> None:
    """Codex's JSON lines, and the pretty-printed documents of Cline and Vibe; under a
    directory the CLI's own variable names ({$VAR:-…}), as the session's environment has it."""
    field = "0.cwd" if text.startswith("[") else "task.cwd" if "task" in text else "cwd"
    rule = Discovery(
        "{$TOOL_HOME:-{home}/.tool}/tasks/*/task.json", r"tasks/([^/]+)/", cwd_field=field
    )
    where = tmp_path / "elsewhere"
    (where / "tasks" / "t-1").mkdir(parents=True)
    (where / "tasks" / "t-1" / "task.json").write_text(text)
    owner = _me(tmp_path)
    env = {"TOOL_HOME": str(where)}
    got = asyncio.run(discover(OWNERS, rule, owner, "/srv/app", 0, set(), env))
    assert got == ("t-1" if found else "")
    # Without the variable, the default under the home: nothing there.
    assert asyncio.run(discover(OWNERS, rule, owner, "/srv/app", 0, set(), {})) == ""


def test_discovery_without_cwd_field_and_nothing_there(tmp_path: Path) -> None:
    rule = Discovery("{home}/.demo-agent/sessions/*.jsonl", r"([0-9a-f-]{36})\.jsonl$")
    owner = _me(tmp_path)
    assert asyncio.run(discover(OWNERS, rule, owner, "/x", 0, set(), {})) == ""
    (tmp_path / ".demo-agent/sessions").mkdir(parents=True)
    (tmp_path / f".demo-agent/sessions/{ID_A}.jsonl").write_text("{}\n")
    assert asyncio.run(discover(OWNERS, rule, owner, "/x", 0, set(), {})) == ID_A


def test_gemini_settings_keep_the_admin_defaults_and_their_hooks() -> None:
    admin = {
        "ui": {"theme": "corporate"},
        "hooks": {"SessionStart": [{"hooks": [{"type": "command", "command": "audit"}]}]},
    }
    settings = formats.settings("gemini", ["hostagentctl", "--user", "hook"], admin)
    assert settings["ui"] == {"theme": "corporate"}
    start = hooks_of(settings)["SessionStart"]
    assert [g["hooks"][0]["command"] for g in start] == [
        "audit",
        "hostagentctl --user hook SessionStart",
    ]
    assert "AfterAgent" in hooks_of(settings)
    # Gemini's own cleanup would delete a resumed session's transcript: off, unless the
    # admin's defaults choose.
    assert settings["general"] == {"sessionRetention": {"enabled": False}}
    kept = formats.settings("gemini", ["h"], {"general": {"sessionRetention": {"maxAge": "7d"}}})
    assert kept["general"] == {"sessionRetention": {"maxAge": "7d"}}


@pytest.mark.parametrize(("fmt", "timeout"), [("claude", 10), ("gemini", 10_000), ("qwen", 10_000)])
def test_hook_timeouts_are_in_each_clis_unit(fmt: str, timeout: int) -> None:
    """Gemini and Qwen 0.15 read milliseconds: 10 there killed every hook before it ran."""
    settings = formats.settings(fmt, ["hostagentctl", "hook"], {})
    groups = hooks_of(settings)["SessionStart"]
    assert groups[0]["hooks"][0]["timeout"] == timeout


def test_qwen_hooks_use_claudes_event_names() -> None:
    settings = formats.settings("qwen", ["hostagentctl", "hook"], {})
    assert {"Notification", "PermissionRequest", "Stop"} <= set(hooks_of(settings))
    assert "BeforeAgent" not in hooks_of(settings)


LISTED = Discovery(
    command=("opencode", "session", "list"),
    id_field="id",
    cwd_field="directory",
    time_field="created",
)


FOUR = [
    {"id": "ses_old", "directory": "/p", "created": 1_500},  # seconds, too early
    {"id": "ses_a", "directory": "/p", "created": 2_000_000_000_000},
    {"id": "ses_b", "directory": "/p", "created": 2_000_000_001_000},
    {"id": "ses_c", "directory": "/elsewhere", "created": 2_000_000_002_000},
]


@pytest.mark.parametrize(
    ("listing", "claimed", "until", "found"),
    [
        ([{"id": "ses_a", "directory": "/p", "created": 2_000_000_000_000}], set(), 0, "ses_a"),
        (FOUR, set(), 0, "ses_b"),
        # A run that a reboot ended: ses_b came after the boot, so it is not this run's.
        (FOUR, set(), 2_000_000_000.5, "ses_a"),
        (FOUR, set(), 1_999_999_999.5, ""),
        ([{"id": "ses_a", "directory": "/p", "created": 2_000_000_000_000}], {"ses_a"}, 0, ""),
        ([{"id": 7, "directory": "/p", "created": True}, "junk"], set(), 0, ""),
    ],
)
def test_a_listed_conversation_is_the_newest_of_the_cwd(
    listing: list[object], claimed: set[str], until: float, found: str
) -> None:
    assert pick_listed(listing, LISTED, "/p", 1_999_999_999.0, claimed, until) == found


@pytest.mark.parametrize(
    ("out", "list_field", "items"),
    [
        ('[{"id": "a"}, {"id": "b"}]', "", [{"id": "a"}, {"id": "b"}]),
        ('{"id": "a"}\n\n{"id": "b"}\n', "", [{"id": "a"}, {"id": "b"}]),  # JSON lines
        ('{"sessions": {"recent": [{"id": "a"}]}}', "sessions.recent", [{"id": "a"}]),
        ('{"id": "a"}', "", []),  # one object, and no list_field: nothing listed
        ('[{"id": "a"}]', "sessions", []),
        ("ID  TITLE\nses_a  hello\n", "", []),  # a table
        ("", "", []),
    ],
)
def test_a_listing_prints_a_list_json_lines_or_an_object_holding_the_list(
    out: str, list_field: str, items: list[object]
) -> None:
    assert listed(out, list_field) == items


# Cline's and Continue's ways: nested fields, ISO times (with and without a zone).
NESTED = Discovery(
    command=("x",), id_field="meta.id", cwd_field="meta.workspace.0", time_field="meta.created_at"
)


@pytest.mark.parametrize(
    ("created", "found"),
    [
        ("2033-05-18T03:33:21Z", "t_1"),  # 2 000 000 001 s
        ("2033-05-18T03:33:21.500+00:00", "t_1"),
        ("2033-05-18T05:33:21+02:00", "t_1"),
        ("2033-05-18T03:33:19Z", ""),  # before the run began
        ("yesterday", ""),
        (None, ""),
    ],
)
def test_listed_fields_are_paths_and_times_may_be_iso(created: object, found: str) -> None:
    item = {"meta": {"id": "t_1", "workspace": ["/p", "/q"], "created_at": created}}
    assert pick_listed([item], NESTED, "/p", 2_000_000_000.0, set()) == found


def _transcript(home: Path, rel: str, text: str) -> None:
    path = home / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize(
    ("preset", "files", "state"),
    [
        # Claude filed it under a project name we could not have computed (a symlinked cwd).
        ("claude", {f".claude/projects/-real-path/{ID_A}.jsonl": "{}"}, Conversation.RESUMABLE),
        ("claude", {}, Conversation.ABSENT),
        # Gemini writes the file at start; only an answer makes it resumable.
        ("gemini", {"g": '{"type":"user"}'}, Conversation.UNUSABLE),
        ("gemini", {"g": '{"type":"user"}\n{"type":"gemini"}'}, Conversation.RESUMABLE),
        ("qwen", {f".qwen/projects/-x/chats/{ID_A}.runtime.json": "{}"}, Conversation.ABSENT),
        ("copilot", {}, Conversation.UNKNOWN),
    ],
)
def test_the_conversation_state_is_read_as_the_owner(
    tmp_path: Path, preset: str, files: dict[str, str], state: Conversation
) -> None:
    for rel, text in files.items():
        if rel == "g":
            rel = f".gemini/tmp/proj/chats/session-2026-12-01T13-29-{ID_A[:8]}.jsonl"
        _transcript(tmp_path, rel, text)
    p = load_presets([BUILTIN_DIR], strict=True)[preset]
    got = asyncio.run(conversation_state(OWNERS, p, _me(tmp_path), "/x", {}, "prog", ID_A))
    assert got is state


def test_claude_config_dir_is_where_the_transcript_is_looked_for(tmp_path: Path) -> None:
    _transcript(tmp_path, f"elsewhere/projects/p/{ID_A}.jsonl", "{}")
    p = load_presets([BUILTIN_DIR], strict=True)["claude"]
    env = {"CLAUDE_CONFIG_DIR": str(tmp_path / "elsewhere")}
    got = asyncio.run(conversation_state(OWNERS, p, _me(tmp_path), "/x", env, "claude", ID_A))
    assert got is Conversation.RESUMABLE


S = 1_000_000  # a second, in µs


@pytest.mark.parametrize(
    ("started_at", "started_boottime", "now", "boot_now", "began"),
    [
        pytest.param(1000 * S, 50 * S, 1100 * S, 150 * S, 1000 * S, id="steady-clock"),
        # Stepped back by an hour 100 s after the start: files written since are older than
        # the stamp; the start moves back with the clock.
        pytest.param(5000 * S, 50 * S, 1500 * S, 150 * S, 1400 * S, id="stepped-back"),
        pytest.param(1000 * S, 50 * S, 9000 * S, 150 * S, 1000 * S, id="stepped-forward"),
        pytest.param(1000 * S, 0, 500 * S, 150 * S, 1000 * S, id="older-record"),
        pytest.param(1000 * S, 900 * S, 500 * S, 150 * S, 1000 * S, id="another-boot"),
    ],
)
def test_when_a_run_began_on_the_clock_as_it_reads_now(
    started_at: int, started_boottime: int, now: int, boot_now: int, began: int
) -> None:
    assert run_began(started_at, started_boottime, now, boot_now) == began


def test_a_conversation_whose_time_was_set_back_is_still_this_runs(tmp_path: Path) -> None:
    """Its modification time set back an hour after the start (a clock step, a tool that keeps
    times): its inode's change time, which only the kernel's clock sets, still dates it."""
    rule = load_presets([BUILTIN_DIR], strict=True)["codex"].discover
    assert rule is not None
    started_at = int((time.time() - 30) * 1e6)
    path = _rollout(tmp_path, "2026/11/30", "2026-11-30T10-00-00", ID_B, "/srv/app", 3600)
    assert path.stat().st_mtime < started_at / 1e6 - 3000
    found = discover(OWNERS, rule, _me(tmp_path), "/srv/app", started_at, set(), {})
    assert asyncio.run(found) == ID_B


FOUND = Preset(
    name="found",
    command=["agent"],
    id_source=IdSource.DISCOVERED,
    discover=Discovery(glob="{home}/*.jsonl", id_pattern="(.*)"),
)


async def _found_session(tmp_path: Path) -> tuple[Host, Any, ShownWatch]:
    """A running session of FOUND (an id discovered on disk) whose screen the test says."""
    host = await Host.started(tmp_path)
    host.core.settings.presets["found"] = FOUND
    await host.create(me(), "a", "found", str(tmp_path), CreateRequest())
    session = host.registry.get("a")
    shown = ShownWatch()
    session.watch = shown
    return host, session, shown


@pytest.mark.parametrize(
    ("activities", "looks"),
    [
        pytest.param(["idle"], 1, id="first-prompt"),
        pytest.param(["working", "idle"], 1, id="turn-ended"),
        pytest.param(["idle", "working", "idle"], 2, id="found-nothing-then-a-turn"),
        pytest.param(["working", "blocked", "working"], 0, id="never-idle"),
        pytest.param(["idle", "idle"], 1, id="still-idle"),
    ],
)
def test_a_discovered_id_is_looked_for_each_time_the_session_goes_idle(
    tmp_path: Path, activities: list[str], looks: int
) -> None:
    """Codex and OpenCode write their id at the first turn: it is looked for while the session
    runs, once each time it goes idle without an id, and never once it has one."""

    async def body() -> None:
        host, session, shown = await _found_session(tmp_path)
        asked: list[int] = []
        found = [b""]  # what the discovery helper prints: nothing, then an id

        def discovery(argv: list[str]) -> tuple[int, bytes, bytes]:
            asked.append(1)
            return 0, found[0], b""

        host.owners.answers["*.jsonl"] = discovery  # FOUND's glob
        for name in activities:
            shown.verdict = Verdict(Activity(name), "screen", "test", "")
            host.registry.announce(session)
            await host.core.background.settle()
        assert len(asked) == looks
        if looks:  # once found, an idle looks no more
            found[0] = ID_A.encode() + b"\n"
            for name in ("working", "idle", "working", "idle"):
                shown.verdict = Verdict(Activity(name), "screen", "test", "")
                host.registry.announce(session)
                await host.core.background.settle()
            assert len(asked) == looks + 1
            assert session.record.agent_session == ID_A
            assert session.record.agent_session_source == "discovered"

    run(body())


def test_a_turn_too_quick_to_be_seen_working_still_teaches_its_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Idle before the line and idle after it (the answer came between two looks at the
    screen): the line sent through the daemon is what says a turn happened, and the id is
    looked for a moment after it, as the usage is read."""
    from hostagent.daemon.follow import usage as following

    monkeypatch.setattr(following, "FOLLOW_UPS", (0.02, 30.0))

    async def body() -> None:
        host, session, shown = await _found_session(tmp_path)
        answers = [b"", ID_A.encode() + b"\n"]  # nothing at the first prompt; then the id

        def discovery(argv: list[str]) -> tuple[int, bytes, bytes]:
            return 0, answers.pop(0) if answers else b"", b""

        host.owners.answers["*.jsonl"] = discovery
        shown.verdict = Verdict(Activity.IDLE, "screen", "test", "")
        host.registry.announce(session)
        await host.core.background.settle()
        assert not session.record.agent_session and len(answers) == 1
        await host.core.terminal.send_text(session, "quick one", True)
        deadline = time.monotonic() + 5
        while not session.record.agent_session and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # the follow-up timer fires, then its look settles
            await host.core.background.settle()
        assert session.record.agent_session == ID_A
        host.core.usage.close()
        await host.settle()

    run(body())


def _hermes_db(path: Path, rows: list[tuple[str, str, float]]) -> None:
    import sqlite3

    db = sqlite3.connect(path)
    db.execute("create table sessions (id text primary key, cwd text, started_at real, x text)")
    db.executemany("insert into sessions (id, cwd, started_at) values (?, ?, ?)", rows)
    db.commit()
    db.close()


def test_a_clis_database_table_is_read_as_its_listing(tmp_path: Path) -> None:
    """Hermes prints no JSON listing: its sessions table is read, as the owner, under the
    directory its own variable names (HERMES_HOME)."""
    rule = load_presets([BUILTIN_DIR], strict=True)["hermes"].discover
    assert rule is not None and rule.database
    home = tmp_path / "hermes-home"
    home.mkdir()
    now, cwd = time.time(), str(tmp_path)  # the listing runs in the session's cwd
    _hermes_db(
        home / "state.db",
        [
            ("20261206_000131_d3837f", cwd, now - 50),
            ("20261206_000334_17fb02", cwd, now - 10),
            ("20261206_000400_aaaaaa", "/other", now - 5),
        ],
    )
    owner, env = _me(tmp_path), {"HERMES_HOME": str(home)}
    since = int((now - 60) * 1e6)

    def found(since: int, claimed: set[str], env: dict[str, str]) -> str:
        command = database_listing(rule, owner.home, cwd, env)
        return asyncio.run(discover_listed(OWNERS, rule, owner, cwd, since, claimed, env, command))

    assert found(since, set(), env) == "20261206_000334_17fb02"  # the newest of the cwd
    assert found(since, {"20261206_000334_17fb02"}, env) == "20261206_000131_d3837f"
    assert found(int((now - 20) * 1e6), {"20261206_000334_17fb02"}, env) == ""
    assert found(since, set(), {}) == ""  # no database under the home's default


@pytest.mark.parametrize(
    "argv", [["sessions; drop table x", "id", "cwd", "t"], ["s", "id", "c-1", "t"]]
)
def test_a_database_listing_puts_no_odd_name_into_sql(tmp_path: Path, argv: list[str]) -> None:
    _hermes_db(tmp_path / "state.db", [("a", "/p", 1.0)])
    assert dblisting.rows([str(tmp_path / "state.db"), *argv]) == []
    assert dblisting.rows([str(tmp_path / "absent.db"), "sessions", "id", "cwd", "x"]) == []


@pytest.mark.parametrize(
    ("agent_session", "source", "looked_for"),
    [
        ("", "", True),  # none yet
        (ID_A, "discovered", False),
        (ID_A, "assigned", False),
        (ID_A, "forked", True),  # the copy a resume went on in has an id of its own
        ("", "forked", True),
    ],
)
def test_a_conversation_is_looked_for_while_none_or_only_the_one_forked_from_is_known(
    agent_session: str, source: str, looked_for: bool
) -> None:
    record = SessionRecord(name="s", agent_session=agent_session, agent_session_source=source)
    assert looking(record) is looked_for
