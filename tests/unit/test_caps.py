"""The admin's limits as caps: what a caller may ask for, how many
sessions one user may have, the per-user slice, and operation slots counted per user."""

from __future__ import annotations

import asyncio
import contextlib
import pwd
from pathlib import Path
from typing import Any

import pytest

from hostagent import yamlfile
from hostagent.config import Config, UserCaps, over_caps, parse_config
from hostagent.daemon.host.scope import NO_LIMIT, slice_properties
from hostagent.daemon.ops.admission import check_free, quota_problem
from hostagent.daemon.state import registry as registry_module
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.store import SidecarStore
from hostagent.errors import LimitsExceeded, NoSuchSession, SessionExists
from hostagent.options import CreateRequest
from hostagent.session import Limits, SessionRecord
from tests.unit.fakes import Host, me, run

CAPS = Limits(tasks_max=64, memory_max=1 << 30)


@pytest.mark.parametrize(
    ("asked", "refused"),
    [
        (Limits(), None),  # nothing asked: the defaults apply
        (Limits(tasks_max=64), None),  # the cap itself
        (Limits(tasks_max=10, memory_max=1 << 20), None),  # lower is always fine
        (Limits(tasks_max=65), "TasksMax=65"),
        (Limits(tasks_max=4194304), "TasksMax=4194304"),
        (Limits(memory_max=2 << 30), "MemoryMax=2G"),  # in systemd's words
        (Limits(cpu_weight=10000), None),  # no cap configured for it
    ],
)
def test_limits_are_caps_a_caller_may_lower(asked: Limits, refused: str | None) -> None:
    problem = over_caps(asked, CAPS)
    assert (problem is None) == (refused is None)
    if refused:
        assert problem is not None and problem.startswith(refused) and "at most" in problem


def _registry(tmp: Path, owners: list[int]) -> Registry:
    store = SidecarStore(tmp)
    registry = Registry(store, tmp / "run", system=True)
    for i, owner in enumerate(owners):
        registry.add(SessionRecord(name=f"s{i}", owner=owner))
    return registry


@pytest.mark.parametrize(
    ("owners", "reserved", "uid", "refused"),
    [
        ([1001] * 3, {}, 1001, True),  # at the cap
        ([1001] * 2, {}, 1001, False),
        ([1001] * 2, {"new": 1001}, 1001, True),  # a create under way counts
        ([1001] * 2, {"new": 1002}, 1001, False),  # another user's does not
        ([1002] * 9, {}, 1001, False),  # others' sessions are theirs
        ([0] * 9, {}, 0, False),  # root's are not counted
    ],
)
def test_sessions_per_user(
    tmp_path: Path, owners: list[int], reserved: dict[str, int], uid: int, refused: bool
) -> None:
    registry = _registry(tmp_path, owners)
    registry.reserved.update(reserved)
    config = Config(users=UserCaps(sessions=3))
    problem = quota_problem(registry, config, uid, Limits())
    assert (problem is not None) == refused
    if problem:
        assert "users.sessions" in problem and "hostagentctl rm" in problem


def test_the_config_file_sets_user_caps_and_zero_lifts_one(tmp_path: Path) -> None:
    path = tmp_path / "hostagent.yaml"
    path.write_text(
        "limits: {tasks_max: 128}\n"
        "users: {sessions: 5, tasks_max: 0, memory_max: 4294967296, admins_exceed: true}\n"
    )
    config = parse_config(yamlfile.load(path))
    assert config.limits.tasks_max == 128
    assert config.users.sessions == 5 and config.users.admins_exceed
    assert config.users.limits == Limits(memory_max=4 << 30)
    props = dict(slice_properties(1001, config.users.limits))
    assert props["TasksMax"].value == NO_LIMIT  # lifted, not left as it was
    assert props["MemoryMax"].value == 4 << 30


def test_a_create_over_a_cap_is_refused_unless_exempt(tmp_path: Path) -> None:
    async def body() -> None:
        config = Config(limits=Limits(tasks_max=64), users=UserCaps(sessions=1))
        host = await Host.started(tmp_path, config, system=True)

        async def create(name: str, exempt: bool = False, **req: Any) -> None:
            await host.create(
                me(),
                name,
                "shell",
                str(tmp_path),
                CreateRequest(**req),
                exempt,
            )

        with pytest.raises(LimitsExceeded, match="TasksMax=65"):
            await create("a", limits=Limits(tasks_max=65))
        assert host.registry.sessions == {} and host.on_disk("a") is None
        await create("a", exempt=True, limits=Limits(tasks_max=65))
        assert host.systemd.units["hostagent-a.scope"].limits == Limits(tasks_max=65)
        # On the system daemon every session goes into its owner's slice, with the caps.
        expected = config.users.limits if me() else Limits()
        assert host.systemd.units["hostagent-a.scope"].user_caps == expected
        if me():  # root's own sessions are not counted
            with pytest.raises(LimitsExceeded, match="users.sessions"):
                await create("b")

    run(body())


