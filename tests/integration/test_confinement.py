"""A session is a sandbox: systemd.exec(5)'s words on a session, tried as attacks typed into its
own shell on a real systemd. Each attack fails in a session with the word and succeeds in one
without it, or from its owner's shell outside every session; and each word means what it
means to systemd, checked against a transient service systemd itself sandboxes."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator

import pytest

from tests.integration.debs import doc_block
from tests.integration.helpers import agent_process, create, new_name, record, until
from tests.sandbox import Sandbox

pytestmark = pytest.mark.core  # The core, run again on Debian 13 (dev/test).

BUS_NAME = "org.hostagent.HostAgent1"
SUID = "/usr/local/bin/hostagent-test-suid"  # a setuid-root copy of id
SECRET = "/home/alice/.ssh/id_ed25519"


@pytest.fixture(scope="module")
def alices_home(sandbox: Sandbox) -> Iterator[Sandbox]:
    """alice's secret, her project, and a file of her own under /etc and /usr each."""
    yield from _home(sandbox)


@pytest.fixture(scope="module")
def alices_home_without_landlock() -> Iterator[Sandbox]:
    """alices_home on a machine whose kernel offers no Landlock (its calls refused in the
    container, as on Linux before 5.13, or under nspawn's own filter)."""
    with Sandbox(landlock=False) as sb:
        sb.daemon_start()
        yield from _home(sb)


def _home(sb: Sandbox) -> Iterator[Sandbox]:
    sb.sh(
        "install -d -o alice -m 700 /home/alice/.ssh /home/alice/proj && "
        f"echo SECRET-KEY > {SECRET} && chown alice {SECRET} && "
        "install -d -o alice /etc/hostagent-test /usr/local/hostagent-test && "
        f"cp /usr/bin/id {SUID} && chmod 4755 {SUID}"
    ).check()
    yield sb
    sb.sh(f"rm -rf /etc/hostagent-test /usr/local/hostagent-test {SUID} /var/tmp/hostagent-test-*")


def typed(sb: Sandbox, name: str, command: str, system: bool = True) -> int:
    """The exit status of command typed into alice's session name (of her user daemon's, with
    system False), at its shell's prompt; the status comes back through /dev/shm, which every
    sandbox leaves as it is."""
    out = f"/dev/shm/hostagent-test-{secrets.token_hex(4)}"
    sb.ctl("send", name, f"{command}; echo $? > {out}", user="alice", system=system).check()
    until(lambda: sb.run("test", "-s", out).returncode == 0, f"{command!r} ran in {name}")
    status = int(sb.run("cat", out).check().stdout)
    sb.run("rm", "-f", out)
    return status


def session(sb: Sandbox, *words: str, cwd: str = "/tmp") -> str:
    extra = [arg for word in words for arg in ("-p", word)]
    return create(sb, "shell", *extra, user="alice", cwd=cwd)


def removed(sb: Sandbox, *names: str) -> None:
    for name in names:
        sb.ctl("rm", "--force", name, user="alice", system=True)


# Each word, and what an agent with its approvals off would type to get past it.
ATTACKS = [
    (["InaccessiblePaths=%h/.ssh"], f"cat {SECRET}"),
    (["ProtectHome=yes"], f"cat {SECRET}"),
    (["ProtectHome=tmpfs"], f"cat {SECRET}"),
    (["ProtectHome=read-only"], "touch ~/written"),
    (["ReadOnlyPaths=%h/proj"], "touch ~/proj/written"),
    (["ProtectSystem=strict"], "touch /var/tmp/hostagent-test-strict"),
    (["ProtectSystem=full"], "touch /etc/hostagent-test/written"),
    (["ProtectSystem=yes"], "touch /usr/local/hostagent-test/written"),
    (["NoNewPrivileges=yes"], f'test "$({SUID} -u)" = 0'),
    # Undo the sandbox from a namespace of one's own: the kernel locks the mounts it copies.
    (["InaccessiblePaths=%h/.ssh"], f"unshare -rm sh -c 'umount -l ~/.ssh; cat {SECRET}'"),
    (["ProtectHome=read-only"], "unshare -rm sh -c 'mount -o remount,rw ~; touch ~/written'"),
]


@pytest.mark.parametrize(("words", "attack"), ATTACKS, ids=lambda v: str(v)[:40])
def test_an_attack_fails_in_a_session_with_the_word_and_succeeds_without_it(
    alices_home: Sandbox, words: list[str], attack: str
) -> None:
    sb = alices_home
    confined, plain = session(sb, *words), session(sb)
    try:
        assert typed(sb, confined, attack) != 0, f"{attack!r} got past {words}"
        assert typed(sb, plain, attack) == 0, f"{attack!r} fails even without {words}"
    finally:
        removed(sb, confined, plain)
        sb.sh("rm -f /home/alice/written /home/alice/proj/written /var/tmp/hostagent-test-*")


