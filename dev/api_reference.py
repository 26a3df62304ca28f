"""Write docs/dbus-api.md from the interface tables the daemon exports (their introspection
XML) and the descriptions below. tests/unit/test_api_reference.py fails when the file is stale:
run ``.venv/bin/python dev/api_reference.py`` after changing the bus contract."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hostagent import BUS_NAME, MANAGER_PATH, SESSION_PATH_PREFIX
from hostagent.daemon.bus.interface import Interface
from hostagent.daemon.bus.manager import MANAGER
from hostagent.daemon.bus.session import SESSION
from hostagent.errors import ALL_ERRORS
from hostagent.options import OPTION_TYPES
from hostagent.resources import PROPERTIES
from hostagent.sandbox import WORDS

OUT = Path(__file__).resolve().parent.parent / "docs" / "dbus-api.md"
ACTS = "owner, root or polkit `manage-any`"
OPEN = "anyone"

# member -> (who may call, what it does)
DOCS: dict[str, tuple[str, str]] = {
    "ListSessions": (OPEN, "Every session: name, preset, state, activity, owner uid, object path."),
    "GetSession": (OPEN, "The object of a session by name; NoSuchSession."),
    "GetSessionByPID": (
        OPEN,
        "The session whose scope holds pid (0: the caller's own, as the bus places it; a "
        "process in a session's PID namespace knows only its own numbers); NoSessionForPID.",
    ),
    "CreateSession": (
        "anyone, for themselves; `user` is root's",
        "Create and start a session; replies once its scope runs. Options: "
        + ", ".join(f"`{key}` {signature}" for key, signature in OPTION_TYPES.items())
        + ". An unknown option is InvalidArgs. `args` go with every start; `prompt` only with "
        "the first. `properties` are systemd resource-control assignments in systemd's words "
        "(`CPUQuota=50%`, `AllowedCPUs=0-3`; " + ", ".join(PROPERTIES) + "), kept and given "
        "to the scope at every start (IPAddressAllow and IPAddressDeny are InvalidArgs where "
        "systemd cannot enforce them). They also take systemd.exec(5)'s sandboxing words ("
        + ", ".join(WORDS)
        + '; docs/admin-guide.md, "Sandboxing agents"), made by the session\'s first process '
        "at every start: a bad one is InvalidArgs naming what it takes, one that cannot be made "
        "here InvalidArgs before the session exists. The admin's defaults (hostagent.yaml's "
        "`sandbox`), and from inside a sandboxed session that session's words, come first; a "
        "word that loosens them is AccessDenied. `mcp` (b) registers hostagent's MCP server in "
        "the agent's CLI for this session (default: the preset's, else hostagent.yaml's `mcp`); "
        "InvalidArgs where its CLI takes none. Created from inside a session, the new session "
        "is its child (Parent). The program is looked up by the owner's login shell; "
        "AgentNotFound names the PATH searched.",
    ),
    "ResumeSession": (ACTS, "Start a stopped, dormant or failed session again; AlreadyRunning."),
    "StopSession": (ACTS, "Stop gracefully, SIGKILL after the stop timeout; the record stays."),
    "KillSession": (ACTS, "Signal `agent` (the pane's process) or `all` of the scope."),
    "RemoveSession": (
        ACTS,
        "Stop if running, then delete the record and the object; a clean worktree goes too.",
    ),
    "RemoveSessionWithFlags": (
        ACTS,
        "As RemoveSession; flag 1 (force) removes the worktree even with changes. Returns a "
        "note when something was kept (a worktree holding files git could not restore: where, "
        "and how to remove it).",
    ),
    "ListQuestions": (
        "anyone, for what they may act on",
        "Every question waiting that the caller may answer, oldest first: session name and "
        "the question as the `Question` property has it, with its `text`, `detail`, `choices` "
        "(as drawn) and `numbers` (what answers each) always; from inside a session, only "
        "those of sessions it may act on.",
    ),
    "SetAnswerRules": (
        "anyone, for themselves; never from inside a session",
        "Keep the caller's answer rules (YAML: `rules`, each with an `answer` and at least one "
        "of `preset`, `question` (a shell pattern of the dialog's words: its detail, then its "
        "question), `cwd`); an empty text keeps none. Rules answer the questions of sessions "
        "made outside every session only. Refused from inside a session. InvalidArgs naming the first rule that cannot be kept; AccessDenied "
        "where the admin turned rules off (`answers: {rules: false}`). Returns how many.",
    ),
    "GetAnswerRules": (
        "anyone, for themselves; never from inside a session",
        "The caller's answer rules, as SetAnswerRules takes them.",
    ),
    "ListWorktrees": (OPEN, "Each session with a worktree of its own: name, path, branch."),
    "ListPresets": (OPEN, "Every preset: name, description, command."),
    "ListAgents": (
        "anyone, for themselves",
        "Each preset with a program, as the caller's login shell finds it: name, absolute "
        'path ("" if not found), the first line of its `--version`, and what is wrong.',
    ),
    "GetAgentProfile": (
        "anyone, for themselves",
        "The sandboxing words a session of the preset the caller creates from outside every "
        "session starts from (the agent profile; none for `shell`), and notes: a file of its "
        "CLI's that the first such create moves, whether asking for less is refused.",
    ),
    "WaitAny": (
        OPEN,
        "The first of the sessions to reach one of the activities, or `exited`; a timeout "
        "of 0 waits forever; Timeout.",
    ),
    "Reload": ("root (the user, in user mode)", "Re-read hostagent.yaml and the presets."),
    "GetUsage": (
        "anyone: their own rows; root, the daemon's user and polkit `manage-any` all",
        "What each user's sessions used per preset, in the hours that start in [since, until) "
        "(until 0: now), removed sessions included: (uid, preset, usage as the Usage property).",
    ),
    "LiftBudget": (
        "root (the user, in user mode) or polkit `manage-any`",
        "Lift the user's budgets for the rest of the day, and resume the sessions a budget "
        "stopped (dormant, reason `budget`); their names.",
    ),
    "Stop": (ACTS, "As StopSession."),
    "Kill": (ACTS, "As KillSession."),
    "Resume": (ACTS, "As ResumeSession."),
    "Remove": (ACTS, "As RemoveSession."),
    "RemoveWithFlags": (ACTS, "As RemoveSessionWithFlags."),
    "Diff": (
        ACTS,
        "What the session changed in its worktree against its base, committed and not, as "
        "`git diff` shows it (`stat`: as `git diff --stat`); WorktreeFailed without one.",
    ),
    "Capture": (
        ACTS,
        "The screen, with `lines` of scrollback (0 to 100000); at most 256 KiB inline, "
        "LimitsExceeded past it.",
    ),
    "CaptureByFileDescriptor": (
        ACTS,
        "As Capture, up to 16 MiB, in a sealed memfd read from its start (as systemd's "
        "DumpByFileDescriptor): what the client library and `hostagentctl capture` use.",
    ),
    "OpenJournal": (
        ACTS,
        "The read end of a pipe with the daemon's journal lines about this session since it "
        "was created (the last `lines`, at most 10 000), as `journalctl -o short` writes them; "
        "with `follow`, new lines keep coming until the caller closes it. For owners, who may "
        "not read a system service's journal; at most 4 open per user (LimitsExceeded).",
    ),
    "SendText": (
        ACTS,
        "Type text (at most 64 KiB, no NUL), then Enter if `enter`: a key of "
        "its own, at least the preset's `enter_gap` (0.3 s unless it says; 0 for Claude Code) "
        "after the text and once the pane shows its last words (at most 2 s after it), so "
        "that a CLI that reads a burst as a paste submits it. From inside a session, never "
        "into its own terminal or a maker's (AccessDenied): that would be answering itself.",
    ),
    "Answer": (
        ACTS + "; never from inside the session or a session it was made from inside",
        "Answer the question `id` (the `Question` property's) with a choice: its number or the "
        "words it starts with, case-insensitive (InvalidArgs when none or several match). The "
        "screen is read again and must still show it; its keys are sent and the choice's label "
        "returned. NoQuestion when it was answered (here or in the terminal), replaced, or is "
        "being answered by another caller. One journal line each.",
    ),
    "WaitForActivity": (OPEN, "Wait until one of the activities, or `exited`; Timeout."),
    "ExplainActivity": (
        OPEN,
        "activity, source, rule, matched, last_hook: why. `matched` is screen text: it is "
        "empty for a caller who may not Capture the session.",
    ),
    "GetAttachCommand": (
        ACTS,
        "The argv that attaches a terminal: `hostagentctl --system attach NAME` (`--user` on the "
        "user daemon), whose tmux client the session cannot command.",
    ),
    "GetTmuxAttachCommand": (
        ACTS,
        "The plain tmux client's argv (`tmux -S … attach`), which `hostagentctl attach` runs "
        "confined. Run as it is, it does what the session's server tells it (a hook the agent "
        "set runs on the attaching terminal, as its user): use GetAttachCommand's.",
    ),
    "ReportHook": (
        "a process inside the session's scope",
        "An agent hook's event and data (`session_id`, `source`, `notification_type`).",
    ),
    "AskHook": (
        "a process inside the session's scope, with its hook token",
        "A hook that asks (the preset's `hooks.ask`: Claude Code's PermissionRequest, with "
        "`tool_name` and `tool_input`): its question is the session's `Question` (source "
        '`hook`) while it waits, and the reply is its answer, `allow` or `deny`, or `""` when '
        "none came within `answers.wait`, when it was answered in the terminal or the agent "
        "went on (its dialog is then the terminal's); at once when the input cannot be shown "
        "whole or the tool's dialog is no yes or no. InvalidArgs for an event its preset does "
        "not ask through.",
    ),
    "SessionNew": ("", "A session was created (name first, for arg0 matches)."),
    "SessionRemoved": ("", "A session was removed."),
    "Version": ("", "The daemon's version."),
    "Mode": ("", "`system` or `user`."),
    "BootID": ("", "The boot id the daemon started under."),
    "SetAsideRecords": (
        "",
        "Damaged records the daemon moved to `corrupt/` under its state directory (file names, "
        "`NAME.yaml.SECONDS`), newest last; `hostagentctl doctor` says how to restore one.",
    ),
    "Sandboxing": (
        "",
        "What this kernel and mode enforce of a session's sandbox: `words` (the sandboxing "
        "words made here, space-separated; empty with `why_not` in user mode), `landlock_abi`, "
        "`kept_apart` (what a session's processes cannot do to those outside it), "
        "`user_namespaces` (yes or no) and `ip_address_deny` (yes, or why systemd cannot "
        "enforce IPAddressDeny= here, which a create is then refused); `hostagentctl doctor` "
        "shows them.",
    ),
    "Name": ("", "The session's name."),
    "Uuid": ("", "A uuid that never changes, even across resumes."),
    "Preset": ("", "The preset it was created with."),
    "Owner": ("", "The owner's uid."),
    "Cwd": ("", "Its working directory."),
    "Worktree": (OPEN, 'The session\'s own git worktree, or "" without one.'),
    "Branch": (OPEN, "The worktree's branch."),
    "BaseRef": (OPEN, "The commit the worktree's branch started from."),
    "State": ("", "starting, running, stopping, stopped, dormant or failed."),
    "Activity": ("", "working, blocked, idle or unknown while running; exited otherwise."),
    "AgentSessionId": ("", "The agent's conversation id, kept current (assigned, hook, disk)."),
    "Containment": (
        "",
        "Empty, or what left the scope since this start: processes of the agent's in another "
        "cgroup, processes still there after the agent exited, or a service the agent had a "
        "bus start outside the scope (the journal has a line too).",
    ),
    "Unit": ("", "The scope's unit name."),
    "Leader": ("", "The tmux server's pid (stale once the session no longer runs)."),
    "StartedAt": ("", "µs since the epoch."),
    "StoppedAt": ("", "µs since the epoch."),
    "DormantReason": ("", "`reboot`, `lost` or `budget` while dormant, else empty."),
    "Question": (
        "",
        "What the session asks while it is blocked, read from its dialog (empty when nothing): "
        "`id` (s, new when the question changes), `since` (t, µs), `source` (s: `screen`), "
        "`selected` (i, the highlighted choice, -1), `count` (u, choices). On a user's own bus "
        "also `text` (s, the question), `detail` (s, what the dialog says above it: the tool, "
        "the command, a line each), `choices` (as) and `numbers` (au); on the system bus those "
        "are the screen's words, for ListQuestions' callers only. A new command under the "
        "same question is a new question (a new `id`).",
    ),
    "Usage": (
        "",
        "What the agent used, from its CLI's own record, across every conversation, restart "
        "and resume: `input`, `output`, `cache_read`, `cache_write`, `calls` (t), `model` (s), "
        "and `cost_usd` (d) only where the CLI or an admin's price states one.",
    ),
    "LastError": ("", "Why it last ended or failed to start, in words; empty after a clean exit."),
    "Result": (
        "",
        "How it last ended, in systemd's words: success, exit-code, signal, timeout, oom-kill "
        "or resources (a start that could not be set up); empty while it runs.",
    ),
    "Parent": (
        "",
        'The session it was created from inside, "" for none or one removed since. From inside '
        "a session whose preset has `rights: tree` (every agent's), only the sessions made from "
        "inside it, and theirs, may be acted on.",
    ),
    "Mcp": (
        "",
        "Whether its agent CLI is given hostagent's MCP server (`hostagentctl mcp`) at every "
        "start: CreateSession's `mcp`, else its preset's default, else the host's.",
    ),
    "Profile": (
        "",
        '"agent" when its sandbox started from the agent profile (hostagent.yaml\'s '
        '`sandbox.agents`: a session of every preset but `shell`), "" for none. The profile\'s '
        "words are in Properties, as every start makes them.",
    ),
    "Loosened": (
        "",
        "The words by which its create asked for less than the agent profile "
        "(ProtectHome=no, or those `--unconfined` stands for), as the journal said them.",
    ),
    "Properties": (
        "",
        "Its systemd resource-control assignments beyond Limits and its sandboxing words, in "
        "systemd's words, as CreateSession's `properties` gave them (CPUQuota=50%, "
        "ProtectSystem=strict).",
    ),
    "Limits": (
        "",
        "The limits its scope was given, by systemd's property names (TasksMax, MemoryMax, "
        "MemoryHigh, CPUWeight, RuntimeMaxSec), those that are set; 2^64-1 is infinity.",
    ),
    "ExitStatus": ("", "The agent's exit status when it last exited, else 0."),
    "ExitSignal": ("", "The signal that killed the agent, else 0."),
    "ResumeCount": ("", "Resumes so far."),
    "Command": ("", "The argv of the last run."),
    "MemoryCurrent": ("", "The scope's memory, read from systemd on each Get."),
    "CPUUsageNSec": ("", "The scope's CPU time, read from systemd on each Get."),
}


def _args(args: list[tuple[str, str]]) -> str:
    return ", ".join(f"`{s}` {n}" for n, s in args) or "—"


def section(interface: Interface, path: str) -> str:
    lines = [f"## {interface.name}", "", f"Object: `{path}`", "", "### Methods", ""]
    lines += ["| method | in | out | who | what |", "|---|---|---|---|---|"]
    for m in interface.methods:
        who, what = DOCS[m.name]
        lines.append(f"| {m.name} | {_args(m.in_args)} | {_args(m.out_args)} | {who} | {what} |")
    if interface.properties:
        lines += [
            "",
            "### Properties",
            "",
            "| property | type | changes | what |",
            "|---|---|---|---|",
        ]
        for p in interface.properties:
            change = {"true": "PropertiesChanged", "const": "never", "false": "no signal"}
            lines.append(f"| {p.name} | `{p.signature}` | {change[p.emits]} | {DOCS[p.name][1]} |")
    if interface.signals:
        lines += ["", "### Signals", "", "| signal | args | what |", "|---|---|---|"]
        for s in interface.signals:
            lines.append(f"| {s.name} | {_args(s.args)} | {DOCS[s.name][1]} |")
        lines += ["", SIGNAL_ORDER]
    lines += ["", "Introspection:", "", "```xml", interface.xml(), "```", ""]
    return "\n".join(lines)


SIGNAL_ORDER = """Signals are queued and sent together when the daemon's current step yields, as
systemd's own bus queue does: a method's reply goes out before the changes its last steps
caused (a CreateSession's reply comes before its session's `State` of `running`, which a Get
already shows), a session that changes twice in one step sends one PropertiesChanged with the
last values, and the order of signals is the order of the changes (a session's changes come
before its SessionRemoved). PropertiesChanged says what a property is now; a state a session
passes through within one step is not sent."""


CAPTURE_HOWTO = """## Reading a screen

