"""Presets: what to run for each agent CLI, how its conversation id is found, how it resumes.

Built-in presets ship as package data (``hostagent/builtin-presets/*.yaml``). An admin's files in
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

from hostagent import mcp_registration, yamlfile
from hostagent.activity import GENERIC, Rule, Rules
from hostagent.presets import files
from hostagent.presets.discovery import Discovery, parse_discovery
from hostagent.session import Activity, name_problem
from hostagent.usage.readers import READERS

log = logging.getLogger(__name__)

BUILTIN_DIR = Path(__file__).parent.parent / "builtin-presets"
# Extensions hostagent ships for CLIs that take one (Pi's), named by a preset's hooks.extension.
EXTENSIONS_DIR = Path(__file__).parent.parent / "agent-extensions"


class IdSource(enum.StrEnum):
    """How the agent's conversation id becomes known."""

    NONE = "none"  # the CLI has no conversation id (shell, aider)
    ASSIGNED = "assigned"  # we mint it and pass it on the command line
    HOOK = "hook"  # the CLI reports it through a lifecycle hook
    DISCOVERED = "discovered"  # we find it on disk after the first turn


ENTER_GAP = 0.3  # a preset's enter_gap unless it says: enough for every CLI tried
MAX_ENTER_GAP = 2.0


@dataclass
class Preset:
    name: str
    description: str = ""
    command: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    id_source: IdSource = IdSource.NONE
    assign_args: list[str] = field(default_factory=list)
    resume_args: list[str] = field(default_factory=list)
    conversation: str = ""  # a path or glob of the conversation's file (launch.conversation_glob)
    resume_turn: str = ""  # a regex the file holds once a turn was taken (else not resumable)
    resume_list: list[str] = field(default_factory=list)  # prints every resumable id
    resume_forks: bool = False  # the resume opens a copy under a new id (Continue's --fork)
    prompt_args: list[str] = field(default_factory=lambda: ["{prompt}"])  # first launch only
    discover: Discovery | None = None
    hooks_format: str = ""  # "" (no hooks) or a format of hooks.FORMATS
    hooks_args: list[str] = field(default_factory=list)  # with {hooks_file}
    hooks_env: dict[str, str] = field(default_factory=dict)  # with {hooks_file}
    hooks_defaults: str = ""  # an admin's settings file the hooks file takes the place of
    hooks_extension: str = ""  # a file of EXTENSIONS_DIR, passed by hooks_args' {extension}
    hooks_ask: str = ""  # the event whose hook may answer the CLI's dialog (hookrequest.py)
    activity: Rules = GENERIC
    worktree_setup: str = ""  # run as the owner in a new worktree before the agent starts
    usage_format: str = ""  # "" (not read) or a reader of usage.readers.READERS
    usage_file: str = ""  # the record it reads: a path template (launch.conversation_glob)
    # Where the CLI keeps its own state (path templates; a directory ends in "/"): writable in
    # a sandboxed session of the preset, unless a word says otherwise (docs/presets.md). Made
    # from the preset's env and the owner's passwd entry only, never a creator's environment,
    # and each must lie in the home (sandboxpaths.state_paths).
    state: list[str] = field(default_factory=list)
    # Its files that name commands it runs (hooks, servers: path templates): read-only in a
    # sandboxed session of the preset, though under its state, unless a word says otherwise.
    trusted: list[str] = field(default_factory=list)
    # What a session of it may act on from inside: "tree", the sessions made from inside it
    # (and theirs), as an agent should; "owner", all of its owner's, as a person's shell may.
    rights: str = "tree"
    # Whether its sessions start from the admin's agent profile (profile.py): an agent's do, a
    # person's own terminal (the shell preset) does not.
    confined: bool = True
    # A file of the CLI's that a confined session cannot save where it lies, and where the CLI
    # reads it first, in its state: moved there, as the owner, before a confined session starts
    # (Claude Code's ~/.claude.json to ~/.claude/.config.json). Path templates, as state's.
    relocate: list[tuple[str, str]] = field(default_factory=list)
    # How its CLI takes hostagent's MCP server for one run (mcp_registration.FORMATS; "" for
    # not at all), and whether its sessions get it unless a create says otherwise.
    mcp_format: str = ""
    mcp_default: bool = False
    # Seconds between a line's text and its Enter (SendText): a CLI that tells a paste from
    # typing by time (Gemini CLI) takes an Enter that comes sooner as part of the paste.
    enter_gap: float = ENTER_GAP
    source: str = "built-in"


