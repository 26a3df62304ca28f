"""The lists of CLIs that people read first (the README, the admin guide, the man page) name
every built-in preset they are about: a CLI is its preset file, and a list that leaves one out
(Kilo from both MCP lists, once) fails here rather than in a reader's hands."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hostagent.presets import BUILTIN_DIR, load_presets

ROOT = Path(__file__).resolve().parents[2]
# How the docs name each preset's CLI. A new preset is named here once, and every list below
# must then name it.
NAMES = {
    "agy": "Antigravity",
    "aider": "Aider",
    "claude": "Claude Code",
    "cline": "Cline",
    "codex": "Codex",
    "continue": "Continue",
    "copilot": "Copilot",
    "cursor-agent": "Cursor",
    "demo-agent": "",
    "gemini": "Gemini CLI",
    "grok": "Grok",
    "hermes": "Hermes",
    "kilo": "Kilo",
    "opencode": "OpenCode",
    "pi": "Pi",
    "qwen": "Qwen",
    "shell": "",
    "vibe": "Mistral Vibe",
}
PRESETS = load_presets([BUILTIN_DIR], strict=True)


def test_every_built_in_preset_has_a_name_in_the_docs() -> None:
    assert set(NAMES) == set(PRESETS)


def _paragraph(path: str, starts: str) -> str:
    text = (ROOT / path).read_text()
    at = text.index(starts)
    return re.sub(r"\\f[BRI]|\\-", "", text[at : text.find("\n\n", at)])


# Each list, where it starts, and the presets it is about.
LISTS = [
    ("README.md", "hostagent runs AI coding agents", lambda p: p.command),
    ("README.md", "| Agents driving agents", lambda p: p.mcp_format),
    ("docs/admin-guide.md", "Claude Code gets `--mcp-config`", lambda p: p.mcp_format),
    ("man/hostagentctl.1", "\\fB\\-\\-mcp\\fR gives the agent", lambda p: p.mcp_format),
    ("docs/presets.md", "`mcp: {format: claude}` says how", lambda p: p.mcp_format),
]


@pytest.mark.parametrize(
    ("path", "starts", "about"), LISTS, ids=[f"{p}: {s[:24]}" for p, s, _ in LISTS]
)
def test_a_list_of_clis_names_every_preset_it_is_about(
    path: str, starts: str, about: object
) -> None:
    text = _paragraph(path, starts)
    wanted = [n for n, p in PRESETS.items() if about(p) and NAMES[n]]  # type: ignore[operator]
    missing = [NAMES[n] for n in wanted if NAMES[n] not in text and n not in text]
    assert missing == [], f"{path} ({starts!r}) leaves out {missing}"
