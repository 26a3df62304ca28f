"""Safe by default: every session of an agent preset is confined by the agent profile with no
word at all, on a real systemd, tried as attacks typed into it (each fails) and from a `shell`
session, a person's own terminal (each works). Asking for less is a word the user writes,
which the admin may refuse and no session may ask from inside; a changed profile applies to
new sessions only; the user daemon confines the same way, and says why where it cannot."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.helpers import create, record
from tests.integration.test_confinement import SECRET, typed
from tests.sandbox import Sandbox

# A custom agent: a preset of the admin's that is not the shell's, so it is an agent's.
AGENT = "agentsh"
PRESET = (
    f'name: {AGENT}\ncommand: [/bin/bash, --norc]\nprompt_args: []\nstate: ["{{home}}/.agentsh/"]\n'
)
OTHER = 'name: othersh\ncommand: [/bin/bash]\nstate: ["{home}/.othersh/"]\n'
CONFIG = "/etc/hostagent/hostagent.yaml"


@pytest.fixture(scope="module")
def home(sandbox: Sandbox) -> Iterator[Sandbox]:
    """alice's secrets and project, another CLI's sign-in, and the admin's two presets."""
    sb = sandbox
    sb.sh(
        "install -d -o alice /srv/hostagent-test && install -d -o alice -m 700 /home/alice/.ssh /home/alice/.aws /home/alice/.othersh "
        f"/home/alice/proj && echo SECRET-KEY > {SECRET} && echo key > /home/alice/.aws/credentials"
        " && echo token > /home/alice/.othersh/auth.json && chown -R alice /home/alice && "
        f"mkdir -p /etc/hostagent/presets.d && printf '{PRESET}' > /etc/hostagent/presets.d/{AGENT}.yaml"
        f" && printf '{OTHER}' > /etc/hostagent/presets.d/othersh.yaml"
    ).check()
    sb.ctl("reload").check()
    yield sb
    sb.sh(
        "rm -rf /srv/hostagent-test /etc/hostagent/presets.d/agentsh.yaml /etc/hostagent/presets.d/othersh.yaml"
    )
    sb.ctl("reload")


def new(sb: Sandbox, preset: str, *options: str, system: bool = True) -> str:
    if system:
        return create(sb, preset, *options, user="alice", cwd="/home/alice/proj")
    made = sb.ctl("new", "--preset", preset, "--cwd", "/home/alice/proj", *options, user="alice")
    return made.check().stdout.strip()


def status(sb: Sandbox, name: str, system: bool = True) -> dict:
    return json.loads(sb.ctl("--json", "status", name, user="alice", system=system).stdout)


def removed(sb: Sandbox, *names: str, system: bool = True) -> None:
    for name in names:
        sb.ctl("rm", "--force", name, user="alice", system=system)


# What an agent with its approvals off would type, and what a build writes.
ATTACKS = (
    f"cat {SECRET}",
    "cat ~/.aws/credentials",
    "cat ~/.othersh/auth.json",  # another CLI's sign-in
    "touch ~/written",
    "touch /srv/hostagent-test/written",  # a directory of hers outside the home
    "touch ~/.bashrc",
)
BUILDS = (
    "touch ~/proj/made-here",
    "touch ~/.agentsh/state",  # its own CLI's state
    "mkdir -p ~/.cache/pip && touch ~/.cache/pip/x",
    "touch ~/.npm/x ~/.cargo/registry/x ~/go/pkg/mod/x ~/.m2/x ~/.gradle/x",
)


def test_an_agent_with_no_word_is_confined_and_a_shell_is_not(home: Sandbox) -> None:
    sb = home
    agent, shell = new(sb, AGENT), new(sb, "shell")
    made = [agent, shell]
    try:
        for attack in ATTACKS:
            assert typed(sb, agent, attack) != 0, f"{attack!r} got past the agent profile"
            assert typed(sb, shell, attack) == 0, f"{attack!r} fails in a shell"
        for build in BUILDS:
            assert typed(sb, agent, build) == 0, f"{build!r} fails under the agent profile"
        # Its sibling, another agent of hers: not there to signal from inside; from her shell
        # outside every session, there.
        sibling = new(sb, AGENT)
        made.append(sibling)
        pid = status(sb, sibling)["leader"]
        assert typed(sb, agent, f"kill -0 {pid}") != 0
        assert sb.run("kill", "-0", str(pid), user="alice").returncode == 0
        # The caches it was given were made as alice, not root.
        owners = sb.sh("stat -c %U /home/alice/.npm /home/alice/.cargo/registry").stdout.split()
        assert owners == ["alice", "alice"]
        props = status(sb, agent)
        assert props["profile"] == "agent" and "ProtectHome=read-only" in props["properties"]
        shown = sb.ctl("status", agent, user="alice", system=True).stdout
        assert "Profile: agent" in shown
        assert not record(sb, shell).get("properties") and not record(sb, shell).get("profile")
        # doctor says which agents are confined by default, and with which words.
        doctor = sb.ctl("doctor", user="alice", system=True).stdout
        assert f"agents confined by default: {AGENT}" in doctor or f", {AGENT}" in doctor, doctor
        assert "the agent profile: ProtectSystem=strict ProtectHome=read-only" in doctor, doctor
    finally:
        removed(sb, *made)
        sb.sh("rm -f /home/alice/written /srv/hostagent-test/written /home/alice/proj/made-here")


