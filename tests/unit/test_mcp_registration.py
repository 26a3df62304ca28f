"""How each CLI is given hostagent's MCP server for one session, and whether a session gets it."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from hostagent import mcp_registration as reg
from hostagent.errors import InvalidArgs
from hostagent.presets import load_presets, preset_dirs
from hostagent.yamlfile import Document, SettingsError

SERVER = ["/usr/bin/hostagentctl", "--system", "mcp"]
FILE = "/run/hostagent/1000/a.d/mcp.json"


def test_claude_and_copilot_read_a_file_of_the_sessions_own() -> None:
    claude = reg.registration("claude", SERVER, FILE)
    assert claude.args == [f"--mcp-config={FILE}"] and not claude.env
    assert json.loads(claude.file_text) == {
        "mcpServers": {
            "hostagent": {"type": "stdio", "command": SERVER[0], "args": ["--system", "mcp"]}
        }
    }
    copilot = reg.registration("copilot", SERVER, FILE)
    assert copilot.args == ["--additional-mcp-config", "@" + FILE]
    entry = json.loads(copilot.file_text)["mcpServers"]["hostagent"]
    assert entry["type"] == "local" and entry["tools"] == ["*"]


def test_codex_takes_toml_values_on_its_command_line() -> None:
    odd = ['/opt/a "b"/hostagentctl', "--user", "mcp"]
    args = reg.registration("codex", odd, FILE).args
    assert args[0::2] == ["-c", "-c"]
    # Codex reads what follows '=' as TOML: the values must come back whole.
    values = {a.partition("=")[0]: a.partition("=")[2] for a in args[1::2]}
    assert tomllib.loads(f"v = {values['mcp_servers.hostagent.command']}")["v"] == odd[0]
    assert tomllib.loads(f"v = {values['mcp_servers.hostagent.args']}")["v"] == odd[1:]


def test_opencode_takes_a_config_in_its_environment() -> None:
    r = reg.registration("opencode", SERVER, FILE)
    assert not r.args and not r.file_text
    config = json.loads(r.env["OPENCODE_CONFIG_CONTENT"])
    assert config["mcp"]["hostagent"] == {"type": "local", "command": SERVER, "enabled": True}


@pytest.mark.parametrize("fmt", ["gemini", "qwen"])
def test_gemini_and_qwen_find_it_in_their_hooks_settings_beside_the_admins(fmt: str) -> None:
    r = reg.registration(fmt, SERVER, FILE)
    assert not r.args and not r.env and not r.file_text
    admins = {"hooks": {}, "mcpServers": {"theirs": {"command": "x"}}}
    merged = reg.with_settings(admins, r.settings)
    assert set(merged["mcpServers"]) == {"theirs", "hostagent"}
    assert reg.with_settings(admins, {}) == admins  # a session without it: theirs as they are


@pytest.mark.parametrize(
    ("asked", "fmt", "default", "why_not", "gets"),
    [
        (None, "claude", False, "", False),  # nobody asked: the default, off
        (None, "claude", True, "", True),  # the preset's or host's default
        (True, "claude", False, "", True),
        (False, "claude", True, "", False),  # --no-mcp over a default
        (None, "", True, "", False),  # a host default skips a CLI that takes none
        (None, "gemini", True, "cannot", False),  # and a place it cannot be given
    ],
)
def test_whether_a_session_gets_it(
    asked: bool | None, fmt: str, default: bool, why_not: str, gets: bool
) -> None:
    assert reg.wanted(asked, fmt, default, "p", why_not) is gets


@pytest.mark.parametrize(
    ("fmt", "why_not", "said"),
    [("", "", "names no way"), ("gemini", "a user's daemon", "a user's daemon")],
)
def test_asked_for_where_it_cannot_be_is_refused_saying_why(
    fmt: str, why_not: str, said: str
) -> None:
    with pytest.raises(InvalidArgs, match=said):
        reg.wanted(True, fmt, False, "p", why_not)


def test_every_builtin_preset_of_a_cli_that_takes_servers_names_its_format() -> None:
    presets = load_presets(preset_dirs(True)[:1], strict=True)
    named = {name: p.mcp_format for name, p in presets.items() if p.mcp_format}
    assert named == {
        n: n for n in ("claude", "codex", "copilot", "gemini", "kilo", "opencode", "qwen")
    }
    assert not any(p.mcp_default for p in presets.values())  # never given unasked


def test_a_preset_whose_server_goes_into_hooks_it_lacks_is_refused(tmp_path: Path) -> None:
    from hostagent.presets import parse_preset

    doc = Document(tmp_path / "g.yaml", {"name": "g", "mcp": {"format": "gemini"}}, {})
    with pytest.raises(SettingsError, match="hooks of format gemini"):
        parse_preset(doc)
    doc = Document(tmp_path / "x.yaml", {"name": "x", "mcp": {"format": "nope"}}, {})
    with pytest.raises(SettingsError, match="mcp.format"):
        parse_preset(doc)
