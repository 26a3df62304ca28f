"""What a session used: the sum, the units people read, and each CLI's record read as the CLI
wrote it (tests/data/usage/, real records of the real CLIs against the stand-in model)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hostagent.daemon.follow.usagehelper import PROGRAM
from hostagent.usage import Usage, total
from hostagent.usage.readers import READERS
from hostagent.usage.records import read_all
from hostagent.usage.text import format_cost, format_tokens
from tests.modelscript import SERVED


@pytest.mark.parametrize(
    ("count", "shown"),
    [
        (0, "0"),
        (950, "950"),
        (999, "999"),
        (1000, "1.0k"),
        (12_345, "12.3k"),
        (99_949, "99.9k"),
        (123_456, "123k"),
        (4_100_000, "4.1M"),
        (250_000_000, "250M"),
    ],
)
def test_tokens_as_people_read_them(count: int, shown: str) -> None:
    assert format_tokens(count) == shown


@pytest.mark.parametrize(
    ("cost", "shown"),
    [(None, "-"), (0.0, "$0.00"), (0.004, "$0.0040"), (0.42, "$0.42"), (12.345, "$12.35")],
)
def test_cost_as_people_read_it(cost: float | None, shown: str) -> None:
    assert format_cost(cost) == shown


def test_a_sum_keeps_a_cost_unknown_only_while_nothing_states_one() -> None:
    a = Usage(input=10, output=2, calls=1, model="m1")
    b = Usage(input=5, output=1, cache_read=3, cost_usd=0.5, calls=1, model="m2")
    assert (a + a).cost_usd is None
    both = a + b
    assert (both.input, both.output, both.cache_read, both.calls) == (15, 3, 3, 2)
    assert both.cost_usd == 0.5 and both.model == "m2"
    assert total([]) == Usage()
    assert total([a, b, b]).cost_usd == 1.0


def test_a_usage_comes_back_whole_from_its_record() -> None:
    usage = Usage(4321, 876, 1111, 2222, 0.0231, 2, "stand-in")
    assert Usage.from_dict(usage.to_dict()) == usage
    # What a damaged record holds is not believed: no negative count, no cost from text.
    assert Usage.from_dict({"input": -5, "output": "7", "cost_usd": "1", "calls": True}) == Usage()


DATA = Path(__file__).parents[1] / "data" / "usage"
# The per-call figures the stand-in served (tests/modelscript.py), as hostagent counts them.
PER_CALL = Usage(SERVED["input"], SERVED["output"], SERVED["cache_read"], 0, None, 1)
WITH_CACHE_WRITE = Usage(
    SERVED["input"], SERVED["output"], SERVED["cache_read"], SERVED["cache_write"], None, 1
)


def times(usage: Usage, calls: int, cost: float | None = None, model: str = "") -> Usage:
    return Usage(
        usage.input * calls,
        usage.output * calls,
        usage.cache_read * calls,
        usage.cache_write * calls,
        cost,
        calls,
        model,
    )


# Each CLI's record after two turns against the stand-in (one answer, then a command approved
# and its answer: three model calls), and the session stopped. Aider, streaming, counts the
# tokens itself and ignores what the server says; it knows no price for the stand-in.
RECORDS = [
    (
        "claude",
        "2.1.332-two-turns-then-stopped.jsonl",
        times(WITH_CACHE_WRITE, 3, 0.09841259999999999, "claude-opus-5-5"),
    ),
    ("codex", "0.171.0-two-turns-then-stopped.jsonl", times(PER_CALL, 3, None, "stand-in")),
    ("gemini", "0.61.0-two-turns-then-stopped.jsonl", times(PER_CALL, 3, None, "gemini-3.8-flash")),
    ("qwen", "0.24.4-two-turns-then-stopped.jsonl", times(PER_CALL, 3, None, "stand-in")),
    ("opencode", "1.18.33-two-turns-then-stopped.jsonl", times(PER_CALL, 3, None, "stand-in")),
    ("copilot", "1.0.102-two-turns-then-stopped.jsonl", times(PER_CALL, 3, None, "gpt-4o")),
    ("pi", "1.6.0-two-turns-then-stopped.jsonl", times(PER_CALL, 3, None, "stand-in")),
    # Hermes's database row of the session (its running totals), as the reader is given it.
    ("hermes", "0.19.0-two-turns-then-stopped.jsonl", times(PER_CALL, 3, None, "stand-in")),
    # Cline's messages file of a session whose one turn was a command approved and its answer.
    (
        "cline",
        "3.0.65-a-command-approved-then-stopped.messages.json",
        times(PER_CALL, 2, None, "stand-in"),
    ),
    # Vibe's newest snapshot: its projection state, then the runtime state beside it.
    ("vibe", "3.0.2-two-turns-then-stopped.json", times(PER_CALL, 3, None, "")),
    # Continue's session file, and a fork of it whose one call is its own.
    (
        "continue",
        "1.5.47-six-calls-then-stopped.json",
        times(PER_CALL, 6, 0.036438000000000005, "stand-in"),
    ),
    ("continue", "1.5.47-forked-then-one-call.json", times(PER_CALL, 1, 0.006073, "stand-in")),
    ("aider", "0.86.2-two-turns-then-stopped.md", Usage(4700, 29, 0, 0, None, 2)),
]


@pytest.mark.parametrize(("cli", "name", "expected"), RECORDS, ids=[r[0] for r in RECORDS])
def test_each_clis_record_reads_as_what_the_model_served(
    cli: str, name: str, expected: Usage
) -> None:
    text = (DATA / cli / name).read_text(encoding="utf-8")
    assert READERS[cli](text) == expected
    # Read again, or read with a last line the CLI is still writing: the same figures.
    assert READERS[cli](text + text[: len(text) // 3].rsplit("\n", 1)[-1][:40]) == expected


def test_every_reader_has_a_real_record() -> None:
    assert {cli for cli, _, _ in RECORDS} == set(READERS)


@pytest.mark.parametrize("cli", sorted(READERS))
def test_a_record_with_nothing_in_it_reads_as_nothing(cli: str) -> None:
    for text in ("", "\n", "not json\n", '{"type": "assistant"}\n', "[1, 2]\n"):
        assert READERS[cli](text) == Usage()


def test_an_opencode_reply_still_streaming_is_not_a_call_yet() -> None:
    """OpenCode writes an assistant row when a reply starts, and its tokens when it ends: read
    in between, the row is no call (a reading then would count a call that used nothing)."""
    text = (DATA / "opencode" / "1.18.33-two-turns-then-stopped.jsonl").read_text(encoding="utf-8")
    streaming = {
        "id": "msg_new",
        "role": "assistant",
        "modelID": "stand-in",
        "cost": 0,
        "tokens": {
            "total": 0,
            "input": 0,
            "output": 0,
            "reasoning": 0,
            "cache": {"write": 0, "read": 0},
        },
        "time": {"created": 1796267240000},
    }
    assert READERS["opencode"](text + json.dumps(streaming) + "\n") == times(
        PER_CALL, 3, None, "stand-in"
    )


def test_the_helper_program_reads_as_its_modules_do(tmp_path: Path) -> None:
    """The program the daemon runs as the owner is usage/__init__.py, usage/readers.py and
    usage/records.py joined: run as the daemon runs it (no site, no environment), it prints
    what the modules read; a conversation with no record is left out."""
    record = tmp_path / "abc.jsonl"
    record.write_bytes((DATA / "claude" / "2.1.332-two-turns-then-stopped.jsonl").read_bytes())
    spec = {"abc": str(tmp_path / "*.jsonl"), "gone": str(tmp_path / "none" / "*.jsonl")}
    ran = subprocess.run(
        [sys.executable, "-I", "-S", "-c", PROGRAM, "claude", json.dumps(spec)],
        capture_output=True,
        text=True,
        env={},
        check=True,
    )
    printed = json.loads(ran.stdout)
    assert printed == read_all("claude", spec) == {"abc": read_all("claude", spec)["abc"]}
    assert Usage.from_dict(printed["abc"]) == READERS["claude"](record.read_text())
