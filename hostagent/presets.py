"""Presets: what to run for each agent CLI, how its conversation id is found, how it resumes.

Built-in presets ship as package data (``hostagent/presets/*.yaml``). An admin's files in
/etc/hostagent/presets.d/ override them by name, and in user mode so do the user's files in
~/.config/hostagent/presets.d/. Each file holds one preset; see hostagent-presets(5).
"""

from __future__ import annotations

import enum
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import yamlfile
from .session import name_problem

log = logging.getLogger(__name__)

BUILTIN_DIR = Path(__file__).parent / "presets"


class IdSource(enum.StrEnum):
    """How the agent's conversation id becomes known."""

    NONE = "none"  # the CLI has no conversation id (shell, aider)
    ASSIGNED = "assigned"  # we mint it and pass it on the command line
    HOOK = "hook"  # the CLI reports it through a lifecycle hook
    DISCOVERED = "discovered"  # we find it on disk after the first turn


@dataclass(frozen=True)
class Discovery:
    """Where a CLI keeps its conversations on disk, for finding the id of a session's."""

    glob: str  # with {home} and {cwd_dashed}; ** matches any depth
    id_pattern: str  # a regular expression over the path; group 1 is the id
    cwd_field: str = ""  # dotted JSON field of the file's first line that holds the cwd


@dataclass
class Preset:
    name: str
    description: str = ""
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    id_source: IdSource = IdSource.NONE
    assign_args: list[str] = field(default_factory=list)
    resume_args: list[str] = field(default_factory=list)
    conversation: str = ""
    discover: Discovery | None = None
    hooks_format: str = ""  # "" (no hooks) or a format of hooks.FORMATS
    hooks_args: list[str] = field(default_factory=list)  # with {hooks_file}
    source: str = "built-in"


_KNOWN = {"name", "description", "command", "env", "agent_id", "resume", "hooks"}
_AGENT_ID_KNOWN = {"source", "assign_args", "discover"}
_DISCOVER_KNOWN = {"glob", "id", "cwd_field"}
_RESUME_KNOWN = {"args", "conversation"}
_HOOKS_KNOWN = {"format", "args"}
HOOK_FORMATS = ("claude",)


def parse_preset(doc: yamlfile.Document) -> Preset:
    data = yamlfile.expect_mapping(doc, doc.data, None)
    yamlfile.reject_unknown(doc, data, _KNOWN, "")
    name = data.get("name", doc.path.stem)
    if not isinstance(name, str) or name_problem(name):
        raise doc.error("name", "must be a valid preset name ([a-z0-9][a-z0-9_.-]*)")
    preset = Preset(name=name, source=str(doc.path))
    desc = data.get("description", "")
    if not isinstance(desc, str):
        raise doc.error("description", "must be a string")
    preset.description = desc
    preset.command = yamlfile.expect_str_list(doc, data.get("command", []), "command")
    preset.env = yamlfile.expect_str_map(doc, data.get("env", {}), "env")
    agent_id = yamlfile.expect_mapping(doc, data.get("agent_id", {}), "agent_id")
    yamlfile.reject_unknown(doc, agent_id, _AGENT_ID_KNOWN, "agent_id")
    try:
        preset.id_source = IdSource(agent_id.get("source", "none"))
    except ValueError:
        raise doc.error("agent_id.source", "must be none, assigned, hook or discovered") from None
    preset.assign_args = yamlfile.expect_str_list(
        doc, agent_id.get("assign_args", []), "agent_id.assign_args"
    )
    if preset.id_source is IdSource.ASSIGNED and not any("{id}" in a for a in preset.assign_args):
        raise doc.error("agent_id.assign_args", "an assigned id needs an argument with {id}")
    if "discover" in agent_id:
        preset.discover = _parse_discovery(doc, agent_id["discover"])
    resume = yamlfile.expect_mapping(doc, data.get("resume", {}), "resume")
    yamlfile.reject_unknown(doc, resume, _RESUME_KNOWN, "resume")
    preset.resume_args = yamlfile.expect_str_list(doc, resume.get("args", []), "resume.args")
    conv = resume.get("conversation", "")
    if not isinstance(conv, str):
        raise doc.error("resume.conversation", "must be a path template string")
    preset.conversation = conv
    hooks = yamlfile.expect_mapping(doc, data.get("hooks", {}), "hooks")
    yamlfile.reject_unknown(doc, hooks, _HOOKS_KNOWN, "hooks")
    if hooks:
        if hooks.get("format") not in HOOK_FORMATS:
            raise doc.error("hooks.format", f"must be one of: {', '.join(HOOK_FORMATS)}")
        preset.hooks_format = hooks["format"]
        preset.hooks_args = yamlfile.expect_str_list(doc, hooks.get("args", []), "hooks.args")
        if not any("{hooks_file}" in a for a in preset.hooks_args):
            raise doc.error("hooks.args", "needs an argument with {hooks_file}")
    return preset


def _parse_discovery(doc: yamlfile.Document, value: object) -> Discovery:
    rule = yamlfile.expect_mapping(doc, value, "agent_id.discover")
    yamlfile.reject_unknown(doc, rule, _DISCOVER_KNOWN, "agent_id.discover")
    glob, pattern, cwd_field = (rule.get(k, "") for k in ("glob", "id", "cwd_field"))
    if not isinstance(glob, str) or not glob.startswith("{home}/"):
        raise doc.error("agent_id.discover.glob", "must be a glob that starts with {home}/")
    try:
        if not isinstance(pattern, str) or re.compile(pattern).groups < 1:
            raise re.error("no group")
    except re.error:
        raise doc.error(
            "agent_id.discover.id", "must be a regular expression whose group 1 is the id"
        ) from None
    if not isinstance(cwd_field, str):
        raise doc.error("agent_id.discover.cwd_field", "must be a dotted field name")
    return Discovery(glob, pattern, cwd_field)


def preset_dirs(system: bool) -> list[Path]:
    dirs = [BUILTIN_DIR, Path("/etc/hostagent/presets.d")]
    if not system:
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        dirs.append(Path(base) / "hostagent" / "presets.d")
    return dirs


def load_presets(dirs: list[Path], strict: bool) -> dict[str, Preset]:
    """Presets by name, later dirs overriding earlier ones.

    strict: raise SettingsError on the first broken file (Reload keeps the last good set);
    otherwise log it and skip that file (start-up serves everything that is good).
    """
    presets: dict[str, Preset] = {}
    for d in dirs:
        if not d.is_dir():
            continue
        for path in sorted(d.glob("*.yaml")):
            try:
                preset = parse_preset(yamlfile.load(path))
            except yamlfile.SettingsError as e:
                if strict:
                    raise
                log.error("Failed to load preset: %s, ignoring", e)
                continue
            presets[preset.name] = preset
    return presets
