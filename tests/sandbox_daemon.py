"""The hostagent daemon inside a sandbox: start, stop, kill it, drive it with hostagentctl,
read its journal, park it at a checkpoint, and say what it was doing when a systemctl call
hangs."""

from __future__ import annotations

import contextlib
import select
import subprocess
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tests.sandbox_host import Result, SandboxError

if TYPE_CHECKING:
    from tests.sandbox import Sandbox

CHECKPOINT_DIR = "/run/hostagent-checkpoints"  # armed by the sandbox's drop-in for the daemon


class DaemonControl:
    """Mixed into Sandbox, whose ``run`` these methods use."""

    run: Callable[..., Result]

    def _systemctl(self, *args: str, user: str | None = None) -> Result:
        try:
            if user is None:
                return self.run("systemctl", *args)
            return self.run("systemctl", "--user", *args, user=user)
        except subprocess.TimeoutExpired:
            raise SandboxError(
                f"systemctl {' '.join(args)} did not finish:\n{self._hang_report(user)}"
            ) from None

    def _hang_report(self, user: str | None) -> str:
        """What a hung daemon and its manager were doing: pending jobs, the daemon's state,
        and every thread's stack (the daemon dumps them on SIGUSR2)."""
        scope = ["--user"] if user else []
        journal = ["--user-unit", "hostagent.service"] if user else ["-u", "hostagent.service"]

        def output(*argv: str) -> str:
            try:
                return self.run(*argv, user=user, timeout=10).stdout
            except subprocess.TimeoutExpired:
                return f"({argv[0]} {argv[1]} timed out too)"

        output("systemctl", *scope, "kill", "-s", "USR2", "hostagent.service")
        return "\n".join(
            [
                output("systemctl", *scope, "list-jobs", "--no-pager"),
                output("systemctl", *scope, "status", "--no-pager", "-n", "0", "hostagent"),
                output("journalctl", *journal, "-n", "80", "--no-pager", "-o", "cat"),
            ]
        )

    def daemon_start(self, user: str | None = None) -> None:
        """Start hostagent: the system service, or user's own under ``systemd --user``."""
        self._forget_starts(user)
        result = self._systemctl("start", "hostagent.service", user=user)
        if result.returncode != 0:
            raise SandboxError(f"hostagent did not start:\n{self.journal(user=user, lines=30)}")

    def daemon_stop(self, user: str | None = None) -> None:
        self._systemctl("stop", "hostagent.service", user=user).check()

    def daemon_restart(self, user: str | None = None) -> None:
        self._forget_starts(user)
        result = self._systemctl("restart", "hostagent.service", user=user)
        if result.returncode != 0:
            raise SandboxError(f"hostagent did not restart:\n{self.journal(user=user, lines=30)}")

    def _forget_starts(self, user: str | None) -> None:
        """The suite starts the daemon far more often than anyone: without this, systemd's
        start limit (five starts in ten seconds) fails whichever test comes after a test that
        restarted it many times (test_races, then test_faults)."""
        self._systemctl("reset-failed", "hostagent.service", user=user)

    def daemon_kill(self, user: str | None = None) -> None:
        """SIGKILL the daemon and leave it down (the sandbox's unit has Restart=no)."""
        self._systemctl("kill", "--signal=SIGKILL", "hostagent.service", user=user)
        # KillUnit has signalled the process when it returns; stop then only waits for the
        # unit to settle, so the next start is a fresh one.
        self._systemctl("stop", "hostagent.service", user=user)
        self._systemctl("reset-failed", "hostagent.service", user=user)

    def daemon_pid(self, user: str | None = None) -> int:
        out = self._systemctl("show", "-P", "MainPID", "hostagent.service", user=user).stdout
        return int(out.strip() or 0)

    def ctl(
        self, *args: str, user: str | None = None, system: bool | None = None, **kw: object
    ) -> Result:
        """hostagentctl inside; the system bus unless a user is named and system is not set."""
        mode = "--system" if (user is None if system is None else system) else "--user"
        return self.run("hostagentctl", mode, *args, user=user, **kw)  # type: ignore[arg-type]

    def screen_showing(
        self, name: str, text: str, user: str | None = None, timeout: float = 10.0
    ) -> str:
        """The session's screen once it shows text, or "" when it never did.

        Activity changes are events, but "this text is on the screen" is not one of them, so
        this reads the screen with a bounded capture loop.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.ctl("capture", name, user=user, system=True).stdout
            if text in screen:
                return screen
            time.sleep(0.1)
        return ""

    def journal(
        self,
        unit: str = "hostagent.service",
        lines: int = 200,
        user: str | None = None,
        this_run: bool = False,
    ) -> str:
        """The unit's last lines: the system unit's, or user's own unit's. With this_run, only
        the lines its running main process wrote: what a start logged is then there however
        much systemd logs beside it (a start that adopts many sessions runs a helper scope for
        each, and their lines pushed a recovery's own out of the last forty)."""
        scope = ["--user-unit", unit] if user else ["-u", unit]
        if this_run:
            pid = self._systemctl("show", "-P", "MainPID", unit, user=user).stdout.strip()
            field = "_SYSTEMD_USER_UNIT" if user else "_SYSTEMD_UNIT"
            scope = [f"_PID={pid}", f"{field}={unit}"]  # two fields: both must match
        return self.run(
            "journalctl", *scope, "-n", str(lines), "--no-pager", "-o", "cat", user=user
        ).stdout


class Parked:
    """A checkpoint armed in the container's daemon (hostagent/daemon/host/checkpoint.py).

    A writer inside the container opens the point's FIFO: that open returns only once the
    daemon, having reached the point, opens it for reading. ``wait`` therefore returns exactly
    when the daemon is parked; ``release`` closes the writer, and the daemon goes on.
    """

    def __init__(self, sb: Sandbox, point: str, session: str = "") -> None:
        self.sb = sb
        self.path = f"{CHECKPOINT_DIR}/{point}" + (f"@{session}" if session else "")
        sb.run("mkdir", "-p", "-m", "0700", CHECKPOINT_DIR).check()
        sb.run("rm", "-f", self.path).check()
        sb.run("mkfifo", "-m", "0600", self.path).check()
        self.writer = sb.popen("/bin/sh", "-c", 'exec 3>"$1"; echo parked; read _', "sh", self.path)

    def wait(self, timeout: float = 30.0) -> None:
        assert self.writer.stdout is not None
        ready, _, _ = select.select([self.writer.stdout], [], [], timeout)
        if not ready or self.writer.stdout.readline().strip() != "parked":
            raise SandboxError(f"the daemon never reached {self.path}")
        # Disarm at once, so only this one operation parks.
        self.sb.run("rm", "-f", self.path).check()

    def release(self) -> None:
        assert self.writer.stdin is not None
        with contextlib.suppress(BrokenPipeError, ValueError):
            self.writer.communicate("\n", timeout=10)

    def __enter__(self) -> Parked:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.writer.poll() is None:
            self.writer.kill()
        with contextlib.suppress(ValueError):
            self.writer.communicate()
        self.sb.run("rm", "-f", self.path)
