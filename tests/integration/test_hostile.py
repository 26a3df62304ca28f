"""Hostile users: every attack bob found, replayed as bob against the
real system bus and daemon (tests/integration/bob.py is his side).

Around each test, a probe calls ListSessions and GetSession every 50 ms, and CreateSession
every second, as another client, and alice keeps a session running
(tests/integration/hostile_watch.py). After each: the daemon has its PID still,
never held more than 200 MB, never took a second to answer the probe, logged no internal error,
and alice's session runs and answers.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator

import pytest

from hostagent.bus.paths import path_encode
from hostagent.daemon.host import checkpoint
from tests.integration.helpers import SESSIONS_DIR, create, props, settled
from tests.integration.hostile_watch import (
    ALICES,
    BOB,
    STALL,
    Probe,
    bob,
    bobs,
    finish,
    long_history,
)
from tests.integration.test_security import carol_is_admin  # noqa: F401 - a fixture
from tests.sandbox import Sandbox

pytestmark = pytest.mark.core  # The core, run again on Debian 13 (dev/test).

CONFIG = "/etc/hostagent/hostagent.yaml"
MAX_RSS_KIB = 200 << 10  # the most the daemon may hold at any moment of an attack


@pytest.fixture(scope="module")
def _alices_machines() -> Iterator[list[Sandbox]]:
    machines: list[Sandbox] = []
    yield machines
    for box in machines:
        box.ctl("rm", ALICES)


@pytest.fixture
def alices(sb: Sandbox, _alices_machines: list[Sandbox]) -> str:
    """alice's session that every attack must leave alone, on whichever machine the test
    runs (the limits tests have one of their own); made once per machine and module."""
    if sb not in _alices_machines:
        create(sb, "demo-agent", user="alice", name=ALICES)
        _alices_machines.append(sb)
    return ALICES


@pytest.fixture
def guarded(sb: Sandbox, alices: str) -> Iterator[Probe]:
    pid = sb.daemon_pid()
    with Probe(sb) as probe:
        yield probe
    slowest = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in probe.slowest_by.items())
    print(f"probe: {probe.calls} rounds, slowest {slowest}")
    assert sb.daemon_pid() == pid, "the daemon exited or restarted"
    assert users_in_the_daemons_cgroup(sb) == [], "a user's process runs in hostagent.service"
    peak = sb.run("grep", "VmHWM", f"/proc/{pid}/status").check().stdout.split()[1]
    assert int(peak) < MAX_RSS_KIB, f"the daemon's memory peaked at {int(peak) >> 10} MiB"
    assert probe.errors == [] and probe.calls > 0
    assert probe.slowest < STALL, f"others waited: {slowest}"
    assert "Internal error" not in sb.journal(lines=500)
    assert settled(sb, alices) == ("running", "active", "running")
    assert "> " in sb.ctl("capture", alices, user="alice", system=True).check().stdout


def records(sb: Sandbox) -> list[str]:
    """The records on disk, but for the probe's own sessions, which come and go."""
    return [r for r in sb.run("ls", SESSIONS_DIR).stdout.split() if not r.startswith("probe-")]


# What the daemon runs as a user of its own (docs/security.md): tmux client calls, path checks
# and looks made of its own scripts, and a helper held until it is moved into a scope.
DAEMONS_OWN = re.compile(r"((/usr/bin/)?tmux|/bin/sh -c|/bin/mkdir|/bin/cat|\S*python3 -I -S -c) ")


def users_in_the_daemons_cgroup(sb: Sandbox) -> list[str]:
    """Every process in hostagent.service that is not root's (ps says each one's unit, in
    any cgroup layout), but for the daemon's own short-lived helpers, its direct children: the
    daemon runs a user's code only in a scope under their slice."""
    daemon = str(sb.daemon_pid())
    shown = sb.run("ps", "-e", "-o", "unit=,user=,ppid=,args=").check().stdout.splitlines()
    found = []
    for line in shown:
        unit, user, ppid, args = [*line.split(None, 3), "", "", "", ""][:4]
        if unit != "hostagent.service" or user == "root":
            continue
        if ppid == daemon and DAEMONS_OWN.match(args):
            continue
        found.append(line)
    return found


