"""What an owner can do to the daemon through the edges it shares with them: plant things in their runtime directory, stop their own helper processes, send text
no command line could carry, and name paths longer than the kernel takes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hostagent.daemon.follow.terminal import check_text
from hostagent.daemon.host import owner as owner_module
from hostagent.daemon.host import procfs
from hostagent.daemon.host.enclosure import Enclosure
from hostagent.daemon.host.forking import Forker
from hostagent.daemon.host.heldchild import HeldChild
from hostagent.daemon.host.owner import Helpers
from hostagent.daemon.host.runtimedir import make_room
from hostagent.daemon.host.tmux import Tmux
from hostagent.errors import InvalidArgs, InvalidCwd
from hostagent.identity import Owner
from hostagent.options import CreateRequest
from hostagent.session import State
from tests.unit.fakes import Host, me, run


def test_make_room_moves_a_planted_directory_aside_and_keeps_a_fifo(tmp_path: Path) -> None:
    planted = tmp_path / "a.out"
    (planted / "inner").mkdir(parents=True)
    make_room(planted)
    assert not planted.exists()
    [aside] = tmp_path.glob("a.out.moved-*")
    assert (aside / "inner").is_dir()  # the owner's things are kept
    link = tmp_path / "b.out"
    link.symlink_to("/etc/passwd")
    make_room(link)
    assert not link.is_symlink() and Path("/etc/passwd").exists()
    fifo = tmp_path / "hooks.fifo"
    os.mkfifo(fifo)
    make_room(fifo, keep_fifo=True)
    assert fifo.exists()


def test_a_directory_where_the_fifo_goes_does_not_wedge_the_session(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        session = host.registry.get("a")
        await host.lifecycle.stop(session)
        (session.paths.fifo / "x").mkdir(parents=True)  # the owner's doing
        await host.lifecycle.resume(session)
        assert session.record.state is State.RUNNING
        assert session.watch is not None and session.paths.fifo.is_fifo()
        await host.lifecycle.stop(session)  # closing the watch leaves their directory be
        assert list(tmp_path.glob("run/a.d/out.moved-*/x"))

    run(body())


def test_a_cwd_longer_than_the_kernel_takes_is_named(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        with pytest.raises(InvalidCwd, match="shorter than 4096 bytes"):
            await host.create(me(), "a", "shell", "/" + "é" * 3000, CreateRequest())
        assert host.registry.sessions == {}

    run(body())


def test_sendtext_is_measured_in_bytes(tmp_path: Path) -> None:
    async def body() -> None:
        host = await Host.started(tmp_path)
        await host.create(me(), "a", "shell", str(tmp_path), CreateRequest())
        session = host.registry.get("a")
        check_text("x" * 65536)  # 64 KiB exactly
        await host.core.terminal.send_text(session, "x" * 65536, True)
        with pytest.raises(InvalidArgs, match="64 KiB"):
            check_text("é" * 32769)

    run(body())


async def never_inside(
    owner: Owner,
    argv: list[str],
    inside: Enclosure,
    timeout: float,
    stdin: bytes | None,
    *,
    limit: int = 0,
    stdout: int = -1,
) -> tuple[int, bytes, bytes] | None:
    raise AssertionError("no session is entered here: Tmux is given no locate")


def test_text_goes_to_tmux_through_stdin_not_the_command_line(tmp_path: Path) -> None:
    seen: list[tuple[list[str], bytes | None]] = []

    async def execute(
        owner: Owner,
        argv: list[str],
        timeout: float,
        stdin: bytes | None,
        *,
        limit: int = 0,
        stdout: int = -1,
    ) -> tuple[int, bytes, bytes]:
        seen.append((argv, stdin))
        return 0, b"", b""

    me_owner = Owner.from_uid(me())
    asyncio.run(
        Tmux(execute, never_inside).send_text(me_owner, tmp_path / "s.sock", "a\nb" * 40000, True)
    )
    [(argv, stdin)] = seen
    assert stdin == ("a\nb" * 40000).encode()
    assert max(len(a) for a in argv) < 100
    assert argv[-4:] == ["send-keys", "-t", "main", "Enter"]


def test_helpers_are_bounded_per_owner_and_time_out_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user's stalled helpers (as with a stopped tmux server) wait in line: at most
    MAX_HELPERS_PER_OWNER run, and one that cannot get a slot in time gives up."""
    monkeypatch.setattr(owner_module, "MAX_HELPERS_PER_OWNER", 2)
    me_owner = Owner.from_uid(me())

    async def body() -> list[object]:
        helpers = Helpers()
        stalled = [
            asyncio.ensure_future(helpers.run(me_owner, ["/bin/sleep", "30"], 0.5))
            for _ in range(5)
        ]
        deadline = time.monotonic() + 5
        while _sleeping() < 2:  # the first two run...
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        for _ in range(20):
            await asyncio.sleep(0)  # ...and the others, given every chance, still wait
        assert _sleeping() == 2 and helpers.slot(me()).locked()
        return await asyncio.gather(*stalled)

    assert asyncio.run(body()) == [None] * 5