A screen with a long history can be megabytes. `Capture` answers inline up to 256 KiB, which
is what a quick look with busctl needs:

```sh
busctl call org.hostagent.HostAgent1 /org/hostagent/HostAgent1/session/demo \\
    org.hostagent.HostAgent1.Session Capture i 20
```

Past that it fails with `LimitsExceeded` (the daemon reads no more of the screen than that);
`CaptureByFileDescriptor` then answers with a sealed memfd, as systemd's `DumpByFileDescriptor`
does, so the text never crosses the bus and a caller that does not read its replies holds
almost nothing of the daemon's connection. The session's tmux writes the text into that memfd
itself; the daemon only trims the blank rows below the screen's last line and seals it. busctl prints
the descriptor it received (`h 4`) rather than its text; the client library
(`Client.capture`) and `hostagentctl capture` read it, and fall back to `Capture` over ssh
(`-H`), whose bridge passes no descriptors.
"""


def render() -> str:
    errors = "\n".join(f"- `{e.dbus_name}`" for e in ALL_ERRORS)
    return "\n".join(
        [
            "# D-Bus API reference",
            "",
            "Generated by `dev/api_reference.py` from the tables the daemon exports; do not edit.",
            "",
            f"Bus name `{BUS_NAME}`, on the system bus (system mode) or the session bus (user "
            "mode). Reading is open to local users; acting on a session is for its owner, root "
            "or a caller polkit authorises for `org.hostagent.HostAgent1.manage-any` "
            "(docs/security.md). The environment is never on the bus.",
            "",
            section(MANAGER, MANAGER_PATH),
            section(SESSION, f"{SESSION_PATH_PREFIX}/<name, escaped as sd_bus_path_encode does>"),
            CAPTURE_HOWTO,
            "## Errors",
            "",
            "Each carries a one-line message that says what to do. `AccessDenied` also answers any "
            "call over a connection whose opening process has exited, or whose pid now names a "
            "younger process: the daemon cannot tell which session it comes from, and refuses "
            "rather than take it for the owner's (docs/security.md, \"Which session a call "
            'comes from").',
            "",
            errors,
            "",
        ]
    )


if __name__ == "__main__":
    OUT.write_text(render())
    print(f"wrote {OUT}")