def test_1_posing_as_systemd_fails_nobodys_create(sb: Sandbox, guarded: Probe) -> None:
    spoofer = sb.popen(*BOB, "spoof-systemd", "4", user="bob")
    try:
        made = [create(sb, "shell", user="alice", name=f"after-spoof-{i}") for i in range(3)]
        for name in made:
            assert settled(sb, name) == ("running", "active", "running")
        out, err = spoofer.communicate(timeout=60)
        assert spoofer.returncode == 0, err
        assert json.loads(out)["sent"] > 1000
        # No empty scope was left behind for recovery to adopt.
        units = sb.run("systemctl", "list-units", "--plain", "--no-legend", "hostagent-*.scope")
        assert all(f"hostagent-{n}.scope" in units.stdout for n in made)
    finally:
        finish(spoofer)
        sb.ctl("rm", "after-spoof-0", "after-spoof-1", "after-spoof-2")


def test_2_a_wait_for_80000_names_is_refused_at_once(sb: Sandbox, guarded: Probe) -> None:
    result = bob(sb, "wait-names", "80000")
    assert result["error"] == "org.freedesktop.DBus.Error.InvalidArgs", result
    assert "at most 4096" in result["text"]


def test_3_a_capture_larger_than_a_bus_message_is_refused_by_name(
    sb: Sandbox, guarded: Probe
) -> None:
    try:
        assert long_history(sb, "big-history", "€" * 999)
        result = bob(sb, "capture", "big-history", "30000", "CaptureByFileDescriptor")
        assert result["error"] == "org.freedesktop.DBus.Error.InvalidArgs", result
        assert "ask for fewer lines" in result["text"]
        # Inline, the reply's own limit comes first: refused once 256 KiB have been read.
        result = bob(sb, "capture", "big-history", "30000")
        assert result["error"].endswith(".LimitsExceeded"), result
        assert "CaptureByFileDescriptor" in result["text"]
    finally:
        sb.ctl("rm", "big-history")


def test_4_abandoned_waits_go_with_their_caller(sb: Sandbox, guarded: Probe, alices: str) -> None:
    result = bob(sb, "abandoned-waits", alices, "20")
    # Past a cap, a wait is refused by name at once: the bus's own (128 pending replies per
    # connection on Debian's system bus) or the daemon's (256 calls per caller).
    refused = set(result["answered"]) - {
        "org.freedesktop.DBus.Error.LimitsExceeded",
        "org.hostagent.HostAgent1.Error.LimitsExceeded",
    }
    assert refused == set(), result
    assert 0 < result["left_waiting"] <= 20 * 256
    # bob has left. Alice's session changing now answers nobody's wait, and costs nothing.
    sb.ctl("stop", alices, user="alice", system=True).check()
    sb.ctl("resume", alices, user="alice", system=True).check()
    assert settled(sb, alices) == ("running", "active", "running")


def test_5_bobs_stuck_calls_hold_no_one_elses_slots(sb: Sandbox, guarded: Probe) -> None:
    """bob's resume is stuck in its start (its held first process stopped) and he queues 25
    removes behind it. bob cannot stop that process himself (his session's init is root's,
    and it holds the start), so root does, for him."""
    bobs(sb, "stuck")
    sb.ctl("stop", "stuck", user="bob", system=True).check()
    # Parked for bob's session alone: the bystander's creates pass the same point meanwhile.
    with sb.park(checkpoint.SCOPE_STARTED, session="stuck") as parked:
        resume = sb.popen("hostagentctl", "--system", "resume", "stuck", user="bob")
        try:
            parked.wait()
            cgroup = sb.run("systemctl", "show", "-P", "ControlGroup", "hostagent-stuck.scope")
            procs = sb.cgroup_file(cgroup.stdout.strip(), "systemd", "cgroup.procs")
            held = sb.run("cat", procs).check().stdout.split()
            assert len(held) == 1, held
            assert sb.run("kill", "-STOP", held[0], user="bob").returncode != 0
            sb.run("kill", "-STOP", held[0]).check()
        except BaseException:
            parked.release()
            finish(resume)
            raise
        parked.release()
    queued = [
        sb.popen(
            "busctl",
            "call",
            "--timeout=120",
            "org.hostagent.HostAgent1",
            "/org/hostagent/HostAgent1",
            "org.hostagent.HostAgent1.Manager",
            "RemoveSession",
            "s",
            "stuck",
            user="bob",
        )
        for _ in range(25)
    ]
    try:
        # Meanwhile alice creates and stops, as if nothing happened.
        name = create(sb, "shell", user="alice", name="meanwhile")
        sb.ctl("stop", name, user="alice", system=True).check()
        sb.ctl("rm", name, user="alice", system=True).check()
        # The held child is given up on; bob hears why.
        _, err = resume.communicate(timeout=90)
        assert resume.returncode != 0 and "tmux did not start within 30s" in err
        for call in queued:
            call.communicate(timeout=90)
        assert settled(sb, "stuck")[0] is None  # the first queued remove removed it
    finally:
        for call in [resume, *queued]:
            finish(call)
        sb.ctl("rm", "stuck")


