"""Run every benchmark in the real-systemd sandbox and write docs/benchmarks.md.

    sudo .venv/bin/python -m bench            # the full run (1000 sessions; ~6 minutes)
    sudo .venv/bin/python -m bench --quick    # a few minutes; what CI runs
    sudo .venv/bin/python -m bench --only usage     # one part (cli, fleet, hostile, usage), printed

--out DIR writes the report and plots there instead of docs/ (CI keeps docs/ as committed).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import subprocess
import sys
from pathlib import Path

from bench import activity, cli, create, fleet, goals, hostile, plot, realcli, scale, usage
from bench.report import BENCHMARKS_MD, machine, table
from tests.sandbox import Sandbox

NOTES = BENCHMARKS_MD.parent / "benchmarks-notes.md"  # hand-written: misses and profiles
INTRO = """\
# Benchmarks

Measured by `bench/` (`sudo .venv/bin/python -m bench`) inside the real-systemd sandbox of the
tests (systemd 252, dbus-daemon, tmux, Debian 12's Python and dbus-fast 1.84 for the daemon),
on this project's machine: {machine}. Figures are medians or percentiles of repeated runs, each
beside its baseline in the same run. Run {when}, mode {mode}, on commit {commit}.
"""


def commit() -> str:
    """The commit measured, and whether the tree had changes beside it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=BENCHMARKS_MD.parent.parent, capture_output=True, text=True
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    # Changes to docs/ alone (this report's own text, say) measure the same code.
    changed = git("status", "--porcelain", "--", ".", ":!docs")
    return head + (" with uncommitted changes" if changed else "")


# The parts --only runs alone: each returns its section and its figures.
PARTS = {"cli": cli.run, "hostile": hostile.run, "usage": usage.run}
# The parts that boot machines of their own (--only runs them alone too).
OWN_MACHINES = {"fleet": fleet.run}


def figures(
    sc: scale.Scale,
    cr: dict[str, float],
    act: dict[str, float],
    host: dict[str, float],
    parts: dict[str, float],
) -> goals.Figures:
    """The run's figures that goals.GOALS name; parts: those the parts (usage, fleet) named
    themselves."""
    by_n = {p.n: p for p in sc.points}
    top = sc.points[-1]
    return {
        "create_ratio": cr["ratio"],
        "create20_ratio": cr["ratio-20"],
        "sandbox_ratio": cr["sandbox"],
        "list_growth": by_n[100].list_p50 / by_n[10].list_p50,
        "list_p99": top.list_p99,
        "rss_mb": top.rss_mb,
        "idle_cpu": top.idle_cpu,
        "hook_p95": act["hook_p95"],
        "latency_p95": act["latency_p95"],
        "sandbox_turn_ratio": act["sandbox_turn_ratio"],
        "restart_s": top.restart_s,
        "known_s": top.known_s,
        "reboot_s": top.reboot_s,
        "hostile_excess": host["hostile_excess"],
        **parts,
    }


SCALE_HEADER = [
    "sessions",
    "List p50 ms",
    "List p99 ms",
    "Get p99 ms",
    "RSS MB",
    "idle CPU %",
    "restart s",
    "activity known s",
    "reboot s",
    "create all s",
    "containment check ms",
]


def scale_section(sc: scale.Scale, pngs: list[Path], out: Path) -> str:
    rows = [
        [
            str(p.n),
            f"{p.list_p50:.1f}",
            f"{p.list_p99:.1f}",
            f"{p.get_p99:.1f}",
            f"{p.rss_mb:.0f}",
            f"{p.idle_cpu:.2f}",
            f"{p.restart_s:.2f}",
            f"{p.known_s:.2f}",
            f"{p.reboot_s:.2f}",
            f"{sc.create_s[p.n]:.0f}",
            f"{p.containment_ms:.1f} ({p.containment_procs} procs)",
        ]
        for p in sc.points
    ]
    images = "\n".join(f"![{p.stem}]({p.relative_to(out).as_posix()})" for p in pngs)
    return (
        "## scale and recovery\n\n"
        "Shell sessions, created 16 at a time. Latencies are round trips from a dbus-fast "
        f"client on the host ({scale.CALLS} calls each). Idle CPU is the whole service's share "
        f"of one core (its cgroup: the daemon and the helpers it runs), measured from "
        f"{sc.idle.after:.0f} s after the last create over {sc.idle.window:.0f} s, while every "
        "session sits at its prompt. The containment check is the CPU time of one pass of the "
        "guard's walk over every running session's processes, run as the guard runs it. READY "
        "is systemd's own record, from the daemon's exec to READY=1: after `systemctl restart` "
        "with N live sessions, and after a reboot with N records. Activity known is from that "
        "restart's READY (when `systemctl restart` returned) until ListSessions reads none of "
        "the N sessions unknown.\n\n" + table(SCALE_HEADER, rows) + "\n\n" + images
    )


def main() -> None:
    p = argparse.ArgumentParser(prog="bench")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", type=Path, default=BENCHMARKS_MD.parent)
    p.add_argument(
        "--only", choices=sorted([*PARTS, *OWN_MACHINES]), help="run one part and print it"
    )
    args = p.parse_args()
    out: Path = args.out
    if args.only in OWN_MACHINES:
        text, part = OWN_MACHINES[args.only](args.quick)
        print(text)
        for line in goals.failures(part):
            print(line, file=sys.stderr)
        return
    if args.only:
        with Sandbox(name="bench") as sb:
            sb.daemon_start()
            text, part = PARTS[args.only](sb, args.quick)
            print(text)
            for line in goals.failures(part):
                print(line, file=sys.stderr)
        return
    with Sandbox(name="bench") as sb:
        sb.sh(
            "mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/demo-screen.yaml",
            input=activity.SCREEN_ONLY_PRESET,
        ).check()
        sb.daemon_start()
        create_text, create_figures = create.run(sb, args.quick)
        cli_text, cli_figures = cli.run(sb, args.quick)
        hostile_text, hostile_figures = hostile.run(sb, args.quick)
        activity_text, activity_figures = asyncio.run(activity.run(sb, args.quick))
        try:
            real = asyncio.run(realcli.measure(sb, 3 if args.quick else 20))
        except Exception as e:  # a real CLI misbehaving must not cost the other figures
            print(f"bench: the real-CLI benchmark failed: {e!r}", file=sys.stderr)
            real = None
        usage_text, usage_figures = usage.run(sb, args.quick)
        sc = scale.run(sb, args.quick)
    fleet_text, fleet_figures = fleet.run(args.quick)
    figures_ = figures(
        sc,
        create_figures,
        activity_figures,
        hostile_figures,
        {**usage_figures, **fleet_figures, **cli_figures},
    )
    pngs = plot.draw(sc, out / "bench")
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    report = "\n\n".join(
        [
            INTRO.format(
                machine=machine(),
                when=when,
                mode="quick" if args.quick else "full",
                commit=commit(),
            ),
            goals.section(figures_),
            create_text,
            cli_text,
            hostile_text,
            scale_section(sc, pngs, out),
            activity_text,
            usage_text,
            fleet_text,
            "## A real CLI's approval dialog\n\n"
            + (realcli.__doc__ or "").split("\n\n")[0]
            + "\n\n"
            + realcli.report(real),
            NOTES.read_text() if NOTES.exists() else "",
        ]
    )
    (out / BENCHMARKS_MD.name).write_text(report.rstrip() + "\n")
    print(report)
    missed = goals.failures(figures_)
    for line in missed:
        print(line, file=sys.stderr)
    if missed:
        sys.exit(1)


if __name__ == "__main__":
    main()
