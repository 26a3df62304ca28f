"""A session's sandbox words, read as systemd reads them, and the mounts that give them
systemd's meaning: which paths, in which order, which one wins."""

from __future__ import annotations

import re

import pytest

from hostagent import sandbox, sandboxmounts
from hostagent.errors import AccessDenied
from hostagent.permissions import (
    act_from_inside,
    require_in_tree,
    sandbox_defaults,
    sandbox_from_inside,
    tree_of,
)
from hostagent.sandbox import Context, Sandbox, SandboxProblem
from hostagent.sandboxmounts import Closed, Mode, Mount
from hostagent.session import SessionRecord

CTX = Context("/home/alice", "alice", 1000, "/run", "/home/alice/proj", "/home/alice/proj/.git")
RUNTIME = "/run/hostagent/1000"


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("ProtectSystem=strict", "ProtectSystem=strict"),
        ("ProtectSystem=true", "ProtectSystem=yes"),
        ("ProtectSystem=off", "ProtectSystem=no"),
        ("ProtectHome=read-only", "ProtectHome=read-only"),
        ("ProtectHome=TMPFS", "ProtectHome=tmpfs"),
        ("PrivateTmp=on", "PrivateTmp=yes"),
        ("NoNewPrivileges=0", "NoNewPrivileges=no"),
        ("ReadWritePaths=%{cwd} -%h/.claude", "ReadWritePaths=%{cwd} -%h/.claude"),
        ('InaccessiblePaths="/srv/a b" %h/.ssh', "InaccessiblePaths='/srv/a b' %h/.ssh"),
        ("ReadOnlyPaths=", "ReadOnlyPaths="),
    ],
)
def test_a_word_is_read_as_systemd_reads_it_and_shown_back_in_its_words(
    text: str, shown: str
) -> None:
    assert sandbox.check(text) == shown


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ProtectSystem=very", "ProtectSystem= takes no, yes, full, strict, not 'very'"),
        ("ProtectHome=hidden", "ProtectHome= takes no, yes, read-only, tmpfs"),
        ("PrivateTmp=maybe", "PrivateTmp= takes yes or no"),
        ("ReadWritePaths=proj", "absolute, normalized paths"),
        ("ReadWritePaths=/home/../etc", "absolute, normalized paths"),
        ("ReadWritePaths=/a//b", "absolute, normalized paths"),
        ("ReadOnlyPaths=+/etc", "'+' prefix is relative to RootDirectory="),
        ("InaccessiblePaths=%H/x", "specifier '%H'"),
        ("InaccessiblePaths=%{home}/x", "specifier '%{home}'"),
        ('ReadWritePaths="/a', "unbalanced quotes"),
    ],
)
def test_a_bad_word_is_refused_naming_what_it_takes(text: str, says: str) -> None:
    with pytest.raises(SandboxProblem, match=".*".join(map(_escaped, says.split("*")))):
        sandbox.check(text)


def _escaped(text: str) -> str:
    return re.escape(text)


def test_later_words_win_and_path_words_add_up_until_emptied() -> None:
    box = sandbox.read(
        [
            "ProtectSystem=yes",
            "CPUQuota=50%",  # not a sandbox word: passed over
            "ReadOnlyPaths=/a",
            "ProtectSystem=strict",
            "ReadOnlyPaths=/b",
            "InaccessiblePaths=/c",
            "InaccessiblePaths=",
            "InaccessiblePaths=/d",
        ]
    )
    assert box == Sandbox(protect_system="strict", read_only=("/a", "/b"), inaccessible=("/d",))
    assert not sandbox.read(["CPUQuota=50%"]).confined


def test_too_many_paths_are_refused() -> None:
    many = " ".join(f"/p{i}" for i in range(sandbox.MAX_PATHS + 1))
    with pytest.raises(SandboxProblem, match="at most"):
        sandbox.read([f"ReadOnlyPaths={many}"])


@pytest.mark.parametrize(
    ("path", "expanded"),
    [
        ("%h/.ssh", "/home/alice/.ssh"),
        ("-%h/.claude.json", "-/home/alice/.claude.json"),
        ("/srv/%u/%U", "/srv/alice/1000"),
        ("%t/hostagent", "/run/hostagent"),
        ("%{cwd}", "/home/alice/proj"),
        ("%{gitdir}", "/home/alice/proj/.git"),
        ("/odd/%%", "/odd/%"),
        ("%h/", "/home/alice"),
    ],
)
def test_specifiers_stand_for_the_session(path: str, expanded: str) -> None:
    assert sandbox.expand(path, CTX) == expanded


