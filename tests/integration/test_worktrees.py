"""Parallel agents on one repository, each in a git worktree of its own, on a real systemd,
as alice with a real repository: made, diffed, removed, resumed after a reboot, and every bad
input refused by name, with nothing in the repository written as root."""

from __future__ import annotations

from hostagent.daemon.host import checkpoint
from tests.integration.helpers import agent_process, props
from tests.integration.test_clients import SOCK, until_watch_shows
from tests.sandbox import Sandbox

REPO = "/home/alice/proj"
GITDIR = f"{REPO}/.git"
TREES = f"{GITDIR}/hostagent-worktrees"
SETUP_PRESET = """\
name: shell-setup
command: [/bin/bash]
worktree_setup: "echo preparing the tree; exit 3"
"""


def alice(sb: Sandbox, script: str) -> str:
    return sb.run("/bin/sh", "-c", script, user="alice").check().stdout


def new(sb: Sandbox, name: str, *extra: str, cwd: str = f"{REPO}/src", preset: str = "shell"):
    return sb.ctl(
        "new", "--preset", preset, "--name", name, "--cwd", cwd, *extra, user="alice", system=True
    )


def make_repo(sb: Sandbox) -> None:
    alice(
        sb,
        f"git config --global user.email a@example.org && git config --global user.name Alice"
        f" && mkdir -p {REPO}/src && cd {REPO} && git init -q -b main"
        " && echo hello > README && echo '.env' > .gitignore && echo '.env' > .worktreeinclude"
        " && git add . && git commit -qm start && echo SECRET=1 > .env",
    )


def test_three_agents_in_their_own_worktrees(fresh_sandbox: Sandbox) -> None:
    sb = fresh_sandbox
    sb.daemon_start()
    make_repo(sb)
    names = ["wt-a", "wt-b", "wt-c"]
    for name in names:
        new(sb, name, "--worktree").check()
    for name in names:
        p = props(sb, name, user="alice")
        assert (p["Worktree"], p["Branch"], p["Cwd"]) == (
            f"{TREES}/{name}",
            f"hostagent/{name}",
            f"{TREES}/{name}/src",
        )
        assert agent_process(sb, name).cwd == f"{TREES}/{name}/src"
        assert alice(sb, f"cat {TREES}/{name}/.env") == "SECRET=1\n"  # .worktreeinclude
    # Each agent edits the same file; each edit lands in its own worktree only.
    for name in names[:2]:
        sb.ctl("send", name, f"echo {name} >> ../README", system=True).check()
    for name in names[:2]:
        sb.ctl("send", name, "echo done-$((40+2))", system=True).check()
        assert sb.screen_showing(name, "done-42", user="alice")
    for name in names[:2]:
        assert alice(sb, f"cat {TREES}/{name}/README") == f"hello\n{name}\n"
    assert alice(sb, f"cat {REPO}/README") == "hello\n"
    assert alice(sb, f"git -C {REPO} worktree list").count("\n") == 4
    listed = sb.ctl("list", user="alice", system=True).check().stdout
    assert "BRANCH" in listed and "hostagent/wt-a" in listed
    sb.run(
        "tmux",
        "-S",
        SOCK,
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-s",
        "watch",
        "-x",
        "160",
        "-y",
        "20",
        "hostagentctl --system watch",
        user="alice",
    ).check()
    until_watch_shows(sb, "hostagent/wt-c")
    sb.run("tmux", "-S", SOCK, "kill-server", user="alice")
    # diff: what each changed against its base, committed or not.
    alice(sb, f"cd {TREES}/wt-b && git commit -qam 'b edits'")
    for name in names[:2]:
        diff = sb.ctl("diff", name, user="alice", system=True).check().stdout
        assert f"+{name}" in diff and "README" in diff
    stat = sb.ctl("diff", "--stat", "wt-b", user="alice", system=True).check().stdout
    assert "1 insertion" in stat
    # A clean one goes with its session, its branch stays; a changed one is kept and said so.
    sb.ctl("rm", "wt-c", user="alice", system=True).check()
    assert sb.run("test", "-e", f"{TREES}/wt-c").returncode != 0
    assert "hostagent/wt-c" in alice(sb, f"git -C {REPO} branch --list 'hostagent/*'")
    kept = sb.ctl("rm", "wt-a", user="alice", system=True).check()
    assert "'README') and was kept" in kept.stderr and f"{TREES}/wt-a" in kept.stderr
    assert sb.run("test", "-d", f"{TREES}/wt-a").returncode == 0
    sb.ctl("rm", "--force", "wt-b", user="alice", system=True).check()
    assert sb.run("test", "-e", f"{TREES}/wt-b").returncode != 0
    # The branch of a removed session is reused only when asked for.
    taken = new(sb, "wt-c", "--worktree")
    assert taken.returncode == 1 and "--worktree=hostagent/wt-c" in taken.stderr
    new(sb, "wt-d", "--worktree=hostagent/wt-c").check()
    assert props(sb, "wt-d", user="alice")["Branch"] == "hostagent/wt-c"
    # Stopped, rebooted, resumed: the agent starts in its worktree again.
    sb.reboot()
    sb.daemon_start()
    assert props(sb, "wt-d", user="alice")["State"] == "dormant"
    sb.ctl("resume", "wt-d", user="alice", system=True).check()
    assert agent_process(sb, "wt-d").cwd == f"{TREES}/wt-d/src"
    # Nothing git made in the repository belongs to root.
    assert sb.run("find", REPO, "-not", "-user", "alice").check().stdout == ""


