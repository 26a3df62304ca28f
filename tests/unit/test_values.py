"""Values as systemd's tools take them: sizes, time spans,
signals, users and timeouts, and what hostagentctl makes of them."""

from __future__ import annotations

import argparse
import os
import pwd
import signal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hostagent import values
from hostagent.cli import ctl, ctl_options
from hostagent.cli.ctl_args import bare_json_is_short, parser
from hostagent.cli.ctl_output import human_nsec
from hostagent.values import (
    INFINITY,
    ValueProblem,
    format_size,
    format_timespan,
    parse_size,
    parse_timespan,
)

G = 1 << 30


@pytest.mark.parametrize(
    ("text", "physical", "size"),
    [
        ("512M", None, 512 << 20),
        ("4G", None, 4 * G),
        ("4g", None, 4 * G),
        ("1.5G", None, 3 * G // 2),
        ("4GiB", None, 4 * G),
        ("2048", None, 2048),
        ("infinity", None, INFINITY),
        ("50%", 8 * G, 4 * G),
        ("15E", None, 15 << 60),
    ],
)
def test_sizes(text: str, physical: int | None, size: int) -> None:
    assert values.parse_size(text, physical) == size


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("lots", "is not a size"),
        ("50%", "needs this host's memory"),
        ("150%", None),
        ("99999999T", "more than the largest size"),
        ("-1G", "is not a size"),
    ],
)
def test_bad_sizes_say_what_was_typed(text: str, problem: str | None) -> None:
    with pytest.raises(ValueProblem) as e:
        values.parse_size(text, 8 * G if problem is None else None)
    assert f"'{text}'" in str(e.value)
    if problem:
        assert problem in str(e.value)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90),
        ("90s", 90),
        ("30min", 1800),
        ("30m", 1800),
        ("1h", 3600),
        ("1h 30min", 5400),
        ("1h30min", 5400),
        ("2d", 172800),
        ("1w", 604800),
        ("500ms", 1),
        ("infinity", INFINITY),
    ],
)
def test_time_spans(text: str, seconds: int) -> None:
    assert values.parse_timespan(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "1 fortnight", "h", "10 10x"])
def test_bad_time_spans(text: str) -> None:
    with pytest.raises(ValueProblem):
        values.parse_timespan(text)


@pytest.mark.parametrize(
    ("text", "number"),
    [("9", 9), ("KILL", 9), ("kill", 9), ("SIGTERM", 15), ("term", 15), ("HUP", 1)],
)
def test_signals(text: str, number: int) -> None:
    assert values.parse_signal(text) == number


@pytest.mark.parametrize("text", ["0", "99", "SIGNOPE", ""])
def test_bad_signals(text: str) -> None:
    with pytest.raises(ValueProblem):
        values.parse_signal(text)


def test_users_by_name_or_uid() -> None:
    me = pwd.getpwuid(os.getuid())
    assert values.parse_user(me.pw_name) == me.pw_uid
    assert values.parse_user("4242") == 4242
    with pytest.raises(ValueProblem, match="no user 'nobody-here'"):
        values.parse_user("nobody-here")


@pytest.mark.parametrize("text", ["-5", "1e30", "nan", "inf", "soon"])
def test_bad_timeouts(text: str) -> None:
    with pytest.raises(ValueProblem):
        values.parse_seconds(text)


def _new(*argv: str) -> argparse.Namespace:
    return parser().parse_args(bare_json_is_short(["new", *argv]))


def test_properties_read_as_systemd_run_reads_them() -> None:
    options = ctl_options.build_options(
        _new(
            "-p",
            "MemoryMax=infinity",
            "-p",
            "TasksMax=infinity",
            "-p",
            "RuntimeMaxSec=1h",
            "-p",
            "Columns=120",
            "-p",
            "MemoryHigh=50%",
            "--uid",
            "0",
        )
    )
    assert options["memory_max"].value == INFINITY
    assert options["tasks_max"].value == INFINITY
    assert options["runtime_max_sec"].value == 3600
    assert (options["columns"].signature, options["columns"].value) == ("q", 120)
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert options["memory_high"].value == physical // 2
    assert options["user"].value == 0


