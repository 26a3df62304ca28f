"""The real agent CLIs in the sandbox: what dev/agents installed, how each is set up in a user's
home the way its own documentation says (pointed at the stand-in model API on loopback), and
what its first-run dialogs want typed.

The CLIs are linked into the user's ~/.local/bin, with the Node 22 they need, as a user's own
install would put them: the daemon must find them through the user's login PATH.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.sandbox import AGENTS_CACHE, Sandbox
from tests.sandbox_roots import DEFAULT_SYSTEM

API_PORT = 8400
API = f"http://127.0.0.1:{API_PORT}"
API_LOG = "/var/log/hostagent-modelapi.jsonl"
ENTER, DOWN, UP = "\r", "\x1b[B", "\x1b[A"


@dataclass(frozen=True)
class RealAgent:
    """One CLI as a test drives it."""

    key: str  # its line in dev/agents' manifest
    preset: str
    user: str
    env: dict[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    # First-run dialogs, step by step: (text on the screen, the key that answers it). A
    # cursor move and its Enter are two steps: sent together, some CLIs drop the move.
    first_run: tuple[tuple[str, str], ...] = ()
    ready: str = ""  # text of the idle screen once the dialogs are answered
    approval: str = ""  # text of its approval dialog, waited for before it is answered
    # What the approval turn types: a CLI that asks only before a dangerous command (Pi's
    # permission gate) is asked for one (tests/modelscript.py).
    approval_prompt: str = "please run it slowly"
    approve: str = ENTER
    answers_after_tool: bool = True  # Aider runs the command and is done: no second answer
    git_project: bool = False  # Codex asks its trust question only in a repository
    hooks: bool = False  # reports through hooks (shown by ExplainActivity at idle)
    configured: bool = True  # its settings written to the user's home (home_files)
    system: str = "debian12"  # the machine it runs on (tests/sandbox_roots.py)

    def runs_here(self) -> bool:
        """Whether this run's machines are the one it runs on (HOSTAGENT_SANDBOX_OS); with
        HOSTAGENT_EVERY_NODE_CLI set, a CLI that runs on Node runs on either machine (its own
        Node 22 goes with it, where a PyPI CLI's venv is its machine's Python's)."""
        if os.environ.get("HOSTAGENT_EVERY_NODE_CLI") and self.key not in PYPI_CLIS:
            return True
        return self.system == DEFAULT_SYSTEM


PYPI_CLIS = {"aider", "hermes", "vibe"}  # each in a venv of its machine's own Python


ANTHROPIC = {
    "ANTHROPIC_BASE_URL": API,
    "ANTHROPIC_API_KEY": "sk-ant-standin-0123456789",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_AUTOUPDATER": "1",
}
AGENTS = (
    RealAgent(
        "claude",
        "claude",
        "alice",
        ANTHROPIC,
        approval="Do you want to proceed?",
        first_run=(
            ("Yes, I trust this folder", DOWN),
            ("❯ Yes, I trust this folder", ENTER),
            ("Do you want to use this API key?", UP),
            ("❯ Yes", ENTER),
            ("Make auto mode your default permission mode?", DOWN),
            ("❯ No, keep manual mode", ENTER),
        ),
        ready="? for shortcuts",
        hooks=True,
    ),
    RealAgent(
        "claude-old",
        "claude",
        "bob",
        ANTHROPIC,
        approval="Do you want to proceed?",
        first_run=(
            ("Yes, I trust this folder", ENTER),
            ("Do you want to use this API key?", UP),
            ("❯ 1. Yes", ENTER),
        ),
        ready="? for shortcuts",
        hooks=True,
    ),
    RealAgent(
        "codex",
        "codex",
        "alice",
        {"OPENAI_API_KEY": "sk-standin"},
        first_run=(("Trust this folder?", ENTER),),
        ready="Ask Codex to do anything",
        approval="Would you like to run the following command?",
        git_project=True,
    ),
    RealAgent(
        "gemini",
        "gemini",
        "alice",
        {"GEMINI_API_KEY": "standin", "GOOGLE_GEMINI_BASE_URL": API},
        first_run=(
            ("Do you trust the files in this folder?", ENTER),
            ("How would you like to authenticate", ENTER),
            ("Enter Gemini API Key", ENTER),
        ),
        ready="Type your message",
        hooks=True,
        approval="Allow execution of",
    ),
    RealAgent(
        "qwen",
        "qwen",
        "alice",
        {
            "OPENAI_API_KEY": "sk-standin",
            "OPENAI_BASE_URL": f"{API}/v1",
            "OPENAI_MODEL": "stand-in",
        },
        args=("--auth-type", "openai", "--approval-mode", "default"),
        ready="Type your message",
        hooks=True,
        approval="Allow execution of",
    ),
    RealAgent(
        "qwen-old",
        "qwen",
        "bob",
        {
            "OPENAI_API_KEY": "sk-standin",
            "OPENAI_BASE_URL": f"{API}/v1",
            "OPENAI_MODEL": "stand-in",
        },
        args=("--auth-type", "openai", "--approval-mode", "default"),
        ready="Type your message",
        hooks=True,
        approval="Allow execution of",
    ),
    RealAgent(
        "opencode", "opencode", "alice", ready="ctrl+p commands", approval="Permission required"
    ),
    RealAgent(
        "copilot",
        "copilot",
        "alice",
        {
            "COPILOT_OFFLINE": "true",
            "COPILOT_PROVIDER_BASE_URL": f"{API}/v1",
            "COPILOT_PROVIDER_API_KEY": "sk-standin",
            "COPILOT_MODEL": "gpt-4o",
            "COPILOT_AUTO_UPDATE": "false",
        },
        # "Yes" trusts the folder for this session only: the next session would ask again.
        first_run=(
            ("Do you trust the files in this folder?", DOWN),
            ("❯ 2. Yes, and remember", ENTER),
        ),
        ready="/ commands",
        approval="Do you want to run this command?",
    ),
    RealAgent("kilo", "kilo", "alice", ready="ctrl+p commands", approval="Permission required"),
    # Cline approves every tool itself unless told not to, as its user does here.
    RealAgent(
        "cline",
        "cline",
        "alice",
        args=("--auto-approve", "false"),
        ready="● Act (Tab)",
        approval="Cline needs permission",
        approve="y",
    ),
    # Pi asks nothing before a tool runs: its user has added the permission gate and the
    # question tool of Pi's own examples as extensions (set_up_user).
    RealAgent(
        "pi",
        "pi",
        "alice",
        {"PI_OFFLINE": "1"},
        ready="(auto)",
        approval="Dangerous command:",
        approval_prompt="please run it slowly, a dangerous one",
        hooks=True,  # through hostagent's own extension for Pi
    ),
    # Hermes asks only before a dangerous command, as Pi's gate does.
    RealAgent(
        "hermes",
        "hermes",
        "alice",
        ready="/help for commands",
        approval="Dangerous Command",
        approval_prompt="please run it slowly, a dangerous one",
    ),
    # Continue's model is in its user's config.yaml; its approval's first choice is "Continue".
    RealAgent(
        "continue",
        "continue",
        "alice",
        ready="Ask anything, @ for context",
        approval="Would you like to continue?",
    ),
    # Vibe wants Python 3.12 or newer, which Debian 12 has not: it runs on the Debian 13
    # machine, in a venv of that machine's Python (dev/agents).
    RealAgent(
        "vibe",
        "vibe",
        "alice",
        ready="accept edits",
        approval="Permission for the",
        system="debian13",
    ),
    RealAgent(
        "aider",
        "aider",
        "alice",
        {"OPENAI_API_KEY": "sk-standin"},
        args=(
            "--model",
            "openai/stand-in",
            "--openai-api-base",
            f"{API}/v1",
            "--no-check-update",
            "--no-show-release-notes",
            "--analytics-disable",
            "--edit-format",
            "diff",
            "--no-show-model-warnings",
        ),
        first_run=(("No git repo found, create one", "y" + ENTER),),
        ready="diff>",
        approval="Run shell command?",
        approve="y" + ENTER,
        answers_after_tool=False,
    ),
)


def installed() -> dict[str, tuple[str, str]]:
    """key -> (version, program) of what dev/agents installed on this machine."""
    manifest = AGENTS_CACHE / "installed"
    if not manifest.exists():
        return {}
    rows = (line.split() for line in manifest.read_text().splitlines())
    return {r[0]: (r[1], r[2]) for r in rows if len(r) == 3}


# What each CLI reads from its user's home, as its documentation says to write it.
_CODEX_CONFIG = f"""model = "stand-in"
model_provider = "standin"

[model_providers.standin]
name = "Stand-in"
base_url = "{API}/v1"
env_key = "OPENAI_API_KEY"
wire_api = "responses"
"""
_OPENCODE_CONFIG = {
    "$schema": "https://opencode.ai/config.json",
    "provider": {
        "standin": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Stand-in",
            "options": {"baseURL": f"{API}/v1", "apiKey": "sk-standin"},
            "models": {"stand-in": {"name": "Stand-in model"}},
        }
    },
    "model": "standin/stand-in",
    "permission": {"bash": "ask", "edit": "ask"},
    "autoupdate": False,
    "share": "disabled",
}


