"""Activity detection in the sandbox: how long after the stand-in agent shows a screen the bus
says so (p50, p95), and what watched idle sessions cost the daemon.

    sudo .venv/bin/python -m bench.activity [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time

import yaml
from dbus_fast import Message, MessageType, Variant

from bench import probe
from bench.report import machine, percentile, table
from hostagent import SESSION_INTERFACE, profile
from hostagent.bus.call import add_match
from hostagent.client.library import Client
from tests.sandbox import Sandbox

WAIT = 30_000_000
SESSIONS = "/var/lib/hostagent/sessions"
SCREEN_ONLY_PRESET = """\
name: demo-screen
command: [hostagent-demo-agent]
state: ["{home}/.demo-agent/"]
activity:
  rules:
    - {activity: blocked, screen: '^Do you want to proceed\\? \\(y/n\\)$', lines: 1}
    - {activity: working, screen: '\\(esc to interrupt\\)$', lines: 1}
  fallback: idle
"""


class Signals:
    """Every Activity change of every session, and each question it asks (as "question"),
    stamped on arrival."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, float]] = []  # (object path, activity, time)
        self.arrived = asyncio.Event()  # set at each one, for a wait_for to look again

    async def wait_for(self, path: str, kind: str, after: float) -> float:
        """When path's kind first arrived after after: waited for, 30 s at most."""
        async with asyncio.timeout(30):
            while (at := self.first(path, kind, after)) is None:
                self.arrived.clear()
                await self.arrived.wait()
        return at

    def on_message(self, msg: Message) -> None:
        if msg.message_type is not MessageType.SIGNAL or msg.member != "PropertiesChanged":
            return
        if msg.body[0] != SESSION_INTERFACE:
            return
        now = time.time()
        if "Activity" in msg.body[1]:
            self.seen.append((msg.path, msg.body[1]["Activity"].value, now))
        if "id" in msg.body[1].get("Question", Variant("a{sv}", {})).value:
            self.seen.append((msg.path, "question", now))
        self.arrived.set()

    def first(self, path: str, activity: str, after: float) -> float | None:
        return next(
            (t for p, a, t in self.seen if p == path and a == activity and t >= after), None
        )


async def subscribe(client: Client) -> Signals:
    signals = Signals()
    client.bus.add_message_handler(signals.on_message)
    await add_match(
        client.bus, "type='signal',member='PropertiesChanged',path_namespace='/org/hostagent'"
    )
    return signals


def traces(sb: Sandbox, path: str) -> list[tuple[str, float]]:
    out = sb.run("cat", path).stdout.split()
    return [(out[i], float(out[i + 1])) for i in range(0, len(out) - 1, 2)]


async def latency(sb: Sandbox, client: Client, preset: str, rounds: int) -> dict[str, list[float]]:
    """ms from the agent showing a screen to the bus announcing its activity."""
    name = f"lat-{preset}"
    trace = f"/dev/shm/trace-{name}"  # a session's /tmp is its own under the profile
    sb.run("rm", "-f", trace)
    env = {"DEMO_AGENT_TRACE": trace, "DEMO_AGENT_THINK": "0"}
    path = await client.create(name, preset, "/tmp", {"env": Variant("a{ss}", env)})
    signals = await subscribe(client)
    result: dict[str, list[float]] = {"working": [], "blocked": [], "idle": []}
    await client.wait(name, ["idle"], WAIT)
    for _ in range(rounds):
        for text, expect in (("/work 1", "working"), ("/ask", "blocked"), ("y", "idle")):
            start = time.time()
            await client.send_text(name, text, True)
            await client.wait(name, [expect], WAIT)
            await client.wait(name, ["idle", "blocked"], WAIT)  # where each step settles
            shown = [t for e, t in traces(sb, trace) if e == expect and t >= start]
            if shown:
                announced = signals.first(path, expect, start)
                if announced is not None:
                    result[expect].append((announced - shown[0]) * 1000)
    await client.remove(name)
    return result


PACE = 1.5  # seconds between two questions of the inbox bench


