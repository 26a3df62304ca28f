from __future__ import annotations

import pytest

from hostagent.session import (
    Event,
    InvalidTransition,
    State,
    generate_name,
    name_from_unit,
    name_problem,
    transition,
    unit_name,
)


@pytest.mark.parametrize(
    ("state", "event", "after"),
    [
        pytest.param(State.STOPPED, Event.START, State.STARTING, id="resume-stopped"),
        pytest.param(State.DORMANT, Event.START, State.STARTING, id="resume-dormant"),
        pytest.param(State.FAILED, Event.START, State.STARTING, id="resume-failed"),
        pytest.param(State.STARTING, Event.STARTED, State.RUNNING, id="job-done"),
        pytest.param(State.STARTING, Event.START_FAILED, State.FAILED, id="job-failed"),
        pytest.param(State.RUNNING, Event.STOP, State.STOPPING, id="stop"),
        pytest.param(State.STOPPING, Event.UNIT_GONE, State.STOPPED, id="stopped"),
        pytest.param(State.RUNNING, Event.UNIT_GONE, State.STOPPED, id="agent-exited"),
        pytest.param(State.RUNNING, Event.UNIT_LOST, State.DORMANT, id="lost"),
        pytest.param(State.DORMANT, Event.ADOPT, State.RUNNING, id="adopt"),
    ],
)
def test_transitions(state: State, event: Event, after: State) -> None:
    assert transition(state, event) is after


@pytest.mark.parametrize(
    ("state", "event"),
    [
        pytest.param(State.RUNNING, Event.START, id="resume-running"),
        pytest.param(State.STARTING, Event.START, id="resume-starting"),
        pytest.param(State.STOPPING, Event.START, id="resume-stopping"),
        pytest.param(State.STOPPED, Event.STOP, id="stop-stopped"),
        pytest.param(State.DORMANT, Event.STARTED, id="started-dormant"),
    ],
)
def test_impossible_transitions(state: State, event: Event) -> None:
    with pytest.raises(InvalidTransition):
        transition(state, event)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("a", True),
        ("claude-1x2z", True),
        ("a.b_c-d", True),
        ("x" * 63, True),
        ("", False),
        ("x" * 64, False),
        ("../x", False),
        ("a/b", False),
        ("Abc", False),
        ("-a", False),
        ("héllo", False),
        ("a b", False),
    ],
)
def test_names(name: str, ok: bool) -> None:
    assert (name_problem(name) is None) is ok


def test_generated_names_are_valid_and_free() -> None:
    taken = {generate_name("claude", set()) for _ in range(50)}
    name = generate_name("Weird Preset!", taken)
    assert name_problem(name) is None and name not in taken


def test_unit_names_round_trip() -> None:
    assert name_from_unit(unit_name("abc")) == "abc"
    assert name_from_unit("hostagent-../x.scope") is None
    assert name_from_unit("other.scope") is None


def test_states_are_their_wire_strings() -> None:
    assert [State(s.value) for s in State] == list(State)
    assert str.__eq__(State.RUNNING, "running")  # a StrEnum is its wire string


def test_a_name_with_a_trailing_newline_is_refused() -> None:
    from hostagent.session import name_problem

    assert name_problem("x\n") is not None