_PI_MODELS = {
    "providers": {
        "standin": {
            "baseUrl": f"{API}/v1",
            "api": "openai-completions",
            "apiKey": "sk-standin",
            "models": [{"id": "stand-in"}],
        }
    }
}
_HERMES_CONFIG = f"""model:
  provider: custom
  base_url: {API}/v1
  default: stand-in
"""
_CLINE_PROVIDERS = {
    "version": 1,
    "lastUsedProvider": "openai-compatible",
    "modes": {},
    "providers": {
        "openai-compatible": {
            "settings": {
                "provider": "openai-compatible",
                "apiKey": "sk-standin",
                "model": "stand-in",
                "baseUrl": f"{API}/v1",
            },
            "updatedAt": "2026-12-06T00:00:00.000Z",
            "tokenSource": "manual",
        }
    },
}
_CONTINUE_CONFIG = f"""name: Local
version: 1.0.0
schema: v1
models:
  - name: Stand-in
    provider: openai
    model: stand-in
    apiBase: {API}/v1
    apiKey: sk-standin
    roles: [chat, edit, apply]
"""
_VIBE_CONFIG = f"""active_model = "stand-in"
enable_telemetry = false
enable_update_checks = false
enable_auto_update = false

[experiments]
enable = false

[[providers]]
name = "standin"
api_base = "{API}/v1"
api_key_env_var = "STANDIN_API_KEY"
api_style = "openai"
backend = "generic"

[[models]]
name = "stand-in"
provider = "standin"
alias = "stand-in"
"""
# The extensions of Pi's examples its user adds (Pi's package ships them).
PI_EXTENSIONS = ("permission-gate.ts", "question.ts")


