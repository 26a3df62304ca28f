"""Answers a user keeps for her agents' questions: each rule names which questions it answers
(a preset, a pattern of the dialog's words: what it says above its question, the tool and the
command a permission dialog asks about, then the question; a working tree) and the choice it
gives.

    rules:
      - question: 'bash*command*npm test*'
        preset: claude
        cwd: /home/alice/src/app
        answer: "1"           # a choice's number, or the words it starts with

A pattern is a shell's (``*``, ``?``, ``[...]``; ``*`` takes line ends too), matched against
the dialog's words whole, without regard to case: the daemon matches it, and a glob cannot make it backtrack for ever as a
regular expression can. The first rule whose conditions all hold, and whose answer names one of
the question's choices, answers it. A rule with no condition would answer everything, which is
the CLI's own "approvals off": refused, saying so. The daemon keeps each user's rules (state/answerbook.py), set from
outside every session; this module reads, matches and writes them back. Pure.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import yaml

from hostagent.question import AnswerProblem, Question, choose
from hostagent.yamlfile import LOADER

MAX_RULES = 256
MAX_TEXT = 64 * 1024  # of a rules file, in UTF-8
MAX_PATTERN = 512
CONDITIONS = ("preset", "question", "cwd")


class RulesProblem(ValueError):
    """Rules that cannot be kept, said for the person who wrote them."""


@dataclass(frozen=True)
class AnswerRule:
    number: int  # its place among the rules, from 1, as the journal names it
    answer: str
    preset: str = ""
    question: str = ""  # a shell pattern of the dialog's words (question.words), any case
    cwd: str = ""  # the session's working directory is this or under it

    def answers(self, preset: str, cwd: str, q: Question) -> int | None:
        """The index of the choice this rule gives q, asked in a session of preset in cwd;
        None when it is not this rule's question."""
        if self.preset and self.preset != preset:
            return None
        if self.cwd and cwd != self.cwd and not cwd.startswith(self.cwd.rstrip("/") + "/"):
            return None
        if self.question and not fnmatch.fnmatchcase(q.words.lower(), self.question.lower()):
            return None
        try:
            return choose(q, self.answer)
        except AnswerProblem:
            return None  # its answer is no choice of this question's: another question


def parse(text: str) -> tuple[AnswerRule, ...]:
    """The rules a text holds; RulesProblem naming the first rule that cannot be kept."""
    if len(text.encode(errors="surrogateescape")) > MAX_TEXT:
        raise RulesProblem(f"Rules are at most {MAX_TEXT // 1024} KiB.")
    try:
        data = yaml.load(text, Loader=LOADER) if text.strip() else {}
    except yaml.YAMLError as e:
        raise RulesProblem(f"Not YAML: {str(e).splitlines()[0]}") from None
    except RecursionError:  # PyYAML's own loader, where libyaml's is missing
        raise RulesProblem("Not YAML that can be read: it nests too deep.") from None
    if data is None:
        data = {}
    if not isinstance(data, dict) or set(data) - {"rules"}:
        raise RulesProblem("Write a mapping with one key, 'rules': a list of rules.")
    listed = data.get("rules") or []
    if not isinstance(listed, list):
        raise RulesProblem("'rules' must be a list.")
    if len(listed) > MAX_RULES:
        raise RulesProblem(f"Keep at most {MAX_RULES} rules.")
    return tuple(_rule(i, item) for i, item in enumerate(listed, 1))


def _rule(number: int, item: object) -> AnswerRule:
    where = f"Rule {number}"
    if not isinstance(item, dict):
        raise RulesProblem(f"{where}: write it as a mapping (answer, preset, question, cwd).")
    unknown = set(item) - {"answer", *CONDITIONS}
    if unknown:
        raise RulesProblem(f"{where}: unknown keys {', '.join(sorted(map(str, unknown)))}.")
    values = {k: item[k] for k in item}
    for key, value in values.items():
        if key == "answer" and isinstance(value, bool):
            value = "yes" if value else "no"  # YAML reads a bare yes or no as a boolean
        elif not isinstance(value, str | int) or isinstance(value, bool):
            raise RulesProblem(f"{where}: '{key}' must be a string.")
        values[key] = str(value)
    if not values.get("answer", "").strip():
        raise RulesProblem(f"{where}: give its answer: a choice's number or its first words.")
    if not any(values.get(k) for k in CONDITIONS):
        raise RulesProblem(
            f"{where}: it would answer every question; give it a preset, a question or a cwd "
            "(the CLI's own settings turn its approvals off)."
        )
    if len(values.get("question", "")) > MAX_PATTERN:
        raise RulesProblem(f"{where}: 'question' is at most {MAX_PATTERN} characters.")
    if values.get("cwd") and not values["cwd"].startswith("/"):
        raise RulesProblem(f"{where}: 'cwd' must be an absolute path.")
    return AnswerRule(number, **values)


def matching(
    rules: tuple[AnswerRule, ...], preset: str, cwd: str, q: Question
) -> tuple[AnswerRule, int] | None:
    """The first rule that answers q, and the index of the choice it gives."""
    for rule in rules:
        index = rule.answers(preset, cwd, q)
        if index is not None:
            return rule, index
    return None


def dump(rules: tuple[AnswerRule, ...]) -> str:
    """The rules as parse reads them, for hostagentctl inbox --rules."""
    listed = [
        {k: v for k, v in (("answer", r.answer), *((c, getattr(r, c)) for c in CONDITIONS)) if v}
        for r in rules
    ]
    return yaml.safe_dump({"rules": listed}, sort_keys=False, allow_unicode=True)
