"""What a confined session has closed of its owner's (her user manager and session bus), what
covers it, and the only word that reopens it: a path word naming exactly the closed path, which
a session made from inside another may not ask for."""

from __future__ import annotations

import pytest

from hostagent import sandbox, sandboxmounts
from hostagent.daemon.host.sandboxing import closed
from hostagent.errors import AccessDenied
from hostagent.permissions import sandbox_from_inside
from hostagent.sandbox import Context, Sandbox
from hostagent.sandboxmounts import Closed, Mode, Mount
from hostagent.session import SessionRecord

CTX = Context("/home/alice", "alice", 1000, "/run", "/home/alice/proj", "/home/alice/proj/.git")
USER_CTX = Context(
    "/home/alice", "alice", 1000, "/run/user/1000", "/home/alice/proj", "/home/alice/proj/.git"
)
RUN = "/run/user/1000"
COVER = Mount("/run/user", Mode.TMPFS, True)  # the system daemon's cover
SYSTEM = [Closed(RUN, "/run/user", Mode.TMPFS)]
USER = [Closed(f"{RUN}/bus", f"{RUN}/bus"), Closed(f"{RUN}/systemd", f"{RUN}/systemd")]


def test_a_word_that_resolves_to_her_directory_through_a_link_does_not_reopen_it() -> None:
    """The owner resolves each path (sandboxpaths.py), and a link in her home can lead to her
    runtime directory: the word names the link, not the directory, so the cover stays."""
    link = "/home/alice/proj/run"
    found = sandboxmounts.mounts(
        sandbox.read([f"ReadOnlyPaths={link}"]), CTX, close=SYSTEM, resolved={link: RUN}
    )
    assert COVER in found, found


def test_the_system_daemon_covers_all_of_run_user_and_the_user_daemon_only_the_sockets() -> None:
    assert closed(RUN, system=True) == SYSTEM
    assert closed(RUN, system=False) == USER


@pytest.mark.parametrize(
    ("words", "cover", "also"),
    [
        ([], COVER, None),
        (["ProtectSystem=strict"], COVER, None),  # stronger than strict's /run/user as it is
        (["ProtectHome=read-only"], COVER, None),
        (["ProtectHome=yes"], Mount("/run/user", Mode.INACCESSIBLE, True), None),
        (["ProtectHome=tmpfs"], COVER, None),
        # Only the path itself reopens it, spelt any way that expands to it.
        (["ReadOnlyPaths=/run/user/1000"], None, Mount(RUN, Mode.READ_ONLY)),
        (["ReadWritePaths=-/run/user/%U"], None, Mount(RUN, Mode.READ_WRITE, True)),
        (["ReadWritePaths=%t/user/%U/"], None, Mount(RUN, Mode.READ_WRITE)),
        (["InaccessiblePaths=/run/user/1000"], None, Mount(RUN, Mode.INACCESSIBLE)),
        # A word under it does not reopen it, and is not made: nothing under a cover is.
        (["InaccessiblePaths=-/run/user/1000/x"], COVER, None),
        (["ReadWritePaths=/run/user/1000/bus"], COVER, None),
        (["ReadOnlyPaths=-%t/user/%U/systemd"], COVER, None),
        # Nor does one above it, or another user's.
        (["ReadWritePaths=/run/user"], COVER, None),
        (["ProtectSystem=strict", "ReadWritePaths=/run"], COVER, Mount("/run", Mode.READ_WRITE)),
        (["ReadOnlyPaths=/run/user/10000"], COVER, None),
    ],
)
def test_on_the_system_daemon_run_user_is_covered_unless_a_word_names_her_directory(
    words: list[str], cover: Mount | None, also: Mount | None
) -> None:
    found = sandboxmounts.mounts(sandbox.read(words), CTX, close=SYSTEM)
    at_run_user = [m for m in found if m.path == "/run/user"]
    if cover is None:
        assert all(m.mode not in (Mode.TMPFS, Mode.INACCESSIBLE) for m in at_run_user), found
    else:
        assert at_run_user == [cover]
        assert not [m for m in found if m.path.startswith("/run/user/")], found
    if also is not None:
        assert also in found
        assert also.optional == next(m for m in found if m == also).optional