def home_files(agent: RealAgent) -> dict[str, str]:
    if agent.preset == "claude":
        # Onboarding checks that api.anthropic.com answers before it asks anything; a user
        # with a key in the environment has been through it, as this says.
        return {
            ".claude.json": json.dumps({"hasCompletedOnboarding": True, "theme": "dark"}),
            # Claude's auto mode would ask the model to judge each tool call: the user here
            # answers approvals themselves.
            ".claude/settings.json": json.dumps({"permissions": {"defaultMode": "default"}}),
        }
    if agent.preset == "codex":
        return {".codex/config.toml": _CODEX_CONFIG}
    if agent.preset == "opencode":
        return {".config/opencode/opencode.json": json.dumps(_OPENCODE_CONFIG)}
    if agent.preset == "kilo":  # OpenCode's settings, in Kilo's place
        return {".config/kilo/kilo.json": json.dumps(_OPENCODE_CONFIG)}
    if agent.preset == "pi":
        return {".pi/agent/models.json": json.dumps(_PI_MODELS)}
    if agent.preset == "cline":  # what `cline auth -p openai -b URL -k KEY -m MODEL` writes
        return {".cline/data/settings/providers.json": json.dumps(_CLINE_PROVIDERS)}
    if agent.preset == "continue":  # a user who has been through its first start's key prompt
        return {".continue/config.yaml": _CONTINUE_CONFIG, ".continue/.onboarding_complete": ""}
    if agent.preset == "vibe":
        return {".vibe/config.toml": _VIBE_CONFIG, ".vibe/.env": "STANDIN_API_KEY=sk-standin"}
    if agent.preset == "hermes":
        return {".hermes/config.yaml": _HERMES_CONFIG, ".hermes/.env": "OPENAI_API_KEY=sk-standin"}
    return {}


def program_name(agent: RealAgent) -> str:
    return {"claude-old": "claude", "qwen-old": "qwen", "continue": "cn"}.get(agent.key, agent.key)


