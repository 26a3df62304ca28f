"""The labelled screen corpus (tests/data/screens/): every preset's rules against real screens
of the agent CLIs, scored per label and per CLI.

Every screen is a capture of a real CLI, run offline against the stand-in model API
(tests/modelapi.py) and saved with dev/capture-screen; none is written by hand. A file is named
VERSION-SITUATION.screen under its preset's directory, and holds a header of ``key: value``
lines (label, preset, title as a JSON string, source), a line ``---``, then the screen as
``tmux capture-pane -p`` printed it. Every screen of the corpus must read its label. The
held-out set (tests/data/screens-held-out/, the same format) was captured after the rules
were written and is never used to write them: it must read right at 95 % per label.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from hostagent import screenfile
from hostagent.activity import View, classify
from hostagent.presets import BUILTIN_DIR, load_presets
from hostagent.screenfile import ScreenFile

CORPUS = Path(__file__).resolve().parent.parent / "data" / "screens"
# Captured after the rules were written and never used to write them: how the rules read
# screens they were not made against.
HELD_OUT = CORPUS.parent / "screens-held-out"
LABELS = ("working", "blocked", "idle")


def load_corpus(directory: Path = CORPUS) -> list[ScreenFile]:
    return [screenfile.read(path) for path in sorted(directory.glob("*/*.screen"))]


SCREENS = load_corpus()
HELD = load_corpus(HELD_OUT)
PRESETS = load_presets([BUILTIN_DIR], strict=True)


def verdict_of(screen: ScreenFile) -> str:
    view = View(screen.text, screen.title.strip())
    return classify(PRESETS[screen.preset].activity, view).activity.value


INSTALLABLE = {"claude", "codex", "gemini", "qwen", "opencode", "copilot", "aider"}
# Text the user typed or an answer's prose: never a dialog, whatever it says.
NOT_A_DIALOG = ("typing", "question-in-answer", "prose")


def version_of(screen: ScreenFile) -> str:
    return screen.path.name.split("-", 1)[0]


def test_every_screen_is_a_capture_of_a_real_cli() -> None:
    screens = SCREENS + HELD
    invented = [s.path.name for s in screens if not s.path.read_text().count("source: captured")]
    assert invented == []
    assert all(version_of(s)[0].isdigit() for s in screens)


def test_the_corpus_covers_every_label_every_installable_cli_and_two_claudes() -> None:
    assert {s.label for s in SCREENS} == set(LABELS)
    assert {s.preset for s in SCREENS} >= INSTALLABLE
    assert len({version_of(s) for s in SCREENS if s.preset == "claude"}) >= 2
    for cli in INSTALLABLE:
        assert {s.label for s in SCREENS if s.preset == cli} == set(LABELS), cli


def report() -> str:
    """Accuracy per CLI and label, as a table (shown with pytest -rA)."""
    rows = []
    for cli in sorted({s.preset for s in SCREENS}):
        cells = []
        for label in LABELS:
            mine = [s for s in SCREENS if s.preset == cli and s.label == label]
            right = sum(verdict_of(s) == label for s in mine)
            cells.append(f"{label} {right}/{len(mine)}")
        rows.append(f"{cli:10} " + "  ".join(cells))
    return "\n".join(rows)


def test_accuracy_per_cli_is_reported() -> None:
    print(report())
    assert report()


@pytest.mark.parametrize("label", LABELS)
def test_every_screen_of_the_corpus_reads_its_label(label: str) -> None:
    """The corpus is what the rules are made against: every screen in it reads right."""
    screens = [s for s in SCREENS if s.label == label]
    wrong = Counter(
        f"{s.path.parent.name}/{s.path.name} -> {verdict_of(s)}"
        for s in screens
        if verdict_of(s) != label
    )
    accuracy = 1 - sum(wrong.values()) / len(screens)
    assert not wrong, f"{label}: {accuracy:.0%} of {len(screens)}; wrong: {sorted(wrong)}"


@pytest.mark.parametrize("label", LABELS)
def test_held_out_screens_read_their_label_at_least_95_percent(label: str) -> None:
    screens = [s for s in HELD if s.label == label]
    assert screens, f"no held-out {label} screen"
    wrong = sorted(
        f"{s.path.parent.name}/{s.path.name} -> {verdict_of(s)}"
        for s in screens
        if verdict_of(s) != label
    )
    accuracy = 1 - len(wrong) / len(screens)
    assert accuracy >= 0.95, f"{label}: {accuracy:.0%} of {len(screens)}; wrong: {wrong}"


def test_every_question_tool_reads_blocked_from_its_screen() -> None:
    """The question a CLI's own question tool draws (Claude's AskUserQuestion, Copilot's
    ask_user form, Gemini's ask_user, OpenCode's question, Codex's request_user_input in Plan
    mode) is blocked from the screen alone: after a daemon restart no hook says so again, and
    a terminal title (Codex sets one) is not needed either."""
    asked = {s.preset: s for s in SCREENS if "question-tool" in s.path.name}
    assert set(asked) >= {"claude", "copilot", "gemini", "opencode", "codex"}
    for screen in asked.values():
        for title in (screen.title.strip(), ""):
            verdict = classify(PRESETS[screen.preset].activity, View(screen.text, title))
            assert (verdict.activity.value, verdict.visible) == ("blocked", True), screen.path


def test_prose_and_typed_text_never_read_blocked() -> None:
    prose = [s for s in SCREENS if any(k in s.path.name for k in NOT_A_DIALOG)]
    assert len(prose) >= 14
    assert [f"{s.preset}/{s.path.name}" for s in prose if verdict_of(s) == "blocked"] == []


def test_a_cli_without_a_preset_is_read_by_the_shapes_these_clis_share() -> None:
    """Every CLI's screens read with the shell preset, the way in for a CLI without a preset of
    its own (started in the shell's place, so no job has the terminal): a quiet screen is never
    `working`, an idle one never `blocked`, and most of the dialogs read `blocked`."""
    rules = PRESETS["shell"].activity
    screens = SCREENS + HELD
    read = {s.path: classify(rules, View(s.text, "")).activity.value for s in screens}
    assert [s.path.name for s in screens if read[s.path] == "working"] == []
    assert [s.path.name for s in screens if s.label == "idle" and read[s.path] != "idle"] == []
    dialogs = [s for s in screens if s.label == "blocked"]
    found = sum(read[s.path] == "blocked" for s in dialogs)
    assert found / len(dialogs) >= 0.8, f"{found} of {len(dialogs)} dialogs read blocked"
