"""A user's answer rules (hostagent/answerrules.py): what a rules text may hold, which rule
answers which question, and the text they are shown as."""

from __future__ import annotations

from dataclasses import replace

import pytest

from hostagent import answerrules
from hostagent.answerrules import RulesProblem
from hostagent.question import Choice, Question

BASH = Question(
    "Bash command npm test Run the tests Do you want to proceed?",
    (Choice("Yes", 1), Choice("Yes, and don't ask again for npm test", 2), Choice("No", 3)),
    0,
)
RULES = answerrules.parse(
    """
rules:
  - {preset: claude, question: "bash command npm test*", answer: "1"}
  - {cwd: /home/alice/src/app, question: "*rm -rf*", answer: "no"}
  - {preset: codex, answer: "yes, and"}
  - {preset: aider, answer: no}
"""
)


@pytest.mark.parametrize(
    "preset, cwd, q, answered",
    [
        ("claude", "/home/alice/src/app", BASH, (1, 0)),  # pattern matched, any case
        ("gemini", "/home/alice/src/app", BASH, None),  # another CLI's
        ("claude", "/tmp", replace(BASH, text="Bash command rm -rf build Proceed?"), None),
        ("qwen", "/home/alice/src/app/web", replace(BASH, text="Run rm -rf build?"), (2, 2)),
        ("qwen", "/home/alice/src/application", replace(BASH, text="Run rm -rf x?"), None),
        ("codex", "/tmp", BASH, (3, 1)),  # by its first words
        ("codex", "/tmp", Question("Trust?", (Choice("Trust"), Choice("Quit"))), None),
        ("aider", "/tmp", BASH, (4, 2)),  # YAML's bare no, a boolean, read as the word
    ],
)
def test_the_first_rule_that_holds_and_names_a_choice_answers(
    preset: str, cwd: str, q: Question, answered: tuple[int, int] | None
) -> None:
    found = answerrules.matching(RULES, preset, cwd, q)
    assert (None if found is None else (found[0].number, found[1])) == answered


@pytest.mark.parametrize(
    "text, problem",
    [
        ("rules: [{answer: '1'}]", "would answer every question"),
        ("rules: [{preset: claude}]", "give its answer"),
        ("rules: [{preset: claude, answer: '1', tool: Bash}]", "unknown keys tool"),
        ("rules: [{cwd: src, answer: '1'}]", "absolute path"),
        ("rules: [{question: [a], answer: '1'}]", "must be a string"),
        ("rules: {preset: claude}", "must be a list"),
        ("answers: []", "one key, 'rules'"),
        ("rules: [", "Not YAML"),
        (f"rules: [{{question: '{'x' * 600}', answer: '1'}}]", "at most 512"),
    ],
)
def test_rules_that_cannot_be_kept_are_refused_saying_why(text: str, problem: str) -> None:
    with pytest.raises(RulesProblem, match=problem):
        answerrules.parse(text)


def test_no_rules_is_an_empty_text_and_rules_read_back_as_written() -> None:
    assert answerrules.parse("") == () and answerrules.parse("rules: []") == ()
    assert answerrules.parse(answerrules.dump(RULES)) == RULES
    assert answerrules.dump(()) == "rules: []\n"


def test_rules_nested_too_deep_are_refused_not_a_crash() -> None:
    with pytest.raises(RulesProblem):
        answerrules.parse("rules: " + "[" * 3000 + "]" * 3000)
