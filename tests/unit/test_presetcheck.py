"""hostagentctl check-preset: a preset file loaded as the daemon loads it, and screens (the
corpus's labelled ones, or a plain capture) read with it, with no daemon and no bus."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostagent.cli.ctl import main
from hostagent.presets import BUILTIN_DIR

CORPUS = Path(__file__).resolve().parent.parent / "data" / "screens"
APPROVAL = CORPUS / "claude" / "2.1.332-bash-approval.screen"
IDLE = CORPUS / "claude" / "2.1.332-answered.screen"


def check(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["check-preset", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_a_preset_reads_its_clis_labelled_screens(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = check(capsys, str(BUILTIN_DIR / "claude.yaml"), str(APPROVAL), str(IDLE))
    assert code == 0
    assert "preset 'claude' loads" in out
    assert f"{APPROVAL}: blocked (claude rule" in out
    # What the inbox reads of it: the question, and its choices as a person answers them.
    assert "  asks: Do you want to proceed? | >1. Yes  2. Yes, and always allow" in out
    assert f"{IDLE}: idle" in out


def test_a_dialog_the_inbox_cannot_read_is_said_so(capsys: pytest.CaptureFixture[str]) -> None:
    screen = CORPUS / "kilo" / "7.7.7-reject-permission-asks-why.screen"  # a reason to type
    code, out, _ = check(capsys, str(BUILTIN_DIR / "kilo.yaml"), str(screen))
    assert code == 0 and "no question the inbox can read: answered in the terminal" in out


def test_choices_told_apart_by_colour_are_read_as_the_inbox_reads_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    screen = CORPUS / "opencode" / "1.18.33-permission.screen"
    code, out, _ = check(capsys, str(BUILTIN_DIR / "opencode.yaml"), str(screen))
    assert code == 0
    assert "asks: △ Permission required | 1. Allow once  2. Allow always  3. Reject" in out


def test_a_misread_screen_fails_the_check_and_says_which(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    preset = tmp_path / "mine.yaml"
    preset.write_text(
        "name: mine\ncommand: [mine]\nactivity:\n  rules:\n"
        "    - {activity: blocked, screen: ['nothing like it']}\n"
    )
    code, out, err = check(capsys, str(preset), str(APPROVAL), str(IDLE))
    assert code == 1
    assert f"{APPROVAL}: idle, labelled blocked (no rule matched)" in out
    assert "1 of 2 screens misread" in err


def test_a_plain_capture_is_read_with_the_title_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    screen = tmp_path / "now.txt"
    screen.write_text("some answer\n> \n")
    preset = tmp_path / "t.yaml"
    preset.write_text(
        "name: t\ncommand: [t]\nactivity:\n  rules:\n    - {activity: working, title: '^busy'}\n"
    )
    assert check(capsys, str(preset), str(screen))[1].endswith("now.txt: idle (no rule matched)\n")
    code, out, _ = check(capsys, str(preset), str(screen), "--title", "busy now")
    assert code == 0 and "now.txt: working (t rule 1: 'busy')" in out


def test_a_broken_preset_says_where(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    preset = tmp_path / "bad.yaml"
    preset.write_text("name: bad\ncommand: notalist\n")
    code, _, err = check(capsys, str(preset))
    assert code == 1 and "bad.yaml:2: field 'command'" in err
    code, _, err = check(capsys, str(tmp_path / "none.yaml"))
    assert code == 1 and "none.yaml" in err


def test_it_reads_this_hosts_files_only(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = check(capsys, str(BUILTIN_DIR / "shell.yaml"), "-H", "elsewhere")
    assert code == 2 and "reads this host's files" in err
