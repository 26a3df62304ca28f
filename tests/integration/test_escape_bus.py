"""Ways out of a session through the daemon's idea of who calls, typed into a session's own
shell on a real systemd and bus: a connection that outlived the process that opened it, and a
child made with more rights than its maker. Each fails from inside; the same done plainly from
alice's shell outside every session still works."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest

from tests.integration.helpers import create, until
from tests.sandbox import GUEST_REPO, Sandbox

pytestmark = pytest.mark.core  # The core, run again on Debian 13 (dev/test).

SECRET = "/home/alice/.ssh/id_ed25519"
CONFINED = (
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "ReadWritePaths=%h/proj",
    "InaccessiblePaths=%h/.ssh",
    "PrivateTmp=yes",
    "NoNewPrivileges=yes",
)
ORPHAN = (
    f"PYTHONPATH={GUEST_REPO} PYTHONPYCACHEPREFIX=/tmp/orphan-pycache "
    "python3 -m tests.integration.orphan"
)
DENIED = "org.freedesktop.DBus.Error.AccessDenied"
# A shell with an agent's rights (rights: tree, the default), as an agent's CLI has them.
AGENT_SHELL = """\
name: agent-shell
description: a shell with an agent's rights, for the test
command: []
prompt_args: []
"""


@pytest.fixture(scope="module")
def home(sandbox: Sandbox) -> Iterator[Sandbox]:
    sb = sandbox
    sb.sh(
        "install -d -o alice -m 700 /home/alice/.ssh /home/alice/proj && "
        f"echo SECRET-KEY > {SECRET} && chown alice {SECRET} && "
        "mkdir -p /etc/hostagent/presets.d && "
        "cat > /etc/hostagent/presets.d/agent-shell.yaml",
        input=AGENT_SHELL,
    ).check()
    sb.ctl("reload").check()
    yield sb
    sb.run("rm", "-f", "/etc/hostagent/presets.d/agent-shell.yaml")
    sb.ctl("reload")


def said(sb: Sandbox, name: str, command: str) -> str:
    """What command printed, typed into alice's session name; it comes back through /dev/shm,
    which every sandbox leaves as it is. An orphan's answer is printed by the child it leaves
    behind, after the shell has gone on: waited for until it is there."""
    out = f"/dev/shm/hostagent-test-{secrets.token_hex(4)}"
    sb.ctl(
        "send",
        name,
        f"{{ {command}; }} > {out}.tmp 2>&1; mv {out}.tmp {out}",
        user="alice",
        system=True,
    ).check()
    until(lambda: sb.run("test", "-e", out).returncode == 0, f"{command!r} ran in {name}", 60)
    if command.startswith(ORPHAN):
        until(lambda: sb.run("test", "-s", out).returncode == 0, f"{command!r} answered", 60)
    text = sb.run("cat", out).check().stdout
    sb.run("rm", "-f", out)
    return text.strip()


def sessions(sb: Sandbox) -> set[str]:
    listed = sb.ctl("list", "-o", "json", user="alice", system=True).check().stdout
    return {row["name"] for row in json.loads(listed)}


def removed(sb: Sandbox, *names: str) -> None:
    for name in names:
        sb.ctl("rm", "--force", name, user="alice", system=True)


def test_an_orphaned_connection_is_refused_and_never_taken_for_the_owners(home: Sandbox) -> None:
    """A process in a confined session connects, leaves the connection to a child and exits:
    the daemon cannot place the caller, and must not take it for alice's shell outside every
    session (which would list all her sessions and make one with no sandbox at all)."""
    sb = home
    words = [x for w in CONFINED for x in ("-p", w)]
    agent = create(sb, "shell", *words, user="alice", cwd="/home/alice/proj")
    sibling = create(sb, "shell", user="alice")
    escaped = f"escaped-{secrets.token_hex(3)}"
    try:
        assert said(sb, agent, f"{ORPHAN} ListSessions") == DENIED
        assert said(sb, agent, f"{ORPHAN} CreateSession {escaped}") == DENIED
        assert escaped not in sessions(sb)
        # The sandbox is whole: from inside, its own connection reaches the daemon as it is.
        assert said(sb, agent, f"cat {SECRET}").endswith("Permission denied")
        # Outside every session, alice's plain calls work; an orphaned one of hers is refused
        # too: whose it is cannot be known.
        assert {agent, sibling} <= sessions(sb)
        assert sb.sh(f"{ORPHAN} ListSessions", user="alice").check().stdout.strip() == DENIED
    finally:
        removed(sb, agent, sibling, escaped)


def test_an_orphaned_connection_whose_pid_is_reused_outside_is_refused(home: Sandbox) -> None:
    """The same, and before the call the opener's pid is given to a process of alice's outside
    every session (root sets the next pid): the bus still names that pid for the connection
    (dbus-daemon 1.14), and the daemon must see that the process is younger than the
    connection, not take the call for one from her shell."""
    sb = home
    words = [x for w in CONFINED for x in ("-p", w)]
    agent = create(sb, "shell", *words, user="alice", cwd="/home/alice/proj")
    handshake = f"/dev/shm/hostagent-test-{secrets.token_hex(4)}"
    out = f"{handshake}.out"
    try:
        sb.ctl(
            "send",
            agent,
            f"{ORPHAN} ListSessions '' {handshake} > {out}.tmp 2>&1; mv {out}.tmp {out}",
            user="alice",
            system=True,
        ).check()
        until(lambda: sb.run("test", "-e", f"{handshake}.pid").returncode == 0, "the opener left")
        stale = int(sb.run("cat", f"{handshake}.pid").check().stdout)
        # Root makes the next pid in the container the stale one: alice's, outside sessions.
        plant = (
            "mount -o remount,bind,rw /proc/sys || exit 1; "
            "echo $(($1 - 1)) > /proc/sys/kernel/ns_last_pid || exit 3; "
            "setpriv --reuid=alice --regid=alice --init-groups sleep 600 "
            ">/dev/null 2>&1 </dev/null & echo $!"
        )
        for _ in range(20):
            got = sb.run("unshare", "-m", "sh", "-c", plant, "sh", str(stale), timeout=5)
            if got.stdout.strip() == str(stale):
                break
            sb.run("pkill", "-u", "alice", "-x", "sleep")
        assert got.stdout.strip() == str(stale), got
        sb.run("touch", f"{handshake}.go").check()
        until(lambda: sb.run("test", "-s", out).returncode == 0, "the call was answered", 60)
        assert sb.run("cat", out).check().stdout.strip() == DENIED
    finally:
        sb.run("pkill", "-u", "alice", "-x", "sleep")
        sb.sh(f"rm -f {handshake}.*")
        removed(sb, agent)


def test_a_child_gets_no_more_rights_than_the_session_that_made_it(home: Sandbox) -> None:
    """An agent's session (rights: tree) makes a child of the shell preset (rights: owner):
    from inside that child, alice's other session is as out of reach as from its maker."""
    sb = home
    other = create(sb, "shell", user="alice")
    maker = create(sb, "agent-shell", user="alice", cwd="/home/alice/proj")
    child = f"child-{secrets.token_hex(3)}"
    try:
        assert "only the sessions it made" in said(sb, maker, f"hostagentctl capture {other}")
        said(sb, maker, f"hostagentctl new --preset shell --name {child} --cwd /tmp")
        assert child in sessions(sb)
        assert "only the sessions it made" in said(sb, child, f"hostagentctl capture {other}")
        # Outside every session alice reads it, and the child itself is hers to drive.
        sb.ctl("capture", other, user="alice", system=True).check()
        sb.ctl("capture", child, user="alice", system=True).check()
    finally:
        removed(sb, other, maker, child)
