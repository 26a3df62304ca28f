"""A sandbox's paths as the owner's files make them (sandboxpaths.py), and the creates from
inside a sandbox that count them: a preset's state paths from the preset and passwd alone, in
the home; no writable path resolving to a hidden one; state counted as words against the
maker's; the admin's %{cwd} for a create from inside."""

from __future__ import annotations

import pytest

from hostagent import sandbox, sandboxmounts, sandboxpaths
from hostagent.errors import AccessDenied
from hostagent.options import CreateRequest, Maker
from hostagent.permissions import (
    act_from_inside,
    made_from_inside,
    sandbox_defaults,
    state_from_inside,
)
from hostagent.sandbox import Context, SandboxProblem
from hostagent.sandboxmounts import Mode, Mount
from hostagent.session import SessionRecord

HOME = "/home/alice"
CTX = Context(HOME, "alice", 1000, "/run", f"{HOME}/proj", f"{HOME}/proj/.git")
CLAUDE = ["{$CLAUDE_CONFIG_DIR:-{home}/.claude}/", "{home}/.claude.json"]


@pytest.mark.parametrize(
    ("templates", "env", "paths"),
    [
        pytest.param(CLAUDE, {}, [f"{HOME}/.claude/", f"{HOME}/.claude.json"], id="defaults"),
        pytest.param(
            CLAUDE,
            {"CLAUDE_CONFIG_DIR": f"{HOME}/.work"},
            [f"{HOME}/.work/", f"{HOME}/.claude.json"],
            id="preset-env",
        ),
        pytest.param(["{home}/a/../b/"], {}, [f"{HOME}/b/"], id="normalized"),
        pytest.param(["{home}/.cache/x/"], {}, [f"{HOME}/.cache/x/"], id="plain"),
    ],
)
def test_a_state_path_is_made_from_the_preset_and_passwd(
    templates: list[str], env: dict[str, str], paths: list[str]
) -> None:
    assert sandboxpaths.state_paths(templates, HOME, f"{HOME}/proj", env) == paths


@pytest.mark.parametrize(
    ("template", "env"),
    [
        pytest.param("{$D:-{home}/x}/", {"D": f"{HOME}/proj/.."}, id="the-home-through-dotdot"),
        pytest.param("{$D:-{home}/x}/", {"D": HOME}, id="the-home-itself"),
        pytest.param("{$D:-{home}/x}/", {"D": "/etc"}, id="outside-the-home"),
        pytest.param("{home}/../bob/", {}, id="another-home"),
        pytest.param("/var/lib/x/", {}, id="absolute-outside"),
        pytest.param("{home}/{id}/", {}, id="a-placeholder-left"),
        pytest.param("{$D}/", {}, id="no-default"),
    ],
)
def test_a_state_path_outside_the_home_is_refused(template: str, env: dict[str, str]) -> None:
    with pytest.raises(SandboxProblem, match="not a path in the home"):
        sandboxpaths.state_paths([template], HOME, f"{HOME}/proj", env)


RO_HOME = ["ProtectHome=read-only", "ReadWritePaths=%h/proj"]


@pytest.mark.parametrize(
    ("words", "state", "paths", "beyond"),
    [
        pytest.param(["ReadWritePaths=/home/alice"], [], [f"{HOME}/.demo/"], [], id="under-a-word"),
        pytest.param(["ReadWritePaths=%h"], [], [f"{HOME}/.demo/"], [], id="under-a-specifier"),
        pytest.param(
            RO_HOME,
            [],
            [f"{HOME}/.demo/"],
            [f"{HOME}/.demo/"],
            id="outside-the-words",
        ),
        pytest.param(
            RO_HOME,
            [f"{HOME}/.demo/"],
            [f"{HOME}/.demo/x/"],
            [],
            id="under-its-state",
        ),
        pytest.param(
            RO_HOME,
            [f"{HOME}/.demo/"],
            [f"{HOME}/.demox/"],
            [f"{HOME}/.demox/"],
            id="a-sibling-of-its-state",
        ),
        pytest.param(["ProtectSystem=strict"], [], [f"{HOME}/.demo/"], [], id="a-writable-home"),
        pytest.param(
            ["ProtectHome=read-only"],
            [],
            [f"{HOME}/.demo/"],
            [f"{HOME}/.demo/"],
            id="a-read-only-home",
        ),
    ],
)
def test_state_counts_as_a_writable_path_of_the_words(
    words: list[str], state: list[str], paths: list[str], beyond: list[str]
) -> None:
    assert sandboxpaths.uncovered(paths, sandbox.read(words), CTX, state) == beyond


