"""Reconcile and recovery on fakes at the edges (tests/unit/fakes.py): what systemd's unit
signals do to a running session, and what a restarted daemon makes of every record, including
the signals that arrive while it recovers."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest

from hostagent.config import Config, OrphanPolicy, RecoveryPolicy
from hostagent.daemon.ops.recover import resume_dormant
from hostagent.daemon.state.store import SidecarStore
from hostagent.options import CreateRequest
from hostagent.session import DormantReason, SessionRecord, State, unit_name
from tests.unit.fakes import FakeUnit, Host, me, run


async def running(host: Host, *names: str) -> None:
    for name in names:
        await host.create(me(), name, "shell", str(host.tmp), CreateRequest())


# ---- reconcile --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ends_as", "result", "killed", "state", "ended", "error"),
    [
        pytest.param("", "", 0, State.STOPPED, "success", "", id="unit-removed"),
        pytest.param("inactive", "", 0, State.STOPPED, "success", "", id="inactive"),
        pytest.param(
            "failed",
            "",
            0,
            State.FAILED,
            "resources",
            "its scope ended with systemd's result 'failed'",
            id="failed",
        ),
        pytest.param(
            "",
            "timeout",
            0,
            State.FAILED,
            "timeout",
            "stopped by systemd after RuntimeMaxSec=0s",
            id="timeout",
        ),
        pytest.param(
            "",
            "oom-kill",
            0,
            State.FAILED,
            "oom-kill",
            "killed by the kernel's OOM killer (out of memory in its scope)",
            id="oom",
        ),
        pytest.param(
            "",
            "",
            9,
            State.FAILED,
            "signal",
            "killed by SIGKILL ('hostagentctl kill')",
            id="killed",
        ),
    ],
)
def test_a_unit_that_ends_while_watched_says_why(
    tmp_path: Path, ends_as: str, result: str, killed: int, state: State, ended: str, error: str
) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await running(host, "a")
        if killed:
            await host.lifecycle.kill(host.registry.get("a"), "all", killed)
        if result:
            host.core.reconciler.on_result("hostagent-a.scope", result)
        host.systemd.end("hostagent-a.scope", ends_as)
        await host.settle()
        record = host.registry.get("a").record
        assert (record.state, record.last_error) == (state, error)
        assert record.result == ended
        assert host.on_disk("a") == state.value

    run(body())


def test_a_unit_said_inactive_while_its_tmux_server_lives_is_not_stopped(
    tmp_path: Path,
) -> None:
    """systemd 252 on hybrid cgroups can call a scope inactive while it has processes."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await running(host, "a")
        unit = host.systemd.units["hostagent-a.scope"]
        unit.state = "inactive"
        host.systemd.on_unit(unit.name, "inactive")  # the leader still lives
        await host.settle()
        assert host.registry.get("a").record.state is State.RUNNING

    run(body())


