"""PNG plots of cost against the number of sessions, for docs/benchmarks.md."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: files only
import matplotlib.pyplot as plt

from bench.scale import Scale


def _axes(title: str, ylabel: str) -> tuple[plt.Figure, plt.Axes]:
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=100)
    ax.set_title(title)
    ax.set_xlabel("sessions")
    ax.set_ylabel(ylabel)
    ax.set_xscale("log")
    ax.grid(True, alpha=0.3)
    return fig, ax


def draw(scale: Scale, directory: Path) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    ns = [p.n for p in scale.points]
    made = []

    fig, ax = _axes("Bus latency", "ms")
    ax.plot(ns, [p.list_p50 for p in scale.points], "o-", label="ListSessions p50")
    ax.plot(ns, [p.list_p99 for p in scale.points], "o--", label="ListSessions p99")
    ax.plot(ns, [p.get_p99 for p in scale.points], "s:", label="GetSession + Get p99")
    ax.axhline(10, color="grey", lw=0.8, label="goal (p99)")
    ax.legend(fontsize=8)
    made.append(_save(fig, directory / "latency.png"))

    fig, ax = _axes("Daemon memory and idle CPU", "RSS MB")
    ax.plot(ns, [p.rss_mb for p in scale.points], "o-", label="RSS")
    ax.axhline(80, color="grey", lw=0.8, label="goal")
    cpu = ax.twinx()
    cpu.plot(ns, [p.idle_cpu for p in scale.points], "s--", color="tab:red", label="idle CPU")
    cpu.set_ylabel("% of one core")
    cpu.set_ylim(0, max(1.0, *[p.idle_cpu for p in scale.points]) * 1.2)
    ax.legend(loc="upper left", fontsize=8)
    cpu.legend(loc="lower right", fontsize=8)
    made.append(_save(fig, directory / "memory-cpu.png"))

    fig, ax = _axes("Time to READY=1", "s")
    ax.plot(ns, [p.restart_s for p in scale.points], "o-", label="restart, N live sessions")
    ax.plot(ns, [p.reboot_s for p in scale.points], "s--", label="reboot, N records")
    ax.axhline(2, color="grey", lw=0.8, label="goal at 1000")
    ax.legend(fontsize=8)
    made.append(_save(fig, directory / "recovery.png"))
    return made


def _save(fig: plt.Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