BOX = sandbox.read(["ReadWritePaths=%{cwd}", "InaccessiblePaths=-%h/.ssh"])


@pytest.mark.parametrize(
    ("cwd", "state", "resolved", "refused"),
    [
        pytest.param(f"{HOME}/proj", [], {}, "", id="plain"),
        pytest.param(
            f"{HOME}/proj/l/home/alice/.ssh",
            [],
            {f"{HOME}/proj/l/home/alice/.ssh": f"{HOME}/.ssh"},
            "'%{cwd}' is /home/alice/.ssh here",
            id="cwd-through-a-link",
        ),
        pytest.param(
            f"{HOME}/proj/l",
            [],
            {f"{HOME}/proj/l": f"{HOME}/.ssh/keys"},
            "'%{cwd}' is /home/alice/.ssh/keys",
            id="under-the-hidden",
        ),
        pytest.param(
            f"{HOME}/.ssh", [], {}, "which InaccessiblePaths=-%h/.ssh hides", id="named-as-it-is"
        ),
        pytest.param(
            f"{HOME}/proj",
            [f"{HOME}/.x/"],
            {f"{HOME}/.x": f"{HOME}/.ssh"},
            "'/home/alice/.x/' is /home/alice/.ssh",
            id="state-through-a-link",
        ),
        pytest.param(
            f"{HOME}/proj",
            [f"{HOME}/.x/"],
            {f"{HOME}/.x": f"{HOME}/.sshx"},
            "",
            id="a-sibling-is-not-under",
        ),
    ],
)
def test_a_writable_path_that_resolves_to_a_hidden_one_is_refused(
    cwd: str, state: list[str], resolved: dict[str, str], refused: str
) -> None:
    ctx = Context(HOME, "alice", 1000, "/run", cwd)
    problem = sandboxpaths.exposed(BOX, ctx, state, resolved)
    assert (refused in problem and bool(problem)) if refused else problem == ""


GITDIR_BOX = sandbox.read(["ReadWritePaths=%{cwd} -%{gitdir}", "InaccessiblePaths=-%h/.ssh"])
GIT = f"{HOME}/proj/.git"


@pytest.mark.parametrize(
    ("resolved", "refused"),
    [
        pytest.param({}, "", id="no-link"),
        pytest.param({GIT: HOME}, "through a link in %{cwd}", id="a-link-to-the-home-below-cwd"),
        pytest.param({GIT: f"{HOME}/.ssh"}, "through a link in %{cwd}", id="a-link-to-the-hidden"),
        pytest.param(
            {f"{HOME}/proj": "/data/proj", GIT: "/data/proj/.git"},
            "",
            id="a-link-above-both-is-alices",
        ),
        pytest.param(
            {f"{HOME}/proj": "/data/proj", GIT: "/etc"},
            "through a link",
            id="a-link-below-a-linked-tree",
        ),
    ],
)
def test_no_link_below_a_writable_path_is_followed(resolved: dict[str, str], refused: str) -> None:
    problem = sandboxpaths.exposed(GITDIR_BOX, CTX, [], resolved)
    assert (refused in problem and bool(problem)) if refused else problem == ""


def test_every_path_is_listed_for_the_owner_to_resolve() -> None:
    box = sandbox.read(
        ["ReadWritePaths=%{cwd} -%{gitdir}", "ReadOnlyPaths=%h", "InaccessiblePaths=-%h/.ssh"]
    )
    assert sandboxpaths.to_resolve(box, CTX, [f"{HOME}/.claude/"]) == [
        HOME,
        f"{HOME}/.claude",
        f"{HOME}/.ssh",
        f"{HOME}/proj",
        f"{HOME}/proj/.git",
    ]


def test_the_mounts_take_each_path_as_the_owner_resolved_it() -> None:
    """The link's target, not the link: the inaccessible mount wins over the writable one."""
    ctx = Context(HOME, "alice", 1000, "/run", f"{HOME}/proj/l/home/alice/.ssh")
    resolved = {f"{HOME}/proj/l/home/alice/.ssh": f"{HOME}/.ssh", f"{HOME}/.y": f"{HOME}/.z"}
    made = sandboxmounts.mounts(BOX, ctx, state=[f"{HOME}/.y"], resolved=resolved)
    assert made == [Mount(f"{HOME}/.ssh", Mode.INACCESSIBLE), Mount(f"{HOME}/.z", Mode.READ_WRITE)]


