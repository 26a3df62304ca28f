"""A confined session picks no writable path of its own: neither through the environment a
create passes (a preset's state paths), nor through a symlink in its working directory; and the
admin's `ReadWritePaths=%{cwd}` works for a worktree and from inside a session. Each attack is
typed into a confined session's own shell on a real systemd, and the same create from alice's
shell outside every session still works, or makes a session in which ~/.ssh is still hidden."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.helpers import new_name, record
from tests.integration.test_confinement import SECRET, alices_home, removed, session, typed
from tests.sandbox import Sandbox

__all__ = ["alices_home"]  # the fixture, used by name

CTL = "hostagentctl --system"
PROJ = "/home/alice/proj"
# The admin guide's default ("Sandboxing agents").
DEFAULT = (
    "sandbox:\n  default: [ProtectSystem=strict, ProtectHome=read-only, PrivateTmp=yes,\n"
    '            "ReadWritePaths=%{cwd}", "InaccessiblePaths=-%h/.ssh -%h/.gnupg"]\n'
)
# A preset whose CLI keeps its state where a variable says, as Claude's CLAUDE_CONFIG_DIR.
ESCAPE_PRESET = """\
name: escape
command: [/bin/bash]
state:
  - "{$ESCAPE_DIR:-{home}/.escape}/"
"""


@pytest.fixture
def admin_default(alices_home: Sandbox) -> Iterator[Sandbox]:
    sb = alices_home
    sb.sh("mkdir -p /etc/hostagent && cat > /etc/hostagent/hostagent.yaml", input=DEFAULT).check()
    sb.ctl("reload").check()
    yield sb
    sb.run("rm", "-f", "/etc/hostagent/hostagent.yaml")
    sb.ctl("reload")


@pytest.fixture
def escape_preset(alices_home: Sandbox) -> Iterator[Sandbox]:
    sb = alices_home
    sb.sh(
        "mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/escape.yaml",
        input=ESCAPE_PRESET,
    ).check()
    sb.ctl("reload").check()
    yield sb
    sb.run("rm", "-f", "/etc/hostagent/presets.d/escape.yaml")
    sb.ctl("reload")


def exists(sb: Sandbox, name: str) -> bool:
    return sb.ctl("status", name).returncode == 0


def escaped(sb: Sandbox, name: str) -> bool:
    """Whether session name (if it was made) reads alice's key or writes her login files."""
    if not exists(sb, name):
        return False
    mark = f"escaped-{name}"
    wrote = typed(sb, name, f"echo '# {mark}' >> ~/.profile") == 0
    wrote = wrote or mark in sb.run("cat", "/home/alice/.profile").stdout
    return wrote or typed(sb, name, f"cat {SECRET}") == 0


def test_a_worktree_session_writes_its_tree_under_the_admins_cwd_default(
    admin_default: Sandbox,
) -> None:
    """%{cwd} of a --worktree session made at the repository's top was '<tree>/.', which no
    path word may be, and the start failed."""
    sb = admin_default
    repo = "/home/alice/wrepo"
    sb.run(
        "/bin/sh",
        "-c",
        f"rm -rf {repo} && mkdir -p {repo} && cd {repo} && git init -q -b main && "
        "git -c user.email=a@example.org -c user.name=A commit -q --allow-empty -m start",
        user="alice",
    ).check()
    name = new_name()
    try:
        made = sb.ctl(
            "new",
            "--preset",
            "shell",
            "--name",
            name,
            "--cwd",
            repo,
            "--worktree",
            user="alice",
            system=True,
        )
        assert made.returncode == 0, made.stderr
        cwd = record(sb, name)["cwd"]  # type: ignore[index]
        assert not cwd.endswith("/."), cwd
        assert typed(sb, name, "touch written-in-the-tree") == 0
        assert typed(sb, name, f"cat {SECRET}") != 0
    finally:
        removed(sb, name)
        sb.run("rm", "-rf", repo)


def test_a_session_makes_one_from_inside_under_the_admins_cwd_default(
    admin_default: Sandbox,
) -> None:
    """Every create from inside a session was refused under a default with %{cwd}: the
    maker's words, pinned to its tree, were not the default's words."""
    sb = admin_default
    maker, child = session(sb, cwd=PROJ), new_name()
    try:
        made = typed(sb, maker, f"{CTL} new --preset shell --name {child} --cwd {PROJ}")
        assert made == 0
        assert typed(sb, child, f"touch {PROJ}/written-by-the-child") == 0
        assert typed(sb, child, f"cat {SECRET}") != 0
        assert typed(sb, child, "touch ~/written-by-the-child") != 0
        # Moving does not widen it: a child made elsewhere writes only its maker's tree.
        elsewhere = new_name()
        typed(sb, maker, f"{CTL} new --preset shell --name {elsewhere} --cwd /home/alice")
        assert not exists(sb, elsewhere) or typed(sb, elsewhere, "touch ~/elsewhere") != 0
        removed(sb, elsewhere)
    finally:
        removed(sb, maker, child)