def test_a_session_writes_only_its_working_tree_and_keeps_to_it_after_a_resume(
    alices_home: Sandbox,
) -> None:
    sb = alices_home
    name = session(
        sb,
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "ReadWritePaths=%{cwd}",
        "InaccessiblePaths=%h/.ssh",
        cwd="/home/alice/proj",
    )
    try:
        for _ in range(2):
            assert typed(sb, name, "touch /home/alice/proj/made-here") == 0
            assert typed(sb, name, "touch /home/alice/elsewhere") != 0
            assert typed(sb, name, f"cat {SECRET}") != 0
            assert typed(sb, name, "touch /var/tmp/hostagent-test-tree") != 0
            # A restarted daemon adopts it as it runs, sandbox and all.
            sb.daemon_restart()
            assert typed(sb, name, f"cat {SECRET}") != 0
            # The same sandbox at every start: a stop and a resume make it again.
            sb.ctl("stop", name, user="alice", system=True).check()
            sb.ctl("resume", name, user="alice", system=True).check()
        assert sb.run("test", "-e", "/home/alice/proj/made-here").returncode == 0
    finally:
        removed(sb, name)


def test_a_private_tmp_leaves_nothing_in_the_hosts_tmp(alices_home: Sandbox) -> None:
    sb = alices_home
    confined, plain = session(sb, "PrivateTmp=yes"), session(sb)
    left = f"/tmp/left-{secrets.token_hex(3)}"
    try:
        assert typed(sb, confined, f"touch {left}-confined && test -e {left}-confined") == 0
        assert sb.run("test", "-e", f"{left}-confined").returncode != 0
        assert typed(sb, plain, f"touch {left}-plain") == 0
        assert sb.run("test", "-e", f"{left}-plain").returncode == 0
    finally:
        removed(sb, confined, plain)
        sb.run("rm", "-f", f"{left}-plain")


# Kept apart, confined or not: a session with a sandbox, and one with no word at all; with
# Landlock and on a kernel without it (its PID namespace alone).
APART = pytest.mark.parametrize(
    "words", [("InaccessiblePaths=%h/.ssh",), ()], ids=["sandboxed", "no-sandbox"]
)
KERNELS = pytest.mark.parametrize("kernel", ["landlock", "no-landlock"])


def machine(request: pytest.FixtureRequest, kernel: str) -> Sandbox:
    home = alices_home if kernel == "landlock" else alices_home_without_landlock
    sb: Sandbox = request.getfixturevalue(home.__name__)
    return sb


# PTRACE_SEIZE of a pid: the least a debugger does, and all an attacker needs.
SEIZE = "python3 -c 'import ctypes; l = ctypes.CDLL(None); exit(l.ptrace(0x4206, {pid}, 0, 0))'"


@APART
@KERNELS
def test_a_session_cannot_see_signal_or_trace_its_owners_other_processes(
    request: pytest.FixtureRequest, kernel: str, words: tuple[str, ...]
) -> None:
    """Its own PID namespace and /proc: the sibling's agent is not there to name, whatever
    Landlock the kernel has; its own processes are."""
    sb = machine(request, kernel)
    if kernel == "no-landlock":
        said = json.loads(sb.ctl("doctor", "-o", "json").stdout)
        assert said["sandboxing"]["landlock_abi"] == "0"
    confined, sibling = session(sb, *words), session(sb)
    try:
        pid = agent_process(sb, sibling).pid
        for attack in (
            f"ps -e -o pid= | grep -qw {pid}",
            f"kill -0 {pid}",
            SEIZE.format(pid=pid),
            f"cat /proc/{pid}/environ > /dev/null",  # what a trace may read
            f"cat /proc/{pid}/root{SECRET}",  # the sibling's view of the files, unhidden
        ):
            assert typed(sb, confined, attack) != 0, attack
            outside = sb.run("/bin/sh", "-c", attack, user="alice")
            assert outside.returncode == 0, (attack, outside.stderr)
        # Its own: its shell is there, and signalled; no more processes than it runs itself.
        assert typed(sb, confined, "kill -0 $$ && ps -e -o pid= | grep -qw $$") == 0
        assert typed(sb, confined, "test $(ps -e --no-headers | wc -l) -lt 10") == 0
    finally:
        removed(sb, confined, sibling)


