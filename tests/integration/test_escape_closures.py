"""What a confined session has closed of its owner's stays closed: her runtime directory, with
her user manager and session bus in it, through which `systemd-run --user` runs anything outside
every sandbox. Tried as attacks typed into alice's confined session on a real systemd, after
logind mounts her runtime directory again (she had none at the start; or it was unmounted and
mounted again while the session ran), and through a session made from inside with a word that
reads as tightening; each succeeds from alice's own shell outside every session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.helpers import new_name, record, until
from tests.integration.test_confinement import SECRET, alices_home, removed, session, typed
from tests.sandbox import Sandbox

# The attacker: the agent inside alice's session, confined as this.
CONFINED = (
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "ReadWritePaths=%{cwd}",
    "InaccessiblePaths=%h/.ssh",
    "PrivateTmp=yes",
    "NoNewPrivileges=yes",
)
PROJ = "/home/alice/proj"
# Anything, started by her user manager: outside every sandbox.
ESCAPE = "XDG_RUNTIME_DIR=/run/user/$(id -u) systemd-run --user --quiet --wait true"
BUS = "test -S /run/user/$(id -u)/bus"
LINGER_TIMEOUT = 30.0


def _runtime(sb: Sandbox) -> str:
    return f"/run/user/{sb.uid('alice')}"


def _mounted(sb: Sandbox) -> bool:
    return sb.run("mountpoint", "-q", _runtime(sb)).returncode == 0


def _escapes_outside(sb: Sandbox) -> bool:
    """The escape from alice's shell outside every session: her user manager answers."""
    return (
        sb.run("systemd-run", "--user", "--quiet", "--wait", "true", user="alice").returncode == 0
    )


def _linger_off(sb: Sandbox) -> None:
    """alice's user manager stopped and her runtime directory unmounted (she has no login)."""
    sb.run("loginctl", "disable-linger", "alice").check()
    until(lambda: not _mounted(sb), "alice's runtime directory unmounted", LINGER_TIMEOUT)


def _linger_on(sb: Sandbox) -> None:
    """logind mounts alice's runtime directory again and starts her user manager in it."""
    sb.run("loginctl", "enable-linger", "alice").check()
    until(lambda: _escapes_outside(sb), "alice's user manager answers", LINGER_TIMEOUT)