async def send_latency(sb: Sandbox, client: Client, rounds: int) -> list[float]:
    """ms from a SendText call (a line and its Enter) to the bus saying the agent works: the
    stand-in agent, which as Claude Code tells no paste from typing by time (enter_gap: 0),
    with its hooks."""
    name = "lat-send"
    env = {"DEMO_AGENT_THINK": "0.5"}
    path = await client.create(name, "demo-agent", "/tmp", {"env": Variant("a{ss}", env)})
    signals = await subscribe(client)
    found: list[float] = []
    await client.wait(name, ["idle"], WAIT)
    for i in range(rounds):
        start = time.time()
        await client.send_text(name, f"line {i}", True)
        working = await signals.wait_for(path, "working", start)
        found.append((working - start) * 1000)
        await client.wait(name, ["idle"], WAIT)
    await client.remove(name)
    return found


async def inbox_latency(sb: Sandbox, client: Client, rounds: int) -> dict[str, list[float]]:
    """ms from the stand-in agent drawing its question to the bus carrying it in Question,
    and from an Answer's call to the bus saying the agent left blocked."""
    name = "lat-inbox"
    trace = f"/dev/shm/trace-{name}"
    sb.run("rm", "-f", trace)
    env = {"DEMO_AGENT_TRACE": trace, "DEMO_AGENT_THINK": "0"}
    path = await client.create(name, "demo-screen", "/tmp", {"env": Variant("a{ss}", env)})
    signals = await subscribe(client)
    result: dict[str, list[float]] = {"question on the bus": [], "answer → not blocked": []}
    await client.wait(name, ["idle"], WAIT)
    for _ in range(rounds):
        # Paced as a person answers, a second or more apart: back to back, the rounds spend
        # the pane watch's budget of screen reads (panewatch.py: RATE a second) and measure it.
        await asyncio.sleep(PACE)
        start = time.time()
        await client.send_text(name, "/ask", True)
        announced = await signals.wait_for(path, "question", start)
        question = next(q for q in await client.questions() if q.session == name)
        shown = [t for e, t in traces(sb, trace) if e == "blocked" and t >= start]
        if shown:
            result["question on the bus"].append((announced - shown[0]) * 1000)
        asked = time.time()
        await client.answer(name, "y", question.id)
        await client.wait(name, ["idle", "working"], WAIT)
        left = min(
            (t for e in ("idle", "working") if (t := signals.first(path, e, asked)) is not None),
            default=None,
        )
        if left is not None:
            result["answer → not blocked"].append((left - asked) * 1000)
        await client.wait(name, ["idle"], WAIT)
    await client.remove(name)
    return result


# The stand-in agent under the agent profile (no word), and the same asking for none of it.
UNCONFINED = list(profile.UNCONFINED)


async def turn_cost(sb: Sandbox, client: Client, rounds: int) -> dict[str, list[float]]:
    """ms from sending a line to the stand-in agent to the bus saying it is idle again, its
    answer written to its conversation, in a sandboxed session and in one without, turn about."""
    sessions = {"sandboxed": "turn-boxed", "plain": "turn-plain"}
    env = Variant("a{ss}", {"DEMO_AGENT_THINK": "0"})
    for kind, name in sessions.items():
        words = {"properties": Variant("as", UNCONFINED)} if kind == "plain" else {}
        await client.create(name, "demo-agent", "/tmp", {"env": env, **words})
        await client.wait(name, ["idle"], WAIT)
    result: dict[str, list[float]] = {kind: [] for kind in sessions}
    for _ in range(rounds):
        for kind, name in sessions.items():
            start = time.monotonic()
            await client.send_text(name, "/work 0.5", True)
            await client.wait(name, ["working"], WAIT)
            await client.wait(name, ["idle"], WAIT)
            result[kind].append((time.monotonic() - start) * 1000)
    for name in sessions.values():
        await client.remove(name)
    return result


def hook_cost(sb: Sandbox, command: str, rounds: int, token: str = "") -> list[float]:
    """ms the agent waits for one hook: ``sh -c COMMAND`` with a hook's JSON on stdin, as an
    agent CLI runs it."""
    script = (
        'for i in $(seq "$1"); do s=$(date +%s%N); echo \'{"session_id":"bench"}\' | '
        'HOSTAGENT_HOOK_TOKEN="$3" /bin/sh -c "$2" 2>/dev/null; e=$(date +%s%N); '
        "echo $(( (e - s) / 1000 )); done"
    )
    out = sb.run("/bin/sh", "-c", script, "sh", str(rounds), command, token).stdout.split()
    return [int(x) / 1000 for x in out]