# What each path is (r: readable, w: writable, -: neither) to a shell as alice.
@APART
@KERNELS
def test_a_session_reaches_no_other_sessions_terminal_or_files(
    request: pytest.FixtureRequest, kernel: str, words: tuple[str, ...]
) -> None:
    """Its owner's runtime directory shows it its own directory, its link and the owner's
    hooks FIFO: another session's socket, output FIFO and hooks file cannot even be named.
    Its own terminal, and the same attacks from its owner's shell outside, work."""
    sb = machine(request, kernel)
    confined, sibling = session(sb, *words), session(sb)
    run = f"/run/hostagent/{sb.uid('alice')}"
    typed_in = f"/tmp/typed-{secrets.token_hex(3)}"
    try:
        for attack in (
            f"tmux -S {run}/{sibling}.sock send-keys -t main 'touch {typed_in}' Enter",
            f"tmux -S {run}/{sibling}.d/tmux.sock list-sessions",
            f"test -p {run}/{sibling}.d/out",
            f"ls {run}/{sibling}.d",
        ):
            assert typed(sb, confined, attack) != 0, attack
            outside = sb.run("/bin/sh", "-c", attack, user="alice")
            assert outside.returncode == 0, (attack, outside.stderr)
        until(lambda: sb.run("test", "-e", typed_in).returncode == 0, "typed from outside")
        shown = (
            f"test $(ls -A {run} | wc -l) = 3 && test -d {run}/{confined}.d"
            f" && test -L {run}/{confined}.sock && test -p {run}/hooks.fifo"
        )
        assert typed(sb, confined, shown) == 0
        assert typed(sb, confined, f"tmux -S {run}/{confined}.sock list-sessions") == 0
        assert typed(sb, confined, "tmux list-sessions") == 0  # its own, through $TMUX
    finally:
        removed(sb, confined, sibling)
        sb.run("rm", "-f", typed_in)


def test_the_admins_defaults_confine_every_new_session_and_only_tighten(
    alices_home: Sandbox,
) -> None:
    """hostagent.yaml's sandbox defaults: a create that asks for nothing gets them, one that
    asks for more gets both, one that loosens them is AccessDenied; a user the admin names
    gets the words in their place."""
    sb = alices_home
    sb.sh(
        "mkdir -p /etc/hostagent && printf 'sandbox:\\n  default: [InaccessiblePaths=%%h/.ssh]"
        "\\n  users:\\n    bob: []\\n' > /etc/hostagent/hostagent.yaml"
    ).check()
    sb.ctl("reload").check()
    made: list[str] = []
    try:
        made.append(plain := session(sb))
        assert "InaccessiblePaths=%h/.ssh" in record(sb, plain)["properties"]
        assert typed(sb, plain, f"cat {SECRET}") != 0
        made.append(tighter := session(sb, "ProtectSystem=full"))
        assert typed(sb, tighter, "touch /etc/hostagent-test/written") != 0
        loosened = sb.ctl(
            "new", "--preset", "shell", "-p", "InaccessiblePaths=", user="alice", system=True
        )
        assert loosened.returncode != 0
        assert "by the admin" in loosened.stderr, loosened.stderr
        bobs = create(sb, "shell", user="bob")
        assert not (record(sb, bobs) or {}).get("properties")  # the admin's words for bob: none
        sb.ctl("rm", bobs).check()
    finally:
        removed(sb, *made)
        sb.run("rm", "-f", "/etc/hostagent/hostagent.yaml")
        sb.ctl("reload")


def test_ip_address_deny_is_enforced_or_refused_never_ignored(alices_home: Sandbox) -> None:
    """systemd enforces IPAddressDeny= with a cgroup BPF program and ignores it where it
    cannot attach one; hostagent refuses it there instead, with the reason doctor gives."""
    sb = alices_home
    port = 47000 + secrets.randbelow(1000)
    sb.run(
        "systemd-run",
        "--unit=hostagent-test-listener",
        "/usr/bin/python3",
        "-c",
        f"import socket, time; s = socket.create_server(('127.0.0.1', {port})); time.sleep(600)",
    ).check()
    connect = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\""
    said = json.loads(sb.ctl("--json", "doctor", user="alice", system=True).stdout)
    enforced = said["sandboxing"]["ip_address_deny"] == "yes"
    made: list[str] = []
    try:
        until(lambda: sb.run("/bin/sh", "-c", connect).returncode == 0, "the listener listens")
        if not enforced:
            refused = sb.ctl(
                "new", "--preset", "shell", "-p", "IPAddressDeny=any", user="alice", system=True
            )
            assert refused.returncode != 0
            assert "IPAddressDeny= cannot be enforced here" in refused.stderr, refused.stderr
            return
        made += [walled := session(sb, "IPAddressDeny=any"), plain := session(sb)]
        assert typed(sb, walled, connect) != 0
        assert typed(sb, plain, connect) == 0
    finally:
        removed(sb, *made)
        sb.run("systemctl", "stop", "hostagent-test-listener")