def _sleeping() -> int:
    """Our own children running sleep 30."""
    return sum(
        1
        for p in os.listdir("/proc")
        if p.isdigit() and _cmdline(p) == "/bin/sleep\x0030\x00" and _ppid(p) == os.getpid()
    )


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text()
    except OSError:
        return ""


def _ppid(pid: str) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _kill_sleeps(*seconds: str) -> None:
    """The sleeps a test left holding a helper's output."""
    for pid in os.listdir("/proc"):
        if pid.isdigit() and _cmdline(pid) in {f"sleep\x00{s}\x00" for s in seconds}:
            os.kill(int(pid), signal.SIGKILL)


def test_a_held_child_that_was_stopped_is_given_up_on(tmp_path: Path) -> None:
    """The owner SIGSTOPs the shim before it may run: release() times out instead of holding
    the create (and its operation slot) for ever."""

    async def body() -> None:
        forker = Forker()
        child = await HeldChild.start(
            forker, Owner.from_uid(me()), str(tmp_path), {}, ["/bin/true"]
        )
        os.kill(child.pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await child.release(0.3)
        assert time.monotonic() - started < 5
        await child.abort()
        assert child.returncode == -signal.SIGKILL

    asyncio.run(body())


def test_a_helper_that_prints_too_much_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(owner_module, "MAX_OUTPUT", 1000)
    me_owner = Owner.from_uid(me())

    async def body() -> None:
        result = await Helpers().run(me_owner, ["/bin/cat"], 5, stdin=b"x" * 1000)
        assert result == (0, b"x" * 1000, b"")  # fed through stdin, read back whole
        with pytest.raises(owner_module.OutputTooLarge):
            await Helpers().run(me_owner, ["/bin/cat"], 5, stdin=b"x" * 100_000)

    asyncio.run(body())


def test_a_helper_whose_output_is_held_elsewhere_still_times_out() -> None:
    """The stopped-tmux case: the helper is gone or stuck, but another process holds its
    stdout, so the pipe never ends. The call must end at its timeout all the same."""
    me_owner = Owner.from_uid(me())

    async def body() -> None:
        started = time.monotonic()
        result = await Helpers().run(me_owner, ["/bin/sh", "-c", "sleep 31 & exec sleep 32"], 0.5)
        assert result is None
        assert time.monotonic() - started < 5

    try:
        asyncio.run(body())
    finally:
        _kill_sleeps("31", "32")


def test_a_helper_cut_short_while_it_starts_still_ends(tmp_path: Path) -> None:
    """The timeout lands while asyncio connects the helper's pipes (a helper that got its
    slot just as its time ran out), and the helper's stdout is held elsewhere, as a stopped
    tmux server holds its client's. The call must end all the same: asyncio, cancelled there,
    would wait for pipes that never end. The pipes' connection is parked to land it there."""
    me_owner = Owner.from_uid(me())
    holder = tmp_path / "holder"

    async def body() -> None:
        loop = asyncio.get_running_loop()
        connect, gate = loop.connect_read_pipe, asyncio.Event()

        async def parked(*args: object, **kwargs: object) -> object:
            await gate.wait()
            return await connect(*args, **kwargs)  # type: ignore[arg-type]

        loop.connect_read_pipe = parked  # type: ignore[method-assign,assignment]
        script = f"sleep 33 & echo $! > {holder}; exec sleep 34"
        call = asyncio.ensure_future(Helpers().run(me_owner, ["/bin/sh", "-c", script], 30))
        deadline = time.monotonic() + 5
        while not holder.exists() or not holder.read_text().strip():
            assert time.monotonic() < deadline, "the helper never started"
            await asyncio.sleep(0.01)
        call.cancel()  # what the timeout does, while the pipes are still being connected
        gate.set()
        done, _ = await asyncio.wait({call}, timeout=5)
        assert call in done, "the helper's call never ended"
        assert call.cancelled()

    try:
        asyncio.run(body())
    finally:
        _kill_sleeps("33", "34")


def test_following_a_process_tells_once_and_closes_its_pidfd_once() -> None:
    async def body() -> None:
        proc = await asyncio.create_subprocess_exec("/bin/sleep", "30")
        told = asyncio.Event()
        stop = procfs.follow(proc.pid, told.set)
        assert stop is not None
        fds = len(os.listdir("/proc/self/fd"))
        proc.kill()
        await asyncio.wait_for(told.wait(), 5)
        await proc.wait()
        stop()
        stop()  # a listener may stop it again: nothing else is closed
        assert len(os.listdir("/proc/self/fd")) == fds - 1
        assert procfs.follow(proc.pid, told.set) is None  # gone and reaped

    asyncio.run(body())


@pytest.mark.parametrize(
    ("script", "said"),
    [
        ("exec sleep 30", "its first process still runs"),
        ("exit 126", "its first process saw its start cancelled"),
        ("exit 125", "its first process exited with status 125"),
        ("kill -9 $$", "its first process was killed by signal 9"),
    ],
)
def test_a_failed_scope_start_says_what_became_of_its_first_process(script: str, said: str) -> None:
    """systemd's job result alone ('failed') does not say whether the held child was gone
    before it could be moved; the error does."""

    async def body() -> None:
        proc = subprocess.Popen(["/bin/sh", "-c", script])
        read_fd, write_fd = os.pipe()
        os.close(read_fd)
        child = HeldChild(proc, write_fd)  # past its release: the script runs
        try:
            assert await child.why_gone() == said
        finally:
            await child.abort()

    asyncio.run(body())


@pytest.mark.parametrize(
    ("uid", "groups", "setpriv", "argv"),
    [
        (os.geteuid(), (5,), "/usr/bin/setpriv", ["tmux", "ls"]),  # we are the owner
        (os.geteuid(), (5,), None, ["tmux", "ls"]),  # nothing to switch: none needed
        (
            1001,
            (1001, 27),
            "/usr/bin/setpriv",
            [
                *("/usr/bin/setpriv", "--reuid=1001", "--regid=1001", "--groups=1001,27", "--"),
                *("tmux", "ls"),
            ],
        ),
        (
            1001,
            (),
            "/usr/bin/setpriv",
            [
                *("/usr/bin/setpriv", "--reuid=1001", "--regid=1001", "--clear-groups", "--"),
                *("tmux", "ls"),
            ],
        ),
        (1001, (1001, 27), None, None),  # refused: no fork of the daemon switches instead
    ],
)
def test_a_helper_is_switched_to_its_owner_after_exec_by_setpriv(
    uid: int, groups: tuple[int, ...], setpriv: str | None, argv: list[str] | None
) -> None:
    """So that subprocess starts it with vfork: its own uid switch would fork the daemon, and
    a sandbox made in that fork would be a start path of its own."""
    if uid == 1001 and os.geteuid() == 1001:
        pytest.skip("this test's other owner is the user running it")
    who = Owner(uid, uid, "someone", "/home/someone", "/bin/sh", groups)
    if argv is None:
        with pytest.raises(OSError, match="setpriv"):
            owner_module.as_owner(who, ["tmux", "ls"], setpriv)
        return
    assert owner_module.as_owner(who, ["tmux", "ls"], setpriv) == argv
