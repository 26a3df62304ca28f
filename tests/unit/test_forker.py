"""The forker (daemon/host/forker.py) as the held child uses it: a child forked with its
sandbox plan, held, released, told ended, killed, and a forker that dies on the way."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from hostagent.daemon.host import forking
from hostagent.daemon.host.heldchild import HeldChild
from hostagent.daemon.host.namespace import FAILED, Plan, landlock_abi
from hostagent.identity import Owner
from hostagent.sandboxmounts import Mode, Mount

# Nothing to make but the forker's own fork: the path every kept-apart session takes.
NOTHING = Plan((), "/run/systemd/inaccessible", False, 0)


def me() -> Owner:
    return Owner.from_uid(os.getuid())


def run(body: Callable[[forking.Forker], Awaitable[None]]) -> None:
    async def then_end_the_forker() -> None:
        forker = forking.Forker()
        try:
            await body(forker)
        finally:
            forker.close()

    asyncio.run(then_end_the_forker())


def test_a_forked_child_is_held_until_released_and_its_output_read(tmp_path: Path) -> None:
    async def body(forker: forking.Forker) -> None:
        argv = ["/bin/sh", "-c", 'pwd; echo "$X" >&2; exit 3']
        child = await HeldChild.start(forker, me(), str(tmp_path), {"X": "from env"}, argv, NOTHING)
        assert child.returncode is None  # held: it reads its pipe
        code, out, err = await child.release(5)
        assert (code, out, err) == (3, str(tmp_path), "from env")
        assert child.returncode == 3

    run(body)


def test_a_forked_child_gets_its_own_process_group_and_default_signals(tmp_path: Path) -> None:
    async def body(forker: forking.Forker) -> None:
        script = "exec grep -E '^Sig(Ign|Blk)' /proc/self/status"
        child = await HeldChild.start(
            forker, me(), str(tmp_path), {}, ["/bin/sh", "-c", script], NOTHING
        )
        pgid = os.getpgid(child.pid)
        code, out, _ = await child.release(5)
        assert code == 0 and pgid == child.pid
        masks = {line.split(":")[0]: int(line.split()[1], 16) for line in out.splitlines()}
        # What Python ignores in the forker (SIGPIPE, SIGXFSZ) must not reach the session, as
        # subprocess sees to; what the daemon was started with (nohup's SIGHUP) passes on.
        python_ignores = 1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)
        assert masks["SigBlk"] == 0 and masks["SigIgn"] & python_ignores == 0, out

    run(body)


def test_a_held_forked_child_is_killed_by_abort(tmp_path: Path) -> None:
    async def body(forker: forking.Forker) -> None:
        child = await HeldChild.start(forker, me(), str(tmp_path), {}, ["/bin/true"], NOTHING)
        os.kill(child.pid, signal.SIGSTOP)
        with pytest.raises(TimeoutError):
            await child.release(0.3)
        await child.abort()
        assert child.returncode == -signal.SIGKILL

    run(body)


def test_a_sandbox_that_cannot_be_made_is_said_by_the_child(tmp_path: Path) -> None:
    missing = Plan((Mount(str(tmp_path / "gone"), Mode.READ_ONLY),), "/nowhere", False, 0)
    if os.geteuid() != 0:
        pytest.skip("the mounts are root's to make (the user daemon makes a user namespace)")

    async def body(forker: forking.Forker) -> None:
        child = await HeldChild.start(forker, me(), str(tmp_path), {}, ["/bin/true"], missing)
        assert await child.wait() == FAILED
        assert "does not exist: " in await child.why_gone()
        await child.abort()

    run(body)


@pytest.mark.skipif(landlock_abi() < 6, reason="signals are scoped from Landlock ABI 6")
def test_a_forked_child_in_its_landlock_domain_cannot_signal_outside_it(tmp_path: Path) -> None:
    apart = Plan((), "/run/systemd/inaccessible", False, landlock_abi())

    async def body(forker: forking.Forker) -> None:
        script = f"kill -0 {os.getpid()} && echo reached || echo refused"
        child = await HeldChild.start(
            forker, me(), str(tmp_path), {}, ["/bin/sh", "-c", script], apart
        )
        _, out, _ = await child.release(5)
        assert out == "refused"

    run(body)


def test_children_forked_at_once_each_get_their_own_answer(tmp_path: Path) -> None:
    async def one(forker: forking.Forker, i: int) -> tuple[int, str]:
        argv = ["/bin/sh", "-c", f"echo {i}; exit {i}"]
        child = await HeldChild.start(forker, me(), str(tmp_path), {}, argv, NOTHING)
        code, out, _ = await child.release(5)
        return code, out

    async def body(forker: forking.Forker) -> None:
        results = await asyncio.gather(*(one(forker, i) for i in range(20)))
        assert results == [(i, str(i)) for i in range(20)]

    run(body)


def test_a_forker_that_dies_is_started_again_and_its_held_child_still_ends(
    tmp_path: Path,
) -> None:
    async def body(forker: forking.Forker) -> None:
        child = await HeldChild.start(forker, me(), str(tmp_path), {}, ["/bin/true"], NOTHING)
        process = forker._process
        assert process is not None
        process.kill()
        process.wait()
        # Its child is init's now: a release still ends, its status unknown to the daemon.
        code, _, _ = await child.release(5)
        assert code in (0, forking.UNKNOWN_EXIT)
        again = await HeldChild.start(
            forker, me(), str(tmp_path), {}, ["/bin/sh", "-c", "exit 4"], NOTHING
        )
        assert (await again.release(5))[0] == 4
        assert forker._process is not process

    run(body)


def test_a_start_asked_of_a_forker_just_gone_fails_and_the_next_one_starts_anew(
    tmp_path: Path,
) -> None:
    async def body(forker: forking.Forker) -> None:
        child = await HeldChild.start(forker, me(), str(tmp_path), {}, ["/bin/true"], NOTHING)
        await child.release(5)
        process = forker._process
        assert process is not None
        process.kill()
        process.wait()  # gone, and the loop has not yet read its end of file
        with pytest.raises(OSError):
            await HeldChild.start(forker, me(), str(tmp_path), {}, ["/bin/true"], NOTHING)
        again = await HeldChild.start(
            forker, me(), str(tmp_path), {}, ["/bin/sh", "-c", "exit 5"], NOTHING
        )
        assert (await again.release(5))[0] == 5

    run(body)
