"""Sessions as transient scopes, end to end on a real systemd."""

from __future__ import annotations

import asyncio
import json

import pytest
from dbus_fast import Variant

from hostagent.client.library import Client
from hostagent.errors import (
    AlreadyRunning,
    HostAgentError,
    InvalidArgs,
    InvalidCwd,
    InvalidName,
    NoSuchPreset,
    NoSuchSession,
    SessionExists,
    StorageFull,
)
from tests.integration.busclient import wait_for_state, with_client
from tests.integration.helpers import create, new_name, props, record, wait_screen
from tests.sandbox import Sandbox

pytestmark = pytest.mark.core  # The core, run again on Debian 13 (dev/test).


def test_create_runs_tmux_and_agent_in_scope_under_slice(sb: Sandbox) -> None:
    name = create(sb)
    status = sb.run("systemctl", "status", "--no-pager", f"hostagent-{name}.scope").stdout
    # Each user's sessions share a slice under hostagent.slice; root's too.
    assert f"/hostagent.slice/hostagent-u0.slice/hostagent-{name}.scope" in status
    assert "tmux" in status
    assert "hostagent.cli.demo_agent" in status
    p = props(sb, name)
    assert p["State"] == "running" and p["Unit"] == f"hostagent-{name}.scope"
    assert p["Leader"] > 0 and p["AgentSessionId"]
    assert invocation_recorded(sb, name) == invocation_of_unit(sb, name)


def invocation_recorded(sb: Sandbox, name: str) -> str:
    data = record(sb, name)
    assert data is not None
    return str(data["invocation_id"])


def invocation_of_unit(sb: Sandbox, name: str) -> str:
    unit = f"hostagent-{name}.scope"
    return sb.run("systemctl", "show", "-P", "InvocationID", unit).check().stdout.strip()


def test_busctl_introspect_shows_the_contract(sb: Sandbox) -> None:
    out = (
        sb.run("busctl", "introspect", "org.hostagent.HostAgent1", "/org/hostagent/HostAgent1")
        .check()
        .stdout
    )
    for member in (
        "CreateSession",
        "ListSessions",
        "GetSessionByPID",
        "WaitAny",
        "SessionNew",
        "Version",
    ):
        assert member in out
    name = create(sb)
    out = (
        sb.run(
            "busctl",
            "introspect",
            "org.hostagent.HostAgent1",
            f"/org/hostagent/HostAgent1/session/{name.replace('-', '_2d')}",
        )
        .check()
        .stdout
    )
    assert "Capture" in out and "WaitForActivity" in out
    assert ".Name" in out and "const" in out.split(".Name")[1].splitlines()[0]
    assert "emits-change" in out.split(".State")[1].splitlines()[0]


def test_ctl_list_status_capture_send_and_json(sb: Sandbox) -> None:
    name = create(sb)
    listing = sb.ctl("list").check().stdout
    assert name in listing and "listed on the system daemon." in listing
    rows = json.loads(sb.ctl("--json", "list").check().stdout)
    assert any(r["name"] == name and r["state"] == "running" for r in rows)
    assert sb.ctl("status", name).returncode == 0
    wait_screen(sb, name, "Demo Agent")
    sb.ctl("send", name, "hello there").check()
    wait_screen(sb, name, "You said: hello there")


def test_attach_execs_tmux_attach(sb: Sandbox) -> None:
    name = create(sb)
    outer = f"outer-{name}"
    sb.run(
        "tmux",
        "-L",
        outer,
        "new-session",
        "-d",
        "-x",
        "120",
        "-y",
        "30",
        f"hostagentctl --system attach {name}",
    ).check()
    try:
        for _ in range(100):
            screen = sb.run("tmux", "-L", outer, "capture-pane", "-p").stdout
            if "Demo Agent" in screen:
                break
            sb.run("sleep", "0.1")
        assert "Demo Agent" in screen
        pane_cmd = sb.run("tmux", "-L", outer, "display", "-p", "#{pane_current_command}").stdout
        assert pane_cmd.strip() == "tmux"  # hostagentctl replaced itself
    finally:
        sb.run("tmux", "-L", outer, "kill-server")


