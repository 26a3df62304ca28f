from __future__ import annotations

from pathlib import Path

import pytest

from hostagent.config import RecoveryPolicy, load_config
from hostagent.presets import BUILTIN_DIR, load_presets
from hostagent.session import Activity
from hostagent.yamlfile import SettingsError


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_defaults_without_a_file(tmp_path: Path) -> None:
    cfg = load_config([tmp_path / "missing.yaml"])
    assert cfg.columns == 200 and cfg.recovery_policy is RecoveryPolicy.DORMANT


def test_a_good_config(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "h.yaml",
        "limits:\n  tasks_max: 100\ntmux:\n  rows: 40\n"
        "recovery:\n  policy: auto\n  max_parallel: 3\n",
    )
    cfg = load_config([path])
    assert (cfg.limits.tasks_max, cfg.rows, cfg.recovery_policy, cfg.recovery_max_parallel) == (
        100,
        40,
        RecoveryPolicy.AUTO,
        3,
    )


def test_sandbox_defaults_for_everyone_and_in_their_place_per_user(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "h.yaml",
        "sandbox:\n  default: [ProtectSystem=strict, 'ReadWritePaths=%{cwd}']\n"
        "  users:\n    alice: [ProtectSystem=full]\n    bob: []\n",
    )
    cfg = load_config([path])
    assert cfg.sandbox.of("carol") == ["ProtectSystem=strict", "ReadWritePaths=%{cwd}"]
    assert cfg.sandbox.of("alice") == ["ProtectSystem=full"]
    assert cfg.sandbox.of("bob") == []


@pytest.mark.parametrize(
    ("text", "where"),
    [
        pytest.param("tmux:\n  columns: 5\n", ":2: field 'tmux.columns'", id="bound"),
        pytest.param("limits:\n  tasks_max: 0\n", ":2: field 'limits.tasks_max'", id="zero"),
        pytest.param("limits:\n  bogus: 1\n", ":2: field 'limits.bogus'", id="unknown-key"),
        pytest.param("a: [\n", ":2:", id="syntax"),
        pytest.param("recovery:\n  policy: sometimes\n", ":2: field 'recovery.policy'", id="enum"),
        pytest.param("- 1\n", ":1: must be a mapping", id="not-mapping"),
        pytest.param(
            "sandbox:\n  default: [CPUQuota=50%]\n", "field 'sandbox.default'", id="not-a-word"
        ),
        pytest.param(
            "sandbox:\n  default: [ProtectSystem=sometimes]\n",
            "field 'sandbox.default'",
            id="bad-value",
        ),
        pytest.param(
            "sandbox:\n  users:\n    alice: ProtectHome=yes\n",
            "field 'sandbox.users.alice'",
            id="not-a-list",
        ),
        pytest.param(
            "sandbox:\n  users:\n    alice: [ReadOnlyPaths=relative]\n",
            "field 'sandbox.users.alice'",
            id="relative-path",
        ),
    ],
)
def test_config_errors_name_file_line_and_field(tmp_path: Path, text: str, where: str) -> None:
    path = write(tmp_path, "h.yaml", text)
    with pytest.raises(SettingsError) as info:
        load_config([path])
    assert str(info.value).startswith(str(path))
    assert where in str(info.value)


def test_presets_override_by_name_and_broken_ones(tmp_path: Path) -> None:
    base = tmp_path / "base"
    over = tmp_path / "over"
    base.mkdir()
    over.mkdir()
    write(base, "a.yaml", "name: a\ncommand: [one]\n")
    write(over, "a.yaml", "name: a\ncommand: [two]\n")
    write(over, "bad.yaml", "name: bad\ncommand: notalist\n")
    assert load_presets([base, over], strict=False)["a"].command == ["two"]
    with pytest.raises(SettingsError, match=r"bad.yaml:2: field 'command'"):
        load_presets([base, over], strict=True)