@pytest.mark.parametrize(
    ("words", "open_"),
    [
        ([], set()),
        (["ProtectHome=read-only"], set()),
        (["ReadWritePaths=%t"], set()),  # her directory as it is, its sockets still closed
        (["ReadWritePaths=%t/bus"], {"bus"}),
        (["ReadOnlyPaths=-/run/user/%U/systemd"], {"systemd"}),
        (["InaccessiblePaths=-%t/bus/x", "ReadWritePaths=%t/systemd/private"], set()),
    ],
)
def test_on_the_user_daemon_only_a_word_naming_a_socket_reopens_it(
    words: list[str], open_: set[str]
) -> None:
    found = sandboxmounts.mounts(sandbox.read(words), USER_CTX, close=USER)
    for name in ("bus", "systemd"):
        shut = Mount(f"{RUN}/{name}", Mode.INACCESSIBLE, True) in found
        assert shut is (name not in open_), (name, found)
        # Nothing under a closed one is made.
        assert not [m for m in found if m.path.startswith(f"{RUN}/{name}/")], found


@pytest.mark.parametrize(
    ("path", "may"),
    [
        ("/run/user/1000", True),
        ("-/run/user/%U/", True),
        ("%t", True),
        ("%t/bus", True),
        ("%t/user/%U", True),
        ("/var/run/user/1000", True),  # /var/run is /run
        ("/run/user/1000/systemd", True),
        ("%{cwd}", True),  # a child's cwd is its maker's choice
        ("/run/user/1000/x", False),  # under a cover: not made
        ("/run/user", False),
        ("%h/proj", False),
        ("%t/hostagent", False),
        ("/srv/user/alice", False),
    ],
)
def test_a_path_that_may_spell_a_closed_one_is_told_without_the_sessions_context(
    path: str, may: bool
) -> None:
    made = Sandbox(read_only=(path,))
    assert sandbox.tighter(made, Sandbox()) is not may


def _session(name: str, *words: str) -> SessionRecord:
    return SessionRecord(
        name=name, uuid=f"uuid-{name}", owner=1000, cwd="/home/alice/proj", properties=list(words)
    )


MAKER = (
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "ReadWritePaths=%{cwd}",
    "InaccessiblePaths=%h/.ssh",
    "PrivateTmp=yes",
    "NoNewPrivileges=yes",
)


@pytest.mark.parametrize(
    ("asked", "allowed"),
    [
        (["InaccessiblePaths=-/run/user/1000/x"], True),  # tighter, and the closure holds
        (["InaccessiblePaths=/run/user/%U"], True),
        (["ReadWritePaths=/run/user/1000"], False),
        (["ReadOnlyPaths=/run/user/%U"], False),
        (["ReadOnlyPaths=-%t/user/%U"], False),
        (["ReadOnlyPaths=/var/run/user/1000/"], False),
        (["ReadOnlyPaths=%{cwd}"], False),
        (["ReadOnlyPaths=%h/notes"], True),
    ],
)
def test_from_inside_a_sandbox_naming_her_runtime_directory_is_a_loosening(
    asked: list[str], allowed: bool
) -> None:
    maker = _session("maker", *MAKER)
    if allowed:
        assert sandbox_from_inside(maker, asked)[-len(asked) :] == asked
    else:
        with pytest.raises(AccessDenied, match="inside session 'maker'"):
            sandbox_from_inside(maker, asked)


def test_a_maker_that_reopened_it_may_make_one_that_reads_it() -> None:
    maker = _session("maker", *MAKER, "ReadWritePaths=/run/user/%U")
    asked = ["ReadOnlyPaths=/run/user/%U"]
    assert sandbox_from_inside(maker, asked)[-1] == asked[0]