def test_rm_keeps_a_worktree_whose_only_changes_git_ignores(sb: Sandbox) -> None:
    """A rotated .env that .worktreeinclude brought in, or an ignored note, is nothing git
    could bring back: rm keeps the worktree and says where it is. An untouched copy of the
    main worktree's .env is no reason to keep one."""
    make_repo(sb) if sb.run("test", "-d", GITDIR).returncode else None
    alice(sb, f"grep -qx 'notes/' {GITDIR}/info/exclude || echo 'notes/' >> {GITDIR}/info/exclude")
    for name in ("wt-env", "wt-notes", "wt-plain"):
        new(sb, name, "--worktree").check()
    alice(
        sb,
        f"echo SECRET=2 > {TREES}/wt-env/.env"
        f" && mkdir {TREES}/wt-notes/notes && echo plan > {TREES}/wt-notes/notes/plan.md",
    )
    for name, file in (("wt-env", ".env"), ("wt-notes", "notes/")):
        said = sb.ctl("rm", name, user="alice", system=True).check().stderr
        assert f"'{file}') and was kept" in said and f"{TREES}/{name}" in said, said
        assert alice(sb, f"ls -A {TREES}/{name}").count(file.rstrip("/")) == 1
    sb.ctl("rm", "wt-plain", user="alice", system=True).check()
    assert sb.run("test", "-e", f"{TREES}/wt-plain").returncode != 0
    for name in ("wt-env", "wt-notes"):  # as the note says
        alice(sb, f"git -C {REPO} worktree remove --force {TREES}/{name}")


def test_bad_worktree_requests_are_refused_by_name_and_leave_nothing(sb: Sandbox) -> None:
    make_repo(sb) if sb.run("test", "-d", GITDIR).returncode else None
    sb.sh(
        "mkdir -p /etc/hostagent/presets.d && cat > /etc/hostagent/presets.d/shell-setup.yaml",
        input=SETUP_PRESET,
    ).check()
    sb.sh("mkdir -p /srv/theirs && cd /srv/theirs && git init -q && chmod -R a+rX /srv/theirs")
    sb.run("systemctl", "reload", "hostagent").check()
    branches = alice(sb, f"git -C {REPO} branch --list")
    cases = [
        (["--worktree"], "/tmp", "is not in a git repository"),
        (["--worktree", "--base", "no-such-ref"], f"{REPO}/src", "does not name a commit"),
        (["--worktree=../evil"], f"{REPO}/src", "must be a git branch"),
        (["--base", "main"], f"{REPO}/src", "give 'worktree' too"),
        (["--worktree"], "/srv/theirs", "belongs to another user"),
    ]
    for extra, cwd, said in cases:
        refused = new(sb, "wt-bad", *extra, cwd=cwd)
        assert refused.returncode == 1 and said in refused.stderr, (extra, refused.stderr)
        assert sb.ctl("status", "wt-bad").returncode == 4
    failed = new(sb, "wt-bad", "--worktree", preset="shell-setup")
    assert failed.returncode == 1 and "setup command failed (exit 3)" in failed.stderr
    assert "preparing the tree" in failed.stderr
    assert sb.ctl("status", "wt-bad").returncode == 4
    assert sb.run("test", "-e", f"{TREES}/wt-bad").returncode != 0
    assert alice(sb, f"git -C {REPO} branch --list") == branches
    assert alice(sb, f"git -C {REPO} worktree list").count("\n") == 1
    sb.run("rm", "-f", "/etc/hostagent/presets.d/shell-setup.yaml")


def test_a_create_killed_before_its_record_leaves_nothing_behind(sb: Sandbox) -> None:
    """The daemon SIGKILLed after a create made the worktree, its branch and the runtime
    files, before the first record: the next start removes them all, and a create of the same
    name then works."""
    make_repo(sb) if sb.run("test", "-d", GITDIR).returncode else None
    name, uid = "wt-killed", sb.uid("alice")
    fifo = f"/run/hostagent/{uid}/{name}.d/out"
    with sb.park(checkpoint.CREATE_MADE, name) as parked:
        args = ["new", "--preset", "shell", "--name", name, "--cwd", f"{REPO}/src", "--worktree"]
        proc = sb.popen("hostagentctl", "--system", *args, user="alice")
        parked.wait()
        assert alice(sb, f"git -C {REPO} branch --list hostagent/{name}").strip()
        assert sb.run("test", "-d", f"{TREES}/{name}").returncode == 0
        assert sb.run("test", "-p", fifo).returncode == 0
        sb.daemon_kill()
    proc.communicate(timeout=90)
    assert proc.returncode != 0  # the caller learns that its create did not complete
    sb.daemon_start()
    assert "1 creates cut short undone" in sb.journal(this_run=True)
    assert alice(sb, f"git -C {REPO} branch --list hostagent/{name}") == ""
    assert sb.run("test", "-e", f"{TREES}/{name}").returncode != 0
    assert sb.run("test", "-e", fifo).returncode != 0
    assert sb.run("sh", "-c", "ls /var/lib/hostagent/creating").check().stdout == ""
    new(sb, name, "--worktree").check()
    assert props(sb, name, user="alice")["Worktree"] == f"{TREES}/{name}"
    sb.ctl("rm", name, user="alice", system=True).check()
