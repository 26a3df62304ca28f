"""CreateSession's options at the bus boundary, fuzzed: any input is either a valid request
or InvalidArgs, never another exception."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hostagent.errors import InvalidArgs
from hostagent.options import OPTION_TYPES, parse_options


def test_good_options() -> None:
    req = parse_options(
        {
            "args": ("as", ["-v"]),
            "env": ("a{ss}", {"A": "1"}),
            "memory_max": ("t", 1 << 30),
            "columns": ("q", 120),
            "properties": ("as", ["CPUQuota=50%", "AllowedCPUs=3,0-1", "MemoryLow=1024M"]),
        }
    )
    assert req.args == ["-v"] and req.env == {"A": "1"}
    assert req.limits.memory_max == 1 << 30 and req.columns == 120
    # kept in systemd's words, as status shows them back
    assert req.properties == ["CPUQuota=50%", "AllowedCPUs=0-1,3", "MemoryLow=1G"]


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"nope": ("s", "")}, id="unknown"),
        pytest.param({"args": ("s", "x")}, id="wrong-type"),
        pytest.param({"env": ("a{ss}", {"A=B": "1"})}, id="env-equals"),
        pytest.param({"env": ("a{ss}", {"A": "a\0b"})}, id="env-nul"),
        pytest.param({"env": ("a{ss}", {"": "1"})}, id="env-empty-key"),
        pytest.param({"tasks_max": ("t", 0)}, id="zero"),
        pytest.param({"cpu_weight": ("t", 10**9)}, id="absurd"),
        pytest.param({"columns": ("q", 3)}, id="tiny-terminal"),
        pytest.param({"command": ("as", [])}, id="empty-command"),
        pytest.param({"agent_session": ("s", "../../etc")}, id="agent-id-path"),
        pytest.param({"properties": ("as", ["CPUQuota"])}, id="property-without-value"),
        pytest.param({"properties": ("as", ["Delegate=yes"])}, id="property-not-ours"),
        pytest.param({"properties": ("as", ["IOWeight=0"])}, id="property-bad-value"),
        pytest.param({"properties": ("as", ["IOWeight=5"] * 65)}, id="too-many-properties"),
    ],
)
def test_bad_options(options: dict[str, tuple[str, Any]]) -> None:
    with pytest.raises(InvalidArgs):
        parse_options(options)


_values = st.one_of(
    st.text(),
    st.integers(min_value=0, max_value=2**64 - 1),
    st.lists(st.text(), max_size=3),
    st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
)
_signatures = st.sampled_from(["s", "t", "q", "u", "as", "a{ss}", "b", "i"])
_keys = st.one_of(st.sampled_from(sorted(OPTION_TYPES)), st.text(max_size=12))


@given(st.dictionaries(_keys, st.tuples(_signatures, _values), max_size=4))
def test_fuzzed_options_are_valid_or_invalid_args(options: dict[str, tuple[str, Any]]) -> None:
    typed = {
        k: (sig, v)
        for k, (sig, v) in options.items()
        if OPTION_TYPES.get(k) != sig or _fits(sig, v)
    }
    try:
        parse_options(typed)
    except InvalidArgs as e:
        assert e.message and "\n" not in e.message


def _fits(sig: str, value: Any) -> bool:
    """Only values the bus could really deliver for that signature."""
    return {
        "s": isinstance(value, str),
        "as": isinstance(value, list),
        "a{ss}": isinstance(value, dict),
        "t": isinstance(value, int),
        "q": isinstance(value, int) and value < 2**16,
        "u": isinstance(value, int) and value < 2**32,
    }.get(sig, False)


@pytest.mark.parametrize(
    "options",
    [
        pytest.param({"env": ("a{ss}", {"KEY\n": "v"})}, id="env-key-newline"),
        pytest.param({"agent_session": ("s", "abc\n")}, id="agent-id-newline"),
        pytest.param({"worktree": ("s", "feature\n")}, id="branch-newline"),
    ],
)
def test_a_trailing_newline_is_not_part_of_a_valid_name(
    options: dict[str, tuple[str, object]],
) -> None:
    with pytest.raises(InvalidArgs):
        parse_options(options)


def test_sizes_are_counted_in_bytes_as_exec_counts_them() -> None:
    from hostagent.options import MAX_ARGV_BYTES, size_problem

    wide = "€" * (MAX_ARGV_BYTES // 3 + 10)  # few enough characters, too many bytes
    assert len(wide) < MAX_ARGV_BYTES
    assert size_problem(["agent", wide], {}) is not None
    assert size_problem(["agent"], {"K": wide}) is not None
