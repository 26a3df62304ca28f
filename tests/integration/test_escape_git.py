"""Out of the sandbox through git, and through what runs later outside it (issue 70, attack 6),
on a real systemd: a confined session of alice's, its project writable, plants what git runs
(hooks, core.fsmonitor, filters, a worktree's .git file pointed elsewhere) and waits for git to
run outside: the daemon's own git for a worktree, or alice's. Each plant either cannot be
written from inside, or is written (a word lets it) and the daemon's git does not run it; a
marker that copies alice's ~/.ssh key out stays absent. The same writes from alice's shell
outside every session succeed."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from tests.integration.helpers import props
from tests.integration.test_confinement import removed, session, typed
from tests.sandbox import Sandbox

SECRET = "/home/alice/.ssh/id_ed25519"
REPO = "/home/alice/proj"
GITDIR = f"{REPO}/.git"
TREES = f"{GITDIR}/hostagent-worktrees"
CONFINED = (
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "PrivateTmp=yes",
    "InaccessiblePaths=%h/.ssh",
)
TRUSTING_PRESET = """\
name: shell-trusting
extends: shell
state: ["{home}/.cli/"]
trusted: ["{home}/.cli/settings.json"]
"""


@pytest.fixture(scope="module")
def alices_repo(sandbox: Sandbox) -> Iterator[Sandbox]:
    """alice's secret, and her project: a git repository of hers."""
    sb = sandbox
    sb.sh(
        f"install -d -o alice -m 700 /home/alice/.ssh && echo SECRET-KEY > {SECRET} && "
        f"chown alice {SECRET} && rm -rf {REPO} /home/alice/.cli && "
        "mkdir -p /etc/hostagent/presets.d && "
        "cat > /etc/hostagent/presets.d/shell-trusting.yaml",
        input=TRUSTING_PRESET,
    ).check()
    alice(
        sb,
        "git config --global user.email a@example.org && git config --global user.name Alice"
        f" && mkdir -p {REPO} && cd {REPO} && git init -q -b main && echo hello > README"
        " && echo hi > a.txt && git add . && git commit -qm start"
        " && mkdir -p ~/.cli && echo '{}' > ~/.cli/settings.json",
    )
    sb.run("systemctl", "reload", "hostagent").check()
    yield sb
    sb.sh(f"rm -rf {REPO} /home/alice/.cli /etc/hostagent/presets.d/shell-trusting.yaml")
    sb.run("systemctl", "reload", "hostagent")


def alice(sb: Sandbox, script: str) -> str:
    return sb.run("/bin/sh", "-c", script, user="alice").check().stdout


def marker() -> str:
    """Where a planted command copies alice's key: /dev/shm, which every sandbox leaves be."""
    return f"/dev/shm/hostagent-test-leak-{secrets.token_hex(4)}"


def leaked(sb: Sandbox, path: str) -> bool:
    return sb.run("test", "-e", path).returncode == 0


def plant_in_gitdir(leak: str) -> str:
    """What an agent types to have git run its code outside: a post-checkout hook, core.fsmonitor
    and a filter on every file, each copying alice's key out. The config is appended to: a file
    a word names is a mount point, which git config's rename over it cannot replace."""
    steal = f"cp {SECRET} {leak}"
    return (
        f"printf '#!/bin/sh\\n{steal}\\n' > .git/hooks/post-checkout"
        " && chmod +x .git/hooks/post-checkout"
        f" && printf '[core]\\n\\tfsmonitor = \"{steal}; false\"\\n' >> .git/config"
        f' && printf \'[filter "x"]\\n\\tsmudge = "{steal}; cat"\\n'
        f'\\tclean = "{steal}; cat"\\n\' >> .git/config'
        " && echo '* filter=x' > .gitattributes && git add .gitattributes"
        " && git commit -qm attributes"
    )


def test_the_daemons_git_runs_no_hook_or_fsmonitor_a_session_planted(alices_repo: Sandbox) -> None:
    """A word makes the hooks and the config writable; the session plants its code there;
    alice then has the daemon make a worktree, diff it, and remove it: nothing planted runs."""
    sb, leak = alices_repo, marker()
    words = (*CONFINED, "ReadWritePaths=%{cwd} %{gitdir}/hooks %{gitdir}/config")
    planter = session(sb, *words, cwd=REPO)
    kept, gone = f"w-{secrets.token_hex(3)}", f"w-{secrets.token_hex(3)}"
    try:
        assert typed(sb, planter, plant_in_gitdir(leak)) == 0
        assert typed(sb, planter, f"cat {SECRET}") != 0  # the key is out of its reach
        # alice, outside: worktree sessions (git worktree add: a checkout, post-checkout hook)
        for tree in (kept, gone):
            sb.ctl(
                "new",
                "--preset",
                "shell",
                "--name",
                tree,
                "--cwd",
                REPO,
                "--worktree",
                user="alice",
                system=True,
            ).check()
            alice(sb, f"echo changed > {props(sb, tree, user='alice')['Worktree']}/a.txt")
        diff = sb.ctl("diff", kept, user="alice", system=True).check().stdout
        assert "+changed" in diff
        assert not leaked(sb, leak), "the daemon's git ran the session's hook or fsmonitor"
        # Removed without --force: git status finds the change, and the worktree is kept;
        # with it: git worktree remove.
        said = sb.ctl("rm", kept, user="alice", system=True).check()
        assert "was kept" in said.stdout + said.stderr
        sb.ctl("rm", "--force", gone, user="alice", system=True).check()
        assert not leaked(sb, f"{TREES}/{gone}")
        assert not leaked(sb, leak), "the daemon's git ran the session's code at a remove"
        # The plant is real: git as alice runs it by hand.
        alice(sb, f"cd {REPO} && git status >/dev/null 2>&1; true")
        assert leaked(sb, leak), "the planted fsmonitor did not run even for alice's own git"
    finally:
        removed(sb, planter, kept, gone)
        sb.run("rm", "-f", leak)
        alice(
            sb,
            f"cd {REPO} && git config --unset core.fsmonitor; git config --remove-section"
            f" filter.x; rm -f .git/hooks/post-checkout; rm -rf {TREES}/{kept};"
            " git worktree prune; git rm -q .gitattributes && git commit -qm clean; true",
        )