def test_the_user_daemon_makes_the_sandbox_in_a_user_namespace(alices_home: Sandbox) -> None:
    """alice's own daemon, under her user manager, makes the same sandbox as root's, in a user
    namespace of the session's own: her secret hidden, her home read-only but for the tree, no
    way to her user manager or to her other session's terminal or processes (a PID namespace
    and /proc of its own, which this machine lets a user mount)."""
    sb = alices_home
    sb.daemon_start(user="alice")
    made: list[str] = []

    def new(*words: str) -> str:
        extra = [arg for word in words for arg in ("-p", word)]
        out = (
            sb.ctl("new", "--preset", "shell", "--cwd", "/home/alice/proj", *extra, user="alice")
            .check()
            .stdout.strip()
        )
        made.append(out)
        return out

    try:
        confined = new(
            "ProtectHome=read-only", "ReadWritePaths=%{cwd}", "InaccessiblePaths=%h/.ssh"
        )
        plain = new()
        run = f"/run/user/{sb.uid('alice')}"
        shown = ("display-message", "-p", "-t", "main", "#{pane_pid}")
        sock = f"{run}/hostagent/{plain}.sock"
        agent = sb.run("tmux", "-S", sock, *shown, user="alice").check().stdout.strip()
        for attack in (
            f"cat {SECRET}",
            "touch ~/written",
            "systemd-run --user --quiet true",
            f"tmux -S {sock} list-sessions",
            f"kill -0 {agent}",
            f"ps -e -o pid= | grep -qw {agent}",
        ):
            assert typed(sb, confined, attack, system=False) != 0, attack
            assert typed(sb, plain, attack, system=False) == 0, attack
        assert typed(sb, confined, "touch ~/proj/made-here", system=False) == 0
        sb.ctl("stop", confined, user="alice").check()
        sb.ctl("resume", confined, user="alice").check()
        assert typed(sb, confined, f"cat {SECRET}", system=False) != 0
    finally:
        for name in made:
            sb.ctl("rm", "--force", name, user="alice")
        sb.daemon_stop(user="alice")
        sb.sh("rm -f /home/alice/written /home/alice/proj/made-here")


PROBE = (
    "for p in / /usr /etc /var/tmp /dev/shm /proc/self /home /home/alice /home/alice/proj "
    f"{SECRET} /root /run/user /tmp; do "
    'printf "%s:%s%s " $p $(test -r $p && echo r || echo -) $(test -w $p && echo w || echo -); '
    "done; echo"
)
AS_SYSTEMD = [
    ["ProtectSystem=yes"],
    ["ProtectSystem=full"],
    ["ProtectSystem=strict"],
    ["ProtectSystem=strict", "ProtectHome=read-only", "ReadWritePaths=/home/alice/proj"],
    ["ProtectSystem=strict", "ProtectHome=yes", "ReadWritePaths=-/home/alice/proj"],
    # Not ProtectHome=tmpfs: systemd 252 mounts a writable tmpfs (mode 1777) there, where its
    # manual says "read-only"; hostagent keeps to the manual (test_sandbox.py's tables).
    ["InaccessiblePaths=/home/alice/.ssh", "ReadOnlyPaths=/home/alice"],
    ["ReadOnlyPaths=/home/alice", "ReadWritePaths=/home/alice/proj"],
]


@pytest.mark.parametrize("words", AS_SYSTEMD, ids=" ".join)
def test_each_word_means_what_it_means_to_systemd(alices_home: Sandbox, words: list[str]) -> None:
    sb = alices_home
    props = [arg for word in words for arg in ("-p", word)]
    service = sb.run(
        "systemd-run",
        "--quiet",
        "--wait",
        "--pipe",
        "-p",
        "User=alice",
        *props,
        "/bin/sh",
        "-c",
        PROBE,
    ).check()
    name = session(sb, *words)
    out = f"/dev/shm/hostagent-test-probe-{name}"
    try:
        assert typed(sb, name, f"({PROBE}) > {out}") == 0
        assert sb.run("cat", out).check().stdout == service.stdout
    finally:
        removed(sb, name)
        sb.run("rm", "-f", out)