def test_6_a_hook_from_a_reused_pid_is_refused(sb: Sandbox, guarded: Probe) -> None:
    """bob keeps a bus connection whose process exited and makes its pid come back inside
    alice's session: the pid check alone would pass, the hook token does not."""
    target = create(sb, "shell", user="alice", name="pid-target")
    holder = sb.popen(*BOB, "hook-with-stale-pid", user="bob")
    try:
        assert holder.stdout is not None
        stale = json.loads(holder.stdout.readline())["pid"]
        scope = sb.run("systemctl", "show", "-P", "ControlGroup", f"hostagent-{target}.scope")
        cgroup = sb.cgroup_file(scope.stdout.strip(), "systemd", "cgroup.procs")
        # Root makes the next pid in the container be the stale one, forked into her scope.
        plant = (
            "mount -o remount,bind,rw /proc/sys || exit 1; "
            'echo $$ > "$1" || exit 2; '
            "echo $(($2 - 1)) > /proc/sys/kernel/ns_last_pid || exit 3; "
            "setpriv --reuid=alice --regid=alice --init-groups sleep 600 "
            ">/dev/null 2>&1 </dev/null & echo $!"
        )
        for _ in range(20):
            got = sb.run("unshare", "-m", "sh", "-c", plant, "sh", cgroup, str(stale), timeout=5)
            if got.stdout.strip() == str(stale):
                break
            sb.run("pkill", "-u", "alice", "-x", "sleep")
        # The pid is hers now: the daemon itself says so.
        by_pid = sb.run(
            "busctl",
            "call",
            "org.hostagent.HostAgent1",
            "/org/hostagent/HostAgent1",
            "org.hostagent.HostAgent1.Manager",
            "GetSessionByPID",
            "u",
            str(stale),
        )
        assert "pid_2dtarget" in by_pid.stdout, by_pid
        path = path_encode("/org/hostagent/HostAgent1/session", target)
        out, _ = holder.communicate(f"go {path}\n", timeout=60)
        assert json.loads(out.splitlines()[-1])["reply"].endswith("AccessDenied"), out
        assert props(sb, target)["AgentSessionId"] != "forged-by-pid"
    finally:
        finish(holder)
        sb.run("pkill", "-u", "alice", "-x", "sleep")
        sb.ctl("rm", target)


@pytest.fixture
def capped(sb: Sandbox) -> Iterator[None]:
    sb.sh(
        f"mkdir -p /etc/hostagent && cat > {CONFIG}",
        input=("limits: {tasks_max: 40}\nusers: {sessions: 3, tasks_max: 60}\n"),
    ).check()
    reload(sb)
    yield
    sb.run("rm", "-f", CONFIG).check()
    reload(sb)


def reload(sb: Sandbox) -> None:
    """Reload over the bus: it returns once the daemon has the new settings."""
    sb.run(
        "busctl",
        "call",
        "org.hostagent.HostAgent1",
        "/org/hostagent/HostAgent1",
        "org.hostagent.HostAgent1.Manager",
        "Reload",
    ).check()