@pytest.mark.parametrize("where", ["/home/alice/proj/..", "/home/alice", "/home/alice/.ssh"])
def test_a_child_picks_no_writable_state_path_through_its_environment(
    escape_preset: Sandbox, where: str
) -> None:
    """Attack 3: a preset's state path took the creator's environment, unnormalised: the
    child got the whole home writable (its .profile, run by the next ListAgents)."""
    sb = escape_preset
    maker = session(
        sb,
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "ReadWritePaths=%{cwd}",
        "InaccessiblePaths=%h/.ssh",
        cwd=PROJ,
    )
    child, outside = new_name(), new_name()
    try:
        attack = f"{CTL} new --preset escape --name {child} --cwd {PROJ} -e ESCAPE_DIR={where}"
        assert typed(sb, maker, attack) != 0  # its maker writes no ~/.escape either
        assert not escaped(sb, child)
        # From alice's own shell: made, and ~/.ssh and her login files are still out of reach.
        sb.ctl(
            "new",
            "--preset",
            "escape",
            "--name",
            outside,
            "--cwd",
            PROJ,
            "-e",
            f"ESCAPE_DIR={where}",
            "-p",
            "ProtectHome=read-only",
            "-p",
            "InaccessiblePaths=%h/.ssh",
            user="alice",
            system=True,
        ).check()
        assert not escaped(sb, outside)
        assert typed(sb, outside, "touch ~/.escape/written") == 0  # its own state, as before
    finally:
        removed(sb, maker, child, outside)
        sb.run("rm", "-rf", "/home/alice/.escape")


def test_a_child_of_the_same_preset_is_made_from_inside(escape_preset: Sandbox) -> None:
    """State paths count as words: a child with its maker's own state is as confined as it,
    and one of another preset, whose state its maker cannot write, is not made."""
    sb = escape_preset
    maker, child, other = new_name(), new_name(), new_name()
    try:
        sb.ctl(
            "new",
            "--preset",
            "escape",
            "--name",
            maker,
            "--cwd",
            PROJ,
            "-p",
            "ProtectHome=read-only",
            "-p",
            "InaccessiblePaths=%h/.ssh",
            user="alice",
            system=True,
        ).check()
        assert typed(sb, maker, f"{CTL} new --preset escape --name {child} --cwd {PROJ}") == 0
        assert typed(sb, child, "touch ~/.escape/written-by-the-child") == 0
        assert typed(sb, child, f"cat {SECRET}") != 0
        made = typed(sb, maker, f"{CTL} new --preset demo-agent --name {other} --cwd {PROJ}")
        assert made != 0 and not exists(sb, other)
    finally:
        removed(sb, maker, child, other)
        sb.run("rm", "-rf", "/home/alice/.escape")


def test_a_symlinked_cwd_does_not_undo_the_admins_default(admin_default: Sandbox) -> None:
    """Attack 9: `ln -s / ~/proj/l` and a cwd of ~/proj/l/home/alice/.ssh: %{cwd} was made
    writable through the link, over the hidden ~/.ssh."""
    sb = admin_default
    maker, child, outside, linked = session(sb, cwd=PROJ), new_name(), new_name(), new_name()
    via = f"{PROJ}/l/home/alice/.ssh"
    try:
        assert typed(sb, maker, f"ln -sfn / {PROJ}/l") == 0
        typed(sb, maker, f"{CTL} new --preset shell --name {child} --cwd {via}")
        assert not escaped(sb, child)
        # From alice's own shell: refused, by name, with what to do.
        refused = sb.ctl(
            "new", "--preset", "shell", "--name", outside, "--cwd", via, user="alice", system=True
        )
        assert refused.returncode != 0 and not exists(sb, outside)
        assert "which InaccessiblePaths=-%h/.ssh hides" in refused.stderr, refused.stderr
        # A link to a place that is not hidden still works, resolved.
        sb.run("ln", "-sfn", PROJ, "/home/alice/plink", user="alice").check()
        sb.ctl(
            "new",
            "--preset",
            "shell",
            "--name",
            linked,
            "--cwd",
            "/home/alice/plink",
            user="alice",
            system=True,
        ).check()
        assert record(sb, linked)["cwd"] == PROJ  # type: ignore[index]
        assert typed(sb, linked, f"touch {PROJ}/written-through-the-link") == 0
    finally:
        removed(sb, maker, child, outside, linked)
        sb.run("rm", "-f", f"{PROJ}/l", "/home/alice/plink")


@pytest.mark.parametrize("target", ["/home/alice/.ssh", "/home/alice"])
def test_a_link_made_in_a_writable_path_is_refused_at_the_next_start(
    alices_home: Sandbox, target: str
) -> None:
    """Around attack 9: a path its words make writable that was missing at its start (its
    -%{gitdir}, in its tree) the session makes a link to ~/.ssh, or to the home; its next
    start, and a child it makes, would have carried the mount through the link (to the home:
    all of it writable, ~/.profile with it)."""
    sb = alices_home
    gitdir = f"{PROJ}/.git"
    sb.run("rm", "-rf", gitdir).check()
    s = session(
        sb,
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "ReadWritePaths=%{cwd} -%{gitdir}",
        "InaccessiblePaths=-%h/.ssh",
        cwd=PROJ,
    )
    child = new_name()
    try:
        assert typed(sb, s, f"ln -s {target} {gitdir}") == 0
        typed(sb, s, f"{CTL} new --preset shell --name {child} --cwd {PROJ}")
        assert not escaped(sb, child)
        sb.ctl("stop", s, user="alice", system=True).check()
        resumed = sb.ctl("resume", s, user="alice", system=True)
        assert resumed.returncode != 0 or not escaped(sb, s)
        assert "through a link in %{cwd}" in resumed.stderr, resumed.stderr
    finally:
        removed(sb, s, child)
        sb.run("rm", "-rf", gitdir)
