"""Whether a pane's first program still has its terminal (procfs.leads_its_terminal), on real
processes in a real pseudo-terminal: the shell preset reads a job in the foreground as
working, and a program started in the shell's place, at its own prompt, by its screen."""

from __future__ import annotations

import contextlib
import os
import pty
import signal
import subprocess
import time
from collections.abc import Iterator

from hostagent.daemon.host import procfs


@contextlib.contextmanager
def _started(script: str) -> Iterator[int]:
    pid, fd = pty.fork()  # the child leads a new session on its own terminal, as a pane does
    if pid == 0:
        os.execvp("sh", ["sh", "-c", script])
    try:
        yield pid
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(fd)


def _until(check: object, what: str) -> None:
    deadline = time.monotonic() + 10
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.01)


def test_a_program_that_keeps_its_terminal_leads_it() -> None:
    """sh without job control runs sleep in its own process group: no job has the terminal."""
    with _started("sleep 30; :") as pid:
        _until(lambda: procfs.children_of(pid), "sleep started")
        assert procfs.leads_its_terminal(pid)


def test_a_job_given_the_terminal_takes_the_lead() -> None:
    """With job control (as an interactive shell runs a command), the job is in front."""
    with _started("set -m; sleep 30; :") as pid:
        _until(lambda: procfs.children_of(pid), "sleep started")
        _until(lambda: not procfs.leads_its_terminal(pid), "the job has the terminal")


def test_a_process_without_a_terminal_or_gone_leads_nothing() -> None:
    alone = subprocess.Popen(["sleep", "30"], start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        assert not procfs.leads_its_terminal(alone.pid)
    finally:
        alone.kill()
        alone.wait()
    assert not procfs.leads_its_terminal(alone.pid)
