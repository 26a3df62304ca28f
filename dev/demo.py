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


def sandbox_demo() -> int:
    with Sandbox() as sb:

        def ctl(*args: str):
            return sb.ctl(*args, user=USER, system=True)

        say(f"A throwaway machine with a real systemd booted (boot id {sb.boot_id()})")
        sb.daemon_start()
        show(sb.run("systemctl", "status", "--no-pager", "-n0", "hostagent").stdout)

        say(f"{USER} creates a session of the stand-in agent")
        ctl("new", "--preset", "demo-agent", "--name", "demo", "--cwd", f"/home/{USER}").check()
        wait_screen(ctl, "demo", "> ")
        ctl("send", "demo", "hello from before the reboot").check()
        wait_screen(ctl, "demo", "You said: hello from before the reboot")
        show(ctl("list").stdout)
        say("Its screen (hostagentctl capture demo)")
        show(screen_top(ctl("capture", "demo").stdout))
        say("The scope in systemd: tmux and the agent, in hostagent.slice")
        show(sb.run("systemctl", "status", "--no-pager", "-n0", "hostagent-demo.scope").stdout)

        leader = json.loads(ctl("--json", "status", "demo").stdout)["Leader"]
        say("systemctl restart hostagent: the session keeps running")
        sb.daemon_restart()
        after = json.loads(ctl("--json", "status", "demo").stdout)
        show(ctl("list").stdout)
        print(f"tmux server pid before {leader}, after {after['Leader']}")

        say("Reboot the machine")
        sb.reboot()
        print(f"new boot id {sb.boot_id()}")
        sb.daemon_start()
        show(ctl("list").stdout)
        show(ctl("status", "demo").stdout)

        say("hostagentctl resume demo: the agent continues the same conversation")
        ctl("resume", "demo").check()
        screen = wait_screen(ctl, "demo", "Resumed the conversation")
        show(screen_top(screen))
        show(ctl("list").stdout)
    say("Done; the sandbox is gone.")
    return 0


def host_demo() -> int:
    """On a real systemd host: the user's own manager and session bus."""
    env = dict(os.environ)
    venv = Path(__file__).resolve().parent.parent / ".venv" / "bin"
    env["PATH"] = f"{venv}:{env.get('PATH', '')}"

    def ctl(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "hostagentctl"), "--user", *args], env=env, capture_output=True, text=True
        )

    say("Starting hostagent --user on your session bus")
    daemon = subprocess.Popen([str(venv / "hostagent"), "--user"], env=env)
    try:
        time.sleep(1)
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