def hide_machine_installs(sb: Sandbox) -> None:
    """The machine is an overlay of the build host's root: a CLI the host installed system-wide
    (npm -g puts qwen in /usr/bin) would be every user's, and a user without the test's links
    would find it. Removed in the overlay; the host keeps its own."""
    names = sorted({program_name(a) for a in AGENTS})
    paths = [f"{d}/{n}" for d in ("/usr/local/bin", "/usr/bin") for n in names]
    sb.run("rm", "-f", *paths).check()


def set_up_user(sb: Sandbox, agent: RealAgent, program: str, node: str) -> str:
    """Link the CLI and Node 22 into the user's ~/.local/bin, write its settings; the
    project directory the session runs in."""
    home = f"/home/{agent.user}"
    name = program_name(agent)
    script = [
        f"mkdir -p {home}/.local/bin",
        f"ln -sfn {node} {home}/.local/bin/node",
        f"ln -sfn {program} {home}/.local/bin/{name}",
    ]
    for rel, text in (home_files(agent) if agent.configured else {}).items():
        path = f"{home}/{rel}"
        script.append(f"mkdir -p $(dirname {path}) && cat > {path} <<'EOF'\n{text}\nEOF")
    if agent.preset == "pi" and agent.configured:
        examples = f"{Path(program).parents[1]}/@earendil-works/pi-coding-agent/examples/extensions"
        script.append(
            f"mkdir -p {home}/.pi/agent/extensions && cd {examples} && "
            f"cp {' '.join(PI_EXTENSIONS)} {home}/.pi/agent/extensions/"
        )
    project = f"{home}/proj-{agent.key}"
    script.append(f"rm -rf {project} && mkdir -p {project}")
    if agent.git_project:
        script.append(f"git -C {project} init -q")
    sb.sh(" && ".join(script[:3]) + "\n" + "\n".join(script[3:]), user=agent.user).check()
    return project


def outside_scopes(sb: Sandbox, user: str) -> set[str]:
    """The user's processes, by name and unit, outside hostagent's units, the user manager and
    the user's session bus: what an agent started that would outlive its session (a service
    of the user's own, as the accessibility bus is). The session bus is the user's login
    plumbing, which any D-Bus client (Copilot) starts; docs/security.md says so."""
    script = (
        f"for p in $(pgrep -u {user}); do c=$(tail -1 /proc/$p/cgroup 2>/dev/null) || continue; "
        "case $c in */hostagent*|*/init.scope|*/dbus.service|*/dbus-broker.service) continue;; "
        "esac; "
        'echo "$(cat /proc/$p/comm 2>/dev/null) ${c##*/}"; done'
    )
    return set(sb.sh(script).check().stdout.splitlines())


def start_model_api(sb: Sandbox) -> None:
    """The stand-in model API as a transient service of the machine (gone after a reboot)."""
    sb.run("systemctl", "stop", "hostagent-modelapi.service")
    sb.run("systemctl", "reset-failed", "hostagent-modelapi.service")
    sb.run(
        "systemd-run",
        "--unit=hostagent-modelapi",
        "--property=Restart=no",
        "/usr/bin/python3",
        "/opt/hostagent/tests/modelapi.py",
        str(API_PORT),
        API_LOG,
    ).check()
    deadline = time.monotonic() + 30
    while control(sb, "hold") != 0:
        if time.monotonic() > deadline:
            raise AssertionError("the stand-in model API never answered")
        time.sleep(0.1)


def control(sb: Sandbox, what: str) -> int:
    """Hold or release the model's slow replies; the exit code of the request."""
    script = (
        "import sys, urllib.request as u; "
        f"u.urlopen(u.Request('{API}/control/{what}', data=b'{{}}'), timeout=5)"
    )
    return sb.run("/usr/bin/python3", "-c", script).returncode


def requests_since(sb: Sandbox, offset: int) -> list[dict]:
    """The model API's requests logged after byte offset of its log."""
    out = sb.sh(f"tail -c +{offset + 1} {API_LOG} 2>/dev/null").stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def log_size(sb: Sandbox) -> int:
    out = sb.sh(f"stat -c %s {API_LOG} 2>/dev/null || echo 0").stdout.strip()
    return int(out or 0)