@pytest.mark.needs_limits
def test_7_limits_are_caps_and_bobs_slice_holds_his_fork_bombs(
    sb: Sandbox, guarded: Probe, capped: None
) -> None:
    refused = sb.ctl("new", "--preset", "shell", "-p", "TasksMax=4194304", user="bob", system=True)
    assert refused.returncode != 0 and "TasksMax=4194304 is more than this host allows" in (
        refused.stderr
    )
    bombs = [bobs(sb, f"bomb-{i}", "-p", "TasksMax=40", "--", "-c", "sleep 600") for i in (1, 2)]
    third = bobs(sb, "bomb-3")
    try:
        fourth = sb.ctl("new", "--preset", "shell", "--name", "bomb-4", user="bob", system=True)
        assert fourth.returncode != 0 and "users.sessions" in fourth.stderr
        root = create(sb, "shell", "-p", "TasksMax=100", name="roots-own")  # root is exempt
        sb.ctl("rm", root).check()
        slice_ = f"hostagent-u{sb.uid('bob')}.slice"
        pids_max = sb.cgroup_file(f"/hostagent.slice/{slice_}", "pids", "pids.max")
        assert sb.run("cat", pids_max).stdout.strip() == "60"
        sock = f"/run/hostagent/{sb.uid('bob')}"
        for bomb in bombs:
            sb.run(
                "tmux",
                "-S",
                f"{sock}/{bomb}.sock",
                "respawn-pane",
                "-k",
                "-t",
                "main",
                "bash -c 'f() { f & f & wait; }; f'",
                user="bob",
            ).check()
        deadline = time.monotonic() + 30
        while int(sb.run("systemctl", "show", "-P", "TasksCurrent", slice_).stdout or 0) < 60:
            assert time.monotonic() < deadline, "the fork bombs never reached the slice's cap"
            time.sleep(0.1)
        assert int(sb.run("systemctl", "show", "-P", "TasksCurrent", slice_).stdout) <= 60
        # Neither bomb reached its own TasksMax: the slice stopped them together.
        assert sb.ctl("list", user="alice", system=True).returncode == 0
        for bomb in bombs:
            sb.ctl("kill", "--whom", "all", "-s", "9", bomb, user="bob", system=True).check()
    finally:
        sb.ctl("rm", *bombs, third)


@pytest.mark.usefixtures("carol_is_admin")
def test_7_an_admin_goes_past_the_caps_only_where_the_admin_allows(
    sb: Sandbox, guarded: Probe, capped: None
) -> None:
    def carol_asks() -> tuple[int, str]:
        result = sb.ctl(
            "new",
            "--preset",
            "shell",
            "--name",
            "carols",
            "-p",
            "TasksMax=100",
            user="carol",
            system=True,
        )
        return result.returncode, result.stderr

    code, err = carol_asks()
    assert code != 0 and "TasksMax=100 is more than this host allows" in err
    sb.sh(f"sed -i 's/sessions: 3,/sessions: 3, admins_exceed: true,/' {CONFIG}").check()
    reload(sb)
    try:
        assert carol_asks() == (0, "")
        assert props(sb, "carols")["State"] == "running"
        bobs_try = sb.ctl("new", "--preset", "shell", "-p", "TasksMax=100", user="bob", system=True)
        assert bobs_try.returncode != 0 and "more than this host allows" in bobs_try.stderr
    finally:
        sb.ctl("rm", "carols")


def test_8_an_oversized_create_writes_nothing(sb: Sandbox, guarded: Probe) -> None:
    before = records(sb)
    # 20 creates, each with an argument of 50 000 characters and 150 000 bytes.
    result = bob(sb, "fill", "20", "€", "50000")
    assert result["errors"] == {"org.freedesktop.DBus.Error.InvalidArgs": 20}, result
    assert "bytes" in result["text"]
    assert bob(sb, "create", "x\n")["error"].endswith("InvalidName")
    assert records(sb) == before


def test_9_forged_signals_do_not_reach_alices_follower(
    sb: Sandbox, guarded: Probe, alices: str
) -> None:
    follower = sb.popen(*BOB, "follow", user="alice")
    try:
        assert follower.stdout is not None
        name = next(n for line in follower.stdout if (n := json.loads(line).get("name")))
        bob(sb, "forge-follow", name, alices)
        marker = create(sb, "shell", name="after-forgery")  # real signals, after bob's
        pictures = []
        for line in follower.stdout:
            pictures.append(json.loads(line)["sessions"])
            if marker in pictures[-1]:
                break
        assert all("forged" not in p and p.get(alices) != "blocked" for p in pictures), pictures
        assert alices in pictures[-1]
    finally:
        finish(follower)
        sb.ctl("rm", "after-forgery")