def test_session_exists_says_nothing_of_another_users_session(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        with pytest.raises(SessionExists) as e:
            await host.create(me() + 1, "a", "shell", str(tmp_path), CreateRequest())
        assert e.value.message == "Session name 'a' is taken; pick another name."

    run(body())


def test_operation_slots_are_per_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(registry_module, "MAX_OPERATIONS_PER_USER", 2)
    monkeypatch.setattr(registry_module, "MAX_OPERATIONS", 3)
    registry = _registry(tmp_path, [])
    with contextlib.ExitStack() as held:
        held.enter_context(registry.operation(1001))
        held.enter_context(registry.operation(1001))
        with pytest.raises(LimitsExceeded, match="this user's sessions"):
            held.enter_context(registry.operation(1001))
        held.enter_context(registry.operation(1002))  # bob's slots are not alice's
        with pytest.raises(LimitsExceeded, match="3 operations"):
            held.enter_context(registry.operation(1003))
    with registry.operation(1001):
        pass  # all given back


def test_calls_queued_on_a_sessions_lock_hold_no_slot(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Bob parks his own resume and queues stops behind it: they wait for the lock without
    taking his slots, so his 200 queued calls do not refuse his (or anyone's) next create."""
    monkeypatch.setattr(registry_module, "MAX_OPERATIONS_PER_USER", 2)

    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        await host.lifecycle.stop(host.registry.get("a"))
        host.scopes.gate = asyncio.Event()
        resume = asyncio.ensure_future(host.lifecycle.resume(host.registry.get("a")))
        await host.scopes.parked.wait()
        queued = [
            asyncio.ensure_future(host.lifecycle.stop(host.registry.get("a"))) for _ in range(200)
        ]
        await asyncio.sleep(0)  # let each reach the lock
        assert host.registry._operations == {me(): 1}
        host.scopes.open_gate()
        await resume
        await asyncio.gather(*queued, return_exceptions=True)
        await host.create(me(), "b", "shell", str(tmp_path), CreateRequest())

    run(body())


def test_a_call_acts_on_the_session_it_authorized_not_its_name(tmp_path: Path) -> None:
    """Authorized for one session (the polkit question can take minutes), a call must not act
    on another that took its name meanwhile."""

    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        authorized = host.registry.get("a")
        await host.lifecycle.remove(authorized)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        for act in (
            host.lifecycle.stop(authorized),
            host.lifecycle.remove(authorized),
            host.core.terminal.send_text(authorized, "rm -rf ~", True),
        ):
            with pytest.raises(NoSuchSession, match="removed meanwhile"):
                await act
        assert host.registry.get("a").record.state.value == "running"
        assert host.scopes.tmux.typed == []

    run(body())


@pytest.mark.parametrize(
    ("owners", "reserved", "name", "says"),
    [
        ([1001], {}, "s0", "already exists and is starting; resume it"),  # the owner is told
        ([1002], {}, "s0", "is taken; pick another name"),  # another's: nothing of it told
        ([], {"s0": 1001}, "s0", "being created right now"),
        ([], {"other": 1001}, "s0", None),
    ],
)
def test_a_name_in_use_or_being_created_is_not_free(
    tmp_path: Path, owners: list[int], reserved: dict[str, int], name: str, says: str | None
) -> None:
    registry = _registry(tmp_path, owners)
    registry.reserved.update(reserved)
    if says is None:
        check_free(registry, name, 1001)
    else:
        with pytest.raises(SessionExists, match=says):
            check_free(registry, name, 1001)


@pytest.mark.parametrize(
    ("asked", "caps", "given"),
    [
        (Limits(tasks_max=500, memory_max=2 << 30), CAPS, CAPS),  # lowered since: today's caps
        (Limits(tasks_max=10), CAPS, Limits(tasks_max=10, memory_max=1 << 30)),  # below: kept
        (Limits(memory_max=NO_LIMIT), CAPS, Limits(tasks_max=64, memory_max=1 << 30)),
        (Limits(tasks_max=500), Limits(), Limits(tasks_max=500)),  # no caps: as asked
    ],
)
def test_a_start_gets_todays_caps(asked: Limits, caps: Limits, given: Limits) -> None:
    assert asked.within(caps) == given


@pytest.mark.parametrize(
    ("exempt", "tasks"), [(None, 64), (False, 64), (True, 500)], ids=["auto", "user", "root"]
)
def test_a_resume_after_the_caps_were_lowered_runs_within_them(
    tmp_path: Path, exempt: bool | None, tasks: int
) -> None:
    """bob's session was made under caps of 500 tasks; the admin lowers them to 64. His
    resume (or the automatic one after a reboot) runs with 64; root's resume may keep 500.
    The record keeps what was asked, so caps raised again give it back."""

    async def body() -> None:
        config = Config(limits=Limits(tasks_max=500))
        host = await Host.started(tmp_path, config, system=True)
        owner = me() or pwd.getpwnam("nobody").pw_uid  # a capped owner, whoever runs the tests
        await host.create(owner, "a", "shell", "/tmp", CreateRequest())
        session = host.registry.get("a")
        assert host.systemd.units["hostagent-a.scope"].limits == Limits(tasks_max=500)
        await host.lifecycle.stop(session)
        config.limits = Limits(tasks_max=64)
        await host.lifecycle.resume(session, exempt)
        assert host.systemd.units["hostagent-a.scope"].limits == Limits(tasks_max=tasks)
        assert session.record.limits == Limits(tasks_max=500)

    run(body())
