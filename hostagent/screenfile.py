"""A captured screen as a file: what ``hostagentctl check-preset`` replays against a preset,
and what the project's corpus of real CLI screens (tests/data/screens/) is made of.

Either a plain capture (``hostagentctl capture NAME > FILE``: the screen's text alone), or the
corpus's form: ``key: value`` header lines (``label``, the activity it must read; ``preset``;
``title``, the window title as a JSON string; ``source``, how it was captured), a line ``---``,
then the screen as ``tmux capture-pane -p`` printed it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

SEPARATOR = "\n---\n"


@dataclass(frozen=True)
class ScreenFile:
    path: Path
    text: str
    label: str = ""  # "" for a plain capture: nothing it must read
    preset: str = ""
    title: str = ""


def read(path: Path) -> ScreenFile:
    """The screen in path; OSError when it cannot be read, ValueError when its header is not
    the corpus's."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    head, found, text = raw.partition(SEPARATOR)
    if not found or not head.startswith("label: "):
        return ScreenFile(path, raw)
    meta = dict(line.partition(": ")[::2] for line in head.splitlines())
    title = json.loads(meta.get("title") or '""')
    if not isinstance(title, str):
        raise ValueError(f"{path}: its title must be a JSON string")
    return ScreenFile(path, text, meta["label"], meta.get("preset", ""), title)
