"""A password prompt where systemctl would give one: pkttyagent on the caller's terminal.

An acting verb on the system bus may need an administrator's authentication (polkit's
``auth_admin_keep``). As systemctl does, hostagentctl then runs ``pkttyagent`` for its own process, waits until the agent is registered, and makes its calls with interactive
authorization allowed; ``--no-ask-password`` turns this off.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import subprocess

REGISTER_TIMEOUT = 10.0


class PolkitAgent:
    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    @classmethod
    def start(cls) -> PolkitAgent | None:
        """pkttyagent for this process (polkit takes agents for processes and sessions, and
        finds this one for this process's bus connection), registered; None when there is
        none to run."""
        agent = shutil.which("pkttyagent")
        if agent is None:
            return None
        ready, registered = os.pipe()
        try:
            process = subprocess.Popen(
                [
                    agent,
                    "--notify-fd",
                    str(registered),
                    "--fallback",
                    "--process",
                    str(os.getpid()),
                ],
                pass_fds=(registered,),
            )
        except OSError:
            os.close(ready)
            os.close(registered)
            return None
        os.close(registered)
        # The agent closes its end once polkit knows it; give up waiting after a while.
        with contextlib.suppress(OSError):
            select.select([ready], [], [], REGISTER_TIMEOUT)
        os.close(ready)
        return cls(process)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)


def wanted(system: bool, ask: bool, remote: bool) -> bool:
    """A prompt can help: the system bus, a person at a terminal, and not root."""
    return system and ask and not remote and os.isatty(0) and os.geteuid() != 0
