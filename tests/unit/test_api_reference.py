"""docs/dbus-api.md is generated from the exported tables; it must match them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent.parent / "dev" / "api_reference.py"


def test_the_api_reference_is_current() -> None:
    spec = importlib.util.spec_from_file_location("api_reference", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.OUT.read_text() == module.render(), "run .venv/bin/python dev/api_reference.py"