def test_a_worktrees_git_file_pointed_elsewhere_is_not_followed(alices_repo: Sandbox) -> None:
    """A worktree session points its .git file at a repository of its own with core.fsmonitor
    set; alice diffs and removes it: the daemon's git refuses it, and runs nothing."""
    sb, leak = alices_repo, marker()
    tree = f"w-{secrets.token_hex(3)}"
    sb.ctl(
        "new",
        "--preset",
        "shell",
        "--name",
        tree,
        "--cwd",
        REPO,
        "--worktree",
        *(a for w in (*CONFINED, "ReadWritePaths=%{cwd}") for a in ("-p", w)),
        user="alice",
        system=True,
    ).check()
    try:
        steal = f"cp {SECRET} {leak}"
        plant = (
            f"git init -q evil && git -C evil config core.fsmonitor '{steal}; false'"
            f" && printf 'gitdir: %s/evil/.git\\n' \"$PWD\" > .git"
        )
        assert typed(sb, tree, plant) == 0
        said = sb.ctl("diff", tree, user="alice", system=True)
        assert said.returncode != 0 and "does not name a worktree of" in said.stderr
        said = sb.ctl("rm", "--force", tree, user="alice", system=True)
        assert not leaked(sb, leak), "the daemon's git followed the session's .git file"
    finally:
        removed(sb, tree)
        sb.run("rm", "-f", leak)
        alice(sb, f"rm -rf {TREES}/{tree}; git -C {REPO} worktree prune; true")


def test_git_hooks_and_config_are_read_only_inside_and_alices_outside(
    alices_repo: Sandbox,
) -> None:
    sb = alices_repo
    confined = session(sb, *CONFINED, "ReadWritePaths=%{cwd}", cwd=REPO)
    opened = session(sb, *CONFINED, "ReadWritePaths=%{cwd} %{gitdir}/hooks", cwd=REPO)
    try:
        for attack in (
            "echo x > .git/hooks/x",
            "git config core.fsmonitor 'cat ~/.ssh/id_ed25519'",
            "echo '[core] fsmonitor = x' >> .git/config",
            "mv .git .git-aside",  # and then a .git of its own in its place
            "mv .git/hooks .git/hooks-aside",
            "rm -rf .git/hooks/*.sample",
        ):
            assert typed(sb, confined, attack) != 0, f"{attack!r} got through"
        # The project and its history stay the session's: it commits.
        assert typed(sb, confined, "echo more >> README && git commit -qam more") == 0
        assert typed(sb, opened, "echo x > .git/hooks/x") == 0  # the word says so
        assert typed(sb, opened, "git config core.fsmonitor false") != 0
        # alice, outside every session, writes both.
        alice(sb, f"echo y > {GITDIR}/hooks/y && git -C {REPO} config hostagent.test yes")
    finally:
        removed(sb, confined, opened)
        alice(
            sb,
            f"rm -f {GITDIR}/hooks/x {GITDIR}/hooks/y; "
            f"git -C {REPO} config --unset hostagent.test; true",
        )


def test_other_sessions_worktrees_are_read_only_inside(alices_repo: Sandbox) -> None:
    sb = alices_repo
    words = [a for w in (*CONFINED, "ReadWritePaths=%{cwd} %{gitdir}") for a in ("-p", w)]
    one, two = f"w-{secrets.token_hex(3)}", f"w-{secrets.token_hex(3)}"
    for name in (one, two):
        sb.ctl(
            "new",
            "--preset",
            "shell",
            "--name",
            name,
            "--cwd",
            REPO,
            "--worktree",
            *words,
            user="alice",
            system=True,
        ).check()
    try:
        assert typed(sb, one, "echo mine > README && git commit -qam mine") == 0
        assert typed(sb, one, f"echo theirs > {TREES}/{two}/README") != 0
        assert typed(sb, one, f"echo 'gitdir: /tmp' > {TREES}/{two}/.git") != 0
        assert typed(sb, one, f"mv {TREES} {GITDIR}/aside") != 0
        alice(sb, f"echo alice >> {TREES}/{two}/README")
    finally:
        for name in (one, two):
            sb.ctl("rm", "--force", name, user="alice", system=True)


def test_a_clis_trusted_file_is_read_only_though_its_state_is_writable(
    alices_repo: Sandbox,
) -> None:
    sb = alices_repo
    name = f"t-{secrets.token_hex(3)}"
    sb.ctl(
        "new",
        "--preset",
        "shell-trusting",
        "--name",
        name,
        "--cwd",
        REPO,
        *(a for w in CONFINED for a in ("-p", w)),
        user="alice",
        system=True,
    ).check()
    try:
        assert typed(sb, name, "echo kept > ~/.cli/state.json") == 0
        for attack in (
            'echo \'{"hooks": "x"}\' > ~/.cli/settings.json',
            "echo '{}' > ~/.cli/new && mv -f ~/.cli/new ~/.cli/settings.json",
            "rm -f ~/.cli/settings.json",
            "mv ~/.cli ~/.cli-aside",
        ):
            assert typed(sb, name, attack) != 0, f"{attack!r} got through"
        alice(sb, "echo '{\"theme\": 1}' > ~/.cli/settings.json")
    finally:
        removed(sb, name)