async def hook_costs(sb: Sandbox, client: Client, rounds: int) -> dict[str, list[float]]:
    """The two hook paths side by side: ``hostagentctl hook`` over the bus, and the line the
    settings file's own command writes into the hooks FIFO."""
    name = "hook-bench"
    await client.create(name, "demo-agent", "/tmp", {})
    settings = json.loads(sb.run("cat", f"/run/hostagent/0/{name}.d/hooks.json").check().stdout)
    fifo_command = settings["hooks"]["Stop"][0]["hooks"][0]["command"]
    record = yaml.safe_load(sb.run("cat", f"{SESSIONS}/{name}.yaml").check().stdout)
    result = {
        "hostagentctl hook (D-Bus)": hook_cost(sb, "hostagentctl --system hook Stop", rounds),
        "settings file's command (FIFO)": hook_cost(sb, fifo_command, rounds, record["hook_token"]),
    }
    await client.remove(name)
    return result


STREAMS = {
    # large bursts with short pauses, as a build log or a streamed answer prints
    "bursts": "for i in $(seq 100000); do seq 100; sleep 0.02; done",
    # small redraws ten times a second, as a spinner ticks
    "ticks": "for i in $(seq 100000); do printf '\\r%s' $i; sleep 0.1; done",
    # as fast as the terminal takes it
    "flat out": "yes 'a line of output, printed as fast as the terminal takes it'",
}


async def streaming_cost(sb: Sandbox, client: Client, seconds: float) -> dict[str, float]:
    """The service's share of one core (the daemon and its helpers) while one session streams
    output."""
    result = {}
    for kind, command in STREAMS.items():
        name = f"stream-{kind.replace(' ', '-')}"
        await client.create(name, "shell", "/tmp", {})
        await client.wait(name, ["idle"], WAIT)
        await client.send_text(name, command, True)
        result[kind] = await probe.cpu_percent(sb, seconds)
        await client.remove(name)
    return result


async def idle_cost(sb: Sandbox, client: Client, sessions: int, seconds: float) -> dict[str, float]:
    names = [f"idle-{i}" for i in range(sessions)]
    slots = asyncio.Semaphore(16)

    async def one(name: str) -> None:
        async with slots:
            await client.create(name, "shell", "/tmp", {})
            await client.wait(name, ["idle"], WAIT)

    await asyncio.gather(*(one(n) for n in names))
    cpu = await probe.cpu_percent(sb, seconds)
    cats = int(sb.sh("pgrep -c -x cat || true").stdout.strip() or 0)
    rss = probe.daemon_rss_mb(sb)
    for name in names:
        await client.remove(name)
    return {
        "sessions": sessions,
        "seconds": seconds,
        "cpu_percent": cpu,
        "pipe_processes": cats,
        "rss_mb": rss,
    }


async def run(sb: Sandbox, quick: bool) -> tuple[str, dict[str, float]]:
    client = await Client.connect(True, sb.bus_address)
    try:
        rounds = 5 if quick else 20
        rows = []
        lat = await latency(sb, client, "demo-screen", rounds)
        for activity, values in lat.items():
            rows.append(
                [
                    activity,
                    str(len(values)),
                    f"{percentile(values, 50):.0f}",
                    f"{percentile(values, 95):.0f}",
                ]
            )
        inbox = await inbox_latency(sb, client, rounds)
        sent = await send_latency(sb, client, rounds)
        hooks = await hook_costs(sb, client, rounds)
        turns = await turn_cost(sb, client, rounds)
        streams = await streaming_cost(sb, client, 3 if quick else 10)
        cost = await idle_cost(sb, client, 50 if quick else 200, 10 if quick else 30)
    finally:
        client.close()
    fifo = hooks["settings file's command (FIFO)"]
    figures = {
        "hook_p50": percentile(fifo, 50),
        "hook_p95": percentile(fifo, 95),
        "latency_p50": max(percentile(v, 50) for v in lat.values()),
        "latency_p95": max(percentile(v, 95) for v in lat.values()),
        "sandbox_turn_ratio": percentile(turns["sandboxed"], 50) / percentile(turns["plain"], 50),
        "question_p95": percentile(inbox["question on the bus"], 95),
        "answer_p95": percentile(inbox["answer → not blocked"], 95),
        "send_working_p50": percentile(sent, 50),
    }
    text = figures_text(quick, rows, hooks, turns, streams, cost) + inbox_text(inbox, sent)
    return text, figures


