"""Out of a confined session through tmux (issue 70, attacks 2 and 7), typed from inside
alice's own session, on a real systemd.

A tmux server tells its clients what to do: run a program (MSG_SHELL), read or write a file by
path (a hook's load-buffer or save-buffer). The session commands its own server, and can put a
server of its own where its socket is. The daemon's clients (Capture, SendText, the pane watch)
run inside the session, so whatever a server makes them do is no more than the agent could do
itself: never as alice outside the sandbox, never in hostagent.service.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from tests.integration.helpers import until
from tests.integration.test_confinement import (  # noqa: F401 - a fixture
    SECRET,
    alices_home,
    removed,
    session,
    typed,
)
from tests.integration.test_hostile import users_in_the_daemons_cgroup
from tests.sandbox import Sandbox

pytestmark = pytest.mark.core  # The core, run again on Debian 13 (dev/test).

CONFINED = (
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "ReadWritePaths=%{cwd}",
    "InaccessiblePaths=%h/.ssh",
    "PrivateTmp=yes",
    "NoNewPrivileges=yes",
)
PROJ = "/home/alice/proj"

# A tmux server of the agent's own: it answers every client with MSG_SHELL (209), which makes
# a tmux 3 client exec the program named, as the client runs. imsg's header: type, length,
# flags, peer id (the protocol version, 8, in its low byte), pid.
FAKE_SERVER = """\
import os, socket, struct, sys
path, program = sys.argv[1], sys.argv[2].encode() + b"\\0"
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(8)
while True:
    client, _ = server.accept()
    client.sendall(struct.pack("<IHHII", 209, 16 + len(program), 0, 8, 0) + program)
    client.close()
