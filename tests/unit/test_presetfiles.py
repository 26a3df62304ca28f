"""Presets from files: a later file of a name in the place of an earlier one, and ``extends``,
a preset written as the changes to another (hostagent/presets/files.py)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from hostagent.daemon.follow.hooks.agenthooks import command_with_hooks
from hostagent.daemon.state.paths import SessionPaths
from hostagent.presets import BUILTIN_DIR, EXTENSIONS_DIR, load_preset_file, load_presets
from hostagent.presets.files import merged
from hostagent.yamlfile import SettingsError


@pytest.mark.parametrize(
    ("base", "over", "result"),
    [
        ({"a": 1}, {"b": 2}, {"a": 1, "b": 2}),
        ({"a": 1}, {"a": 2}, {"a": 2}),
        ({"m": {"x": 1, "y": 2}}, {"m": {"y": 3}}, {"m": {"x": 1, "y": 3}}),
        ({"m": {"n": {"x": 1}}}, {"m": {"n": {"z": 0}}}, {"m": {"n": {"x": 1, "z": 0}}}),
        ({"l": [1, 2]}, {"l": [3]}, {"l": [3]}),  # a list is replaced, never appended to
        ({"m": {"x": 1}}, {"m": "flat"}, {"m": "flat"}),
        ({"m": "flat"}, {"m": {"x": 1}}, {"m": {"x": 1}}),
    ],
)
def test_merged_lays_mappings_over_and_replaces_the_rest(
    base: dict[str, Any], over: dict[str, Any], result: dict[str, Any]
) -> None:
    assert merged(base, over) == result


def tree(tmp_path: Path, files: dict[str, str]) -> list[Path]:
    """Directories of preset files, "DIR/NAME.yaml" -> text, in the order given."""
    dirs: list[Path] = []
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        if path.parent not in dirs:
            dirs.append(path.parent)
    return dirs


BASE = (
    "name: base\ndescription: the base\ncommand: [base]\n"
    "agent_id:\n  source: discovered\n  discover:\n"
    "    command: [base, list]\n    id_field: id\n    cwd_field: directory\n    time_field: created\n"
    "resume:\n  args: [--session, '{id}']\n"
)


def test_a_preset_extends_another_and_changes_only_what_it_says(tmp_path: Path) -> None:
    dirs = tree(
        tmp_path,
        {
            "a/base.yaml": BASE,
            "a/fork.yaml": (
                "extends: base\ncommand: [fork]\nagent_id:\n  discover:\n    command: [fork, list]\n"
            ),
        },
    )
    presets = load_presets(dirs, strict=True)
    fork, base = presets["fork"], presets["base"]
    assert fork.name == "fork" and fork.command == ["fork"]
    assert fork.discover is not None and base.discover is not None
    assert fork.discover.command == ("fork", "list")
    assert fork.discover.id_field == "id" and fork.discover.cwd_field == "directory"
    assert fork.resume_args == base.resume_args
    assert base.command == ["base"]  # the base is not changed by what extends it


def test_an_override_that_extends_its_own_name_changes_the_one_it_overrides(
    tmp_path: Path,
) -> None:
    """An admin's file of a built-in's name that says only what she changes."""
    dirs = tree(
        tmp_path,
        {"builtin/base.yaml": BASE, "etc/base.yaml": "extends: base\nenv: {MODE: quiet}\n"},
    )
    base = load_presets(dirs, strict=True)["base"]
    assert base.env == {"MODE": "quiet"} and base.command == ["base"]
    assert base.description == "the base"


def test_a_preset_extends_the_override_of_its_base(tmp_path: Path) -> None:
    dirs = tree(
        tmp_path,
        {
            "builtin/base.yaml": BASE,
            "builtin/fork.yaml": "extends: base\n",
            "etc/base.yaml": BASE.replace("[base]", "[patched]"),
        },
    )
    assert load_presets(dirs, strict=True)["fork"].command == ["patched"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"a/x.yaml": "extends: nothing\n"}, r"x.yaml:1: field 'extends': no preset 'nothing'"),
        ({"a/x.yaml": "extends: x\n"}, r"x.yaml:1: field 'extends': no preset 'x'"),
        ({"a/x.yaml": "extends: [a]\n"}, r"field 'extends': must be the name of a preset"),
        ({"a/x.yaml": "extends: y\n", "a/y.yaml": "extends: x\n"}, r"in a circle"),
        (
            {"a/base.yaml": BASE, "a/x.yaml": "extends: base\nresume: {args: notalist}\n"},
            r"x.yaml:\d+: field 'resume.args'",
        ),
    ],
)
def test_an_extends_that_cannot_be_used_is_named(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    dirs = tree(tmp_path, files)
    with pytest.raises(SettingsError, match=message):
        load_presets(dirs, strict=True)
    assert "x" not in load_presets(dirs, strict=False)  # started anyway, without it


def test_a_broken_override_keeps_the_file_before_it(tmp_path: Path) -> None:
    dirs = tree(tmp_path, {"builtin/base.yaml": BASE, "etc/base.yaml": "command: notalist\n"})
    assert load_presets(dirs, strict=False)["base"].command == ["base"]


def test_a_file_checked_alone_extends_the_presets_it_would_load_beside(
    tmp_path: Path,
) -> None:
    dirs = tree(tmp_path, {"a/base.yaml": BASE, "a/broken.yaml": "command: notalist\n"})
    mine = tmp_path / "mine.yaml"
    mine.write_text("extends: base\ncommand: [mine]\n")
    preset = load_preset_file(mine, dirs)  # another file's mistake is not this one's
    assert preset.name == "mine" and preset.command == ["mine"] and preset.resume_args
    mine.write_text("extends: absent\n")
    with pytest.raises(SettingsError, match="mine.yaml:1: field 'extends'"):
        load_preset_file(mine, dirs)


def test_kilo_is_opencode_under_its_own_names() -> None:
    presets = load_presets([BUILTIN_DIR], strict=True)
    kilo, opencode = presets["kilo"], presets["opencode"]
    assert kilo.command == ["kilo"]
    screens = [(r.activity, r.screen, r.lines) for r in kilo.activity.rules]
    assert screens == [(r.activity, r.screen, r.lines) for r in opencode.activity.rules]
    assert kilo.discover is not None and kilo.discover.command[0] == "kilo"
    assert kilo.resume_args == opencode.resume_args and kilo.resume_list[0] == "kilo"
    assert kilo.usage_format == "opencode" and kilo.usage_file.endswith("/kilo/kilo.db")
    assert kilo.mcp_format == "kilo" and all("/kilo" in s for s in kilo.state)


def test_only_continue_resumes_into_a_copy_under_a_new_id(tmp_path: Path) -> None:
    presets = load_presets([BUILTIN_DIR], strict=True)
    assert [name for name, p in presets.items() if p.resume_forks] == ["continue"]
    (tmp_path / "mine.yaml").write_text("name: mine\ncommand: [mine]\nresume: {forks: yes-ish}\n")
    with pytest.raises(SettingsError, match="field 'resume.forks': must be true or false"):
        load_presets([tmp_path], strict=True)


@pytest.mark.parametrize(
    ("hooks", "message"),
    [
        (
            "{extension: nothing.ts, args: ['-e', '{extension}']}",
            "must name one of hostagent's extensions: pi-hostagent.ts",
        ),
        (
            "{extension: ../presets.py, args: ['-e', '{extension}']}",
            "must name one of hostagent's extensions",
        ),
        (
            "{extension: pi-hostagent.ts, args: ['-e', 'x.ts']}",
            "field 'hooks.args': must pass {extension}",
        ),
        (
            "{extension: pi-hostagent.ts, args: ['-e', '{extension}'], format: claude}",
            "takes only args and activity",
        ),
    ],
)
def test_an_extension_of_hostagents_is_named_and_passed(
    tmp_path: Path, hooks: str, message: str
) -> None:
    (tmp_path / "mine.yaml").write_text(f"name: mine\ncommand: [mine]\nhooks: {hooks}\n")
    with pytest.raises(SettingsError, match=re.escape(message)):
        load_presets([tmp_path], strict=True)


def test_pi_is_started_with_hostagents_extension_for_it() -> None:
    pi = load_presets([BUILTIN_DIR], strict=True)["pi"]
    paths = SessionPaths.of(Path("/run/hostagent"), "s")
    command = command_with_hooks(pi, ["/usr/bin/pi"], paths, [])
    assert command == ["/usr/bin/pi", "-e", str(EXTENSIONS_DIR / "pi-hostagent.ts")]
    assert (EXTENSIONS_DIR / "pi-hostagent.ts").is_file() and not pi.hooks_format


@pytest.mark.parametrize(
    ("trusted", "refused"),
    [
        pytest.param(
            '["{home}/.x/settings.json", "/etc/x.toml", "{$X_HOME:-{home}}/c"]', False, id="files"
        ),
        pytest.param('["{home}/.x/"]', True, id="a-directory"),
        pytest.param('["settings.json"]', True, id="relative"),
        pytest.param('"{home}/.x/settings.json"', True, id="not-a-list"),
    ],
)
def test_a_presets_trusted_files_are_files_named_by_absolute_templates(
    tmp_path: Path, trusted: str, refused: bool
) -> None:
    dirs = tree(tmp_path, {"a/x.yaml": f"command: [x]\ntrusted: {trusted}\n"})
    if refused:
        with pytest.raises(SettingsError, match="trusted"):
            load_presets(dirs, strict=True)
    else:
        assert len(load_presets(dirs, strict=True)["x"].trusted) == 3


def test_the_built_in_presets_trust_only_files_under_their_state() -> None:
    """A trusted file outside the CLI's state is read-only in a sandbox anyway (ProtectHome=)."""
    presets = load_presets([BUILTIN_DIR], strict=True)
    trusting = {"claude", "gemini", "qwen", "pi", "vibe", "continue"}
    assert {n for n, p in presets.items() if p.trusted} == trusting
    for p in presets.values():
        for file in p.trusted:
            assert any(file.startswith(d) for d in p.state if d.endswith("/")), file
