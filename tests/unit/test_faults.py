"""Faults below the daemon, on fakes at the edges: a full disk and a systemd that refuses. Every
operation ends in a state that matches systemd, and a call that must write changes nothing
when it cannot."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from hostagent.config import Config, OrphanPolicy
from hostagent.errors import StopFailed, StorageFull
from hostagent.options import CreateRequest
from hostagent.session import SessionRecord, State
from tests.unit.fakes import Host, me, run


class Disk:
    """Makes the host's record writes fail with ENOSPC while full."""

    def __init__(self, host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
        self.full = False
        save = host.store.save

        def maybe_save(record: SessionRecord) -> None:
            if self.full:
                raise OSError(errno.ENOSPC, "No space left on device")
            save(record)

        monkeypatch.setattr(host.store, "save", maybe_save)


async def running(host: Host, name: str) -> None:
    await host.create(me(), name, "shell", str(host.tmp), CreateRequest())


def test_a_stop_on_a_full_disk_is_refused_by_name_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        disk = Disk(host, monkeypatch)
        await running(host, "a")
        disk.full = True
        with pytest.raises(StorageFull, match="free space in"):
            await host.lifecycle.stop(host.registry.get("a"))
        assert host.registry.get("a").record.state is State.RUNNING
        assert host.events[-1] == ("changed", "a", "running")  # the bus says so too
        assert "hostagent-a.scope" in host.systemd.units
        with pytest.raises(StorageFull):
            await host.lifecycle.remove(host.registry.get("a"))
        disk.full = False
        await host.lifecycle.stop(host.registry.get("a"))
        assert host.on_disk("a") == "stopped"

    run(body())


def test_a_start_whose_outcome_cannot_be_written_leaves_nothing_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create is not reported done before its record is."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        disk = Disk(host, monkeypatch)
        host.scopes.gate = __import__("asyncio").Event()
        create = __import__("asyncio").ensure_future(running(host, "a"))
        await host.scopes.parked.wait()
        disk.full = True  # the starting record is written; the running one will not be
        host.scopes.open_gate()
        with pytest.raises(StorageFull) as refused:
            await create
        assert refused.value.message.count("cannot be written") == 1, refused.value.message
        assert "hostagent-a.scope" not in host.systemd.units
        assert host.registry.get("a").record.state is State.FAILED
        assert host.on_disk("a") == "starting"  # recovery makes it dormant: nothing runs
        disk.full = False
        host.registry.write_unsaved()  # the retry timer's work
        assert host.on_disk("a") == "failed"

    run(body())


def test_a_reconcile_on_a_full_disk_follows_systemd_and_writes_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        disk = Disk(host, monkeypatch)
        await running(host, "a")
        disk.full = True
        host.systemd.end("hostagent-a.scope")
        await host.settle()
        assert host.registry.get("a").record.state is State.STOPPED
        assert host.on_disk("a") == "running"
        disk.full = False
        host.registry.write_unsaved()
        assert host.on_disk("a") == "stopped"
        assert host.registry._unsaved == set()  # and the retries stop

    run(body())


@pytest.mark.parametrize("unit_survives", [True, False], ids=["unit-runs", "unit-gone"])
def test_a_stop_that_meets_a_systemd_error_ends_as_systemd_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unit_survives: bool
) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await running(host, "a")

        async def refused(unit: str, timeout: float) -> None:
            if not unit_survives:
                host.systemd.end(unit)
            raise StopFailed(f"Failed to stop unit {unit}: the manager went away")

        host.scopes.stop_with = refused
        if unit_survives:
            with pytest.raises(StopFailed):
                await host.lifecycle.stop(host.registry.get("a"))
            expected = State.RUNNING
        else:
            await host.lifecycle.stop(host.registry.get("a"))
            expected = State.STOPPED
        await host.settle()
        assert host.registry.get("a").record.state is expected
        assert host.on_disk("a") == expected.value
        host.scopes.stop_with = None
        if unit_survives:  # no state from which only a restart escapes
            await host.lifecycle.remove(host.registry.get("a"))
            assert host.on_disk("a") is None

    run(body())


@pytest.mark.parametrize("orphans", [OrphanPolicy.ADOPT, OrphanPolicy.STOP])
def test_a_torn_record_of_a_live_session_is_quarantined_and_its_scope_adopted(
    tmp_path: Path, orphans: OrphanPolicy
) -> None:
    """Whatever the orphans policy: a damaged record never costs a live session."""

    async def body() -> None:
        host = await Host.started(tmp_path, Config(orphans=orphans))
        await running(host, "a")
        path = host.store.path_of("a")
        path.write_text(path.read_text()[:200])  # cut short; it may still parse as YAML
        again = host.restart()
        report = await again.core.recover()
        assert again.store.quarantined == ["a"]
        assert report.orphans_adopted == ["hostagent-a.scope"]
        assert again.registry.get("a").record.state is State.RUNNING
        assert again.on_disk("a") == "running"

    run(body())
