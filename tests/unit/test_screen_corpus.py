"""The labelled screen corpus (tests/data/screens/): every preset's rules against real screens
of the agent CLIs and of the stand-in agent, scored per label (issue: activity).

A screen file is a header of ``key: value`` lines (label, preset, title as a JSON string,
source), a line ``---``, then the screen as ``tmux capture-pane -p`` printed it.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from hostagent.activity import View, classify
from hostagent.presets import BUILTIN_DIR, load_presets

CORPUS = Path(__file__).resolve().parent.parent / "data" / "screens"
LABELS = ("working", "blocked", "idle")


@dataclass(frozen=True)
class Screen:
    path: Path
    label: str
    preset: str
    title: str
    text: str


def load_corpus() -> list[Screen]:
    screens = []
    for path in sorted(CORPUS.glob("*/*.screen")):
        head, _, text = path.read_text(encoding="utf-8").partition("\n---\n")
        meta = dict(line.partition(": ")[::2] for line in head.splitlines())
        meta["title"] = json.loads(meta.get("title") or '""')
        screens.append(Screen(path, meta["label"], meta["preset"], meta.get("title", ""), text))
    return screens


SCREENS = load_corpus()
PRESETS = load_presets([BUILTIN_DIR], strict=True)


def verdict_of(screen: Screen) -> str:
    view = View(screen.text, screen.title.strip())
    return classify(PRESETS[screen.preset].activity, view).activity.value


def test_the_corpus_covers_every_label_and_four_real_clis() -> None:
    assert {s.label for s in SCREENS} == set(LABELS)
    assert {"claude", "codex", "gemini", "opencode", "demo-agent"} <= {s.preset for s in SCREENS}


@pytest.mark.parametrize("label", LABELS)
def test_accuracy_per_label_is_at_least_95_percent(label: str) -> None:
    screens = [s for s in SCREENS if s.label == label]
    wrong = Counter(
        f"{s.path.parent.name}/{s.path.name} -> {verdict_of(s)}"
        for s in screens
        if verdict_of(s) != label
    )
    accuracy = 1 - sum(wrong.values()) / len(screens)
    assert accuracy >= 0.95, f"{label}: {accuracy:.0%} of {len(screens)}; wrong: {sorted(wrong)}"


def test_prose_that_mentions_approval_is_never_blocked() -> None:
    prose = [s for s in SCREENS if "prose" in s.path.name or "typing" in s.path.name]
    assert len(prose) >= 4
    assert [s.path.name for s in prose if verdict_of(s) == "blocked"] == []