@pytest.mark.parametrize(
    ("word", "says"),
    [
        ("ProtectSystem=very", "ProtectSystem= takes no, yes, full, strict, not 'very'"),
        ("ReadWritePaths=proj", "absolute, normalized paths"),
        ("InaccessiblePaths=%q/x", "specifier '%q'"),
    ],
)
def test_a_bad_word_is_invalid_args_naming_what_it_takes(
    alices_home: Sandbox, word: str, says: str
) -> None:
    sb = alices_home
    name = new_name()
    ctl = sb.ctl("new", "--preset", "shell", "--name", name, "-p", word, user="alice", system=True)
    assert ctl.returncode != 0 and says in ctl.stderr, ctl.stderr
    # The daemon reads it too, for a caller that is not hostagentctl.
    call = sb.run(
        "busctl",
        "call",
        BUS_NAME,
        "/org/hostagent/HostAgent1",
        f"{BUS_NAME}.Manager",
        "CreateSession",
        "sssa{sv}",
        name,
        "shell",
        "/tmp",
        "1",
        "properties",
        "as",
        "1",
        word,
        user="alice",
    )
    assert call.returncode != 0 and says in call.stderr, call.stderr
    assert record(sb, name) is None


def test_a_sandbox_that_cannot_be_made_fails_the_create_whole_and_says_what_to_do(
    alices_home: Sandbox,
) -> None:
    sb = alices_home
    name = new_name()
    ctl = sb.ctl(
        "new",
        "--preset",
        "shell",
        "--name",
        name,
        "--cwd",
        "/tmp",
        "-p",
        "ReadOnlyPaths=/srv/not-there",
        user="alice",
        system=True,
    )
    assert ctl.returncode != 0
    assert "'/srv/not-there' does not exist; prefix it with '-'" in ctl.stderr, ctl.stderr
    assert ctl.stderr.count("\n") == 1, ctl.stderr
    assert record(sb, name) is None
    assert name not in sb.ctl("list", user="alice", system=True).stdout
    # The same path marked as one that may be missing is passed over.
    sb.ctl(
        "new",
        "--preset",
        "shell",
        "--name",
        name,
        "--cwd",
        "/tmp",
        "-p",
        "ReadOnlyPaths=-/srv/not-there",
        user="alice",
        system=True,
    ).check()
    removed(sb, name)


def test_no_way_around_the_sandbox_from_inside_it(alices_home: Sandbox) -> None:
    sb = alices_home
    confined, plain = session(sb, "InaccessiblePaths=%h/.ssh"), session(sb)
    other = session(sb)  # with no sandbox either
    made, loose = new_name(), new_name()
    ctl = "hostagentctl --system"
    attacks = [
        # A session with the sandbox's words taken away.
        f"{ctl} new --preset shell --name {loose} --cwd /tmp -p InaccessiblePaths=",
        # Typing into, or resuming, a session with no sandbox.
        f"{ctl} send {other} 'true'",
        f"{ctl} stop {other} && {ctl} resume {other}",
        # Anything started by the owner's user manager runs outside every sandbox.
        "XDG_RUNTIME_DIR=/run/user/$(id -u) systemd-run --user --quiet --wait true",
    ]
    try:
        for attack in attacks:
            assert typed(sb, confined, attack) != 0, attack
        # The same from a session with no sandbox gets through.
        for attack in attacks:
            assert typed(sb, plain, attack) == 0, attack
        # A session made from inside the sandbox, asking for nothing, is confined as its maker.
        assert typed(sb, confined, f"{ctl} new --preset shell --name {made} --cwd /tmp") == 0
        assert "InaccessiblePaths=%h/.ssh" in record(sb, made)["properties"]  # type: ignore[index]
        assert typed(sb, made, f"cat {SECRET}") != 0
        # And the sandboxed session still drives the one it made, which is as confined.
        assert typed(sb, confined, f"{ctl} send {made} 'true'") == 0
    finally:
        removed(sb, confined, plain, other, made, loose)


def test_the_admin_guides_sandbox_block_runs_as_written(alices_home: Sandbox) -> None:
    sb = alices_home
    block = doc_block("docs/admin-guide.md", "sandbox")
    ran = sb.run("bash", "-euo", "pipefail", "-c", block, user="alice", cwd="/home/alice")
    assert ran.returncode == 0, ran.stderr
    assert "ProtectSystem=strict" in ran.stdout and "InaccessiblePaths=%h/.ssh" in ran.stdout
    assert "started confined: ProtectSystem=strict ProtectHome=read-only" in ran.stdout
