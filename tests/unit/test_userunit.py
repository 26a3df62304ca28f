"""hostagent --install-user: the user unit and activation file it writes say what the packaged
ones say but for the program they start, and land where systemd and the session bus look."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostagent.daemon.host import userunit

UNITS = Path(__file__).resolve().parents[2] / "units" / "user"
PYTHON = "/home/a/.local/pipx/venvs/hostagent/bin/python"


def settings(text: str) -> list[str]:
    """A unit file's settings, without comments, blank lines or the program it starts."""
    return [
        line
        for line in text.splitlines()
        if line.strip() and not line.startswith(("#", "ExecStart=", "Exec="))
    ]


@pytest.mark.parametrize(
    ("written", "packaged"),
    [
        (userunit.unit_text(PYTHON), "hostagent.service"),
        (userunit.activation_text(PYTHON), "org.hostagent.HostAgent1.service"),
    ],
)
def test_what_is_written_is_the_packaged_file_but_for_the_program(
    written: str, packaged: str
) -> None:
    packaged_text = (UNITS / packaged).read_text()
    assert settings(written) == settings(packaged_text)
    starts = [line for line in written.splitlines() if line.startswith(("ExecStart=", "Exec="))]
    assert starts == [f"{starts[0].split('=')[0]}={PYTHON} -m hostagent.daemon.main --user"]


@pytest.mark.parametrize(
    ("env", "home"),
    [
        ({"HOME": "/home/a"}, "/home/a/.local/share"),
        ({"HOME": "/home/a", "XDG_DATA_HOME": "/data/a"}, "/data/a"),
        ({"HOME": "/home/a", "XDG_DATA_HOME": "relative"}, "/home/a/.local/share"),  # ignored
    ],
)
def test_the_files_go_where_the_user_manager_and_session_bus_look(
    env: dict[str, str], home: str
) -> None:
    assert userunit.unit_path(env) == Path(home, "systemd/user/hostagent.service")
    assert userunit.activation_path(env) == Path(
        home, "dbus-1/services/org.hostagent.HostAgent1.service"
    )


def test_install_then_uninstall_leaves_nothing(tmp_path: Path) -> None:
    ran: list[list[str]] = []

    def run_(argv: list[str]) -> tuple[int, str]:
        ran.append(argv)
        return 0, ""

    env = {"HOME": str(tmp_path)}
    done, problems = userunit.install(env, PYTHON, run_)
    assert problems == [] and len(done) == 2
    assert userunit.unit_path(env).read_text() == userunit.unit_text(PYTHON)
    assert ["systemctl", "--user", "daemon-reload"] in ran
    done, problems = userunit.uninstall(env, run_)
    assert problems == [] and len(done) == 2
    assert ["systemctl", "--user", "stop", "hostagent.service"] in ran
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []
