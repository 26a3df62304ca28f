"""An answer to a session's question, typed as the keys its dialog takes.

The first answer to come holds the question (state/asking.py) while it reads the screen again
and sends the keys; one arriving meanwhile, or after, is told the question is gone. The screen
is read again first so that a question answered in the terminal, or replaced, in between is
never answered from here: the keys go to the dialog the sender read, from where its highlight
stands now. A question asked by the agent's hook is answered through the hook's reply, which
the agent takes as its dialog's answer: nothing is typed.
"""

from __future__ import annotations

from hostagent import highlight, hookrequest, question
from hostagent.daemon.host import tmux
from hostagent.daemon.host.ports import TmuxPort
from hostagent.daemon.state.asking import ANSWER_TAKES, SOURCE_HOOK
from hostagent.daemon.state.live import Session
from hostagent.errors import InvalidArgs, NoQuestion, NotRunning
from hostagent.question import AnswerProblem, Choice


async def answer(tmux_client: TmuxPort, session: Session, id: str, said: str) -> Choice:
    """Answer session's question id with the choice said names (question.choose), as the keys
    its dialog takes, once the screen is read again and still shows it; the choice answered.
    NoQuestion when the question is gone, replaced or being answered; InvalidArgs when said
    names no choice, or one the terminal alone can answer."""
    asking = session.watch.asking if session.watch is not None else None
    asked = session.asked  # None unless it runs
    if asking is None or asked is None:
        raise NoQuestion(
            f"Session '{session.name}' asks nothing now; 'hostagentctl inbox' lists the "
            "questions waiting."
        )
    if asked.id != id:
        raise NoQuestion(
            f"Session '{session.name}' asks another question now ({asked.id}); read it again "
            "and answer that one."
        )
    if asking.answering:
        raise NoQuestion(f"Session '{session.name}': its question is being answered already.")
    try:
        index = question.choose(asked.question, said)
    except AnswerProblem as e:
        raise InvalidArgs(str(e)) from None
    if asked.source == SOURCE_HOOK:
        asking.took(asked, hookrequest.decision(index))
        if session.watch is not None:  # a dialog its CLI did not take the reply for is asked
            session.watch.look_again(ANSWER_TAKES + 0.1)
        return asked.question.choices[index]
    asking.answering = True
    try:
        # Choices side by side show their highlight only in a capture with its colours.
        sideways, coloured = asked.question.sideways, ""
        try:
            if sideways:
                coloured = await tmux_client.coloured_screen(session.owner, session.paths.socket)
                screen = highlight.plain(coloured)
            else:
                screen, _, _ = await tmux_client.screen_and_title(
                    session.owner, session.paths.socket
                )
        except tmux.TmuxError as e:
            raise NotRunning(f"Session '{session.name}' has no terminal: {e}") from None
        drawn = question.read(screen)
        still = asking.asked is not None and asking.asked.id == asked.id
        if drawn is None or not question.same(drawn, asked.question) or not still:
            raise NoQuestion(
                f"Session '{session.name}': its question left the screen before the answer "
                "came (answered in its terminal, or replaced); nothing was typed."
            )
        choice = drawn.choices[index]  # the keys from where the highlight stands now
        keys = choice.keys
        if sideways:
            at = highlight.selected(coloured, [c.label for c in drawn.choices])
            keys = highlight.moves(at, index) if at >= 0 else ()
        if not keys:
            raise _terminal_only(session, choice)
        try:
            await tmux_client.send_keys(session.owner, session.paths.socket, keys)
        except tmux.TmuxError as e:
            raise NotRunning(f"Session '{session.name}' has no terminal: {e}") from None
        except ValueError:  # keys no dialog takes: question.py reads none such
            raise _terminal_only(session, choice) from None
        asking.took(asked)
        if session.watch is not None:  # a dialog that dropped the keys is asked again
            session.watch.look_again(ANSWER_TAKES + 0.1)
        return choice
    finally:
        asking.answering = False


def _terminal_only(session: Session, choice: Choice) -> InvalidArgs:
    return InvalidArgs(
        f"Session '{session.name}': '{choice.label}' can only be chosen in its terminal; run "
        f"'hostagentctl attach {session.name}'."
    )
