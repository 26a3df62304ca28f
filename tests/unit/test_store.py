from __future__ import annotations

import asyncio
import dataclasses
import errno
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from hostagent.daemon.state.store import SidecarStore
from hostagent.session import DormantReason, Limits, SessionRecord, State


@pytest.fixture
def store(tmp_path: Path) -> SidecarStore:
    s = SidecarStore(tmp_path / "state")
    s.prepare()
    return s


def test_round_trip_and_modes(store: SidecarStore) -> None:
    rec = SessionRecord(
        name="a1",
        uuid="u",
        owner=1000,
        argv=["x", "ü"],
        env={"K": "v"},
        state=State.DORMANT,
        dormant_reason=DormantReason.REBOOT,
    )
    store.save(rec)
    assert store.load_all() == [rec]
    assert os.stat(store.path_of("a1")).st_mode & 0o777 == 0o600
    assert os.stat(store.directory).st_mode & 0o777 == 0o700
    assert not [p for p in store.sessions_dir.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize(
    "content",
    [
        pytest.param(b"name: [unclosed\n", id="syntax"),
        pytest.param(b"\xff\xfe", id="not-utf8"),
        pytest.param(b"- a list\n", id="not-a-mapping"),
        pytest.param(b"schema_version: 99\nname: bad\n", id="future-schema"),
        pytest.param(b"schema_version: 1\nname: other\n", id="name-mismatch"),
        pytest.param(b"schema_version: 1\nname: bad\nstate: exploded\n", id="bad-state"),
        pytest.param(b"schema_version: 1\nname: bad\nargv: 5\n", id="bad-type"),
    ],
)
def test_bad_records_are_quarantined_and_others_load(
    store: SidecarStore, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    store.save(SessionRecord(name="good"))
    store.path_of("bad").write_bytes(content)
    assert [r.name for r in store.load_all()] == ["good"]
    assert [p.name.split(".yaml")[0] for p in store.corrupt_dir.iterdir()] == ["bad"]
    assert "bad.yaml is unusable" in caplog.text


def test_unreadable_record_is_quarantined(store: SidecarStore) -> None:
    store.path_of("sym").symlink_to("/etc/passwd")  # O_NOFOLLOW refuses it
    assert store.load_all() == []
    assert len(list(store.corrupt_dir.iterdir())) == 1


def test_interrupted_write_leaves_the_old_record(store: SidecarStore) -> None:
    store.save(SessionRecord(name="a"))
    (store.sessions_dir / ".a.yaml.tmp").write_text("half")
    assert [r.name for r in store.load_all()] == ["a"]
    assert not (store.sessions_dir / ".a.yaml.tmp").exists()


@given(
    st.lists(st.text(), max_size=5),
    st.dictionaries(st.from_regex(r"[A-Z_]{1,5}", fullmatch=True), st.text(), max_size=4),
)
def test_any_argv_and_env_round_trip(
    tmp_path_factory: pytest.TempPathFactory, argv: list[str], env: dict[str, str]
) -> None:
    s = SidecarStore(tmp_path_factory.mktemp("s"))
    s.prepare()
    rec = SessionRecord(name="x", argv=argv, env=env)
    s.save(rec)
    assert yaml.safe_load(s.path_of("x").read_text())["argv"] == argv
    assert s.load_all() == [rec]


@pytest.mark.parametrize(
    "text", ["\x7f", "a\x85b", "\u2028\u2029", "\ufeff", "\x00\x1b[1m", "😀 ❯ é", "\t\r\n", '"\\']
)
def test_text_yaml_would_misread_is_written_so_both_loaders_read_it_back(
    tmp_path: Path, text: str
) -> None:
    """Records are written as JSON, which YAML reads, once what YAML takes as a line break or
    refuses raw is escaped."""
    s = SidecarStore(tmp_path)
    s.prepare()
    rec = SessionRecord(name="x", cwd=f"/tmp/{text}", argv=[text], env={"A": text})
    s.save(rec)
    loaded = yaml.safe_load(s.path_of("x").read_text())  # PyYAML's own, strictest reader
    assert (loaded["cwd"], loaded["argv"], loaded["env"]) == (rec.cwd, [text], {"A": text})
    assert s.load_all() == [rec]


def test_a_record_in_yaml_is_read_as_one_in_json(tmp_path: Path) -> None:
    """The store reads its own JSON with json, and a record in YAML's block style (written by
    hand, or by a hostagent from before JSON) with the YAML loader: the same record."""
    s = SidecarStore(tmp_path)
    s.prepare()
    rec = SessionRecord(name="x", state=State.STOPPED, argv=["a b", "ü"], env={"A": "1"})
    s.save(rec)
    data = yaml.safe_load(s.path_of("x").read_text())
    s.path_of("x").write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    assert not s.path_of("x").read_text().startswith("{")
    assert s.load_all() == [rec] and s.quarantined == []


def test_a_stop_does_not_wait_long_for_a_busy_disk(
    store: SidecarStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flush(timeout) gives up waiting when fsync is stuck (the thread carries on alone); the
    record itself is already written."""
    disk = threading.Event()
    syncs = store._syncs
    monkeypatch.setattr(syncs, "_sync", lambda paths: disk.wait())
    syncs._syncer = type(syncs._syncer)(syncs._sync)

    async def scenario() -> None:
        store.save(SessionRecord(name="a", state=State.RUNNING))  # its fsync is left queued
        assert store.flush(timeout=0.05) is False
        assert [r.name for r in store.load_all()] == ["a"]
        disk.set()
        assert store.flush(timeout=10) is True

    asyncio.run(scenario())


def test_a_record_cut_short_anywhere_is_refused() -> None:
    """A torn write that still parses as YAML must never load with defaults: the checksum
    that closes every record is gone or wrong."""
    from hostagent.daemon.state.recordfile import RecordError, record_from_dict, record_to_dict

    rec = SessionRecord(name="a1", uuid="u", owner=1000, preset="shell", cwd="/h", unit="x")
    text = yaml.safe_dump(record_to_dict(rec), sort_keys=False)
    assert record_from_dict(yaml.safe_load(text), "a1") == rec
    accepted = []
    for cut in range(len(text.rstrip("\n"))):
        try:
            data = yaml.safe_load(text[:cut])
        except yaml.YAMLError:
            continue
        try:
            record_from_dict(data, "a1")
        except RecordError:
            continue
        accepted.append(cut)
    assert accepted == []


def test_a_version_1_record_loads_when_whole_and_is_refused_when_cut(
    store: SidecarStore,
) -> None:
    """Records written before checksums (schema 1) still load, unless a field is missing."""
    from hostagent.daemon.state.recordfile import record_to_dict

    whole = record_to_dict(SessionRecord(name="old", uuid="u", unit="hostagent-old.scope"))
    del whole["checksum"]
    whole["schema_version"] = 1
    store.path_of("old").write_text(yaml.safe_dump(whole))
    torn = {k: v for k, v in whole.items() if k not in ("unit", "boot_id", "created_at")}
    torn["name"] = "torn"
    store.path_of("torn").write_text(yaml.safe_dump(torn))
    assert [r.name for r in store.load_all()] == ["old"]
    assert store.quarantined == ["torn"]


def test_a_write_that_fails_leaves_the_old_record_and_no_temp_file(
    store: SidecarStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.save(SessionRecord(name="a1", state=State.RUNNING))

    def full(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", full)
    with pytest.raises(OSError):
        store.save(SessionRecord(name="a1", state=State.STOPPED))
    monkeypatch.undo()
    assert [p.name for p in store.sessions_dir.iterdir()] == ["a1.yaml"]
    assert [r.state for r in store.load_all()] == [State.RUNNING]


@pytest.mark.parametrize(
    ("error", "said"),
    [
        (errno.ENOSPC, "free space in"),
        (errno.EDQUOT, "free space in"),
        (errno.EROFS, "read-only file system; remount it read-write"),
        (errno.EACCES, "may not write in"),
        (errno.ENOENT, "is gone; restart hostagent"),
    ],
)
def test_what_to_do_about_a_record_that_cannot_be_written(
    tmp_path: Path, error: int, said: str
) -> None:
    """A read-only disk is not reported as a full one."""
    assert said in SidecarStore(tmp_path).remedy(error)


# ---- the second copy on tmpfs -----------------------------------------------------------


def copied_store(tmp_path: Path) -> SidecarStore:
    s = SidecarStore(tmp_path / "state", tmp_path / "run" / "records")
    s.prepare()
    return s


def identity(**changes: Any) -> SessionRecord:
    """A live session's identity: what a shell adopted from the scope alone would lack."""
    rec = SessionRecord(
        name="claude1",
        uuid="u1",
        owner=1000,
        preset="claude",
        cwd="/srv/x",
        argv=["claude", "--session-id", "c0ffee"],
        agent_session="c0ffee",
        hook_token="t0k3n",
        limits=Limits(memory_max=300 << 20),
        worktree="/w/claude1",
        state=State.RUNNING,
        unit="hostagent-claude1.scope",
        boot_id="b",
        created_at=1,
    )
    return dataclasses.replace(rec, **changes)


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink()
    make(path)


# Each way a record can be damaged on disk, as the chaos tests damage it.
DAMAGE: dict[str, Callable[[Path], object]] = {
    "empty": lambda path: path.write_bytes(b""),
    "cut-short": lambda path: path.write_bytes(path.read_bytes()[:40]),
    "garbage": lambda path: path.write_bytes(b"\x00\xffgarbage: [\n"),
    "wrong-name": lambda path: path.write_text(path.read_text().replace("claude1", "other")),
    "directory": lambda path: _replace(path, Path.mkdir),
    "fifo": lambda path: _replace(path, os.mkfifo),
    "symlink": lambda path: _replace(path, lambda p: p.symlink_to("/etc/passwd")),
    "missing": Path.unlink,
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_damaged_or_missing_record_is_taken_from_its_copy(
    tmp_path: Path, damage: Callable[[Path], object], caplog: pytest.LogCaptureFixture
) -> None:
    store = copied_store(tmp_path)
    rec = identity()
    store.save(rec)
    store.save(SessionRecord(name="other", uuid="u2"))
    damage(store.path_of("claude1"))
    again = copied_store(tmp_path)
    assert {r.name: r for r in again.load_all()}["claude1"] == rec
    assert again.restored == ["claude1"] and again.quarantined == []
    assert "restored from its copy" in caplog.text
    # Written back: the next start needs no copy.
    assert copied_store(tmp_path).load_all() and store.path_of("claude1").is_file()


def test_the_newer_of_a_record_and_its_copy_wins_whatever_the_clock(tmp_path: Path) -> None:
    store = copied_store(tmp_path)
    store.save(identity(agent_session=""))
    old = store.path_of("claude1").read_bytes()
    store.save(identity())  # the conversation id, learned later
    store.path_of("claude1").write_bytes(old)  # a backup put back over it
    os.utime(store.path_of("claude1"), (2e9, 2e9))  # and it looks newer
    again = copied_store(tmp_path)
    assert again.load_all()[0].agent_session == "c0ffee"
    assert again.restored == ["claude1"]
    # Same revision both sides: the record is taken, nothing is restored.
    third = copied_store(tmp_path)
    assert third.load_all()[0].agent_session == "c0ffee" and third.restored == []


def test_a_removed_session_does_not_come_back_from_its_copy(tmp_path: Path) -> None:
    store = copied_store(tmp_path)
    store.save(identity())
    store.delete("claude1")
    assert copied_store(tmp_path).load_all() == []
    assert not list((tmp_path / "run" / "records").iterdir())


def test_a_lost_record_without_a_copy_is_quarantined_and_records_get_copies(
    tmp_path: Path,
) -> None:
    plain = SidecarStore(tmp_path / "state")  # as an older hostagent wrote them
    plain.prepare()
    plain.save(identity())
    plain.save(SessionRecord(name="bad", uuid="u"))
    plain.path_of("bad").write_bytes(b"")
    store = copied_store(tmp_path)
    assert [r.name for r in store.load_all()] == ["claude1"]
    assert store.quarantined == ["bad"] and store.restored == []
    assert (tmp_path / "run" / "records" / "claude1.yaml").is_file()


def holding_two(tmp_path: Path) -> tuple[SidecarStore, list[SessionRecord]]:
    """A store whose daemon holds a live and a stopped session, both written."""
    store = copied_store(tmp_path)
    held = [identity(), identity(name="stopped1", uuid="u3", state=State.STOPPED)]
    store.holdings = lambda: held
    for rec in held:
        store.save(rec)
    return store, held


def test_a_state_directory_removed_under_the_daemon_is_made_again_with_every_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, held = holding_two(tmp_path)
    shutil.rmtree(store.directory)
    store.save(identity(agent_session="beef"))
    assert "removed or replaced" in caplog.text
    assert os.stat(store.directory).st_mode & 0o777 == 0o700
    plain = SidecarStore(tmp_path / "state")  # the records alone, without the copies
    loaded = {r.name: r for r in plain.load_all()}
    assert loaded["claude1"].agent_session == "beef" and loaded["stopped1"] == held[1]


def test_a_state_directory_replaced_by_an_empty_one_is_written_again(tmp_path: Path) -> None:
    store, held = holding_two(tmp_path)
    shutil.rmtree(store.directory)
    SidecarStore(tmp_path / "state").prepare()  # a reinstall made it again, empty
    store.save(held[0])
    assert sorted(p.name for p in store.sessions_dir.iterdir()) == [
        "claude1.yaml",
        "stopped1.yaml",
    ]


def test_a_copy_that_cannot_be_written_is_said_once_and_the_record_is_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "records").write_text("not a directory")
    store = copied_store(tmp_path)
    store.save(identity())
    store.save(identity(agent_session="beef"))
    assert caplog.text.count("Failed to keep a copy") == 1
    assert store.load_all()[0].agent_session == "beef"


def test_a_check_with_no_write_makes_a_removed_state_directory_again(tmp_path: Path) -> None:
    store = copied_store(tmp_path)
    held = [identity()]
    store.holdings = lambda: held
    store.save(held[0])
    store.check()  # nothing to do
    shutil.rmtree(store.directory)
    store.check()
    assert [r.name for r in SidecarStore(tmp_path / "state").load_all()] == ["claude1"]


def held_store(tmp_path: Path) -> tuple[SidecarStore, list[SessionRecord]]:
    """A store that holds one live session's record, written with its copy."""
    store = copied_store(tmp_path)
    held = [identity()]
    store.holdings = lambda: held
    store.save(held[0])
    return store, held


def copy_of(tmp_path: Path, name: str) -> Path:
    return tmp_path / "run" / "records" / f"{name}.yaml"


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_a_record_and_its_copy_lost_while_the_daemon_runs_are_written_again_from_memory(
    tmp_path: Path, damage: Callable[[Path], object], caplog: pytest.LogCaptureFixture
) -> None:
    """Both gone or damaged while the daemon runs: the check (every 30 s, and at the daemon's
    stop) writes them again from what it holds, so the next start has the whole identity."""
    store, held = held_store(tmp_path)
    damage(store.path_of("claude1"))
    copy_of(tmp_path, "claude1").unlink()
    store.check()
    assert "written again from what the daemon holds" in caplog.text
    assert copied_store(tmp_path).load_all() == held
    assert copy_of(tmp_path, "claude1").is_file()


def test_a_copy_alone_lost_is_written_again_and_a_check_with_nothing_lost_writes_nothing(
    tmp_path: Path,
) -> None:
    store, _ = held_store(tmp_path)
    written = store.path_of("claude1").stat().st_mtime_ns
    store.check()
    assert store.path_of("claude1").stat().st_mtime_ns == written  # nothing to do
    copy_of(tmp_path, "claude1").unlink()
    store.check()
    assert copy_of(tmp_path, "claude1").read_text() == store.path_of("claude1").read_text()


def test_the_copies_directory_removed_under_the_daemon_is_made_again(tmp_path: Path) -> None:
    store, _ = held_store(tmp_path)
    shutil.rmtree(tmp_path / "run" / "records")
    store.save(identity(agent_session="beef"))  # the next write makes it again
    assert copy_of(tmp_path, "claude1").is_file()
    shutil.rmtree(tmp_path / "run" / "records")
    store.check()  # and so does the check, with nothing written meanwhile
    assert copy_of(tmp_path, "claude1").is_file()


def test_a_stale_copy_is_refreshed_at_load(tmp_path: Path) -> None:
    store, _ = held_store(tmp_path)
    stale = copy_of(tmp_path, "claude1").read_bytes()
    store.save(identity(agent_session="beef"))
    copy_of(tmp_path, "claude1").write_bytes(stale)  # an older revision than its record
    copied_store(tmp_path).load_all()
    assert copy_of(tmp_path, "claude1").read_text() == store.path_of("claude1").read_text()
