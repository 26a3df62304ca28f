"""The bench's guard: a guarded goal fails a run only past its line (the goal, or today's level
for one not yet reached, plus the run-to-run noise); an unguarded one is only reported."""

from __future__ import annotations

import pytest

from bench.goals import GOALS, Goal, failures, section, verdict

GUARDED = Goal("g", "x", 1.2, str, noise=0.1)
BEHIND = Goal("b", "x", 1.2, str, noise=0.1, today=1.3)
REPORTED = Goal("r", "x", 1.2, str)


@pytest.mark.parametrize(
    ("goal", "figure", "said"),
    [
        (GUARDED, 1.2, "met"),
        (GUARDED, 1.29, "missed, within noise"),
        (GUARDED, 1.31, "**failed**"),
        (BEHIND, 1.39, "missed, within noise"),
        (BEHIND, 1.41, "**failed**"),
        (REPORTED, 9.0, "missed"),
    ],
)
def test_a_run_fails_only_past_the_guard_line(goal: Goal, figure: float, said: str) -> None:
    assert verdict(goal, {"x": figure}) == said


def test_every_guarded_goal_is_one_the_issue_names_and_each_failure_is_said() -> None:
    guarded = {g.key for g in GOALS if g.guarded}
    assert guarded == {"create_ratio", "cli_ratio", "list_growth", "idle_cpu", "hostile_excess"}
    figures = {g.key: g.line + 1 for g in GOALS}
    assert len(failures(figures)) == len(guarded)
    assert failures({g.key: g.bound for g in GOALS}) == []
    assert section(figures).count("**failed**") == len(guarded)


def test_the_containment_walk_the_scale_bench_runs_in_the_sandbox_runs_here() -> None:
    """It imports the daemon's own modules by name: a module that moves must take it along."""
    import subprocess
    import sys
    from pathlib import Path

    from bench.scale import CONTAINMENT_WALK

    root = Path(__file__).resolve().parents[2]
    ran = subprocess.run(
        [sys.executable, "-c", CONTAINMENT_WALK],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(root)},
    )
    assert ran.returncode == 0, ran.stderr
    assert len(ran.stdout.split()) == 3
