"""The daemon's settings (hostagent.yaml) and the bounds every limit must respect.

Defaults live here, so a host with no config file behaves as documented in hostagent.yaml(5).
"""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field
from pathlib import Path

from hostagent import sandbox, values, yamlfile
from hostagent.budgets import Budgets, parse_budgets
from hostagent.profile import AgentProfile
from hostagent.session import Limits
from hostagent.values import INFINITY, format_limit

# Inclusive bounds for each limit; zero is never accepted where a limit is given explicitly.
LIMIT_BOUNDS: dict[str, tuple[int, int]] = {
    "memory_max": (1 << 20, 1 << 50),
    "memory_high": (1 << 20, 1 << 50),
    "cpu_weight": (1, 10000),
    "tasks_max": (1, 4194304),
    "runtime_max_sec": (1, 10 * 365 * 24 * 3600),
}
COLUMNS_BOUNDS = (20, 1000)
ROWS_BOUNDS = (5, 1000)


# What a limit is called where people meet it: systemd's property, as hostagentctl -p takes it.
LIMIT_PROPERTIES = {
    "memory_max": "MemoryMax",
    "memory_high": "MemoryHigh",
    "cpu_weight": "CPUWeight",
    "tasks_max": "TasksMax",
    "runtime_max_sec": "RuntimeMaxSec",
}
USER_CAP_KEYS = ("tasks_max", "memory_max", "cpu_weight")  # what a user's slice carries


def over_caps(asked: Limits, caps: Limits) -> str | None:
    """The first limit asked for that is above the admin's maximum, said for the caller; the
    admin's limits are defaults a caller may lower, never raise."""
    for key, prop in LIMIT_PROPERTIES.items():
        cap, value = getattr(caps, key), getattr(asked, key)
        if cap and value > cap:
            shown = format_limit(prop, cap)
            return (
                f"{prop}={format_limit(prop, value)} is more than this host allows for a "
                f"session ({shown}, limits.{key} in hostagent.yaml); ask for at most {shown}"
            )
    return None


def limit_problem(key: str, value: int) -> str | None:
    if value == INFINITY and key != "cpu_weight":
        return None  # systemd's infinity: no limit at all
    lo, hi = LIMIT_BOUNDS[key]
    if not lo <= value <= hi:
        return f"must be between {lo} and {hi}"
    return None


class RecoveryPolicy(enum.StrEnum):
    DORMANT = "dormant"
    AUTO = "auto"
    NEVER = "never"


class OrphanPolicy(enum.StrEnum):
    STOP = "stop"
    ADOPT = "adopt"


@dataclass
class UserCaps:
    """What all of one user's sessions may use together. The limits go on the user's own slice
    (hostagent-uUID.slice), so one user cannot starve another; root's sessions are not capped."""

    sessions: int = 64  # sessions (in any state) one user may have; 0: no cap
    limits: Limits = field(default_factory=lambda: Limits(tasks_max=16384))
    admins_exceed: bool = False  # polkit's manage-any admins may go past the caps and limits


@dataclass
class SandboxDefaults:
    """The sandboxing words every session is created with, and per user (by name) the words in
    their place. A create may add words that tighten them, never loosen them."""

    every: list[str] = field(default_factory=list)
    users: dict[str, list[str]] = field(default_factory=dict)
    agents: AgentProfile = field(default_factory=AgentProfile)  # profile.py

    def of(self, user: str) -> list[str]:
        return self.users.get(user, self.every)


@dataclass
class Config:
    limits: Limits = field(default_factory=lambda: Limits(tasks_max=4096))
    columns: int = 200
    rows: int = 50
    stop_timeout_sec: int = 10
    recovery_policy: RecoveryPolicy = RecoveryPolicy.DORMANT
    recovery_max_parallel: int = 2
    recovery_stagger_sec: float = 2.0
    orphans: OrphanPolicy = OrphanPolicy.ADOPT
    users: UserCaps = field(default_factory=UserCaps)
    worktrees_dir: str = ""  # where session worktrees go; "" is beside the repository's git dir
    worktrees_setup: str = ""  # a command run as the owner in each new worktree
    budgets: Budgets = field(default_factory=Budgets)  # and the admin's prices (budgets.py)
    sandbox: SandboxDefaults = field(default_factory=SandboxDefaults)
    mcp: bool = False  # sessions whose CLI takes hostagent's MCP server get it by default
    answer_rules: bool = True  # users may keep rules that answer their agents' questions
    # How long a question an agent's hook asks waits for an answer from the inbox; then its
    # dialog is the terminal's (and read from the screen, as any other).
    answer_wait: int = 600
    source: str = "built-in defaults"