def test_signals_of_other_units_change_nothing(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await running(host, "a")
        host.systemd.on_unit("hostagent-b.scope", "")
        host.systemd.on_unit("user@1000.service", "inactive")
        await host.settle()
        assert host.registry.get("a").record.state is State.RUNNING

    run(body())


# ---- recovery ---------------------------------------------------------------------------


def record(name: str, state: State, boot: str = "boot1", started_at: int = 1) -> SessionRecord:
    """A record of a session that has run once (started_at 0: one whose first start never
    finished)."""
    return SessionRecord(
        name=name,
        uuid="u",
        owner=me(),
        preset="shell",
        cwd="/",
        unit=unit_name(name),
        state=state,
        boot_id=boot,
        command=["/bin/sh"],
        last_argv=["/bin/sh"],
        started_at=started_at,
    )


# (record state, record's boot, unit now, state after, dormant reason)
RECOVERY = [
    pytest.param(State.RUNNING, "boot1", "active", State.RUNNING, "", id="live-adopted"),
    pytest.param(State.RUNNING, "old", "active", State.RUNNING, "", id="live-other-boot"),
    pytest.param(State.RUNNING, "old", None, State.DORMANT, "reboot", id="reboot"),
    pytest.param(State.STARTING, "boot1", None, State.DORMANT, "lost", id="lost"),
    pytest.param(State.STOPPING, "boot1", None, State.STOPPED, "", id="stop-finished"),
    pytest.param(State.STOPPED, "old", None, State.STOPPED, "", id="stopped-kept"),
    pytest.param(State.FAILED, "boot1", None, State.FAILED, "", id="failed-kept"),
    pytest.param(State.DORMANT, "boot1", "active", State.RUNNING, "", id="dormant-but-live"),
]


def test_a_create_whose_first_start_never_finished_is_failed_and_resumable(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        host = Host(tmp_path)
        SidecarStore(host.store.directory).save(record("a", State.STARTING, started_at=0))
        report = await host.core.recover()
        got = host.registry.get("a").record
        assert (got.state, got.result, report.failed) == (State.FAILED, "resources", 1)
        assert "hostagentctl resume a" in got.last_error
        assert host.on_disk("a") == "failed"
        await host.lifecycle.resume(host.registry.get("a"))
        assert host.registry.get("a").record.state is State.RUNNING

    run(body())


@pytest.mark.parametrize(("state", "boot", "unit", "after", "reason"), RECOVERY)
def test_recovery_decides_each_record_through_the_state_machine(
    tmp_path: Path, state: State, boot: str, unit: str | None, after: State, reason: str
) -> None:
    async def body() -> None:
        host = Host(tmp_path)
        SidecarStore(host.store.directory).save(record("a", state, boot))
        if unit:
            host.systemd.units["hostagent-a.scope"] = FakeUnit("hostagent-a.scope", unit)
        await host.core.recover()
        await host.settle()
        got = host.registry.get("a").record
        assert (got.state, got.dormant_reason) == (after, DormantReason(reason))
        assert host.on_disk("a") == after.value

    run(body())


def test_policy_never_prunes_and_auto_queues_the_dormant(tmp_path: Path) -> None:
    async def body() -> None:
        for policy, pruned, queued in (
            (RecoveryPolicy.NEVER, True, []),
            (RecoveryPolicy.AUTO, False, ["a"]),
        ):
            tmp = tmp_path / policy.value
            tmp.mkdir()
            host = Host(tmp, Config(recovery_policy=policy), boot_id="boot2")
            SidecarStore(host.store.directory).save(record("a", State.RUNNING))
            host.store.save_screen("a", "the last screen\n")
            report = await host.core.recover()
            assert (host.on_disk("a") is None) is pruned
            # A prune is a remove: nothing of the session is left behind.
            assert (host.store.load_screen("a") is None) is pruned
            assert report.to_resume == queued

    run(body())


def test_a_scope_without_a_record_is_adopted_or_stopped_if_the_admin_opts_in(
    tmp_path: Path,
) -> None:
    async def body() -> None:
        for policy in OrphanPolicy:
            config = Config(orphans=policy) if policy is OrphanPolicy.STOP else Config()
            host = Host(tmp_path / policy.value, config)
            host.systemd.units["hostagent-x.scope"] = FakeUnit("hostagent-x.scope")
            report = await host.core.recover()
            if policy is OrphanPolicy.STOP:
                assert report.orphans_stopped == ["hostagent-x.scope"]
                assert host.systemd.stopped == ["hostagent-x.scope"]
            else:
                assert report.orphans_adopted == ["hostagent-x.scope"]
                assert host.registry.get("x").record.state is State.RUNNING
                assert host.systemd.stopped == []

    run(body())


def test_a_restart_adopts_live_sessions_and_finds_the_lost_one(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await running(host, "a", "b")
        host.systemd.events = None  # the daemon is down
        host.systemd.end("hostagent-b.scope")
        again = host.restart()
        report = await again.core.recover()
        assert (report.adopted, report.dormant) == (1, 1)
        assert again.registry.get("a").record.state is State.RUNNING
        assert again.registry.get("b").record.dormant_reason is DormantReason.LOST

    run(body())


def test_a_unit_that_ends_while_recovery_runs_is_reconciled_after_it(tmp_path: Path) -> None:
    """The unit signal arrives after recovery has listed the units and adopted the session:
    it is held, and the pass after recovery stops the session."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await running(host, "a")
        SidecarStore(host.store.directory).save(record("b", State.RUNNING))  # leader unknown
        host.systemd.units["hostagent-b.scope"] = FakeUnit("hostagent-b.scope")
        host.store.flush()  # a's running record, with its tmux server's pid, is on disk
        again = host.restart()
        # Recovery adopts a (its leader lives), then asks tmux about b: that is when a ends.
        asked: list[str] = []

        def end_a(name: str) -> None:
            asked.append(name)
            again.systemd.end("hostagent-a.scope")

        again.scopes.tmux.on_server_pid = end_a
        await again.core.recover()
        assert asked == ["b"]
        assert again.registry.get("a").record.state is State.RUNNING  # not yet reconciled
        await again.settle()
        assert again.registry.get("a").record.state is State.STOPPED
        assert again.registry.get("b").record.state is State.RUNNING

    run(body())


def test_an_adopted_session_whose_tmux_is_gone_is_reconciled(tmp_path: Path) -> None:
    async def body() -> None:
        host = Host(tmp_path)
        SidecarStore(host.store.directory).save(record("a", State.RUNNING))
        host.systemd.units["hostagent-a.scope"] = FakeUnit("hostagent-a.scope", leader_alive=False)
        host.systemd.after_list = lambda: setattr(
            host.systemd.units["hostagent-a.scope"], "state", "inactive"
        )
        await host.core.recover()
        await host.settle()
        assert host.registry.get("a").record.state is State.STOPPED

    run(body())


def test_auto_keeps_its_intent_across_a_restart_in_the_middle(tmp_path: Path) -> None:
    """A daemon killed during the staggered resumes finishes the job after its restart."""

    async def body() -> None:
        config = Config(recovery_policy=RecoveryPolicy.AUTO)
        host = Host(tmp_path, config, boot_id="boot2")
        for name in ("a", "b", "c"):
            SidecarStore(host.store.directory).save(record(name, State.RUNNING))  # boot1's
        report = await host.core.recover()
        assert report.to_resume == ["a", "b", "c"]
        host.scopes.gate = asyncio.Event()
        resumes = asyncio.ensure_future(
            resume_dormant(host.lifecycle, host.registry, report.to_resume, 1, 0)
        )
        await host.scopes.parked.wait()  # a is being resumed; b and c wait for the slot
        resumes.cancel()  # the daemon is killed here
        with contextlib.suppress(asyncio.CancelledError):
            await resumes
        host.systemd.units.pop("hostagent-a.scope", None)  # its start never happened
        again = host.restart(boot_id="boot2")
        report = await again.core.recover()
        # b and c were still marked; a's start was cut short, so it is dormant (lost) again,
        # and auto resumes that too.
        assert report.to_resume == ["a", "b", "c"]
        assert again.registry.get("a").record.dormant_reason.value == "lost"
        await resume_dormant(again.lifecycle, again.registry, report.to_resume, 1, 0)
        assert [again.registry.get(n).record.state for n in "abc"] == [State.RUNNING] * 3
        assert not any(again.registry.get(n).record.auto_resume for n in "abc")

    run(body())


def test_every_listener_hears_of_each_session_found_at_start_as_recovery_left_it(
    tmp_path: Path,
) -> None:
    """As a create announces a new session: what follows each session (its usage) must know of
    those that ran before the daemon started."""

    async def body() -> None:
        host = Host(tmp_path, boot_id="boot2")
        store = SidecarStore(host.store.directory)
        store.save(record("a", State.RUNNING))  # a reboot ended it
        store.save(record("b", State.STOPPED))
        host.systemd.units["hostagent-x.scope"] = FakeUnit("hostagent-x.scope")  # no record
        await host.core.recover()
        added = sorted(e for e in host.events if e[0] == "added")
        assert added == [
            ("added", "a", "dormant"),
            ("added", "b", "stopped"),
            ("added", "x", "running"),
        ]

    run(body())
