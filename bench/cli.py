"""hostagentctl's everyday verbs beside systemctl's: `hostagentctl list` against `systemctl
list-units` and `hostagentctl status NAME` against `systemctl status UNIT`, with ten shell
sessions, typed as root in the sandbox (so both ask the system bus), each command a fresh
process as a person or a script starts it.

A round runs the four commands one after the other; the figure for each is the median of its
rounds, and the ratio of the medians is what the goal (≤ 3×) is judged on. The timing is
Python's clock inside the container, around each command's whole run (fork, exec, the
interpreter, the bus, the output), so both sides pay the same for being measured.
"""

from __future__ import annotations

import json
from statistics import median

from bench.report import table
from tests.sandbox import Sandbox

SESSIONS = 10
ROUNDS = 21
GOAL = 3.0
COMMANDS = {
    "hostagentctl list": ["hostagentctl", "list"],
    "systemctl list-units": ["systemctl", "list-units", "--no-pager"],
    "hostagentctl status NAME": ["hostagentctl", "status", "cli-0"],
    "systemctl status UNIT": ["systemctl", "status", "--no-pager", "hostagent-cli-0.scope"],
}
# Run inside the container: each command once to warm the caches, then ROUNDS rounds; prints
# {label: [seconds, ...]}.
TIMER = """
import json, subprocess, sys, time
commands, rounds = json.loads(sys.argv[1]), int(sys.argv[2])
def once(argv):
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - start
    if done.returncode not in (0, 3):  # status says 3 for a unit that is not running
        sys.exit(f"{argv}: {done.returncode}: {done.stderr.decode()}")
    return took
for argv in commands.values():
    once(argv)
times = {label: [] for label in commands}
for _ in range(rounds):
    for label, argv in commands.items():
        times[label].append(once(argv))
print(json.dumps(times))
"""


def run(sb: Sandbox, quick: bool) -> tuple[str, dict[str, float]]:
    """The CLI section and its figure: the worse of the two ratios (cli_ratio). Quick and full
    runs are the same: 21 rounds take a few seconds."""
    names = [f"cli-{i}" for i in range(SESSIONS)]
    for name in names:
        sb.ctl("new", "--preset", "shell", "--name", name, system=True).check()
    # Timed once every session sits at its prompt, not while the daemon still follows starts.
    sb.ctl("wait", "--for", "idle", "--timeout", "60", *names, system=True).check()
    try:
        out = (
            sb.run("python3", "-c", TIMER, json.dumps(COMMANDS), str(ROUNDS), timeout=300)
            .check()
            .stdout
        )
    finally:
        sb.ctl("rm", *names, system=True)
    ms = {label: median(times) * 1000 for label, times in json.loads(out).items()}
    pairs = [
        ("hostagentctl list", "systemctl list-units"),
        ("hostagentctl status NAME", "systemctl status UNIT"),
    ]
    ratios = [ms[ours] / ms[theirs] for ours, theirs in pairs]
    rows = [
        [f"`{ours}` ÷ `{theirs}`", f"{ms[ours]:.1f}", f"{ms[theirs]:.1f}", f"{ratio:.2f}"]
        for (ours, theirs), ratio in zip(pairs, ratios, strict=True)
    ]
    text = (
        "## hostagentctl beside systemctl\n\n"
        + (__doc__ or "").split("\n\n", 1)[0].strip().replace("\n", " ")
        + f" Median ms of {ROUNDS} rounds.\n\n"
        + table(["commands", "hostagentctl ms", "systemctl ms", "ratio"], rows)
        + f"\n\nThe worse ratio is {max(ratios):.2f} (goal ≤ {GOAL:.0f}).\n"
    )
    return text, {
        "cli_ratio": max(ratios),
        "cli_list_ms": ms["hostagentctl list"],
        "cli_status_ms": ms["hostagentctl status NAME"],
    }


if __name__ == "__main__":
    import sys

    with Sandbox(name="bench-cli") as box:
        box.daemon_start()
        print(run(box, "--quick" in sys.argv)[0])