@pytest.mark.parametrize(
    ("prop", "said"),
    [
        ("TasksMax=lots", "-p TasksMax needs a whole number, not 'lots'"),
        ("MemoryMax=99999999T", "-p MemoryMax: '99999999T' is more than the largest size"),
        ("RuntimeMaxSec=soon", "-p RuntimeMaxSec: 'soon' is not a time span"),
        ("Columns=0", "-p Columns needs a number of cells"),
    ],
)
def test_property_errors_say_what_was_typed(prop: str, said: str) -> None:
    with pytest.raises(ctl_options.UsageError) as e:
        ctl_options.build_options(_new("-p", prop))
    assert str(e.value).startswith(said)


def test_a_percentage_is_refused_for_another_host() -> None:
    with pytest.raises(ctl_options.UsageError, match="needs this host's memory"):
        ctl_options.build_options(parser().parse_args(["-H", "h", "new", "-p", "MemoryMax=50%"]))


def test_a_usage_error_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        parser().parse_args(["stop"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "see 'hostagentctl --help'" in err


# Everything hostagentctl might be given: verbs, options, values, junk.
WORDS = st.sampled_from(
    [
        "list",
        "status",
        "new",
        "stop",
        "resume",
        "rm",
        "kill",
        "wait",
        "capture",
        "send",
        "x",
        "--json",
        "--json=pretty",
        "-p",
        "TasksMax=1e9",
        "MemoryMax=50%",
        "RuntimeMaxSec=-1",
        "-s",
        "NOPE",
        "9",
        "--timeout",
        "-5",
        "1e30",
        "--uid",
        "nobody-here",
        "--",
        "-n",
        "-1",
        "--for",
        "idle",
        "--system",
        "--user",
        "--address",
        "",
        "\u00e9",
        "--whom",
        "all",
        "-o",
        "json",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(WORDS, max_size=8))
def test_random_argv_never_tracebacks(argv: list[str]) -> None:
    """Whatever it is given, hostagentctl answers with an exit code of its own and at most a
    few lines: never a traceback. No bus answers here, so what parses fails to connect (-H is
    left out: it would reach for the network through ssh)."""
    import contextlib
    import io

    err, out = io.StringIO(), io.StringIO()
    env = {
        "DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/nonexistent/system",
        "DBUS_SESSION_BUS_ADDRESS": "unix:path=/nonexistent/session",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                code = ctl.main([*argv, "--address", "unix:path=/nonexistent/bus"])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 2
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    assert code in (0, 1, 2, 3, 4), (argv, code)
    assert "Traceback" not in err.getvalue(), (argv, err.getvalue())
    assert err.getvalue().count("\n") <= 3, (argv, err.getvalue())
    assert signal.getsignal(signal.SIGINT) is not None


def test_the_daemons_option_names_are_said_as_typed() -> None:
    from hostagent.cli.ctl_output import in_their_words

    said = in_their_words("Option 'tasks_max' must be between 1 and 4194304.")
    assert said == "TasksMax must be between 1 and 4194304."


def test_watch_without_a_terminal_says_so_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert ctl.main(["watch", "--address", "unix:path=/nonexistent/bus"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a terminal" in err


def test_one_json_shape_snake_case_and_null_for_unknown() -> None:
    from hostagent.cli.ctl_output import as_json, snake

    assert [snake(n) for n in ("StartedAt", "CPUUsageNSec", "BootID", "AgentSessionId")] == [
        "started_at",
        "cpu_usage_nsec",
        "boot_id",
        "agent_session_id",
    ]
    assert as_json({"MemoryCurrent": (1 << 64) - 1, "State": "running"}) == {
        "memory_current": None,
        "state": "running",
    }


@pytest.mark.parametrize(("output", "json"), [("json", "short"), ("json-pretty", "pretty")])
def test_o_json_is_systemctls_spelling_of_json(output: str, json: str) -> None:
    from hostagent.cli.ctl_args import parser as p

    assert p().parse_args(["-o", output, "list"]).output == output


def test_status_lines_are_human_and_never_stale() -> None:
    import time as clock

    from hostagent.cli.ctl_output import status_lines

    now = int(clock.time() * 1e6)
    lines = status_lines(
        {
            "Name": "a",
            "State": "failed",
            "Leader": 42,
            "StartedAt": now - 90_000_000,
            "StoppedAt": now,
            "MemoryCurrent": (1 << 64) - 1,
            "ExitStatus": 3,
            "ExitSignal": 0,
        }
    )
    text = "\n".join(lines)
    assert "Leader" not in text and "MemoryCurrent" not in text and "ExitSignal" not in text
    assert "ExitStatus: 3" in text
    started = next(line for line in lines if "StartedAt" in line)
    assert started.endswith("1m30s ago")
    running = "\n".join(status_lines({"State": "running", "Leader": 42, "MemoryCurrent": 3 << 20}))
    assert "Leader: 42" in running and "MemoryCurrent: 3.0M" in running
    # In systemd's words, and the owner as list names them.
    worded = "\n".join(
        status_lines({"Owner": 0, "Limits": {"MemoryMax": 2 << 30, "RuntimeMaxSec": 28800}})
    )
    assert "Owner: root (0)" in worded and "Limits: MemoryMax=2G RuntimeMaxSec=8h" in worded
    assert "Owner: 0" in "\n".join(status_lines({"Owner": 0}, local=False))
    # A question: its words where the bus gives them, else how many choices; none, no line.
    asked = {"id": "q1", "count": 2, "text": "Do you want to proceed?"}
    assert "Question: Do you want to proceed?; see inbox" in "\n".join(
        status_lines({"Question": asked})
    )
    assert "Question: a choice of 2; see inbox" in "\n".join(
        status_lines({"Question": {"id": "q1", "count": 2}})
    )
    assert status_lines({"Question": {}}) == []


@pytest.mark.parametrize(
    ("nsec", "shown"),
    [(None, "-"), (INFINITY, "-"), (0, "0ms"), (23_456_789, "23ms"), (61_000_000_000, "1m01s")],
)
def test_cpu_time_reads_as_systemctl_status_shows_it(nsec: int | None, shown: str) -> None:
    assert human_nsec(nsec) == shown


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (2 << 30, "2G"),
        (3 << 29, "1.5G"),
        (512 << 20, "512M"),
        (100, "100B"),
        (INFINITY, "infinity"),
    ],
)
def test_sizes_are_shown_as_systemd_shows_them(size: int, shown: str) -> None:
    assert format_size(size) == shown
    assert shown == "infinity" or parse_size(shown) == size  # they read back


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(28800, "8h"), (5400, "1h 30min"), (125, "2min 5s"), (0, "0"), (INFINITY, "infinity")],
)
def test_spans_are_shown_as_systemd_shows_them(seconds: int, shown: str) -> None:
    assert format_timespan(seconds) == shown
    assert shown == "infinity" or parse_timespan(shown) == seconds


@pytest.mark.parametrize(
    ("props", "shown"),
    [
        # running: no stop, no exit yet, no worktree
        (
            {
                "State": "running",
                "StartedAt": 5,
                "StoppedAt": 0,
                "ExitStatus": 0,
                "ExitSignal": 0,
                "Worktree": "",
                "Leader": 42,
                "ResumeCount": 0,
            },
            {
                "state": "running",
                "started_at": 5,
                "stopped_at": None,
                "exit_status": None,
                "exit_signal": None,
                "worktree": None,
                "leader": 42,
                "resume_count": 0,
            },
        ),
        # a clean exit's 0 is a status, not an unknown
        (
            {"State": "stopped", "StoppedAt": 9, "ExitStatus": 0, "ExitSignal": 0, "Leader": 0},
            {
                "state": "stopped",
                "stopped_at": 9,
                "exit_status": 0,
                "exit_signal": None,
                "leader": None,
            },
        ),
        # killed: a signal, and no status
        (
            {"State": "failed", "ExitStatus": 0, "ExitSignal": 9, "LastError": "killed"},
            {"state": "failed", "exit_status": None, "exit_signal": 9, "last_error": "killed"},
        ),
        (
            {"State": "failed", "ExitStatus": 3, "ExitSignal": 0, "Result": "exit-code"},
            {"state": "failed", "exit_status": 3, "exit_signal": None, "result": "exit-code"},
        ),
    ],
)
def test_status_json_says_null_for_what_is_not_known_or_not_set(
    props: dict[str, object], shown: dict[str, object]
) -> None:
    from hostagent.cli.ctl_output import as_json

    assert as_json(props) == shown
