"""What runs later outside a session is read-only in its sandbox, unless a word names it: the
mounts laterrun adds to a session's plan, where the words left those paths writable."""

from __future__ import annotations

import pytest

from hostagent import laterrun, sandbox, sandboxmounts
from hostagent.sandbox import Context
from hostagent.sandboxmounts import Mode

HOME = "/home/alice"
CTX = Context(HOME, "alice", 1000, "/run", f"{HOME}/proj", f"{HOME}/proj/.git")
WT = f"{HOME}/proj/.git/hostagent-worktrees/s1"
TREE_CTX = Context(HOME, "alice", 1000, "/run", WT, f"{HOME}/proj/.git")
BASE = ["ProtectSystem=strict", "ProtectHome=read-only"]
SETTINGS = f"{HOME}/.claude/settings.json"


def plan(words: list[str], ctx: Context = CTX, trusted: tuple[str, ...] = ()) -> dict[str, str]:
    """path -> mode of the plan's mounts under the home, with the CLI's state kept writable."""
    box = sandbox.read(words)
    found = sandboxmounts.mounts(box, ctx, keep=[f"{HOME}/.claude"])
    made = laterrun.guarded(found, box, ctx, laterrun.later_run(ctx, trusted))
    assert [m.path for m in made] == [m.path for m in sandboxmounts._ordered(made)]  # in order
    return {m.path: m.mode.name for m in made if m.path.startswith(HOME)}


G = f"{HOME}/proj/.git"


@pytest.mark.parametrize(
    ("words", "ctx", "trusted", "mounts"),
    [
        pytest.param(
            [*BASE, "ReadWritePaths=%{cwd}"],
            CTX,
            (),
            {
                f"{HOME}/.claude": "READ_WRITE",
                f"{HOME}/proj": "READ_WRITE",
                G: "READ_WRITE",
                f"{G}/config": "READ_ONLY",
                f"{G}/hooks": "READ_ONLY",
                f"{G}/hostagent-worktrees": "READ_ONLY",
            },
            id="project-writable:git-files-read-only,git-dir-pinned",
        ),
        pytest.param(
            [*BASE, "ReadWritePaths=%h/work"],
            Context(HOME, "alice", 1000, "/run", f"{HOME}/work/a/proj", f"{HOME}/work/a/proj/.git"),
            (),
            {
                f"{HOME}/.claude": "READ_WRITE",
                f"{HOME}/work": "READ_WRITE",
                f"{HOME}/work/a": "READ_WRITE",
                f"{HOME}/work/a/proj": "READ_WRITE",
                f"{HOME}/work/a/proj/.git": "READ_WRITE",
                f"{HOME}/work/a/proj/.git/config": "READ_ONLY",
                f"{HOME}/work/a/proj/.git/hooks": "READ_ONLY",
                f"{HOME}/work/a/proj/.git/hostagent-worktrees": "READ_ONLY",
            },
            id="every-directory-down-to-the-git-dir-pinned",
        ),
        pytest.param(
            [*BASE, "ReadWritePaths=%{cwd} %{gitdir}/hooks"],
            CTX,
            (),
            {
                f"{HOME}/.claude": "READ_WRITE",
                f"{HOME}/proj": "READ_WRITE",
                G: "READ_WRITE",
                f"{G}/config": "READ_ONLY",
                f"{G}/hooks": "READ_WRITE",
                f"{G}/hostagent-worktrees": "READ_ONLY",
            },
            id="a-word-naming-hooks-keeps-them-writable",
        ),
        pytest.param(
            [*BASE, "ReadWritePaths=%{cwd} %{gitdir}"],
            TREE_CTX,
            (),
            {
                f"{HOME}/.claude": "READ_WRITE",
                G: "READ_WRITE",
                f"{G}/config": "READ_ONLY",
                f"{G}/hooks": "READ_ONLY",
                f"{G}/hostagent-worktrees": "READ_ONLY",
                WT: "READ_WRITE",
            },
            id="worktree-session:others-read-only,its-own-writable",
        ),
        pytest.param(
            [*BASE, "ReadWritePaths=%{cwd}"],
            TREE_CTX,
            (),
            {f"{HOME}/.claude": "READ_WRITE", WT: "READ_WRITE"},
            id="git-dir-not-writable:nothing-to-guard",
        ),
        pytest.param(
            [*BASE],
            CTX,
            (SETTINGS,),
            {f"{HOME}/.claude": "READ_WRITE", SETTINGS: "READ_ONLY"},
            id="trusted-file-in-the-writable-state",
        ),
        pytest.param(
            [*BASE, f"ReadWritePaths={SETTINGS}"],
            CTX,
            (SETTINGS,),
            {f"{HOME}/.claude": "READ_WRITE", SETTINGS: "READ_WRITE"},
            id="a-word-naming-the-trusted-file-keeps-it-writable",
        ),
        pytest.param(
            [*BASE, "ReadOnlyPaths=%h/proj"],
            CTX,
            (),
            {f"{HOME}/.claude": "READ_WRITE", f"{HOME}/proj": "READ_ONLY"},
            id="read-only-by-the-words-already",
        ),
        pytest.param(
            ["ProtectSystem=strict", "ReadWritePaths=%{cwd}"],
            CTX,
            (SETTINGS,),
            {f"{HOME}/.claude": "READ_WRITE", f"{HOME}/proj": "READ_WRITE"},
            id="home-writable:nothing-guarded",
        ),
        pytest.param(
            [*BASE, "InaccessiblePaths=%h/.claude"],
            CTX,
            (SETTINGS,),
            {f"{HOME}/.claude": "INACCESSIBLE"},
            id="hidden-trusted-file-stays-hidden",
        ),
    ],
)
def test_what_runs_later_is_read_only_where_the_words_left_it_writable(
    words: list[str], ctx: Context, trusted: tuple[str, ...], mounts: dict[str, str]
) -> None:
    assert plan(words, ctx, trusted) == mounts