def test_assigned_id_needs_a_placeholder(tmp_path: Path) -> None:
    write(tmp_path, "x.yaml", "agent_id:\n  source: assigned\n  assign_args: [--id]\n")
    with pytest.raises(SettingsError, match="agent_id.assign_args"):
        load_presets([tmp_path], strict=True)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("hooks:\n  format: yaml\n  args: ['{hooks_file}']\n", "hooks.format"),
        ("hooks:\n  format: claude\n  args: [--settings]\n", "field .hooks."),
        ("agent_id:\n  discover:\n    glob: /etc/*\n    id: '(x)'\n", "agent_id.discover.glob"),
        ("agent_id:\n  discover:\n    glob: '{home}/*'\n    id: 'x'\n", "agent_id.discover.id"),
        ("agent_id:\n  discover:\n    glob: '{home}/*'\n    id: '(x'\n", "agent_id.discover.id"),
        ("agent_id:\n  discover:\n    command: []\n", "agent_id.discover.command"),
        (
            "agent_id:\n  discover:\n    command: [x]\n    id_field: i\n    cwd_field: c\n"
            "    time_field: t\n    list_field: [a]\n",
            "discover.list_field",
        ),
        ("agent_id:\n  discover:\n    command: [x]\n    id_field: id\n", "discover.cwd_field"),
        (
            "agent_id:\n  discover:\n    command: [x]\n    id_field: i\n    cwd_field: c\n"
            "    time_field: t\n    glob: '{home}/*'\n",
            "only one",
        ),
        ("agent_id:\n  discover:\n    database: /var/x.db\n", "discover.database"),
        (
            "agent_id:\n  discover:\n    database: '{home}/x.db'\n    table: 's; drop'\n"
            "    id_field: id\n    cwd_field: cwd\n    time_field: t\n",
            "discover.table",
        ),
        (
            "agent_id:\n  discover:\n    database: '{home}/x.db'\n    table: s\n"
            "    id_field: id\n    cwd_field: cwd\n",
            "discover.time_field",
        ),
        (
            "agent_id:\n  discover:\n    database: '{home}/x.db'\n    table: s\n"
            "    id_field: id\n    cwd_field: cwd\n    time_field: t\n    command: [x]\n",
            "only one",
        ),
        ("prompt_args: [-i]\n", "prompt_args"),
        ("resume:\n  turn: '(x'\n", "resume.turn"),
        ("resume:\n  list: ls\n", "resume.list"),
        ("usage:\n  format: excel\n  file: '{home}/x'\n", "usage.format"),
        ("usage:\n  format: claude\n", "usage.file"),
        ("usage:\n  format: claude\n  file: x.jsonl\n", "usage.file"),
        ("usage:\n  format: claude\n  file: '{home}/x'\n  price: 3\n", "usage"),
    ],
)
def test_hook_and_discovery_rules_are_checked(tmp_path: Path, text: str, field: str) -> None:
    write(tmp_path, "x.yaml", text)
    with pytest.raises(SettingsError, match=field):
        load_presets([tmp_path], strict=True)


def test_discovery_follows_the_clis_own_variables_and_listed_objects_anywhere(
    tmp_path: Path,
) -> None:
    write(
        tmp_path,
        "pi.yaml",
        "agent_id:\n  discover:\n"
        "    glob: '{$PI_CODING_AGENT_DIR:-{home}/.pi/agent}/sessions/**/*.jsonl'\n"
        "    id: '_([0-9a-f-]{36})[.]jsonl$'\n    cwd_field: cwd\n",
    )
    write(
        tmp_path,
        "cn.yaml",
        "agent_id:\n  discover:\n    command: [cn, ls, --json]\n"
        "    list_field: sessions\n    id_field: sessionId\n"
        "    cwd_field: workspaceDirectory\n    time_field: dateCreated\n",
    )
    presets = load_presets([tmp_path], strict=True)
    pi, cn = presets["pi"].discover, presets["cn"].discover
    assert pi is not None and pi.glob.startswith("{$PI_CODING_AGENT_DIR:-")
    assert cn is not None and cn.list_field == "sessions"


def test_a_clis_own_hooks_need_only_an_activity_table(tmp_path: Path) -> None:
    """Hermes's hooks live in its user's config, Pi's in an extension: each runs
    `hostagentctl hook EVENT`, and the preset says what the events mean, with no hooks file."""
    write(
        tmp_path,
        "own.yaml",
        "command: [own]\nagent_id: {source: hook}\nhooks:\n"
        "  activity: {agent_start: working, agent_end: idle, 'ask:approval': blocked}\n",
    )
    preset = load_presets([tmp_path], strict=True)["own"]
    assert preset.hooks_format == ""
    assert preset.activity.hooks["agent_end"] is Activity.IDLE
    assert preset.activity.hooks["ask:approval"] is Activity.BLOCKED
    write(tmp_path, "half.yaml", "hooks:\n  args: [--x]\n  activity: {a: idle}\n")
    with pytest.raises(SettingsError, match="hooks.format"):
        load_presets([tmp_path], strict=True)


def test_builtin_presets_all_load() -> None:
    presets = load_presets([BUILTIN_DIR], strict=True)
    assert presets["claude"].hooks_format == "claude"
    assert presets["codex"].discover is not None
    assert presets["codex"].discover.cwd_field == "payload.cwd"


def test_presets_the_project_cannot_test_say_so() -> None:
    """Grok, Cursor and Antigravity ship no official npm or PyPI package, so no test runs
    them."""
    presets = load_presets([BUILTIN_DIR], strict=True)
    for name in ("grok", "cursor-agent", "agy"):
        assert "not tested by hostagent" in presets[name].description
