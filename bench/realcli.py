"""Activity latency on a real agent CLI: from Claude Code drawing its approval dialog to the bus
announcing ``blocked`` (PropertiesChanged), and its ``Question`` (asked through its
PermissionRequest hook, a Python start and a bus call), with its hooks as the preset sets them
up; and from the inbox's answer to the bus saying it works again.

The moment the dialog is drawn is taken inside the machine by a watcher that reads the pane
(tmux capture-pane, as root) every 2 ms; the announcement by a bus client that stamps each
PropertiesChanged on arrival. Both clocks are the machine's. A negative figure means the hook
(PermissionRequest) said blocked before the dialog was on the screen.

    sudo .venv/bin/python -m bench.realcli [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

from dbus_fast import Variant

from bench.activity import WAIT, subscribe
from bench.report import percentile, table
from hostagent.client.library import Client
from tests.integration.real_agents import (
    AGENTS,
    ENTER,
    control,
    installed,
    set_up_user,
    start_model_api,
)
from tests.sandbox import Sandbox

CLI = "claude"
DIALOG = "Do you want to proceed?"
# Prints the time the text first shows in the pane, polling every 2 ms for up to 60 s.
_WATCH = r"""
import subprocess, sys, time
sock, text = sys.argv[1:3]
end = time.time() + 60
while time.time() < end:
    out = subprocess.run(["tmux", "-S", sock, "capture-pane", "-p", "-t", "main"],
                         capture_output=True, text=True).stdout
    if text in out:
        print(time.time())
        break
    time.sleep(0.002)
"""


async def shown(client: Client, name: str, text: str, timeout: float, must: bool = True) -> bool:
    """Whether text shows on the session's screen within timeout (a bounded capture loop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if text in await client.capture(name, 0):
            return True
        await asyncio.sleep(0.05)
    if must:
        raise TimeoutError(f"{text!r} never showed on {name}:\n{await client.capture(name, 0)}")
    return False


async def _type(client: Client, name: str, text: str) -> None:
    await client.send_text(name, text, False)
    await client.send_text(name, ENTER, False)


async def measure(sb: Sandbox, rounds: int) -> dict[str, list[float]] | None:
    found = installed()
    agent = next(a for a in AGENTS if a.key == CLI)
    if CLI not in found or "node22" not in found:
        return None
    project = set_up_user(sb, agent, found[CLI][1], found["node22"][1])
    start_model_api(sb)
    control(sb, "release")
    client = await Client.connect(True, sb.bus_address)
    name = "bench-realcli"
    try:
        uid = int(sb.run("id", "-u", agent.user).stdout)
        # The first-run questions answered as Claude records the answers (the tests drive the
        # dialogs themselves): this measures the approval dialog alone.
        key = agent.env["ANTHROPIC_API_KEY"][-20:]
        seen = {
            "hasCompletedOnboarding": True,
            "theme": "dark",
            "customApiKeyResponses": {"approved": [key], "rejected": []},
            "projects": {project: {"hasTrustDialogAccepted": True}},
        }
        home = f"/home/{agent.user}"
        sb.sh(f"cat > {home}/.claude.json", input=json.dumps(seen), user=agent.user).check()
        # The permission mode is given on the command line instead of in settings, where
        # Claude would offer its auto mode first.
        sb.run("rm", "-f", f"{home}/.claude/settings.json").check()
        # Created by root for the user, as an admin would: their login PATH finds their Claude.
        options = {
            "env": Variant("a{ss}", dict(agent.env)),
            "user": Variant("u", uid),
            "args": Variant("as", ["--permission-mode", "default"]),
        }
        path = await client.create(name, agent.preset, project, options)
        await shown(client, name, agent.ready, 60)
        signals = await subscribe(client)
        sock = f"/run/hostagent/{uid}/{name}.sock"
        result: dict[str, list[float]] = {k: [] for k in KINDS}
        for _ in range(rounds):
            await client.wait(name, ["idle"], WAIT)
            watcher = sb.popen("/usr/bin/python3", "-c", _WATCH, sock, DIALOG)
            start = time.time()
            await _type(client, name, "please run the build")
            await client.wait(name, ["blocked"], WAIT)
            drawn_at = await asyncio.get_running_loop().run_in_executor(None, watcher.communicate)
            announced = signals.first(path, "blocked", start)
            asked = await signals.wait_for(path, "question", start)
            if drawn_at[0].strip() and announced is not None:
                result["blocked"].append((announced - float(drawn_at[0])) * 1000)
                result["question"].append((asked - float(drawn_at[0])) * 1000)
            await shown(client, name, DIALOG, 60)
            question = next(q for q in await client.questions() if q.session == name)
            answered = time.time()
            await client.answer(name, "1", question.id)
            went_on = await signals.wait_for(path, "working", answered)
            result["answer"].append((went_on - answered) * 1000)
            await shown(client, name, "Done: the command ran.", 60)
            await client.wait(name, ["idle"], WAIT)
            await client.send_text(name, "/clear", False)  # the next round starts a new screen
            await client.send_text(name, ENTER, False)
            await shown(client, name, agent.ready, 60)
        return result
    finally:
        try:
            await client.remove(name)
        finally:
            client.close()


KINDS = {
    "blocked": "dialog drawn → blocked on the bus",
    "question": "dialog drawn → its Question on the bus",
    "answer": "Answer → working on the bus",
}


def report(lat: dict[str, list[float]] | None) -> str:
    if lat is None:
        return f"Not measured: no real {CLI} installed (dev/agents), or it failed (see stderr).\n"
    rows = [
        [
            f"{CLI} {installed()[CLI][0]}",
            what,
            str(len(lat[kind])),
            f"{percentile(lat[kind], 50):.0f}",
            f"{percentile(lat[kind], 95):.0f}",
        ]
        for kind, what in KINDS.items()
    ]
    return table(["CLI", "from → to", "rounds", "p50 ms", "p95 ms"], rows)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    with Sandbox() as sb:
        sb.daemon_start()
        lat = asyncio.run(measure(sb, 3 if args.quick else 20))
    print(report(lat))


if __name__ == "__main__":
    main()
