"""A session's PID namespace: how its first process's word on the shim is read, and how a pid
its tmux says is found among the machine's."""

from __future__ import annotations

import os

import pytest

from hostagent.daemon.host import pidone, procfs, sandboxing


@pytest.mark.parametrize(
    ("out", "said"),
    [
        (b"41 42\n" + pidone.STATUS + b"0\n", (b"41 42\n", 0)),
        (b"no server\n" + pidone.STATUS + b"1\n", (b"no server\n", 1)),
        (pidone.STATUS + b"-9\n", (b"", -9)),
        (b"41 42\n", (b"41 42\n", None)),  # the init ended before it could say
        (b"41 42\n" + pidone.STATUS + b"x\n", (b"41 42\n", None)),
        # Only the last word counts: the shim's own output cannot stand in for it.
        (pidone.STATUS + b"0\n" + pidone.STATUS + b"3\n", (pidone.STATUS + b"0\n", 3)),
    ],
)
def test_the_first_process_says_how_the_shim_ended_last(
    out: bytes, said: tuple[bytes, int | None]
) -> None:
    assert pidone.split_status(out) == said


def test_a_pid_in_the_daemons_own_namespace_is_its_own_number() -> None:
    me = os.getpid()
    assert not procfs.apart(me)
    assert procfs.ns_pid(me) == me
    assert procfs.numbered(me, 12345) == 12345
    assert procfs.numbered_among([me, 7], 7) == 7
    assert procfs.numbered_among([me], 7) == 0


def test_a_gone_process_is_numbered_nothing() -> None:
    assert procfs.ns_pid(2**22 + 1) == 0
    assert not procfs.apart(2**22 + 1)


@pytest.mark.parametrize(
    ("system", "abi", "own_pids", "said"),
    [
        (True, 0, True, "PID namespace and /proc of its own"),
        (True, 6, True, "; Landlock as a second layer"),
        (False, 6, True, "outside a sandboxed session"),
        (False, 6, False, "no trace, /proc/PID/root or signal out of a sandboxed session"),
        (False, 3, False, "signals are not scoped before Landlock ABI 6"),
        (False, 0, False, "nothing: Landlock is not enabled"),
    ],
)
def test_doctor_says_what_keeps_sessions_apart_here(
    system: bool, abi: int, own_pids: bool, said: str
) -> None:
    assert said in sandboxing.kept_apart(system, abi, own_pids)