_KNOWN = {
    "name",
    "description",
    "command",
    "env",
    "agent_id",
    "resume",
    "hooks",
    "activity",
    "worktree_setup",
    "prompt_args",
    "usage",
    "state",
    "trusted",
    "rights",
    "mcp",
    "extends",
    "confined",
    "relocate",
    "enter_gap",
}
_AGENT_ID_KNOWN = {"source", "assign_args", "discover"}
_RESUME_KNOWN = {"args", "conversation", "turn", "list", "forks"}
_USAGE_KNOWN = {"format", "file"}
_HOOKS_KNOWN = {"format", "args", "env", "defaults", "activity", "extension", "ask"}
_ACTIVITY_KNOWN = {"rules", "fallback"}
_RULE_KNOWN = {"activity", "screen", "lines", "title", "progress", "output", "command", "visible"}
_RUNNING_ACTIVITIES = ("working", "blocked", "idle", "unknown")
HOOK_FORMATS = ("claude", "gemini", "qwen")

RIGHTS = ("tree", "owner")


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
        preset.discover = parse_discovery(doc, agent_id["discover"])
    resume = yamlfile.expect_mapping(doc, data.get("resume", {}), "resume")
    yamlfile.reject_unknown(doc, resume, _RESUME_KNOWN, "resume")
    preset.resume_args = yamlfile.expect_str_list(doc, resume.get("args", []), "resume.args")
    conv = resume.get("conversation", "")
    if not isinstance(conv, str):
        raise doc.error("resume.conversation", "must be a path template string")
    preset.conversation = conv
    turn = resume.get("turn", "")
    preset.resume_turn = _regex(doc, turn, "resume.turn").pattern if turn else ""
    preset.resume_list = yamlfile.expect_str_list(doc, resume.get("list", []), "resume.list")
    if not isinstance(resume.get("forks", False), bool):
        raise doc.error("resume.forks", "must be true or false")
    preset.resume_forks = resume.get("forks") is True
    if "prompt_args" in data:
        preset.prompt_args = yamlfile.expect_str_list(doc, data["prompt_args"], "prompt_args")
        if preset.prompt_args and not any("{prompt}" in a for a in preset.prompt_args):
            raise doc.error("prompt_args", "must pass the prompt as {prompt}")
    hooks = yamlfile.expect_mapping(doc, data.get("hooks", {}), "hooks")
    yamlfile.reject_unknown(doc, hooks, _HOOKS_KNOWN, "hooks")
    # A section with only an activity table is a CLI's own hooks (a user's config, an
    # extension) running `hostagentctl hook EVENT`: hostagent writes no settings file for it.
    # One of hostagent's own extensions runs that command too, passed in args as {extension}.
    if "extension" in hooks:
        _parse_extension(doc, hooks, preset)
    elif set(hooks) - {"activity"}:
        if hooks.get("format") not in HOOK_FORMATS:
            raise doc.error("hooks.format", f"must be one of: {', '.join(HOOK_FORMATS)}")
        preset.hooks_format = hooks["format"]
        preset.hooks_args = yamlfile.expect_str_list(doc, hooks.get("args", []), "hooks.args")
        preset.hooks_env = yamlfile.expect_str_map(doc, hooks.get("env", {}), "hooks.env")
        named = [*preset.hooks_args, *preset.hooks_env.values()]
        if not any("{hooks_file}" in a for a in named):
            raise doc.error("hooks", "args or env must pass {hooks_file} to the CLI")
        defaults = hooks.get("defaults", "")
        if not isinstance(defaults, str) or (defaults and not defaults.startswith("/etc/")):
            raise doc.error("hooks.defaults", "must be an absolute path under /etc")
        preset.hooks_defaults = defaults
        ask = hooks.get("ask", "")
        if ask and (ask != "PermissionRequest" or preset.hooks_format != "claude"):
            raise doc.error("hooks.ask", "can only be PermissionRequest, in the claude format")
        preset.hooks_ask = str(ask)
    setup = data.get("worktree_setup", "")
    if not isinstance(setup, str):
        raise doc.error("worktree_setup", "must be a shell command")
    preset.worktree_setup = setup
    preset.state = yamlfile.expect_str_list(doc, data.get("state", []), "state")
    if not all(p.startswith(("/", "{home}/", "{$")) for p in preset.state):
        raise doc.error("state", "each must be an absolute path, or start with {home}/ or {$VAR")
    preset.trusted = yamlfile.expect_str_list(doc, data.get("trusted", []), "trusted")
    if not all(
        p.startswith(("/", "{home}/", "{$")) and not p.endswith("/") for p in preset.trusted
    ):
        raise doc.error(
            "trusted", "each must be a file's absolute path, or start with {home}/ or {$VAR"
        )
    preset.rights = data.get("rights", "tree")
    if preset.rights not in RIGHTS:
        raise doc.error("rights", "must be tree (the sessions it made) or owner (all its owner's)")
    confined = data.get("confined", True)
    if not isinstance(confined, bool):
        raise doc.error("confined", "must be true or false")
    preset.confined = confined
    gap = data.get("enter_gap", ENTER_GAP)
    if isinstance(gap, bool) or not isinstance(gap, int | float) or not 0 <= gap <= MAX_ENTER_GAP:
        raise doc.error("enter_gap", f"must be a number of seconds from 0 to {MAX_ENTER_GAP}")
    preset.enter_gap = float(gap)
    preset.relocate = _relocations(doc, data.get("relocate", []))
    _parse_usage(doc, data.get("usage", {}), preset)
    _parse_mcp(doc, data.get("mcp", {}), preset)
    hook_map = yamlfile.expect_str_map(doc, hooks.get("activity", {}), "hooks.activity")
    preset.activity = _parse_activity(doc, data.get("activity"), hook_map, preset.name)
    return preset


