"""CreateSession until running, beside its floor: ``systemd-run --scope tmux new-session -d``
for the same command, both driven from inside the container by a C client (busctl and
systemd-run), one after another and 20 at once."""

from __future__ import annotations

from statistics import median

from bench.report import table
from tests.sandbox import Sandbox

TMUX = (
    "tmux -f /dev/null -S /run/bench-raw/$i.sock new-session -d -s main -x 200 -y 50 -- /bin/bash"
)
RAW = f"systemd-run --quiet --scope --unit=bench-raw-$i --slice=hostagent.slice {TMUX}"
OURS = (
    "busctl call --quiet org.hostagent.HostAgent1 /org/hostagent/HostAgent1 "
    "org.hostagent.HostAgent1.Manager CreateSession sssa{sv} bench-$i shell /tmp"
)
PLAIN = f"{OURS} 0"
# The same create of an agent's preset, which the agent profile confines with no word: the
# shell's own program, so that the sandbox is all that differs.
AGENT = "name: bench-agent\ncommand: [/bin/bash]\nprompt_args: []\n"
BOXED = PLAIN.replace(" shell /tmp", " bench-agent /tmp")
PRESET = (
    f"mkdir -p /etc/hostagent/presets.d && printf '{AGENT}' > "
    "/etc/hostagent/presets.d/bench-agent.yaml && hostagentctl --system reload"
)
# Each line of output is one call's wall time in µs; a parallel round prints its total.
# Sequential calls are a tenth of a second apart, outside the timing. Every scope's start
# moves a process into a new cgroup, and the kernel makes the first such move after a quiet
# moment wait for an RCU grace period (10 to 20 ms here), while a move within about one grace
# period of the last one does not wait. Back to back, whichever side creates faster than that
# skips the wait and the other pays it: a threshold of the kernel's, not a cost of either side
# (docs/benchmarks-notes.md, "The kernel's grace period between creates"). Apart, both pay it,
# as a create that a person or a script asks for does.
SEQUENTIAL = """
mkdir -p /run/bench-raw
for i in $(seq "$1" "$2"); do
  sleep 0.1
  s=$(date +%s%N); {cmd} >/dev/null; e=$(date +%s%N); echo $(( (e - s) / 1000 ))
done
"""
PARALLEL = """
mkdir -p /run/bench-raw
s=$(date +%s%N)
for i in $(seq "$1" "$2"); do {cmd} >/dev/null & done
wait
e=$(date +%s%N); echo $(( (e - s) / 1000 ))
"""
CLEANUP = """
for u in $(systemctl list-units --plain --no-legend 'bench-raw-*' | awk '{print $1}'); do
  systemctl stop "$u"; done
rm -rf /run/bench-raw
for n in $(hostagentctl --system --no-legend list | awk '/^bench-/ {print $1}'); do
  hostagentctl --system rm "$n"; done
# Every round starts from nothing: a session left over would be load the next one pays for.
if hostagentctl --system --no-legend list | grep -q '^bench-'; then
  echo "bench: sessions left after cleanup" >&2; exit 1; fi
"""


def _run(sb: Sandbox, script: str, cmd: str, first: int, last: int) -> list[float]:
    out = (
        sb.run("/bin/sh", "-c", script.format(cmd=cmd), "sh", str(first), str(last), timeout=600)
        .check()
        .stdout
    )
    return [int(x) / 1000 for x in out.split()]


def run(sb: Sandbox, quick: bool) -> tuple[str, dict[str, float]]:
    """The create section and its figures: each kind's median ms over every call, and each
    ratio as the median of the rounds' own ratios (ratio, ratio-20). A round times raw and
    ours one right after the other, so a minute when the machine is slow for both (another
    guest's load) moves both sides of its ratio, and the median of rounds is what the goal
    is judged on."""
    # Quick is still three rounds: CI compares its ratio with the goal, and one round of a
    # few creates strays too far from the median to guard anything.
    n = 10 if quick else 20
    rounds = 3 if quick else 10
    figures: dict[str, list[float]] = {
        "raw": [],
        "ours": [],
        "raw-20": [],
        "ours-20": [],
        "boxed": [],
    }
    ratios: dict[str, list[float]] = {"ratio": [], "ratio-20": [], "sandbox": []}
    sb.sh(PRESET).check()
    for r in range(rounds):
        base = r * 100
        for key, cmd in (("raw", RAW), ("ours", PLAIN)):
            figures[key] += _run(sb, SEQUENTIAL, cmd, base + 1, base + n)
            sb.sh(CLEANUP).check()
            total = _run(sb, PARALLEL, cmd, base + 50, base + 69)[0]
            figures[f"{key}-20"].append(total / 20)
            sb.sh(CLEANUP).check()
        figures["boxed"] += _run(sb, SEQUENTIAL, BOXED, base + 1, base + n)
        sb.sh(CLEANUP).check()
        ratios["ratio"].append(median(figures["ours"][-n:]) / median(figures["raw"][-n:]))
        ratios["ratio-20"].append(figures["ours-20"][-1] / figures["raw-20"][-1])
        ratios["sandbox"].append(median(figures["boxed"][-n:]) / median(figures["ours"][-n:]))
    med = {k: median(v) for k, v in (figures | ratios).items()}
    rows = [
        [
            "one after another",
            f"{med['raw']:.1f}",
            f"{med['ours']:.1f}",
            f"{med['ratio']:.2f}",
            _spread(ratios["ratio"]),
        ],
        [
            "20 at once (per session)",
            f"{med['raw-20']:.1f}",
            f"{med['ours-20']:.1f}",
            f"{med['ratio-20']:.2f}",
            _spread(ratios["ratio-20"]),
        ],
    ]
    boxed = [
        [
            "one after another",
            f"{med['ours']:.1f}",
            f"{med['boxed']:.1f}",
            f"{med['sandbox']:.2f}",
            _spread(ratios["sandbox"]),
        ],
    ]
    text = (
        "## create\n\n"
        f"Median ms per session over {rounds} round(s) of {n} sequential creates (a tenth of a "
        "second apart, outside the timing) and of 20 concurrent ones. Baseline: `systemd-run "
        "--scope --slice=hostagent.slice tmux new-session -d` for the same shell; ours: "
        "`busctl call … CreateSession`, which replies once the scope runs. Both clients are C "
        "programs started per call. Each round times both, one after the other; the ratio is "
        "the median of the rounds' ratios.\n\n"
        + table(["run", "raw ms", "hostagent ms", "ratio (goals above)", "rounds' ratios"], rows)
        + "\n\nThe same create of an agent's preset (the same shell), which the agent profile "
        "confines with no word (hostagent/profile.py: the system and home read-only, the tree, "
        "the caches and its state writable, the secrets and other CLIs' state hidden), made by "
        "the held child (forked by the forker) before it drops to the owner, beside the `shell` "
        "create, which has no sandbox (and is kept apart from its siblings, as every session "
        "on the system daemon is):\n\n"
        + table(["run", "without ms", "sandboxed ms", "ratio", "rounds' ratios"], boxed)
        + "\n"
    )
    return text, med


def _spread(ratios: list[float]) -> str:
    return f"{min(ratios):.2f} to {max(ratios):.2f}"


if __name__ == "__main__":
    import sys

    with Sandbox(name="bench-create") as box:
        box.daemon_start()
        print(run(box, "--quick" in sys.argv)[0])
