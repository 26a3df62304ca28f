"""Questions answered by their owner's rules (answerrules.py, kept in state/answerbook.py): a
registry listener that looks at each new question of a session made outside every session
once (a hook's once its dialog is on the screen), and answers it as an answer from the bus
would be (follow/answering.py: the screen read again, the keys typed once), with one
journal line naming the rule. An admin turns rules off with ``answers: {rules: false}`` in
hostagent.yaml; a question no rule answers waits in the inbox as any other.
"""

from __future__ import annotations

import logging

from hostagent import answerrules
from hostagent.answerrules import AnswerRule
from hostagent.daemon.follow import answering
from hostagent.daemon.host.ports import TmuxPort
from hostagent.daemon.state.answerbook import AnswerBook
from hostagent.daemon.state.asking import Asked
from hostagent.daemon.state.background import Background
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.errors import HostAgentError
from hostagent.question import number_of

log = logging.getLogger(__name__)


class AutoAnswer:
    def __init__(
        self,
        registry: Registry,
        tmux_client: TmuxPort,
        settings: Settings,
        book: AnswerBook,
        background: Background,
    ) -> None:
        self.registry = registry
        self.tmux = tmux_client
        self.settings = settings
        self.book = book
        self.background = background
        self._looked: dict[str, str] = {}  # session -> the id of the question looked at last

    # ---- Listener -----------------------------------------------------------------------

    def session_added(self, session: Session) -> None:
        pass

    def session_removed(self, session: Session) -> None:
        self._looked.pop(session.name, None)

    def session_changed(self, session: Session) -> None:
        asked = session.asked
        if asked is None or self._looked.get(session.name) == asked.id:
            return
        if not asked.drawn:  # a hook's question no dialog stands behind yet: it may be a
            return  # process of the session's asking, to learn what its user's rules allow
        self._looked[session.name] = asked.id
        # Only a session made outside every session: an agent chooses its child's preset and
        # directory, and a child that matched its user's rules would approve its maker's work.
        if not self.settings.config.answer_rules or session.record.parent:
            return
        record = session.record
        rules = self.book.rules(record.owner)
        found = answerrules.matching(rules, record.preset, record.cwd, asked.question)
        if found is not None:
            rule, index = found
            choice = str(number_of(asked.question, index))
            self.background.start(self._answer(session, asked, rule, choice), "an answer rule")

    async def _answer(self, session: Session, asked: Asked, rule: AnswerRule, choice: str) -> None:
        try:
            chosen = await answering.answer(self.tmux, session, asked.id, choice)
        except HostAgentError as e:
            log.info(
                "session '%s': question %s not answered by rule %d: %s",
                session.name,
                asked.id,
                rule.number,
                e.message,
            )
            return
        self.registry.announce(session)
        log.info(
            "session '%s': question %s (%s) answered '%s' by rule %d of uid %d's answer rules",
            session.name,
            asked.id,
            asked.question.text,
            chosen.label,
            rule.number,
            session.record.owner,
        )
