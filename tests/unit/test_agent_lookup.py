"""Finding an agent's program as its owner would: what the login shell is asked, and how its
answer is read through whatever a profile prints around it."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from hostagent.daemon.host import agents
from hostagent.daemon.host.owner import DEFAULT_PATH, Helpers
from hostagent.errors import AgentNotFound
from hostagent.identity import Owner


@pytest.mark.parametrize(
    ("shell", "first", "flags"),
    [
        ("/bin/bash", "/bin/bash", "-lic"),  # interactive too: nvm sets PATH in ~/.bashrc
        ("/usr/bin/zsh", "/usr/bin/zsh", "-lic"),
        ("/bin/dash", "/bin/dash", "-lc"),
        ("/usr/bin/fish", "/bin/sh", "-lc"),  # not POSIX: its -c would not run our probe
        ("/usr/sbin/nologin", "/bin/sh", "-lc"),
    ],
)
def test_the_login_shell_asked(shell: str, first: str, flags: str) -> None:
    argv = agents.login_argv(shell, "claude")
    assert argv[:2] == [first, flags]
    assert argv[-1] == "claude"


@pytest.mark.parametrize(
    ("output", "program", "path"),
    [
        (
            "Welcome!\n__hostagent_path=/home/a/.local/bin:/usr/bin\n"
            "__hostagent_program=/home/a/.local/bin/claude\nnvm: using 22\n",
            "/home/a/.local/bin/claude",
            "/home/a/.local/bin:/usr/bin",
        ),
        ("__hostagent_path=/usr/bin\n", "", "/usr/bin"),
        ("__hostagent_path=/usr/bin\n__hostagent_program=claude\n", "", "/usr/bin"),  # an alias
        ("garbage only", "", DEFAULT_PATH),
    ],
)
def test_the_answer_is_read_between_markers(output: str, program: str, path: str) -> None:
    assert agents.parse_probe(output) == agents.Found(program, path)


def install(program: Path, version: str) -> None:
    """A stand-in agent program that prints version."""
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text(f"#!/bin/sh\necho '{version}'\n")
    program.chmod(0o755)


def me_at_home(home: Path) -> Owner:
    """This user, with home as HOME and /bin/sh as login shell."""
    me = Owner.from_uid(os.getuid())
    return Owner(me.uid, me.gid, me.name, str(home), "/bin/sh", me.groups)


def test_a_program_in_the_owners_local_bin_is_found_and_a_missing_one_named(
    tmp_path: Path,
) -> None:
    """The real login shell, as this user, with a HOME whose ~/.profile adds ~/.local/bin."""
    bin_dir = tmp_path / ".local" / "bin"
    install(bin_dir / "my-agent", "my-agent 1.2.3")
    (tmp_path / ".profile").write_text(f'echo hello from profile\nPATH="{bin_dir}:$PATH"\n')
    owner, helpers = me_at_home(tmp_path), Helpers()
    found = asyncio.run(agents.resolve(helpers, owner, "my-agent"))
    assert found.program == str(bin_dir / "my-agent")
    assert found.path.startswith(str(bin_dir))
    ver = asyncio.run(agents.version(helpers, owner, found.program, {"PATH": found.path}))
    assert ver == "my-agent 1.2.3"
    with pytest.raises(AgentNotFound, match=r"'no-such-agent' .* login PATH \(.*\.local/bin"):
        asyncio.run(agents.resolve(helpers, owner, "no-such-agent"))


def test_listing_the_agents_asks_afresh_and_creates_then_find_the_new_copy(
    tmp_path: Path,
) -> None:
    """A create within the cache's time keeps the answer it had; the user's own copy installed
    ahead of it is found once ListAgents has looked, as the user does after an install."""
    system, own = tmp_path / "system", tmp_path / ".local" / "bin"
    install(system / "an-agent", "an-agent 1.0")
    (tmp_path / ".profile").write_text(f'PATH="{own}:{system}:$PATH"\n')
    owner, helpers = me_at_home(tmp_path), Helpers()

    assert asyncio.run(agents.resolve(helpers, owner, "an-agent")).program == str(
        system / "an-agent"
    )
    install(own / "an-agent", "an-agent 2.0")
    assert asyncio.run(agents.resolve(helpers, owner, "an-agent")).program == str(
        system / "an-agent"
    )
    listed = asyncio.run(agents.installed(helpers, owner, {"mine": "an-agent"}, {}))
    assert listed["mine"] == (str(own / "an-agent"), "an-agent 2.0", "")
    assert asyncio.run(agents.resolve(helpers, owner, "an-agent")).program == str(own / "an-agent")


def test_a_helper_of_hostagents_own_is_found_by_its_bare_name_only(tmp_path: Path) -> None:
    install(tmp_path / "hostagent-demo-agent", "demo 1")
    (tmp_path / "not-executable").write_text("")
    dirs = ("/nonexistent", str(tmp_path))
    assert agents.helper("hostagent-demo-agent", dirs) == str(tmp_path / "hostagent-demo-agent")
    assert agents.helper("not-executable", dirs) == ""
    assert agents.helper("../hostagent-demo-agent", dirs) == ""
    assert agents.helper("missing", dirs) == ""