def test_asking_for_less_is_the_users_word_said_and_never_from_inside(home: Sandbox) -> None:
    sb = home
    made: list[str] = []
    try:
        made.append(free := new(sb, AGENT, "--unconfined"))
        assert typed(sb, free, f"cat {SECRET}") == 0
        assert record(sb, free)["loosened"][:2] == ["ProtectSystem=no", "ProtectHome=no"]
        said = f"session '{free}': asks for less than the agent profile: ProtectSystem=no"
        assert said in sb.journal(lines=400)
        made.append(home_open := new(sb, AGENT, "-p", "ProtectHome=no"))
        assert typed(sb, home_open, "touch ~/written") == 0
        assert typed(sb, home_open, "touch /srv/hostagent-test/written") != 0
        # From inside a session, even one the user loosened: refused.
        out = "/dev/shm/hostagent-test-inside"
        for maker in (made[0], (agent := new(sb, AGENT))):
            typed(sb, maker, f"hostagentctl new --preset {AGENT} --unconfined 2> {out}")
            said = sb.run("cat", out).stdout  # refused: by the profile, or the maker's words
            assert "from inside session" in said or "made inside session" in said, said
        made.append(agent)
        # The admin's policy refuses it.
        sb.sh(f"printf 'sandbox:\\n  agents:\\n    loosen: false\\n' > {CONFIG}").check()
        sb.ctl("reload").check()
        refused = sb.ctl("new", "--preset", AGENT, "--unconfined", user="alice", system=True)
        assert refused.returncode != 0 and "sandbox.agents.loosen" in refused.stderr
    finally:
        removed(sb, *made)
        sb.sh(
            f"rm -f {CONFIG} /home/alice/written /srv/hostagent-test/written /dev/shm/hostagent-test-*"
        )
        sb.ctl("reload")


def test_a_changed_profile_applies_to_new_sessions_only(home: Sandbox) -> None:
    sb = home
    made: list[str] = []
    try:
        made.append(before := new(sb, AGENT))
        sb.sh(f"printf 'sandbox:\\n  agents:\\n    words: [ProtectSystem=strict]\\n' > {CONFIG}")
        sb.ctl("reload").check()
        made.append(after := new(sb, AGENT))
        assert typed(sb, after, f"cat {SECRET}") == 0  # the new profile hides nothing
        assert typed(sb, after, "touch /srv/hostagent-test/written") != 0
        sb.ctl("stop", before, user="alice", system=True).check()
        sb.ctl("resume", before, user="alice", system=True).check()
        assert typed(sb, before, f"cat {SECRET}") != 0  # the profile it was created with
    finally:
        removed(sb, *made)
        sb.sh(f"rm -f {CONFIG}")
        sb.ctl("reload")


def test_the_user_daemon_confines_an_agent_by_default_and_says_why_where_it_cannot(
    home: Sandbox,
) -> None:
    sb = home
    presets = "/home/alice/.config/hostagent/presets.d"
    sb.sh(
        f"mkdir -p {presets} && cp /etc/hostagent/presets.d/{AGENT}.yaml {presets}/", user="alice"
    )
    sb.daemon_start(user="alice")
    made: list[str] = []
    try:
        made.append(agent := new(sb, AGENT, system=False))
        made.append(sibling := new(sb, AGENT, system=False))
        pid = status(sb, sibling, system=False)["leader"]
        for attack in (
            f"cat {SECRET}",
            "touch ~/written",
            f"kill -0 {pid}",
            "cat ~/.othersh/auth.json",
        ):
            assert typed(sb, agent, attack, system=False) != 0, attack
        assert typed(sb, agent, "touch ~/proj/made-here", system=False) == 0
        # Where the host refuses her a user namespace, the create says why and what to do.
        removed(sb, *made, system=False)
        made.clear()
        sb.daemon_stop(user="alice")
        dropin = "/home/alice/.config/systemd/user/hostagent.service.d"
        sb.sh(
            f"mkdir -p {dropin} && printf '[Service]\\nRestrictNamespaces=~user\\n' > {dropin}/t.conf",
            user="alice",
        )
        sb.daemon_start(user="alice")
        refused = sb.ctl("new", "--preset", AGENT, "--cwd", "/home/alice/proj", user="alice")
        assert refused.returncode != 0
        assert "user.max_user_namespaces" in refused.stderr and "--unconfined" in refused.stderr
    finally:
        removed(sb, *made, system=False)
        sb.daemon_stop(user="alice")
        sb.sh(
            f"rm -rf {presets} /home/alice/.config/systemd/user/hostagent.service.d /home/alice/written"
        )