@pytest.fixture
def alice(request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """alice's home as test_confinement makes it, and her lingering again afterwards, as every
    other test expects."""
    sb: Sandbox = request.getfixturevalue(alices_home.__name__)
    yield sb
    _linger_on(sb)


def test_her_runtime_directory_mounted_after_the_start_stays_closed(alice: Sandbox) -> None:
    """(a) The session starts while alice has no runtime directory (no login, no linger); then
    logind mounts it. Inside, it is not there; outside, her user manager runs anything."""
    sb = alice
    _linger_off(sb)
    name = session(sb, *CONFINED, cwd=PROJ)
    try:
        _linger_on(sb)
        assert sb.run("test", "-S", f"{_runtime(sb)}/bus").returncode == 0
        assert typed(sb, name, "ls -A /run/user/$(id -u) | grep -q .") != 0
        assert typed(sb, name, BUS) != 0
        assert typed(sb, name, ESCAPE) != 0
        # The words still hold, and the session still works.
        assert typed(sb, name, f"cat {SECRET}") != 0
        assert typed(sb, name, f"touch {PROJ}/made-here") == 0
    finally:
        removed(sb, name)
        sb.run("rm", "-f", f"{PROJ}/made-here")


def test_her_runtime_directory_mounted_again_stays_closed(alice: Sandbox) -> None:
    """(b) Her runtime directory is there at the start, closed; then it is unmounted and mounted
    again (linger off and on, no other login), as the agent itself could with polkit's leave
    to set her own linger. Inside, it stays closed."""
    sb = alice
    name = session(sb, *CONFINED, cwd=PROJ)
    try:
        assert typed(sb, name, ESCAPE) != 0
        _linger_off(sb)
        _linger_on(sb)
        assert typed(sb, name, BUS) != 0
        assert typed(sb, name, ESCAPE) != 0
    finally:
        removed(sb, name)


def test_no_word_from_inside_reopens_her_runtime_directory(alice: Sandbox) -> None:
    """(c) A child made from inside with a word under her runtime directory (which reads as
    tightening) keeps it closed; one naming the directory itself is refused as a loosening.
    From outside every session, alice may name it: that session reaches her user manager."""
    sb = alice
    uid = sb.uid("alice")
    maker = session(sb, *CONFINED, cwd=PROJ)
    child, loose, loose_ro, linked = new_name(), new_name(), new_name(), new_name()
    opened = session(sb, *CONFINED, "ReadWritePaths=/run/user/%U", cwd=PROJ)
    new = f"hostagentctl --system new --preset shell --cwd {PROJ} --name"
    try:
        assert typed(sb, maker, f"{new} {child} -p InaccessiblePaths=-/run/user/{uid}/x") == 0
        assert f"InaccessiblePaths=-/run/user/{uid}/x" in record(sb, child)["properties"]  # type: ignore[index]
        assert typed(sb, child, BUS) != 0
        assert typed(sb, child, ESCAPE) != 0
        for made, word in (
            (loose, f"ReadWritePaths=/run/user/{uid}"),
            (loose_ro, "ReadOnlyPaths=/run/user/%U"),
        ):
            assert typed(sb, maker, f"{new} {made} -p {word}") != 0, word
            assert record(sb, made) is None, word
        # Nor by a link to it, which a word names read-only: the cover is made first, so the
        # link leads nowhere and the child is not made, or made without it.
        link = f"{PROJ}/runtime-link"
        attack = f"ln -sfn /run/user/{uid} {link} && {new} {linked} -p ReadOnlyPaths={link}"
        if typed(sb, maker, attack) == 0:
            assert typed(sb, linked, ESCAPE) != 0
        # The owner's own word, from outside: what she asked for.
        assert typed(sb, opened, ESCAPE) == 0
        assert _escapes_outside(sb)
    finally:
        removed(sb, maker, child, loose, loose_ro, linked, opened)
        sb.run("rm", "-f", f"{PROJ}/runtime-link")


def test_on_the_user_daemon_a_session_ends_with_her_user_manager(alice: Sandbox) -> None:
    """alice's own daemon closes only her bus and her manager's socket (its runtime directory is
    in hers), and does not cover /run/user: it needs none, since its sessions run under her user
    manager and end with it, before logind unmounts her runtime directory; none is left to see
    the one mounted next."""
    sb = alice
    sb.daemon_start(user="alice")
    name = ""
    try:
        name = (
            sb.ctl(
                "new",
                "--preset",
                "shell",
                "--cwd",
                PROJ,
                "-p",
                "ProtectHome=read-only",
                "-p",
                "ReadWritePaths=%{cwd}",
                "-p",
                "InaccessiblePaths=%h/.ssh",
                user="alice",
            )
            .check()
            .stdout.strip()
        )
        # (Her bus is there, as the manager's inaccessible socket: no connection is made to it.)
        assert typed(sb, name, ESCAPE, system=False) != 0
        assert _escapes_outside(sb)
        out = "/dev/shm/hostagent-test-shell-pid"
        assert typed(sb, name, f"echo $$ > {out}", system=False) == 0
        shell = sb.run("cat", out).check().stdout.strip()
        sb.run("rm", "-f", out)
        _linger_off(sb)
        assert sb.run("kill", "-0", shell).returncode != 0, "the session outlived her manager"
    finally:
        _linger_on(sb)
        if name:
            sb.ctl("rm", "--force", name, user="alice")
        sb.daemon_stop(user="alice")