@pytest.mark.parametrize("how", ["restart", "sigkill"])
def test_daemon_restart_keeps_sessions(sb: Sandbox, how: str) -> None:
    name = create(sb)
    leader = props(sb, name)["Leader"]
    old_pid = sb.daemon_pid()
    if how == "restart":
        sb.daemon_restart()
    else:
        sb.daemon_kill()
        assert (
            sb.run("systemctl", "is-active", f"hostagent-{name}.scope").stdout.strip() == "active"
        )
        sb.daemon_start()
    assert sb.daemon_pid() not in (0, old_pid)
    p = props(sb, name)
    assert p["State"] == "running"
    assert p["Leader"] == leader
    assert sb.run("ps", "-o", "comm=", "-p", str(leader)).stdout.strip().startswith("tmux")


def test_stop_keeps_record_and_cleans_unit_and_socket(sb: Sandbox) -> None:
    name = create(sb)
    first_invocation = invocation_recorded(sb, name)
    sb.ctl("stop", name).check()
    assert props(sb, name)["State"] == "stopped"
    assert sb.run("systemctl", "is-active", f"hostagent-{name}.scope").stdout.strip() in (
        "inactive",
        "unknown",
    )
    assert sb.run("test", "-e", f"/run/hostagent/0/{name}.sock").returncode != 0
    assert sb.run("test", "-f", f"/var/lib/hostagent/sessions/{name}.yaml").returncode == 0
    assert sb.ctl("status", name).returncode == 3
    sb.ctl("resume", name).check()
    p = props(sb, name)
    assert p["State"] == "running" and p["ResumeCount"] == 1
    # The unit's new start is recorded, not what its signals said of the one before.
    assert invocation_recorded(sb, name) == invocation_of_unit(sb, name) != first_invocation
    sb.ctl("rm", name).check()
    assert sb.run("test", "-e", f"/var/lib/hostagent/sessions/{name}.yaml").returncode != 0
    assert sb.run("systemctl", "is-active", f"hostagent-{name}.scope").stdout.strip() in (
        "inactive",
        "unknown",
    )
    assert sb.ctl("status", name).returncode == 4


def test_kill_all_ends_the_session(sb: Sandbox) -> None:
    name = create(sb)
    sb.ctl("kill", "--whom", "all", "--signal", "9", name).check()
    assert sb.ctl("wait", name, "--for", "exited", "--timeout", "10").check().stdout.strip() == (
        "exited"
    )
    p = props(sb, name)
    # SIGKILL is not a way to end cleanly: failed, and why (SIGTERM would leave it stopped).
    assert (p["State"], p["Result"]) == ("failed", "signal")
    assert p["LastError"] == "killed by SIGKILL ('hostagentctl kill')"


def test_admin_systemctl_stop_shows_on_the_bus_within_a_second(sb: Sandbox) -> None:
    name = create(sb)

    async def run(client: Client) -> list[str]:
        return await wait_for_state(
            client,
            name,
            "stopped",
            lambda: sb.run("systemctl", "stop", f"hostagent-{name}.scope").check(),
            timeout=1.0,
        )

    with_client(sb, run)
    assert props(sb, name)["State"] == "stopped"


def test_agent_exit_makes_the_session_stopped(sb: Sandbox) -> None:
    name = create(sb)
    wait_screen(sb, name, "> ")
    sb.ctl("send", name, "/exit").check()
    assert sb.ctl("wait", name, "--for", "exited", "--timeout", "10").check().stdout.strip() == (
        "exited"
    )
    assert props(sb, name)["State"] == "stopped"


def test_process_group_kill_of_the_creator_leaves_the_session(sb: Sandbox) -> None:
    name = new_name()
    # The creating shell kills its whole process group right after creating the session.
    sb.run(
        "setsid",
        "--wait",
        "sh",
        "-c",
        f"hostagentctl --system new --preset demo-agent --name {name} --cwd /tmp && kill -KILL 0",
    )
    assert props(sb, name)["State"] == "running"
    assert sb.run("systemctl", "is-active", f"hostagent-{name}.scope").stdout.strip() == "active"


def test_fifty_concurrent_creates(sb: Sandbox) -> None:
    async def run(client: Client) -> list[str]:
        paths = await asyncio.gather(*(client.create("", "shell", "/tmp", {}) for _ in range(50)))
        rows = {r.path: r for r in await client.list_sessions()}
        names = [rows[p].name for p in paths]
        assert all(rows[p].state == "running" for p in paths)
        await asyncio.gather(*(client.remove(n) for n in names))
        return names

    names = with_client(sb, run)
    assert len(set(names)) == 50