def test_10_the_smaller_ones(sb: Sandbox, guarded: Probe, alices: str) -> None:
    # Another user's session name: taken, and nothing more is said.
    taken = bob(sb, "create", alices)
    assert taken["text"] == f"Session name '{alices}' is taken; pick another name."
    # A cwd longer than the kernel takes.
    long_cwd = bob(sb, "create", "long-cwd", "{}", "/" + "d" * 5000)
    assert long_cwd["error"].endswith("InvalidCwd") and "4096 bytes" in long_cwd["text"]
    # 31 MB of options is refused on its size alone (the probe shows nobody waited).
    big = bob(sb, "big-options", "31")
    assert big["error"] == "org.freedesktop.DBus.Error.InvalidArgs", big
    # 64 KiB of text reaches a running session whole.
    typed = bobs(
        sb, "typist", "--", "-c", "stty raw -echo; head -c 65536 > /tmp/bob-typed; sleep 600"
    )
    try:
        sb.run(
            "hostagentctl", "--system", "send", "--no-enter", typed, "y" * 65536, user="bob"
        ).check()
        deadline = time.monotonic() + 30
        while sb.run("stat", "-c", "%s", "/tmp/bob-typed").stdout.strip() != "65536":
            assert time.monotonic() < deadline, "the text never arrived whole"
            time.sleep(0.1)
        # His own NAME.d/out replaced by a directory does not wedge his session.
        sb.ctl("stop", typed, user="bob", system=True).check()
        sb.run("mkdir", "-p", f"/run/hostagent/{sb.uid('bob')}/{typed}.d/out/x", user="bob").check()
        sb.ctl("resume", typed, user="bob", system=True).check()
        assert settled(sb, typed) == ("running", "active", "running")
    finally:
        sb.ctl("rm", typed)


def test_10_captures_of_a_stopped_tmux_spawn_few_helpers(sb: Sandbox, guarded: Probe) -> None:
    stalled = bobs(sb, "stalled")
    server = str(props(sb, stalled)["Leader"])
    sb.run("kill", "-STOP", server, user="bob").check()
    captures = [
        sb.popen(
            "busctl",
            "call",
            "--timeout=120",
            "org.hostagent.HostAgent1",
            path_encode("/org/hostagent/HostAgent1/session", stalled),
            "org.hostagent.HostAgent1.Session",
            "Capture",
            "i",
            "0",
            user="bob",
        )
        for _ in range(40)
    ]
    try:
        most = 0
        while any(c.poll() is None for c in captures):
            # The daemon's tmux clients for bob (forked by its forker, inside his sessions).
            count = sb.run("pgrep", "-c", "-u", "bob", "-f", "tmux -S .* capture-pane").stdout
            count = count.strip()
            most = max(most, int(count or "0"))
            time.sleep(0.2)
        assert 0 < most <= 16, most
        # Those past bob's own share are refused at once; the rest time out on the tmux.
        outcomes = [c.communicate()[1].strip() for c in captures]
        stuck = [o for o in outcomes if "has no terminal" in o]
        refused = [o for o in outcomes if "captures of yours are already under way" in o]
        assert stuck and len(stuck) + len(refused) == len(outcomes), set(outcomes)
    finally:
        for c in captures:
            finish(c)
        sb.run("kill", "-CONT", server)
        sb.ctl("rm", stalled)


