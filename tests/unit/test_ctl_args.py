"""hostagentctl's grammar: global options on either side of the verb, and a bare --json that
never reaches into the agent's own command line."""

from __future__ import annotations

import pytest

from hostagent.cli.ctl_args import bare_json_is_short, parser


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["list"], {"verb": "list", "system": None, "no_legend": False}),
        (["--system", "list", "--no-legend"], {"system": True, "no_legend": True}),
        (["list", "--no-legend", "--user"], {"system": False, "no_legend": True}),
        (["--user", "list", "--json"], {"system": False, "json": "short"}),
        (["--json=pretty", "status", "x"], {"json": "pretty", "name": "x"}),
        (["rm", "a", "b", "--system"], {"system": True, "names": ["a", "b"]}),
        (["-H", "list", "status", "x"], {"host": "list", "verb": "status"}),
        (
            ["new", "--name", "a", "-q", "claude", "-q", "--json"],
            {"name": "a", "quiet": True, "json": None, "argv": ["claude", "-q", "--json"]},
        ),
        (["new", "--", "sh", "--json"], {"argv": ["--", "sh", "--json"]}),
        (["usage", "--since", "-7d", "--json"], {"since": "-7d", "json": "short"}),
        (["usage", "--since=today", "--until", "-1d"], {"since": "today", "until": "-1d"}),
        (["budget", "lift", "alice"], {"action": "lift", "user": "alice"}),
    ],
)
def test_options_on_either_side_of_the_verb(argv: list[str], expected: dict[str, object]) -> None:
    args = vars(parser().parse_args(bare_json_is_short(argv)))
    assert {k: args[k] for k in expected} == expected


def test_bus_choice_is_exclusive_after_the_verb_too() -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["list", "--system", "--user"])


@pytest.mark.parametrize(
    ("problem", "split"),
    [
        (
            "not found in the login PATH (/usr/bin:/bin)",
            ("not found in the login PATH", "/usr/bin:/bin"),
        ),
        ("not executable", ("not executable", "")),
        ("", ("", "")),
    ],
)
def test_presets_say_the_login_path_once(problem: str, split: tuple[str, str]) -> None:
    from hostagent.cli.ctl_verbs import problem_and_path

    assert problem_and_path(problem) == split


@pytest.mark.parametrize(
    ("text", "moment"),
    [
        ("today", "2026-12-03 00:00"),
        ("-1d", "2026-12-02 00:00"),
        ("-7d", "2026-11-26 00:00"),
        ("2026-11-30", "2026-11-30 00:00"),
        ("@1796300000", None),
    ],
)
def test_a_usage_window_is_given_as_people_say_it(text: str, moment: str | None) -> None:
    import datetime

    from hostagent.cli.ctl_usage import parse_when

    now = datetime.datetime(2026, 12, 3, 15, 30).timestamp()
    got = parse_when(text, now)
    if moment is None:
        assert got == 1796300000 * 1_000_000
    else:
        assert datetime.datetime.fromtimestamp(got / 1e6).strftime("%Y-%m-%d %H:%M") == moment


@pytest.mark.parametrize("text", ["yesterday-ish", "-d", "7d", "2026-13-01", "@x"])
def test_a_usage_window_that_is_not_a_moment_says_what_is(text: str) -> None:
    from hostagent.cli.ctl_usage import WhenProblem, parse_when

    with pytest.raises(WhenProblem, match="give today, -7d"):
        parse_when(text)