"""


@pytest.fixture
def marks(sandbox: Sandbox) -> Iterator[tuple[str, str]]:
    """Where the agent's program says it ran, and what it read of ~/.ssh: /dev/shm, which
    every sandbox leaves as it is."""
    tag = secrets.token_hex(4)
    ran, stolen = f"/dev/shm/hostagent-test-ran-{tag}", f"/dev/shm/hostagent-test-stolen-{tag}"
    yield ran, stolen
    sandbox.sh(f"rm -f {ran} {stolen}; pkill -u alice -f hostagent-test-linger-{tag} || :")


def program(sb: Sandbox, ran: str, stolen: str) -> str:
    """The agent's program, in the working tree it may write: it says it ran, copies alice's
    key where it can, and leaves a process behind (in whichever cgroup it runs)."""
    path = f"{PROJ}/escape-{secrets.token_hex(3)}"
    tag = ran.rsplit("-", 1)[1]
    script = (
        "#!/bin/sh\n"
        f'key=$(cat {SECRET}) && echo "$key" > {stolen}\n'
        f'echo "$(id -un) $(cat /proc/self/cgroup)" > {ran}\n'
        f"setsid sh -c 'exec -a hostagent-test-linger-{tag} sleep 300' </dev/null >/dev/null 2>&1 &\n"
    )
    sb.run("tee", path, input=script, user="alice").check()
    sb.run("chmod", "755", path, user="alice").check()
    return path


@pytest.mark.usefixtures("alices_home")
def test_a_server_of_the_agents_own_runs_nothing_outside_the_session(
    sandbox: Sandbox, marks: tuple[str, str]
) -> None:
    sb, (ran, stolen) = sandbox, marks
    sb.run("tee", f"{PROJ}/fake-tmux.py", input=FAKE_SERVER, user="alice").check()
    evil = program(sb, ran, stolen)
    confined, plain = session(sb, *CONFINED, cwd=PROJ), session(sb, cwd=PROJ)
    try:
        # From inside: the genuine socket moved aside, a server of the agent's own in its place.
        move = 's="${TMUX%%,*}"; mv "$s" "$s.real"'
        start = f'(python3 {PROJ}/fake-tmux.py "$s" {evil} </dev/null >/dev/null 2>&1 &)'
        assert typed(sb, confined, f'{move}; {start}; sleep 0.5; test -S "$s"') == 0
        # alice asks for its screen, and for text to be typed into it, from outside.
        sb.ctl("capture", confined, user="alice", system=True)
        sb.ctl("send", confined, "hello", user="alice", system=True)
        until(lambda: sb.run("test", "-s", ran).returncode == 0, "the agent's program ran")
        said = sb.run("cat", ran).check().stdout
        assert said.startswith("alice ") and "hostagent.service" not in said, said
        assert sb.run("test", "-e", stolen).returncode != 0, "alice's key left the sandbox"
        assert users_in_the_daemons_cgroup(sb) == [], "alice's process in hostagent.service"
        # Her other session, and the daemon, are as they were.
        assert typed(sb, plain, "echo plain-works") == 0
        assert "plain-works" in sb.ctl("capture", plain, user="alice", system=True).check().stdout
    finally:
        removed(sb, confined, plain)


@pytest.mark.usefixtures("alices_home")
def test_a_hook_of_the_agents_reads_nothing_through_the_daemons_capture(sandbox: Sandbox) -> None:
    """The genuine server, commanded from inside: a hook after each capture has the client
    that asked load the key (tmux has a client read a file it names); a daemon's client
    outside the sandbox would read it for the agent."""
    sb = sandbox
    confined, plain = session(sb, *CONFINED, cwd=PROJ), session(sb, cwd=PROJ)
    hook = f"tmux set-hook -g after-capture-pane 'load-buffer -b stolen {SECRET}'"
    try:
        for name in (confined, plain):
            assert typed(sb, name, hook) == 0
            sb.ctl("capture", name, user="alice", system=True)
        # Outside every session, alice's own capture reads her own key: tmux does as it says.
        assert typed(sb, plain, "tmux show-buffer -b stolen | grep -q SECRET-KEY") == 0
        assert typed(sb, confined, "tmux show-buffer -b stolen | grep -q SECRET-KEY") != 0
        assert users_in_the_daemons_cgroup(sb) == []
    finally:
        removed(sb, confined, plain)


def attached(sb: Sandbox, name: str) -> tuple[str, str]:
    """alice attaches to session name the documented way, in a terminal of her own (a pane of
    an outer tmux); (outer server's name, what that terminal shows once the attach is over)."""
    outer = f"outer-{name}"
    command = f"hostagentctl --system attach {name}; echo attach-ended; sleep 120"
    sb.run(
        "tmux", "-L", outer, "new-session", "-d", "-x", "120", "-y", "30", command, user="alice"
    ).check()

    def screen() -> str:
        return sb.run("tmux", "-L", outer, "capture-pane", "-p", user="alice").stdout

    until(lambda: "attach-ended" in screen(), f"the attach to {name} ended")
    return outer, screen()


# What the agent sets in its own server so that its owner's attaching client runs its program.
HOOKS = {
    "exec on attach": "tmux set-hook -g client-attached 'detach-client -E {program}'",
    "lock on attach": "tmux set -g lock-command {program} \\; "
    "set-hook -g client-attached 'lock-client ; detach-client'",
}


@pytest.mark.parametrize("hook", HOOKS.values(), ids=list(HOOKS))
@pytest.mark.usefixtures("alices_home")
def test_attaching_runs_nothing_the_session_set_outside_it(
    sandbox: Sandbox, marks: tuple[str, str], hook: str
) -> None:
    sb, (ran, stolen) = sandbox, marks
    evil = program(sb, ran, stolen)
    confined = session(sb, *CONFINED, cwd=PROJ)
    outer = ""
    try:
        assert typed(sb, confined, hook.format(program=evil)) == 0
        # Set from inside, it would run (as set) for a client that does what it is told.
        outer, _ = attached(sb, confined)
        assert sb.run("test", "-e", ran).returncode != 0, sb.run("cat", ran).stdout
        assert sb.run("test", "-e", stolen).returncode != 0, "alice's key left the sandbox"
        assert users_in_the_daemons_cgroup(sb) == []
    finally:
        if outer:
            sb.run("tmux", "-L", outer, "kill-server", user="alice")
        removed(sb, confined)


@pytest.mark.usefixtures("alices_home")
def test_a_confined_attach_shows_the_session(sandbox: Sandbox) -> None:
    """The attach itself works, confined: its screen is drawn in alice's terminal, and a
    detach brings her back."""
    sb = sandbox
    confined = session(sb, *CONFINED, cwd=PROJ)
    outer = f"outer-{confined}"
    try:
        assert typed(sb, confined, "echo shown-in-the-attach") == 0
        command = f"hostagentctl --system attach {confined}; echo attach-ended; sleep 120"
        sb.run(
            "tmux", "-L", outer, "new-session", "-d", "-x", "120", "-y", "30", command, user="alice"
        ).check()

        def screen() -> str:
            return sb.run("tmux", "-L", outer, "capture-pane", "-p", user="alice").stdout

        until(lambda: "shown-in-the-attach" in screen(), "the session's screen in the attach")
        sb.run(
            "tmux",
            "-S",
            f"/run/hostagent/{sb.uid('alice')}/{confined}.sock",
            "detach-client",
            "-a",
            user="alice",
        )
        sb.run(
            "tmux",
            "-S",
            f"/run/hostagent/{sb.uid('alice')}/{confined}.sock",
            "detach-client",
            user="alice",
        )
        until(lambda: "attach-ended" in screen(), "the detach")
    finally:
        sb.run("tmux", "-L", outer, "kill-server", user="alice")
        removed(sb, confined)