def test_11_captures_nobody_reads_stall_no_one(sb: Sandbox, guarded: Probe) -> None:
    """bob asks for 128 captures of a 20 000-line history on two connections that never read
    a reply, first inline, then by descriptor; the probe keeps its pace and the daemon stays
    small. Inline, such a capture is refused by name (it is over 256 KiB); by descriptor, each
    reply is a few bytes. hostagentctl and busctl still read the same history."""
    try:
        assert long_history(sb, "unread", "x" * 199)
        for method in ("Capture", "CaptureByFileDescriptor"):
            sent = bob(sb, "unread-captures", "unread", "20000", "128", method, "10")
            assert sent == {"sent": 128}
        shown = sb.ctl("capture", "-n", "20000", "unread", user="bob", system=True).check()
        assert shown.stdout.count("x" * 199) >= 20000
        inline = bob(sb, "capture", "unread", "20000")
        assert (
            inline["error"].endswith("LimitsExceeded")
            and "CaptureByFileDescriptor" in inline["text"]
        )
        path = path_encode("/org/hostagent/HostAgent1/session", "unread")
        by_fd = sb.run(
            "busctl",
            "call",
            "org.hostagent.HostAgent1",
            path,
            "org.hostagent.HostAgent1.Session",
            "CaptureByFileDescriptor",
            "i",
            "20000",
            user="bob",
        ).check()
        assert by_fd.stdout.startswith("h ")
    finally:
        sb.ctl("rm", "unread")


def test_12_a_login_shell_that_misbehaves_runs_in_a_scope_of_bobs(
    sb: Sandbox, guarded: Probe
) -> None:
    """bob's ~/.profile leaves a child that ignores SIGTERM and prints without end. Each
    lookup (presets, a create) runs it in a scope of its own under bob's slice, cut off at
    1 MiB of output; when the lookup is done, the scope and the child are gone, and none of
    it ever ran in hostagent.service."""
    profile = "/home/bob/.profile"
    sb.run(
        "sh",
        "-c",
        f"cp {profile} {profile}.orig 2>/dev/null; cat >> {profile} <<'EOF'\n"
        "(trap '' TERM; exec sleep 600) &\n"
        "yes hostagent-flood\n"
        "EOF",
        user="bob",
    ).check()
    made = ""
    try:
        for _ in range(4):
            sb.ctl("presets", user="bob", system=True).check()
            assert users_in_the_daemons_cgroup(sb) == []
        # The lookup's answer is lost in the flood; whether the create fails or not, its
        # login shell ran where it should.
        made = sb.ctl("new", "--preset", "shell", user="bob", system=True).stdout.strip()
        deadline = time.monotonic() + 30
        while sb.run("pgrep", "-u", "bob", "-f", "sleep 600").returncode == 0:
            assert time.monotonic() < deadline, "bob's login shell left a child running"
            time.sleep(0.2)
        bobs_helpers = f"hostagent-helper:u{sb.uid('bob')}:*"  # the probe's are root's
        helpers = sb.run("systemctl", "list-units", "--plain", "--no-legend", bobs_helpers)
        assert helpers.stdout.strip() == ""
    finally:
        sb.run(
            "sh", "-c", f"mv {profile}.orig {profile} 2>/dev/null || rm -f {profile}", user="bob"
        )
        if made:
            sb.ctl("rm", made)


# Ten seconds of what the daemon reads of one owner's FIFO (hookpipe.LINES_PER_SECOND), from a
# shell loop writing as fast as it can, which then waits on the full pipe: fifty times what the
# session's hook rate takes, which is what the flood must show.
FLOOD_LINES = 5_000


def test_13_a_valid_hook_flood_is_taken_at_a_bounded_rate(sb: Sandbox, guarded: Probe) -> None:
    """bob's own session writes valid lines into his hooks FIFO, each naming a new
    conversation id, as fast as it can: the daemon reads his FIFO at its own pace and his
    writer waits, the probe keeps its pace, the session's id ends as the newest, and the
    journal says so once, not per line."""
    fifo = f"/run/hostagent/{sb.uid('bob')}/hooks.fifo"
    flood = (
        f'i=0; while [ $i -lt {FLOOD_LINES} ]; do i=$((i+1)); printf "%s\\t%s\\tSessionStart\\tid-%d\\t\\t\\n"'
        f' flood "$HOSTAGENT_HOOK_TOKEN" $i; done 1<>{fifo}; echo flooded; exec sleep 600'
    )
    since = sb.run("date", "+%Y-%m-%d %H:%M:%S").check().stdout.strip()
    flooder = bobs(sb, "flood", "--", "-c", flood)
    try:
        sb.screen_showing(flooder, "flooded", user="bob", timeout=120)
        said = sb.run("journalctl", "-u", "hostagent", "--since", since, "-o", "cat").stdout
        assert said.count("conversation id-") < 50, said[-2000:]
        assert "only the newest are taken" in said
        deadline = time.monotonic() + 30
        newest = FLOOD_LINES * 0.95
        while int((props(sb, flooder, user="bob")["AgentSessionId"] or "")[3:] or 0) < newest:
            assert time.monotonic() < deadline, "the newest ids were never taken"
            time.sleep(0.2)
    finally:
        sb.ctl("rm", flooder)