def test_nothing_is_added_to_a_plan_with_nothing_to_guard() -> None:
    box = sandbox.read([*BASE])
    found = sandboxmounts.mounts(box, CTX)
    assert laterrun.guarded(found, box, CTX, laterrun.later_run(CTX)) == found


@pytest.mark.parametrize(
    ("ctx", "trusted", "paths"),
    [
        pytest.param(
            CTX, (), [f"{G}/hooks", f"{G}/config", f"{G}/hostagent-worktrees"], id="in-a-repository"
        ),
        pytest.param(
            Context(HOME, "alice", 1000, "/run", "/tmp", ""),
            (SETTINGS, "rel", "/"),
            [SETTINGS],
            id="no-repository,only-absolute-files",
        ),
    ],
)
def test_the_later_run_paths_of_a_session(
    ctx: Context, trusted: tuple[str, ...], paths: list[str]
) -> None:
    assert laterrun.later_run(ctx, trusted) == paths


@pytest.mark.parametrize(
    ("path", "mounts", "writable"),
    [
        pytest.param("/a/b", [], True, id="no-mount:the-hosts"),
        pytest.param("/a/b", [("/", Mode.READ_ONLY), ("/a", Mode.READ_WRITE)], True, id="rw"),
        pytest.param(
            "/a/b",
            [("/a", Mode.READ_WRITE), ("/a/b", Mode.READ_ONLY)],
            False,
            id="the-path-itself-read-only",
        ),
        pytest.param("/a/b", [("/a", Mode.INACCESSIBLE)], False, id="hidden"),
        pytest.param("/tmp/x", [("/tmp", Mode.PRIVATE_TMP)], False, id="a-tmpfs-of-its-own"),
    ],
)
def test_a_path_is_writable_as_its_nearest_mount_says(
    path: str, mounts: list[tuple[str, Mode]], writable: bool
) -> None:
    found = [sandboxmounts.Mount(p, m) for p, m in mounts]
    assert laterrun.writable(path, found) is writable


def test_a_symbolic_link_is_never_made_a_writable_mount_point() -> None:
    """A link planted at .git could lead a copy of /etc's mount into the project, writable."""
    box = sandbox.read([*BASE, "ReadWritePaths=%{cwd}"])
    found = sandboxmounts.mounts(box, CTX)
    made = laterrun.guarded(found, box, CTX, laterrun.later_run(CTX), linked=lambda p: p == G)
    modes = {m.path: m.mode for m in made}
    assert G not in modes and modes[f"{G}/hooks"] == Mode.READ_ONLY