def _relocations(doc: yamlfile.Document, value: object) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        raise doc.error("relocate", "must be a list of {from: PATH, to: PATH}")
    out = []
    for entry in value:
        pair = yamlfile.expect_mapping(doc, entry, "relocate")
        yamlfile.reject_unknown(doc, pair, {"from", "to"}, "relocate")
        ends = [pair.get("from"), pair.get("to")]
        if not all(isinstance(p, str) and p.startswith(("{home}/", "{$")) for p in ends):
            raise doc.error("relocate", "from and to must each be a path in the home ({home}/...)")
        out.append((str(ends[0]), str(ends[1])))
    return out


def _parse_extension(doc: yamlfile.Document, hooks: dict[str, object], preset: Preset) -> None:
    name = hooks["extension"]
    if not isinstance(name, str) or "/" in name or not (EXTENSIONS_DIR / name).is_file():
        shipped = ", ".join(sorted(p.name for p in EXTENSIONS_DIR.iterdir()))
        raise doc.error("hooks.extension", f"must name one of hostagent's extensions: {shipped}")
    if set(hooks) - {"extension", "args", "activity"}:
        raise doc.error("hooks", "an extension takes only args and activity beside it")
    preset.hooks_extension = name
    preset.hooks_args = yamlfile.expect_str_list(doc, hooks.get("args", []), "hooks.args")
    if not any("{extension}" in a for a in preset.hooks_args):
        raise doc.error("hooks.args", "must pass {extension} to the CLI")


def _parse_mcp(doc: yamlfile.Document, value: object, preset: Preset) -> None:
    mcp = yamlfile.expect_mapping(doc, value, "mcp")
    yamlfile.reject_unknown(doc, mcp, {"format", "default"}, "mcp")
    if not mcp:
        return
    if mcp.get("format") not in mcp_registration.FORMATS:
        raise doc.error("mcp.format", f"must be one of: {', '.join(mcp_registration.FORMATS)}")
    preset.mcp_format = mcp["format"]
    if (
        preset.mcp_format in mcp_registration.IN_SETTINGS
        and preset.hooks_format != preset.mcp_format
    ):
        raise doc.error(
            "mcp.format",
            f"{preset.mcp_format} takes the server in its hooks file: "
            f"give the preset hooks of format {preset.mcp_format}",
        )
    default = mcp.get("default", False)
    if not isinstance(default, bool):
        raise doc.error("mcp.default", "must be true or false")
    preset.mcp_default = default


def _parse_usage(doc: yamlfile.Document, value: object, preset: Preset) -> None:
    usage = yamlfile.expect_mapping(doc, value, "usage")
    yamlfile.reject_unknown(doc, usage, _USAGE_KNOWN, "usage")
    if not usage:
        return
    if usage.get("format") not in READERS:
        raise doc.error("usage.format", f"must be one of: {', '.join(READERS)}")
    path = usage.get("file")
    if not isinstance(path, str) or not path.startswith(("/", "{")):
        raise doc.error("usage.file", "must be a path template ({home}/…, {cwd}/…)")
    preset.usage_format, preset.usage_file = usage["format"], path


def _activity(doc: yamlfile.Document, value: object, fld: str) -> Activity:
    if value not in _RUNNING_ACTIVITIES:
        raise doc.error(fld, f"must be one of: {', '.join(_RUNNING_ACTIVITIES)}")
    return Activity(value)


def _regex(doc: yamlfile.Document, value: object, fld: str) -> re.Pattern[str]:
    try:
        if not isinstance(value, str):
            raise re.error("not a string")
        return re.compile(value)
    except re.error as e:
        raise doc.error(fld, f"must be a regular expression ({e})") from None


def _parse_activity(
    doc: yamlfile.Document, value: object, hook_map: dict[str, str], preset: str
) -> Rules:
    hooks = {k: _activity(doc, v, f"hooks.activity.{k}") for k, v in hook_map.items()}
    if value is None:
        return Rules(GENERIC.rules, hooks)
    section = yamlfile.expect_mapping(doc, value, "activity")
    yamlfile.reject_unknown(doc, section, _ACTIVITY_KNOWN, "activity")
    raw_rules = section.get("rules", [])
    if not isinstance(raw_rules, list):
        raise doc.error("activity.rules", "must be a list of rules")
    rules = []
    for i, raw in enumerate(raw_rules):
        fld = f"activity.rules[{i}]"
        item = yamlfile.expect_mapping(doc, raw, fld)
        yamlfile.reject_unknown(doc, item, _RULE_KNOWN, fld)
        kinds = [k for k in ("screen", "title", "progress", "output", "command") if k in item]
        if len(kinds) != 1:
            raise doc.error(fld, "needs exactly one of screen, title, progress, output or command")
        screen = item.get("screen", [])
        screens = [screen] if isinstance(screen, str) else screen
        if not isinstance(screens, list):
            raise doc.error(f"{fld}.screen", "must be a regular expression or a list of them")
        progress = item.get("progress", [])
        if not isinstance(progress, list) or not all(
            isinstance(p, int) and 0 <= p <= 4 for p in progress
        ):
            raise doc.error(f"{fld}.progress", "must be a list of OSC 9;4 states (0 to 4)")
        lines = item.get("lines", 10)
        if isinstance(lines, bool) or not isinstance(lines, int) or not 1 <= lines <= 200:
            raise doc.error(f"{fld}.lines", "must be an integer between 1 and 200")
        rules.append(
            Rule(
                activity=_activity(doc, item.get("activity"), f"{fld}.activity"),
                name=f"{preset} rule {i + 1}",
                screen=tuple(_regex(doc, r, f"{fld}.screen") for r in screens),
                lines=lines,
                title=_regex(doc, item["title"], f"{fld}.title") if "title" in item else None,
                progress=frozenset(progress),
                output=item.get("output") is True,
                command=(
                    _regex(doc, item["command"], f"{fld}.command") if "command" in item else None
                ),
                visible=item.get("visible") is True,
            )
        )
    fallback = _activity(doc, section.get("fallback", "idle"), "activity.fallback")
    return Rules(tuple(rules), hooks, fallback)


def preset_dirs(system: bool) -> list[Path]:
    dirs = [BUILTIN_DIR, Path("/etc/hostagent/presets.d")]
    if not system:
        base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
        dirs.append(Path(base) / "hostagent" / "presets.d")
    return dirs


def load_presets(dirs: list[Path], strict: bool) -> dict[str, Preset]:
    """Presets by name, later dirs overriding earlier ones, ``extends`` resolved
    (files.py).

    strict: raise SettingsError on the first broken file (Reload keeps the last good set);
    otherwise log it and keep the name's last earlier file that is good (start-up serves
    everything that is good).
    """
    loader = files.Loader(parse_preset, _raise if strict else _log_refused)
    loader.read(dirs)
    return loader.presets()


def load_preset_file(path: Path, dirs: list[Path]) -> Preset:
    """The preset of one file as the daemon would load it beside the presets of dirs (what it
    extends among them); SettingsError says what is wrong with it."""
    doc = yamlfile.load(path)
    errors: list[yamlfile.SettingsError] = []  # the others' too: only its own is raised
    loader = files.Loader(parse_preset, errors.append)
    loader.read(dirs, but=path)
    loader.add(doc)
    preset = loader.preset(files.name_of(doc))
    if preset is None:
        raise errors[-1]  # its own, told last: after any of the bases it reached for
    return preset


def _raise(e: yamlfile.SettingsError) -> None:
    raise e


def _log_refused(e: yamlfile.SettingsError) -> None:
    log.error("Failed to load preset: %s, ignoring", e)