def test_14_a_resume_runs_within_the_caps_of_today(sb: Sandbox, guarded: Probe) -> None:
    """bob's session was made under caps of 500 tasks and 2G; the admin lowers them to 100
    and 1G; his resume runs with the lower ones."""
    sb.sh(
        f"mkdir -p /etc/hostagent && cat > {CONFIG}",
        input="limits: {tasks_max: 500, memory_max: 2G}\n",
    ).check()
    reload(sb)
    name = bobs(sb, "old-caps", "-p", "TasksMax=500", "-p", "MemoryMax=2G")
    try:
        unit = f"hostagent-{name}.scope"
        assert sb.run("systemctl", "show", "-P", "TasksMax", unit).stdout.strip() == "500"
        sb.ctl("stop", name, user="bob", system=True).check()
        sb.sh(f"cat > {CONFIG}", input="limits: {tasks_max: 100, memory_max: 1G}\n").check()
        reload(sb)
        sb.ctl("resume", name, user="bob", system=True).check()
        shown = sb.run("systemctl", "show", "-p", "TasksMax", "-p", "MemoryMax", unit).stdout
        assert sorted(shown.split()) == [f"MemoryMax={1 << 30}", "TasksMax=100"], shown
    finally:
        sb.ctl("rm", name)
        sb.run("rm", "-f", CONFIG).check()
        reload(sb)


def test_15_escapes_in_what_bob_controls_reach_no_terminal(sb: Sandbox, guarded: Probe) -> None:
    """bob's cwd and command carry ESC sequences and a forged line; status, list and the
    journal show them escaped."""
    cwd = "/tmp/bob\x1b]0;owned\x07\x1b[2J\nOwner: 0"
    sb.run("mkdir", "-p", cwd, user="bob").check()
    name = (
        sb.ctl(
            "new",
            "--preset",
            "shell",
            "--cwd",
            cwd,
            "--replace-command",
            "--",
            "sh",
            "-c",
            "exec sleep 600",
            "\x1b[2Jx\nOwner: 0",
            user="bob",
            system=True,
        )
        .check()
        .stdout.strip()
    )
    try:
        for args in (("status", name), ("list",)):
            out = sb.ctl(*args, user="alice", system=True).stdout
            assert "\x1b" not in out and "\x07" not in out, out
            assert not any(line.strip().startswith("Owner: 0") for line in out.splitlines())
        assert "\\x1b]0;owned\\x07" in sb.ctl("status", name, user="alice", system=True).stdout
        journal = sb.run("journalctl", "-u", "hostagent", "-o", "cat", "-n", "200").stdout
        assert "\x1b" not in journal
    finally:
        sb.ctl("rm", name)
        sb.run(
            "rm",
            "-rf",
            "/tmp/bob\x1b]0;owned\x07\x1b[2J\nOwner: 0",
            "/tmp/bob\x1b]0;owned\x07\x1b[2J",
        )


def test_16_a_million_options_one_create_after_another_cost_no_one(
    sb: Sandbox, guarded: Probe
) -> None:
    """bob sends CreateSession after CreateSession, each with an options dict of a million
    entries (24 MB): each is refused by name from its header, before a byte of it is
    unmarshalled, so the probe (guarded: no call over a second, the daemon under 200 MB)
    keeps its pace and nothing is written."""
    before = records(sb)
    sent = bob(sb, "million-options", "5")
    # (bob's own calls take seconds: his client marshals 24 MB in Python each time.)
    assert sent["errors"] == ["org.freedesktop.DBus.Error.InvalidArgs"], sent
    assert records(sb) == before
