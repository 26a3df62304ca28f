"""The README's demo. On a machine whose PID 1 is not systemd it boots the test sandbox (a
throwaway systemd container); on a real systemd host it uses your own user manager."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.sandbox import Sandbox

USER = "alice"


def say(text: str) -> None:
    print(f"\n\033[1m==> {text}\033[0m", flush=True)


def show(result_text: str) -> None:
    print(result_text.rstrip())


def wait_screen(ctl, name: str, text: str, timeout: float = 20) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = ctl("capture", name).stdout
        if text in screen:
            return screen
        time.sleep(0.2)
    raise SystemExit(f"demo: {text!r} did not appear on the screen:\n{screen}")


def screen_top(screen: str) -> str:
    return "\n".join(line for line in screen.splitlines() if line.strip())


def expect(ok: bool, what: str) -> None:
    """The demo is also a test of the README's first command (.ci/run runs it): a step that
    did not do what it shows ends it, with the reason."""
    if not ok:
        raise SystemExit(f"demo: {what}")


def status(ctl, name: str) -> dict:
    result = ctl("status", name, "-o", "json")
    expect(result.returncode in (0, 3), f"status {name} failed: {result.stderr}")
    return json.loads(result.stdout)


def sandbox_demo() -> int:
    with Sandbox() as sb:

        def ctl(*args: str):
            return sb.ctl(*args, user=USER, system=True)

        say(f"A throwaway machine with a real systemd booted (boot id {sb.boot_id()})")
        sb.daemon_start()
        show(sb.run("systemctl", "status", "--no-pager", "-n0", "hostagent").stdout)

        say(f"{USER} creates a session of the stand-in agent")
        # An agent's session writes its working directory: a project, never the whole home.
        sb.sh(f"mkdir -p /home/{USER}/proj", user=USER).check()
        ctl(
            "new", "--preset", "demo-agent", "--name", "demo", "--cwd", f"/home/{USER}/proj"
        ).check()
        wait_screen(ctl, "demo", "> ")
        ctl("send", "demo", "hello from before the reboot").check()
        wait_screen(ctl, "demo", "You said: hello from before the reboot")
        show(ctl("list").stdout)
        say("Its screen (hostagentctl capture demo)")
        show(screen_top(ctl("capture", "demo").stdout))
        say("The scope in systemd: tmux and the agent, in hostagent.slice")
        show(sb.run("systemctl", "status", "--no-pager", "-n0", "hostagent-demo.scope").stdout)

        before = status(ctl, "demo")
        say("systemctl restart hostagent: the session keeps running")
        sb.daemon_restart()
        after = status(ctl, "demo")
        show(ctl("list").stdout)
        print(f"tmux server pid before {before['leader']}, after {after['leader']}")
        expect(
            after["state"] == "running" and after["leader"] == before["leader"],
            f"the session did not keep running across the restart: {after}",
        )

        say("Reboot the machine")
        boot = sb.boot_id()
        sb.reboot()
        print(f"new boot id {sb.boot_id()}")
        expect(sb.boot_id() != boot, "the reboot kept the boot id")
        sb.daemon_start()
        show(ctl("list").stdout)
        show(ctl("status", "demo").stdout)
        dormant = status(ctl, "demo")
        expect(
            dormant["state"] == "dormant", f"after the reboot the session is not dormant: {dormant}"
        )

        say("hostagentctl resume demo: the agent continues the same conversation")
        ctl("resume", "demo").check()
        screen = wait_screen(ctl, "demo", "Resumed the conversation")
        show(screen_top(screen))
        show(ctl("list").stdout)
        resumed = status(ctl, "demo")
        expect(
            resumed["agent_session_id"] == before["agent_session_id"],
            f"resumed into another conversation: {resumed['agent_session_id']}",
        )
    say("Done; the sandbox is gone.")
    return 0


def host_demo() -> int:
    """On a real systemd host: the user's own manager and session bus."""
    python = str(Path(__file__).resolve().parent.parent / ".venv" / "bin" / "python")

    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [python, "-m", "hostagent.cli.ctl", "--user", *args], capture_output=True, text=True
        )

    say("Starting hostagent --user on your session bus")
    daemon = subprocess.Popen([python, "-m", "hostagent.daemon.main", "--user"])
    try:
        deadline = time.monotonic() + 20
        while ctl("info").returncode != 0:  # until the daemon owns its name
            expect(daemon.poll() is None, "hostagent --user exited")
            expect(time.monotonic() < deadline, "hostagent --user did not answer within 20 s")
            time.sleep(0.1)
        ctl("new", "--preset", "demo-agent", "--name", "demo")
        wait_screen(ctl, "demo", "> ")
        ctl("send", "demo", "hello")
        wait_screen(ctl, "demo", "You said: hello")
        show(ctl("list").stdout)
        show(screen_top(ctl("capture", "demo").stdout))
        ctl("rm", "demo")
    finally:
        daemon.terminate()
        daemon.wait()
    return 0


def main() -> int:
    if (
        os.path.isdir("/run/systemd/system")
        and Path("/proc/1/comm").read_text().strip() == "systemd"
    ):
        return host_demo()
    return sandbox_demo()


if __name__ == "__main__":
    sys.exit(main())