def test_gitdir_outside_a_repository_is_refused() -> None:
    bare = Context("/home/alice", "alice", 1000, "/run", "/tmp")
    with pytest.raises(SandboxProblem, match="stands for nothing"):
        sandbox.expand("%{gitdir}", bare)


def _mounts(*words: str, keep: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    found = sandboxmounts.mounts(sandbox.read(words), CTX, keep)
    return [(m.path, m.mode.name) for m in found]


ROW = "READ_WRITE"


@pytest.mark.parametrize(
    ("words", "mounts"),
    [
        (
            ["ProtectSystem=yes"],
            [("/boot", "READ_ONLY"), ("/efi", "READ_ONLY"), ("/usr", "READ_ONLY")],
        ),
        (
            ["ProtectSystem=full"],
            [
                ("/boot", "READ_ONLY"),
                ("/efi", "READ_ONLY"),
                ("/etc", "READ_ONLY"),
                ("/usr", "READ_ONLY"),
            ],
        ),
        # strict leaves the API file systems, and the homes to ProtectHome=.
        (
            ["ProtectSystem=strict"],
            [
                ("/", "READ_ONLY"),
                ("/dev", ROW),
                ("/home", ROW),
                ("/proc", ROW),
                ("/root", ROW),
                ("/sys", ROW),
                ("/run/user", ROW),
            ],
        ),
        (
            ["ProtectSystem=strict", "ProtectHome=read-only"],
            [
                ("/", "READ_ONLY"),
                ("/dev", ROW),
                ("/home", "READ_ONLY"),
                ("/proc", ROW),
                ("/root", "READ_ONLY"),
                ("/sys", ROW),
                ("/run/user", "READ_ONLY"),
            ],
        ),
        (
            ["ProtectHome=yes"],
            [("/home", "INACCESSIBLE"), ("/root", "INACCESSIBLE"), ("/run/user", "INACCESSIBLE")],
        ),
        (["ProtectHome=tmpfs"], [("/home", "TMPFS"), ("/root", "TMPFS"), ("/run/user", "TMPFS")]),
        (["PrivateTmp=yes"], [("/tmp", "PRIVATE_TMP"), ("/var/tmp", "PRIVATE_TMP")]),
        # A path deeper than a word's is made after it, so it is what it says there.
        (
            ["ProtectHome=read-only", "ReadWritePaths=%{cwd}"],
            [
                ("/home", "READ_ONLY"),
                ("/root", "READ_ONLY"),
                ("/run/user", "READ_ONLY"),
                ("/home/alice/proj", ROW),
            ],
        ),
        # Nothing under an inaccessible path is made: it could not be reached.
        (
            ["ProtectHome=yes", "ReadWritePaths=%{cwd}"],
            [("/home", "INACCESSIBLE"), ("/root", "INACCESSIBLE"), ("/run/user", "INACCESSIBLE")],
        ),
        # One path given twice: the stronger word wins, whatever the order.
        (
            ["ReadWritePaths=/srv", "InaccessiblePaths=/srv", "ReadOnlyPaths=/srv"],
            [("/srv", "INACCESSIBLE")],
        ),
        (["ReadWritePaths=/srv", "ReadOnlyPaths=/srv"], [("/srv", "READ_ONLY")]),
        (["NoNewPrivileges=yes"], []),
    ],
)
def test_the_mounts_are_systemds(words: list[str], mounts: list[tuple[str, str]]) -> None:
    assert _mounts(*words) == mounts


def test_the_sessions_own_runtime_directory_stays_writable_unless_a_word_hides_it() -> None:
    assert ("/run/hostagent/1000", ROW) in _mounts("ProtectSystem=strict", keep=(RUNTIME,))
    hidden = _mounts("ProtectSystem=strict", "InaccessiblePaths=/run/hostagent", keep=(RUNTIME,))
    assert ("/run/hostagent", "INACCESSIBLE") in hidden
    assert all(path != RUNTIME for path, _ in hidden)


def test_a_path_that_may_be_missing_stays_so_unless_also_given_as_required() -> None:
    found = sandboxmounts.mounts(sandbox.read(["ReadOnlyPaths=-/srv", "ReadOnlyPaths=/srv"]), CTX)
    assert found == [Mount("/srv", Mode.READ_ONLY, optional=False)]
    found = sandboxmounts.mounts(sandbox.read(["ReadOnlyPaths=-/srv"]), CTX)
    assert found[0].optional


@pytest.mark.parametrize(
    ("words", "hides"),
    [
        (["ProtectSystem=strict", "ReadOnlyPaths=/srv"], False),
        (["ProtectHome=read-only"], False),
        (["ProtectHome=yes"], True),
        (["ProtectHome=tmpfs"], True),
        (["InaccessiblePaths=%h/.ssh"], True),
    ],
)
def test_hiding_a_path_takes_setuid_away(words: list[str], hides: bool) -> None:
    assert sandbox.read(words).hides is hides


@pytest.mark.parametrize(
    ("box", "than", "tighter"),
    [
        (Sandbox(protect_system="strict"), Sandbox(protect_system="yes"), True),
        (Sandbox(protect_system="yes"), Sandbox(protect_system="strict"), False),
        (Sandbox(protect_home="yes"), Sandbox(protect_home="read-only"), True),
        (Sandbox(), Sandbox(private_tmp=True), False),
        (Sandbox(inaccessible=("/a", "/b")), Sandbox(inaccessible=("/a",)), True),
        (Sandbox(read_only=()), Sandbox(read_only=("/a",)), False),
        (Sandbox(inaccessible=("/a",)), Sandbox(read_only=("/a",)), True),
        (Sandbox(read_write=("/a", "/b")), Sandbox(read_write=("/a",)), False),
        (Sandbox(read_write=("/a",)), Sandbox(read_write=("/a", "/b")), True),
    ],
)
def test_tighter_compares_word_by_word(box: Sandbox, than: Sandbox, tighter: bool) -> None:
    assert sandbox.tighter(box, than) is tighter


def _session(name: str, *words: str, cwd: str = "/home/alice/proj") -> SessionRecord:
    return SessionRecord(
        name=name, uuid=f"uuid-{name}", owner=1000, cwd=cwd, properties=["CPUQuota=50%", *words]
    )


TREE = ("ProtectSystem=strict", "ProtectHome=read-only", "ReadWritePaths=%{cwd}")


@pytest.mark.parametrize(
    ("asked", "allowed"),
    [
        ([], True),
        (["InaccessiblePaths=%h/.ssh"], True),  # tighter still
        (["ReadWritePaths="], True),  # writes less
        (["ProtectSystem=full"], False),
        (["ProtectHome=no"], False),
        (["ReadWritePaths=%h"], False),
        (["ReadWritePaths=%{cwd}"], False),  # the new session's own tree is not the maker's
    ],
)
def test_a_session_made_from_inside_a_sandbox_is_confined_at_least_as_its_maker(
    asked: list[str], allowed: bool
) -> None:
    maker = _session("maker", *TREE)
    if not allowed:
        with pytest.raises(AccessDenied, match="confined at least as"):
            sandbox_from_inside(maker, asked)
        return
    made = sandbox_from_inside(maker, asked)
    # The maker's words come first, its tree pinned: moving elsewhere gives no writable tree.
    assert made[:3] == [
        "ProtectSystem=strict",
        "ProtectHome=read-only",
        "ReadWritePaths=/home/alice/proj",
    ]
    assert made[3:] == asked


def test_a_session_without_a_sandbox_makes_what_it_asks_for() -> None:
    assert sandbox_from_inside(_session("plain"), ["ProtectHome=no"]) == ["ProtectHome=no"]


def test_a_tree_with_odd_characters_is_pinned_as_one_path() -> None:
    maker = _session("maker", "ReadWritePaths=%{cwd} %{gitdir}", cwd="/srv/a b%c")
    (made,) = sandbox_from_inside(maker, [])
    assert sandbox.read([made]).read_write == ("/srv/a b%%c", "/srv/a b%%c/.git")
    assert sandbox.expand("/srv/a b%%c", CTX) == "/srv/a b%c"


@pytest.mark.parametrize(
    ("target", "allowed"),
    [
        (_session("self", *TREE), True),
        (_session("twin", *TREE), True),  # the same words, the same tree
        (_session("tighter", *TREE, "InaccessiblePaths=%h/.ssh"), True),
        (_session("elsewhere", *TREE, cwd="/home/alice"), False),  # its tree is wider
        (_session("plain"), False),
    ],
    ids=lambda v: v.name if isinstance(v, SessionRecord) else str(v),
)
def test_from_inside_a_sandbox_only_sessions_as_confined_may_be_acted_on(
    target: SessionRecord, allowed: bool
) -> None:
    inside = _session("self", *TREE)
    if allowed:
        act_from_inside(inside, target, (), owner_rights=True)
    else:
        with pytest.raises(AccessDenied, match="act on it from outside every session"):
            act_from_inside(inside, target, (), owner_rights=True)


def test_from_inside_a_session_without_a_sandbox_every_session_may_be_acted_on() -> None:
    act_from_inside(_session("plain"), _session("other"), (), owner_rights=True)


@pytest.mark.parametrize(
    ("target", "lineage", "owner_rights", "allowed"),
    [
        ("parent", (), False, True),  # itself
        ("child", ("uuid-parent",), False, True),
        ("grandchild", ("uuid-child", "uuid-parent"), False, True),
        ("sibling", (), False, False),  # its owner's, made elsewhere
        ("cousin", ("uuid-uncle",), False, False),
        ("sibling", (), True, True),  # a person's shell: all of its owner's
    ],
)
def test_from_inside_an_agents_session_only_the_sessions_it_made_may_be_acted_on(
    target: str, lineage: tuple[str, ...], owner_rights: bool, allowed: bool
) -> None:
    parent, made = _session("parent"), _session(target)
    if allowed:
        act_from_inside(parent, made, lineage, owner_rights)
    else:
        with pytest.raises(AccessDenied, match="only the sessions it made"):
            act_from_inside(parent, made, lineage, owner_rights)


# Who was made from inside whom: p made c1 and c2, c1 made g; x was made elsewhere, y by x; a
# loop (a record edited by hand) ends.
PARENTS = {"p": "", "c1": "p", "c2": "p", "g": "c1", "x": "", "y": "x", "l1": "l2", "l2": "l1"}


@pytest.mark.parametrize(
    ("root", "seen"),
    [
        ("p", {"p", "c1", "c2", "g"}),
        ("c1", {"c1", "g"}),  # not its parent or its sibling
        ("g", {"g"}),
        ("x", {"x", "y"}),
        ("l1", {"l1", "l2"}),
    ],
)
def test_from_inside_a_session_its_own_tree_is_what_it_sees(root: str, seen: set[str]) -> None:
    assert tree_of(root, PARENTS) == seen


def test_a_session_outside_the_tree_is_refused_naming_the_rule() -> None:
    with pytest.raises(AccessDenied, match="only the sessions it made are shown"):
        require_in_tree(_session("parent"), _session("other"), {"uuid-parent"})
    require_in_tree(_session("parent"), _session("parent"), {"uuid-parent"})


@pytest.mark.parametrize(
    ("words", "closed"),
    [
        (["ProtectSystem=strict"], True),
        (["ReadOnlyPaths=/run/user/1000"], False),  # named on purpose
        (["ReadWritePaths=/run/user/1000/bus"], True),  # only the path itself reopens it
        (["ReadWritePaths=/run/user/10000"], True),  # another user's is not hers
    ],
)
def test_a_confined_session_has_its_user_manager_closed_unless_a_word_names_it(
    words: list[str], closed: bool
) -> None:
    found = sandboxmounts.mounts(
        sandbox.read(words), CTX, close=[Closed("/run/user/1000", "/run/user/1000")]
    )
    assert (Mount("/run/user/1000", Mode.INACCESSIBLE, True) in found) is closed


@pytest.mark.parametrize(
    ("asked", "allowed"),
    [
        ([], True),
        (["InaccessiblePaths=%h/.ssh"], True),
        (["ReadWritePaths=%{cwd}"], True),  # what the defaults leave writable already
        (["ProtectSystem=yes"], False),
        (["ReadWritePaths=%h"], False),
        (["PrivateTmp=yes", "ProtectHome=no"], False),
    ],
)
def test_the_admins_defaults_are_tightened_never_loosened(asked: list[str], allowed: bool) -> None:
    defaults = list(TREE)
    if not allowed:
        with pytest.raises(AccessDenied, match="for alice by the admin"):
            sandbox_defaults(defaults, asked, "alice")
        return
    assert sandbox_defaults(defaults, asked, "alice") == [*defaults, *asked]
    assert sandbox_defaults([], asked, "alice") == asked  # none set: what is asked for


def test_a_path_named_twice_counts_once() -> None:
    words = ["InaccessiblePaths=-%h/.ssh /x", "InaccessiblePaths=/x -%h/.ssh /y /y"]
    assert sandbox.read(words).inaccessible == ("-%h/.ssh", "/x", "/y")
    many = [f"ReadOnlyPaths={' '.join(f'/p{i}' for i in range(sandbox.MAX_PATHS))}"]
    assert len(sandbox.read(many * 2).read_only) == sandbox.MAX_PATHS  # the same ones again
