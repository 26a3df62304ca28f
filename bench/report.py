"""Figures and their Markdown: percentiles, tables and the machine's description."""

from __future__ import annotations

import math
import platform
import re
from pathlib import Path

BENCHMARKS_MD = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def percentile(values: list[float], p: float) -> float:
    """The p-th percentile (0-100), nearest rank; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def machine() -> str:
    cpus = len(re.findall(r"^processor", Path("/proc/cpuinfo").read_text(), re.M))
    model = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
    mem = re.search(r"^MemTotal:\s*(\d+)", Path("/proc/meminfo").read_text(), re.M)
    return (
        f"{cpus} CPUs ({model.group(1) if model else platform.machine()}), "
        f"{int(mem.group(1)) // 1024 // 1024 if mem else '?'} GiB, "
        f"Linux {platform.release()}, Python {platform.python_version()}"
    )
