"""The man pages: each renders as man(1) shows it with its warnings on and says nothing, no
font macro glues a sentence to the next word, and hostagentctl(1) names every verb and every
option the command line has."""

from __future__ import annotations

import argparse
import itertools
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from hostagent.cli.ctl_args import parser

MAN = Path(__file__).resolve().parent.parent.parent / "man"
PAGES = sorted(MAN.glob("*.[0-9]"))


@pytest.mark.skipif(not shutil.which("groff"), reason="needs groff (apt install groff-base)")
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_each_page_renders_without_warnings(page: Path) -> None:
    result = subprocess.run(
        ["groff", "-man", "-Tutf8", "-ww", "-z", str(page)],
        capture_output=True,
        text=True,
        env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"},
    )
    assert (result.returncode, result.stderr) == (0, "")


@pytest.mark.skipif(not shutil.which("man"), reason="needs man (apt install man-db)")
@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_each_page_renders_as_man_shows_it_without_warnings(page: Path) -> None:
    result = subprocess.run(
        ["man", "--warnings", "-l", str(page)],
        capture_output=True,
        text=True,
        env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin", "MANWIDTH": "80", "MANPAGER": "cat"},
    )
    assert (result.returncode, result.stderr) == (0, "")
    assert "drive hostagent" in result.stdout or page.name != "hostagentctl.1"


# Font macros that alternate between their arguments with no space between them.
ALTERNATING = {".BR", ".RB", ".IR", ".RI", ".BI", ".IB"}


def glued(line: str) -> bool:
    """Whether an alternating font macro ends a sentence or clause and starts the next word in
    one breath: `.BR \\-\\-help . As with` renders as "--help.Aswith"."""
    parts = line.split(None, 1)
    if len(parts) < 2 or parts[0] not in ALTERNATING:
        return False
    try:
        args = shlex.split(parts[1].replace("\\", "\\\\"))
    except ValueError:
        args = parts[1].split()
    return any(
        re.search(r"[.,;:!?]$", a) and re.match(r"[A-Za-z]", b) for a, b in itertools.pairwise(args)
    )


@pytest.mark.parametrize(
    ("line", "bad"),
    [
        (".BR \\-\\-help . As with", True),
        (".BR \\-\\-user , or", True),
        (".BR \\-\\-help .", False),
        (".BR systemctl (1),", False),
        (".BI hostagent\\-u UID .slice", False),
        (".B \\-\\-json . As", False),  # .B keeps its spaces
    ],
)
def test_a_glued_sentence_is_found(line: str, bad: bool) -> None:
    assert glued(line) is bad


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_no_font_macro_glues_a_sentence_to_the_next_word(page: Path) -> None:
    lines = page.read_text().splitlines()
    assert [f"{page.name}:{n}: {x}" for n, x in enumerate(lines, 1) if glued(x)] == []


def _text(page: str) -> str:
    """The page's words, with font escapes and the escaped hyphens of roff undone."""
    raw = (MAN / page).read_text()
    return re.sub(r"\\f[BIRP]", "", raw).replace("\\-", "-")


def test_hostagentctl_1_names_every_verb_and_option() -> None:
    text = _text("hostagentctl.1")
    p = parser()
    (verbs,) = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    missing = [v for v in verbs.choices if not re.search(rf"(^|\s){v}\b", text, re.M)]
    assert missing == [], f"verbs missing from hostagentctl(1): {missing}"
    options = {o for a in p._actions for o in a.option_strings if o.startswith("--")}
    for sub in verbs.choices.values():
        options |= {o for a in sub._actions for o in a.option_strings if o.startswith("--")}
    options -= {"--help", "--version"}
    absent = sorted(o for o in options if o not in text)
    assert absent == [], f"options missing from hostagentctl(1): {absent}"


ROOT = MAN.parent


def test_every_document_a_shipped_one_points_at_is_shipped_too() -> None:
    debian = (ROOT / "packaging/debian/hostagent.docs").read_text().split()
    rpm = next(
        line.split()[1:]
        for line in (ROOT / "packaging/rpm/hostagent.spec").read_text().splitlines()
        if line.startswith("%doc")
    )
    assert sorted(debian) == sorted(rpm)
    pointed = set()
    for doc in debian:
        pointed |= set(re.findall(r"docs/[a-z-]+\.md", (ROOT / doc).read_text()))
    assert sorted(pointed - set(debian)) == []
