"""The bench's goals in one place: the goals table of docs/benchmarks.md, and the guard that
fails a run which misses one.

Each goal is one figure of a run and its bound. The full run reports every goal as met or
missed. A guarded goal also fails the run (exit status 1) when its figure is past the bound by
more than the noise: how far one run of the same tree strays from another on this machine's
kind, measured and written down in docs/benchmarks-notes.md ("Run-to-run noise"). That is how
`bench --quick` in CI catches a regression without failing on a slow machine's bad minute.
The guarded figures are ratios (ours against a baseline in the same run, or one size against
another) and idle CPU, which do not move with the machine's speed the way times do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from bench.report import table

Figures = dict[str, float]


@dataclass(frozen=True)
class Goal:
    what: str  # the goals table's first column
    key: str  # the figure's name in the run's figures
    bound: float  # the figure may be at most this
    show: Callable[[float], str]  # the figure as the table shows it
    noise: float = 0.0  # guarded when > 0: the run fails past the guard line plus this
    # Where the guard's line is drawn: the goal itself, or, for a goal not yet reached, the
    # level the last full run measured, so that CI catches it getting worse meanwhile.
    today: float | None = None

    @property
    def guarded(self) -> bool:
        return self.noise > 0

    @property
    def line(self) -> float:
        return max(self.bound, self.today or self.bound) + self.noise

    def met(self, figures: Figures) -> bool:
        return figures[self.key] <= self.bound

    def failed(self, figures: Figures) -> bool:
        return self.guarded and figures[self.key] > self.line


def _ratio(x: float) -> str:
    return f"{x:.2f}"


def _ms(x: float) -> str:
    return f"{x:.1f} ms"


def _pct(x: float) -> str:
    return f"{x:.2f} %"


def _s(x: float) -> str:
    return f"{x:.2f} s"


# Noise: twice the largest distance from the median that five quick runs of one tree showed
# (docs/benchmarks-notes.md, "Run-to-run noise"), so that a slow minute on CI's machine does
# not fail a sound change, and a real regression still does.
GOALS = [
    Goal("create, one after another (ours ÷ raw)", "create_ratio", 1.2, _ratio, noise=0.46),
    Goal("create, 20 at once (ours ÷ raw)", "create20_ratio", 1.2, _ratio),
    Goal("a sandboxed create ÷ the same create without", "sandbox_ratio", 1.1, _ratio),
    Goal("a sandboxed turn ÷ the same turn without", "sandbox_turn_ratio", 1.05, _ratio),
    Goal(
        "hostagentctl list and status ÷ systemctl's, the worse",
        "cli_ratio",
        3.0,
        _ratio,
        noise=1.92,
    ),
    Goal("ListSessions p50 at 100 ÷ at 10", "list_growth", 3.0, _ratio, noise=1.76),
    Goal("ListSessions p99 at the largest size", "list_p99", 5.0, _ms),
    Goal("daemon RSS at the largest size", "rss_mb", 80.0, lambda x: f"{x:.0f} MB"),
    Goal("idle CPU at the largest size (whole service)", "idle_cpu", 0.5, _pct, noise=0.01),
    Goal("hook cost to the agent, p95", "hook_p95", 20.0, _ms),
    Goal("screen → PropertiesChanged, p95", "latency_p95", 100.0, _ms),
    Goal("a question drawn → Question on the bus, p95", "question_p95", 100.0, _ms),
    Goal("Answer → the agent no longer blocked on the bus, p95", "answer_p95", 200.0, _ms),
    Goal("SendText of a line → working on the bus, p50", "send_working_p50", 50.0, _ms),
    Goal("READY after a restart, largest size live", "restart_s", 2.0, _s),
    Goal(
        "every session's activity known after a restart's READY, largest size", "known_s", 1.0, _s
    ),
    Goal("READY after a reboot, largest size of records", "reboot_s", 2.0, _s),
    Goal(
        "a bystander's p99 under attack ÷ quiet, over what the attack allows"
        " (2, or 1.5 × systemd's own ÷ quiet), worst",
        "hostile_excess",
        1.0,
        _ratio,
        noise=2.56,
        today=1.14,
    ),
    Goal(
        "idle CPU, 200 sessions with their usage read (whole service)", "usage_idle_cpu", 0.5, _pct
    ),
    Goal("a fleet's list over 3 hosts ÷ the slowest host alone", "fleet_ratio", 1.2, _ratio),
]


def verdict(goal: Goal, figures: Figures) -> str:
    if goal.met(figures):
        return "met"
    if not goal.guarded:
        return "missed"
    return "**failed**" if goal.failed(figures) else "missed, within noise"


def section(figures: Figures) -> str:
    rows = [
        [
            g.what,
            f"≤ {g.show(g.bound)}" + (f"; fails past {g.show(g.line)}" if g.guarded else ""),
            g.show(figures[g.key]),
            verdict(g, figures),
        ]
        for g in GOALS
        if g.key in figures
    ]
    return (
        "## Goals\n\n"
        + table(["benchmark", "goal", "measured", ""], rows)
        + "\n\nA guarded goal fails the run (CI's quick one included) past its line: the goal "
        "plus the run-to-run noise measured in the notes below, or, for a goal not yet reached, "
        "today's level plus that noise."
    )


def failures(figures: Figures) -> list[str]:
    """One line for each guarded goal this run missed by more than its noise."""
    return [
        f"bench: {g.what} is {g.show(figures[g.key])}, past its guard line of "
        f"{g.show(g.line)} (goal {g.show(g.bound)}, run-to-run noise {g.noise:g})"
        for g in GOALS
        if g.key in figures and g.failed(figures)
    ]