BAD_CREATES = [
    pytest.param("../x", "shell", "/tmp", {}, InvalidName, id="dotdot-name"),
    pytest.param("a/b", "shell", "/tmp", {}, InvalidName, id="slash-name"),
    pytest.param("x" * 64, "shell", "/tmp", {}, InvalidName, id="long-name"),
    pytest.param("héllo", "shell", "/tmp", {}, InvalidName, id="non-ascii-name"),
    pytest.param("", "nope", "/tmp", {}, NoSuchPreset, id="unknown-preset"),
    pytest.param("", "shell", "/nonexistent", {}, InvalidCwd, id="missing-cwd"),
    pytest.param("", "shell", "/etc/passwd", {}, InvalidCwd, id="file-cwd"),
    pytest.param("", "shell", "tmp", {}, InvalidCwd, id="relative-cwd"),
    pytest.param(
        "",
        "shell",
        "/tmp",
        {"env": Variant("a{ss}", {"A=B": "x"})},
        InvalidArgs,
        id="env-key-equals",
    ),
    # A NUL inside an env value cannot even be marshalled as a D-Bus string; the daemon's own
    # check for it is covered by the unit tests.
    pytest.param(
        "",
        "shell",
        "/tmp",
        {"env": Variant("a{ss}", {"1X": "x"})},
        InvalidArgs,
        id="env-key-invalid",
    ),
    pytest.param(
        "",
        "shell",
        "/tmp",
        {"args": Variant("as", ["x" * 200_000])},
        InvalidArgs,
        id="argv-too-big",
    ),
    pytest.param(
        "",
        "shell",
        "/tmp",
        {"env": Variant("a{ss}", {f"K{i}": "v" for i in range(300)})},
        InvalidArgs,
        id="env-too-big",
    ),
    pytest.param(
        "", "shell", "/tmp", {"frobnicate": Variant("s", "x")}, InvalidArgs, id="unknown-option"
    ),
    pytest.param(
        "",
        "shell",
        "/tmp",
        {"memory_max": Variant("s", "1G")},
        InvalidArgs,
        id="wrong-variant-type",
    ),
    pytest.param("", "shell", "/tmp", {"tasks_max": Variant("t", 0)}, InvalidArgs, id="zero-limit"),
    pytest.param(
        "", "shell", "/tmp", {"memory_max": Variant("t", 1 << 62)}, InvalidArgs, id="absurd-limit"
    ),
]


@pytest.mark.parametrize(("name", "preset", "cwd", "options", "error"), BAD_CREATES)
def test_bad_input_gets_a_named_error_and_changes_nothing(
    sb: Sandbox, name: str, preset: str, cwd: str, options: dict, error: type[HostAgentError]
) -> None:
    async def run(client: Client) -> None:
        before = await client.list_sessions()
        with pytest.raises(error) as info:
            await client.create(name, preset, cwd, options)
        assert info.value.message and "\n" not in info.value.message
        assert await client.list_sessions() == before

    with_client(sb, run)


def test_a_record_that_cannot_be_written_fails_the_create_and_leaves_no_trace(
    sb: Sandbox,
) -> None:
    """A directory where the record's temporary file goes makes the write fail (root ignores
    modes, so a read-only directory would not). The create fails with a named error, no
    session or scope is left, the daemon still starts with the obstacle there, and once it is
    gone the same name works."""
    name = new_name()
    obstacle = f"/var/lib/hostagent/sessions/.{name}.yaml.tmp"
    sb.run("mkdir", obstacle).check()
    try:

        async def run(client: Client) -> None:
            before = await client.list_sessions()
            with pytest.raises(StorageFull, match="record cannot be written") as info:
                await client.create(name, "shell", "/tmp", {})
            assert "\n" not in info.value.message
            assert await client.list_sessions() == before

        with_client(sb, run)
        assert sb.run("systemctl", "is-active", f"hostagent-{name}.scope").returncode != 0
        sb.daemon_restart()
    finally:
        sb.run("rmdir", obstacle)
    create(sb, "shell", name=name)


