"""Each user's answer rules (answerrules.py), kept by the daemon in its own state directory:
``answers/UID.yaml``, written as the daemon (root, for the system daemon), so that no session
of hers can write the rules that answer her agents' questions. She sets them over the bus from
outside every session (bus/questions.py), and the daemon reads them from here alone.
"""

from __future__ import annotations

import logging
from pathlib import Path

from hostagent import answerrules
from hostagent.answerrules import AnswerRule, RulesProblem
from hostagent.daemon.state.durable import replace_file

log = logging.getLogger(__name__)


class AnswerBook:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._rules: dict[int, tuple[AnswerRule, ...]] = {}

    def _path(self, uid: int) -> Path:
        return self.directory / f"{uid}.yaml"

    def rules(self, uid: int) -> tuple[AnswerRule, ...]:
        """uid's rules; none when they cannot be read (said in the journal)."""
        if uid not in self._rules:
            try:
                text = self._path(uid).read_text(encoding="utf-8")
                self._rules[uid] = answerrules.parse(text)
            except FileNotFoundError:
                self._rules[uid] = ()
            except (OSError, UnicodeDecodeError, RulesProblem) as e:
                log.warning("uid %d: answer rules not read: %s", uid, e)
                self._rules[uid] = ()
        return self._rules[uid]

    def set(self, uid: int, text: str) -> tuple[AnswerRule, ...]:
        """Keep text as uid's rules (RulesProblem when it cannot be; OSError when it cannot be
        written, the rules kept before staying); the rules kept."""
        rules = answerrules.parse(text)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = self._path(uid)
        if rules:
            replace_file(path, answerrules.dump(rules).encode())
        else:
            path.unlink(missing_ok=True)
        self._rules[uid] = rules
        return rules
