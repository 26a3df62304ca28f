"""``hostagentctl check-preset FILE [SCREEN...]``: a preset file checked as the daemon loads it,
and captured screens replayed against its activity rules, so that an admin writes a preset
against her CLI's screens before a session runs it (docs/presets.md, "Writing a preset").

Local: it reads files and asks no daemon. A screen is a plain capture (``hostagentctl capture
NAME > FILE``) or a labelled one in the corpus's form (hostagent/screenfile.py); a labelled
screen that reads another activity than its label makes the check fail.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hostagent import question, screenfile
from hostagent.activity import View, classify
from hostagent.escape import printable
from hostagent.presets import load_preset_file, preset_dirs
from hostagent.yamlfile import SettingsError

EXIT_MISREAD = 1


def _asked(screen: str) -> str:
    """What the inbox reads of a blocked screen: its question and choices, or that none."""
    q = question.read(screen)
    if q is None:
        return "no question the inbox can read: answered in the terminal"
    choices = "  ".join(
        f"{'>' if i == q.selected else ''}{question.number_of(q, i)}. {c.label}"
        for i, c in enumerate(q.choices)
    )
    return printable(f"asks: {q.text or '(no text)'} | {choices}")


def verb_check_preset(args: argparse.Namespace) -> int:
    path = Path(args.file)
    try:
        preset = load_preset_file(path, preset_dirs(system=False))
    except SettingsError as e:
        print(printable(str(e)), file=sys.stderr)
        return EXIT_MISREAD
    except OSError as e:
        print(f"{path}: {e.strerror}", file=sys.stderr)
        return EXIT_MISREAD
    print(f"{path}: preset '{printable(preset.name)}' loads")
    misread = 0
    for name in args.screens:
        try:
            screen = screenfile.read(Path(name))
        except (OSError, ValueError) as e:
            print(f"{name}: cannot be read: {e}", file=sys.stderr)
            misread += 1
            continue
        title = args.title if args.title is not None else screen.title
        verdict = classify(preset.activity, View(screen.text, title.strip()))
        read = verdict.activity.value
        why = f"{verdict.rule}" + (f": {verdict.matched!r}" if verdict.matched else "")
        if screen.label and screen.label != read:
            misread += 1
            print(f"{name}: {read}, labelled {screen.label} ({printable(why)})")
        else:
            print(f"{name}: {read} ({printable(why)})")
        if read == "blocked":
            print(f"  {_asked(screen.text)}")
    if misread:
        print(f"{misread} of {len(args.screens)} screens misread", file=sys.stderr)
    return EXIT_MISREAD if misread else 0