TREE = ("ProtectSystem=strict", "ProtectHome=read-only", "ReadWritePaths=%{cwd}")
DEFAULTS = [*TREE, "InaccessiblePaths=-%h/.ssh"]


def _maker(*words: str, cwd: str = f"{HOME}/proj") -> SessionRecord:
    return SessionRecord(
        name="maker", uuid="uuid-maker", owner=1000, cwd=cwd, properties=list(words)
    )


@pytest.mark.parametrize(
    ("asked", "allowed"),
    [
        ([], True),  # was refused: the maker's pinned tree is not the words' %{cwd}
        (["InaccessiblePaths=%h/.gnupg"], True),
        (["ReadWritePaths=%{cwd}"], False),  # the child's own tree, not its maker's
        (["ReadWritePaths=%h"], False),
        (["InaccessiblePaths="], False),
    ],
)
def test_the_admins_cwd_default_stands_for_the_makers_tree_from_inside(
    asked: list[str], allowed: bool
) -> None:
    req = CreateRequest(properties=asked)
    try:
        made_from_inside(_maker(*DEFAULTS), req, [])
        made = sandbox_defaults(DEFAULTS, req.properties, "alice", req.maker)
    except AccessDenied:
        assert not allowed
        return
    assert allowed
    assert set(sandbox.read(made).read_write) == {f"{HOME}/proj"}
    # Without the maker, the defaults' %{cwd} is the child's and the pinned tree loosens it.
    with pytest.raises(AccessDenied, match="by the admin"):
        sandbox_defaults(DEFAULTS, req.properties, "alice")


CLAUDE_STATE = [f"{HOME}/.claude/", f"{HOME}/.claude.json"]


@pytest.mark.parametrize(
    ("maker_words", "maker_state", "state", "allowed"),
    [
        pytest.param(TREE, CLAUDE_STATE, CLAUDE_STATE, True, id="the-same-preset"),
        pytest.param(TREE, CLAUDE_STATE, CLAUDE_STATE[:1], True, id="less"),
        pytest.param(TREE, CLAUDE_STATE, [], True, id="none"),
        pytest.param(TREE, [], [f"{HOME}/.codex/"], False, id="another-presets"),
        pytest.param(TREE, CLAUDE_STATE, [HOME + "/"], False, id="the-home"),
        pytest.param(TREE, [], [f"{HOME}/proj/.x/"], True, id="in-the-makers-tree"),
        pytest.param(
            (*TREE[:2], f"ReadWritePaths={HOME}/.codex"),
            [],
            [f"{HOME}/.codex/"],
            True,
            id="a-path-the-maker-writes",
        ),
        pytest.param((), [], [f"{HOME}/.codex/"], True, id="a-maker-without-a-sandbox"),
    ],
)
def test_a_childs_state_counts_as_words_against_its_makers(
    maker_words: tuple[str, ...], maker_state: list[str], state: list[str], allowed: bool
) -> None:
    maker = Maker("maker", f"{HOME}/proj", "", list(maker_words), maker_state)
    if allowed:
        state_from_inside(maker, state, CTX)
    else:
        with pytest.raises(AccessDenied, match="inside session 'maker' writes only what it"):
            state_from_inside(maker, state, CTX)


@pytest.mark.parametrize(
    ("mine", "theirs", "allowed"),
    [
        pytest.param(CLAUDE_STATE, CLAUDE_STATE, True, id="the-same-preset"),
        pytest.param(CLAUDE_STATE, [], True, id="a-shell"),
        pytest.param([], [f"{HOME}/.codex/"], False, id="another-presets-state"),
        pytest.param(CLAUDE_STATE, [f"{HOME}/.codex/"], False, id="more-state"),
    ],
)
def test_a_session_inside_a_sandbox_acts_on_none_that_writes_state_it_cannot(
    mine: list[str], theirs: list[str], allowed: bool
) -> None:
    inside, target = _maker(*TREE), _maker(*TREE)
    target.name, target.uuid = "target", "uuid-target"
    if allowed:
        act_from_inside(inside, target, (), True, (mine, theirs), CTX)
    else:
        with pytest.raises(AccessDenied, match="is less confined than"):
            act_from_inside(inside, target, (), True, (mine, theirs), CTX)