def inbox_text(inbox: dict[str, list[float]], sent: list[float]) -> str:
    return (
        "\nThe approval inbox, on the stand-in agent's y/n question read from its screen, one "
        f"question every {PACE:g} s or so: from its drawing the question to the `Question` "
        "property's PropertiesChanged reaching a client, and from an `Answer` call to the bus "
        "saying the agent left blocked:\n\n"
        + table(
            ["step", "n", "p50 ms", "p95 ms"],
            [
                [step, str(len(v)), f"{percentile(v, 50):.0f}", f"{percentile(v, 95):.0f}"]
                for step, v in {**inbox, "a line sent → working": sent}.items()
            ],
        )
        + "\n\nA line sent is a SendText of the stand-in agent (enter_gap 0, as Claude Code's) "
        "to the bus saying it works.\n"
    )


def figures_text(
    quick: bool,
    rows: list[list[str]],
    hooks: dict[str, list[float]],
    turns: dict[str, list[float]],
    streams: dict[str, float],
    cost: dict[str, float],
) -> str:
    return (
        "## Activity detection\n\n"
        f"Machine: {machine()}. Mode: {'quick' if quick else 'full'}.\n\n"
        "Latency is from the stand-in agent writing a screen (its own timestamp) to the "
        "PropertiesChanged signal reaching a client on the host, with the stand-in agent read "
        "from its screen alone (no hooks):\n\n"
        + table(["activity", "n", "p50 ms", "p95 ms"], rows)
        + "\n\n"
        "What a hook costs the agent, which waits for it (`sh -c COMMAND` with the hook's JSON "
        "on stdin, as the agent runs it), by either path:\n\n"
        + table(
            ["path", "n", "p50 ms", "p95 ms"],
            [
                [path, str(len(v)), f"{percentile(v, 50):.1f}", f"{percentile(v, 95):.1f}"]
                for path, v in hooks.items()
            ],
        )
        + "\n\nA turn of the stand-in agent (a line sent, 0.5 s of work, its answer written "
        "to its conversation under the home, idle again on the bus), in a session the agent "
        "profile confines (no word) and in one created `--unconfined`, turn about:\n\n"
        + table(
            ["session", "n", "p50 ms", "p95 ms"],
            [
                [kind, str(len(v)), f"{percentile(v, 50):.0f}", f"{percentile(v, 95):.0f}"]
                for kind, v in turns.items()
            ],
        )
        + "\n\nThe service's share of one core (its cgroup: the daemon and the helpers it runs) "
        "while one session streams output "
        f"({3 if quick else 10} s each):\n\n"
        + table(["output", "daemon CPU %"], [[k, f"{v:.1f}"] for k, v in streams.items()])
        + "\n\n"
        f"Idle cost: {cost['sessions']} idle shell sessions watched for "
        f"{cost['seconds']:.0f} s: the service used **{cost['cpu_percent']:.2f} %** of one core "
        f"(RSS {cost['rss_mb']:.0f} MB); {cost['pipe_processes']} `cat` processes carry the "
        "panes' output (one per session, blocked in read).\n"
    )


def main() -> None:
    p = argparse.ArgumentParser(prog="bench.activity")
    p.add_argument("--quick", action="store_true")
    args = p.parse_args()
    with Sandbox(name="bench-activity") as sb:
        sb.sh(
            "mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/demo-screen.yaml",
            input=SCREEN_ONLY_PRESET,
        ).check()
        sb.daemon_start()
        section, _ = asyncio.run(run(sb, args.quick))
    print(section)


if __name__ == "__main__":
    main()