def test_a_command_line_up_to_the_documented_limit_starts(sb: Sandbox) -> None:
    """tmux carries a command of about 16 KB to its server; the documented limit is 128 KiB
    (docs/security.md), and a 100 000-byte argument reaches the agent whole."""
    name = new_name()
    big = "x" * 50_000 + "é" * 25_000  # 100 000 bytes, 75 000 characters
    sb.ctl(
        "new",
        "--name",
        name,
        "--cwd",
        "/tmp",
        "--replace-command",
        "--",
        "sh",
        "-c",
        'printf "got %s bytes\\n" "$(printf %s "$1" | wc -c)"; exec sleep 600',
        "sh",
        big,
    ).check()
    wait_screen(sb, name, "got 100000 bytes")
    assert props(sb, name)["Command"][-1] == big
    sb.ctl("rm", name).check()


def test_a_command_of_one_word_runs_as_it_is_written(sb: Sandbox) -> None:
    """tmux gives a command of one word to a shell to parse: a program whose path has a
    space and a '$' in it was split there ("/opt/my: No such file") and never ran."""
    name = new_name()
    program = "/opt/my tools/$agent"
    sb.run("mkdir", "-p", "/opt/my tools").check()
    sb.run(
        "sh",
        "-c",
        'printf "#!/bin/sh\\necho started-as-written\\nexec sleep 600\\n" > "$1" && chmod +x "$1"',
        "sh",
        program,
    ).check()
    try:
        sb.ctl("new", "--name", name, "--cwd", "/tmp", "--replace-command", "--", program).check()
        wait_screen(sb, name, "started-as-written")
        assert props(sb, name)["State"] == "running"
        sb.ctl("rm", name).check()
    finally:
        sb.run("rm", "-rf", "/opt/my tools")


def test_taken_name_and_running_resume_say_what_to_do(sb: Sandbox) -> None:
    name = create(sb)

    async def run(client: Client) -> None:
        with pytest.raises(SessionExists, match="resume it with|remove it with"):
            await client.create(name, "shell", "/tmp", {})
        with pytest.raises(AlreadyRunning):
            await client.resume(name)
        with pytest.raises(NoSuchSession):
            await client.stop("no-such-session")

    with_client(sb, run)
    err = sb.ctl("new", "--name", name).stderr
    assert err.startswith(f"Failed to create session '{name}'") and err.count("\n") == 1


def test_nonroot_owner_runs_as_herself_with_a_private_socket(sb: Sandbox) -> None:
    name = create(sb, "demo-agent", user="alice")
    uid = sb.uid("alice")
    leader = props(sb, name, user="alice")["Leader"]
    uids = sb.run("ps", "-o", "uid=", "--ppid", str(leader), "-p", str(leader)).stdout.split()
    assert uids and set(uids) == {str(uid)}
    stat = sb.run("stat", "-c", "%a %u", f"/run/hostagent/{uid}").check().stdout.split()
    assert stat == ["700", str(uid)]
    assert (
        sb.run("tmux", "-S", f"/run/hostagent/{uid}/{name}.sock", "ls", user="bob").returncode != 0
    )
    assert sb.ctl("list", user="bob", system=True).check().stdout.count(name) == 1


def test_calls_on_a_session_being_removed_get_named_errors(sb: Sandbox) -> None:
    """The agent ignores SIGTERM and SIGHUP, so Remove is parked in its stop job (until the
    stop timeout's SIGKILL) while other calls arrive."""
    name = new_name()
    sb.ctl(
        "new",
        "--name",
        name,
        "--replace-command",
        "--",
        "sh",
        "-c",
        "trap '' TERM HUP; while :; do sleep 1; done",
    ).check()

    async def run(client: Client) -> None:
        loop = asyncio.get_running_loop()
        started = []
        # The action runs once the signal match is in place, so "stopping" cannot be missed.
        await wait_for_state(
            client,
            name,
            "stopping",
            lambda: started.append(asyncio.run_coroutine_threadsafe(client.remove(name), loop)),
            timeout=10,
        )
        removal = asyncio.wrap_future(started[0])
        for call in (client.stop(name), client.resume(name)):
            with pytest.raises(HostAgentError) as info:
                await call
            assert info.value.dbus_name.endswith(".Busy")
        with pytest.raises(HostAgentError) as info:
            await client.capture(name, 0)
        assert info.value.dbus_name.endswith((".NotRunning", ".NoSuchSession"))
        await removal
        with pytest.raises(NoSuchSession):
            await client.stop(name)

    with_client(sb, run)
    assert sb.run("test", "-e", f"/var/lib/hostagent/sessions/{name}.yaml").returncode != 0