MAX_ANSWER_WAIT = 3600  # seconds a hook may hold its question: an hour


def config_paths(system: bool) -> list[Path]:
    if system:
        return [Path("/etc/hostagent/hostagent.yaml")]
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return [Path(base) / "hostagent" / "hostagent.yaml"]


def load_config(paths: list[Path]) -> Config:
    """The first existing file of paths, validated; SettingsError names file, line and field."""
    for path in paths:
        if path.exists():
            return parse_config(yamlfile.load(path))
    return Config()


def _int(doc: yamlfile.Document, value: object, fld: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise doc.error(fld, f"must be an integer between {lo} and {hi}")
    return value


def _limit(doc: yamlfile.Document, key: str, value: object, fld: str) -> int:
    """A limit as a number, or as systemd writes it: 4G, 50%, 1h, infinity."""
    if isinstance(value, str):
        try:
            if key.startswith("memory_"):
                physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
                number = values.parse_size(value, physical)
            elif key == "runtime_max_sec":
                number = values.parse_timespan(value)
            elif value.strip().lower() == "infinity" and key != "cpu_weight":
                number = values.INFINITY
            else:
                raise doc.error(fld, f"must be a whole number, not {value!r}")
        except values.ValueProblem as e:
            raise doc.error(fld, str(e)) from None
        problem = limit_problem(key, number)
        if problem:
            raise doc.error(fld, problem)
        return number
    lo, hi = LIMIT_BOUNDS[key]
    return _int(doc, value, fld, lo, hi)


def parse_config(doc: yamlfile.Document) -> Config:
    data = yamlfile.expect_mapping(doc, doc.data, None)
    yamlfile.reject_unknown(
        doc,
        data,
        {
            "limits",
            "users",
            "tmux",
            "stop_timeout_sec",
            "recovery",
            "worktrees",
            "budgets",
            "prices",
            "sandbox",
            "mcp",
            "answers",
        },
        "",
    )
    cfg = Config(source=str(doc.path), budgets=parse_budgets(doc, data))
    limits = yamlfile.expect_mapping(doc, data.get("limits", {}), "limits")
    yamlfile.reject_unknown(doc, limits, set(LIMIT_BOUNDS), "limits")
    for key, value in limits.items():
        setattr(cfg.limits, key, _limit(doc, key, value, f"limits.{key}"))
    users = yamlfile.expect_mapping(doc, data.get("users", {}), "users")
    yamlfile.reject_unknown(doc, users, {"sessions", "admins_exceed", *USER_CAP_KEYS}, "users")
    cfg.users.sessions = _int(
        doc, users.get("sessions", cfg.users.sessions), "users.sessions", 0, 1_000_000
    )
    for key in USER_CAP_KEYS:
        if key in users:  # 0 takes the cap away
            value = users[key]
            value = 0 if value == 0 else _limit(doc, key, value, f"users.{key}")
            setattr(cfg.users.limits, key, value)
    exceed = users.get("admins_exceed", False)
    if not isinstance(exceed, bool):
        raise doc.error("users.admins_exceed", "must be true or false")
    cfg.users.admins_exceed = exceed
    tmux = yamlfile.expect_mapping(doc, data.get("tmux", {}), "tmux")
    yamlfile.reject_unknown(doc, tmux, {"columns", "rows"}, "tmux")
    cfg.columns = _int(doc, tmux.get("columns", cfg.columns), "tmux.columns", *COLUMNS_BOUNDS)
    cfg.rows = _int(doc, tmux.get("rows", cfg.rows), "tmux.rows", *ROWS_BOUNDS)
    cfg.stop_timeout_sec = _int(
        doc, data.get("stop_timeout_sec", cfg.stop_timeout_sec), "stop_timeout_sec", 1, 3600
    )
    rec = yamlfile.expect_mapping(doc, data.get("recovery", {}), "recovery")
    yamlfile.reject_unknown(
        doc, rec, {"policy", "max_parallel", "stagger_sec", "orphans"}, "recovery"
    )
    try:
        cfg.recovery_policy = RecoveryPolicy(rec.get("policy", cfg.recovery_policy.value))
    except ValueError:
        raise doc.error("recovery.policy", "must be dormant, auto or never") from None
    try:
        cfg.orphans = OrphanPolicy(rec.get("orphans", cfg.orphans.value))
    except ValueError:
        raise doc.error("recovery.orphans", "must be stop or adopt") from None
    cfg.recovery_max_parallel = _int(
        doc, rec.get("max_parallel", cfg.recovery_max_parallel), "recovery.max_parallel", 1, 64
    )
    stagger = rec.get("stagger_sec", cfg.recovery_stagger_sec)
    if isinstance(stagger, bool) or not isinstance(stagger, int | float) or not 0 <= stagger <= 600:
        raise doc.error("recovery.stagger_sec", "must be a number of seconds between 0 and 600")
    cfg.recovery_stagger_sec = float(stagger)
    wt = yamlfile.expect_mapping(doc, data.get("worktrees", {}), "worktrees")
    yamlfile.reject_unknown(doc, wt, {"dir", "setup"}, "worktrees")
    directory, setup = wt.get("dir", ""), wt.get("setup", "")
    if not isinstance(directory, str) or (directory and not os.path.isabs(directory)):
        raise doc.error("worktrees.dir", "must be an absolute path")
    if not isinstance(setup, str):
        raise doc.error("worktrees.setup", "must be a shell command")
    cfg.worktrees_dir, cfg.worktrees_setup = directory, setup
    cfg.sandbox = _sandbox(doc, data)
    mcp = data.get("mcp", False)
    if not isinstance(mcp, bool):
        raise doc.error("mcp", "must be true or false")
    cfg.mcp = mcp
    answers = yamlfile.expect_mapping(doc, data.get("answers", {}), "answers")
    yamlfile.reject_unknown(doc, answers, {"rules", "wait"}, "answers")
    rules = answers.get("rules", True)
    if not isinstance(rules, bool):
        raise doc.error("answers.rules", "must be true or false")
    cfg.answer_rules = rules
    wait = answers.get("wait", cfg.answer_wait)
    if isinstance(wait, bool) or not isinstance(wait, int) or not 1 <= wait <= MAX_ANSWER_WAIT:
        raise doc.error("answers.wait", f"must be whole seconds from 1 to {MAX_ANSWER_WAIT}")
    cfg.answer_wait = wait
    return cfg


def _words(doc: yamlfile.Document, value: object, fld: str) -> list[str]:
    """A list of sandboxing words, each as a session's properties take it."""
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise doc.error(fld, "must be a list of words such as ProtectSystem=strict")
    for word in value:
        if not sandbox.is_word(word.partition("=")[0]):
            raise doc.error(fld, f"{word!r} is not a sandboxing word ({', '.join(sandbox.WORDS)})")
    try:
        sandbox.read(value)
    except sandbox.SandboxProblem as e:
        raise doc.error(fld, str(e)) from None
    return list(value)


def _sandbox(doc: yamlfile.Document, data: dict[str, object]) -> SandboxDefaults:
    section = yamlfile.expect_mapping(doc, data.get("sandbox", {}), "sandbox")
    yamlfile.reject_unknown(doc, section, {"default", "users", "agents"}, "sandbox")
    users = yamlfile.expect_mapping(doc, section.get("users", {}), "sandbox.users")
    return SandboxDefaults(
        _words(doc, section.get("default", []), "sandbox.default"),
        {str(u): _words(doc, w, f"sandbox.users.{u}") for u, w in users.items()},
        _agents(doc, section.get("agents", {})),
    )


def _agents(doc: yamlfile.Document, value: object) -> AgentProfile:
    """sandbox.agents: the agent profile, each key defaulting to the built-in one's."""
    section = yamlfile.expect_mapping(doc, value, "sandbox.agents")
    known = {"words", "users", "caches", "loosen", "relocate"}
    yamlfile.reject_unknown(doc, section, known, "sandbox.agents")
    profile = AgentProfile()
    if "words" in section:
        profile.words = _words(doc, section["words"], "sandbox.agents.words")
    users = yamlfile.expect_mapping(doc, section.get("users", {}), "sandbox.agents.users")
    profile.users = {str(u): _words(doc, w, f"sandbox.agents.users.{u}") for u, w in users.items()}
    if "caches" in section:
        caches = yamlfile.expect_str_list(doc, section["caches"], "sandbox.agents.caches")
        if not all(c.startswith("%h/") and ".." not in c.split("/") for c in caches):
            raise doc.error("sandbox.agents.caches", "each must be a path in the home: %h/...")
        profile.caches = caches
    for key in ("loosen", "relocate"):
        flag = section.get(key, getattr(profile, key))
        if not isinstance(flag, bool):
            raise doc.error(f"sandbox.agents.{key}", "must be true or false")
        setattr(profile, key, flag)
    return profile
