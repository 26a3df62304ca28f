"""How a session ends, and saying why.

tmux keeps a pane whose program exited (``remain-on-exit``) and runs the ``pane-died`` hook,
which writes one line into the owner's hooks FIFO. The daemon then reads the exit status or
signal from tmux, keeps the final screen (``capture`` shows it until a resume or a remove),
and stops the scope itself: the session is ``stopped`` after a clean exit and ``failed`` with
the reason otherwise. A unit that ends without its pane reporting (RuntimeMaxSec, the OOM
killer, a ``kill`` of every process) is explained from systemd's Result for the scope. An end
that comes with the machine's shutdown is not the session's: it is left for recovery, which
makes the session dormant.

``Endings.finish`` is the one end of a session's run, whoever saw it: a stop that was asked
for, the agent's exit, the unit's end, a stop that finished while the daemon was away. It
writes the record once, with everything known about the end (result, reason, status, signal,
what the agent left behind). What is learned after it, off the session's lock (the
conversation the run ended in, and its usage), is one more change at most (``after_end``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from hostagent.daemon.follow import containment
from hostagent.daemon.host import tmux
from hostagent.daemon.host.ports import ScopeRunner
from hostagent.daemon.host.scope import JOB_TIMEOUT
from hostagent.daemon.state.background import Background
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.session import (
    SUCCESS,
    DormantReason,
    Event,
    RecordChange,
    State,
    agent_end,
    unit_end,
)

log = logging.getLogger(__name__)

FINAL_LINES = 200  # of scrollback kept with the final screen


@dataclass(frozen=True)
class End:
    """How a run ended: systemd's Result word, why in words ("" for a clean end), the
    agent's exit status or signal when it had one, and what it left in its scope (None: the
    record's note stands)."""

    result: str = SUCCESS
    why: str = ""
    status: int = 0
    signal: int = 0
    containment: str | None = None


CLEAN = End()


class Endings:
    def __init__(
        self,
        registry: Registry,
        scopes: ScopeRunner,
        background: Background,
        after_end: Callable[[Session, int], Coroutine[Any, Any, None]],
    ) -> None:
        """after_end: what follows a run's end, off the lock (follow/usage.py's: the
        conversation it ended in and its usage, recorded in one change)."""
        self.registry = registry
        self.scopes = scopes
        self.background = background
        self.guard = containment.Guard(registry, scopes.systemd)
        self.after_end = after_end

    # ---- Listener: a session that no longer runs has no agent to follow ----------------

    def session_added(self, session: Session) -> None:
        pass

    def session_changed(self, session: Session) -> None:
        if session.record.state is not State.RUNNING:
            self.unfollow(session)

    def session_removed(self, session: Session) -> None:
        self.unfollow(session)

    # ---- following the agent ----------------------------------------------------------------

    def follow(self, session: Session, pane_pid: int) -> None:
        """Watch the agent's process as well as tmux's hook, which tmux can fail to run."""
        self.registry.unfollow(session)
        unfollow = None
        if pane_pid > 0:
            unfollow = self.scopes.follow_process(pane_pid, lambda: self.agent_exited_soon(session))
        self.registry.follow(session, pane_pid, unfollow)
        if pane_pid > 0 and unfollow is None:  # it is gone already
            self.agent_exited_soon(session)

    def unfollow(self, session: Session) -> None:
        self.registry.unfollow(session)

    def agent_exited_soon(self, session: Session) -> None:
        self.background.start(
            self.agent_exited(session), f"look at session '{session.name}''s agent"
        )

    async def _how_it_ended(self, session: Session) -> tuple[int | None, int | None] | None:
        """(status, signal) of the agent once it has ended, else None. tmux says so for a
        pane it reaped; a zombie it never reaped says so itself."""
        owner, sock = session.owner, session.paths.socket
        if not session.pane_pid:  # adopted: follow the agent from now on
            leader = session.record.leader_pid
            self.follow(session, await self.scopes.agent_pid(owner, sock, leader))
        dead, status, signal = await self.scopes.tmux.pane_end(owner, sock)
        if status is not None or signal is not None:
            return status, signal
        code = self.scopes.exit_status_of(session.pane_pid) if session.pane_pid else None
        if code is not None:
            if os.WIFSIGNALED(code):
                return None, os.WTERMSIG(code)
            return os.WEXITSTATUS(code), None
        return (None, None) if dead else None

    def _keep_screen(self, session: Session, captured: str | None) -> None:
        """The screen the ended session shows: the one captured from its dead pane, or, for
        a run that ended with its terminal (a stop, a kill of the whole scope, the OOM
        killer), the last one its pane watch read."""
        seen = session.watch.last_screen if session.watch is not None else ""
        if captured is not None or tmux.agent_screen(seen):
            self.registry.store.save_screen(session.name, tmux.final_screen(captured or "", seen))

    async def agent_exited(self, session: Session) -> None:
        """The pane-died hook fired, the agent's process exited, or recovery looks: if the
        agent is gone, keep its last screen and end the session with the reason."""
        async with session.lock:
            record = session.record
            if session.removed or record.state is not State.RUNNING:
                return
            try:
                ended = await self._how_it_ended(session)
                if ended is None:
                    return  # it runs (a forged or stale report)
                screen = await self.scopes.tmux.capture(
                    session.owner, session.paths.socket, FINAL_LINES
                )
            except tmux.TmuxError:
                return  # the server is gone already; the unit's end is reconciled
            if await self.left_to_recovery(session):
                return
            status, signal = ended
            result, why = agent_end(status, signal)
            log.info("session '%s': %s", session.name, why or "the agent exited")
            left = await self.guard.after_exit(session)
            # Under the lock: the unit's end that this stop causes is reconciled after the
            # session is already finished, and so is not news.
            await self.scopes.stop(record.unit, JOB_TIMEOUT)
            end = End(result, why, status or 0, signal or 0, left or None)
            await self.finish(session, end, screen)

    async def left_to_recovery(self, session: Session) -> bool:
        """An end heard while the machine shuts down is the shutdown's: the record stays as it
        is, and recovery at the next start makes the session dormant. (Scopes this daemon
        started are stopped only after it; this covers those an older one started.)"""
        if not await self.scopes.systemd.shutting_down():
            return False
        log.info("session '%s' ends with the system; left for recovery", session.name)
        return True

    async def unit_ended(self, session: Session, unit_result: str) -> None:
        """The unit went away while the session ran, without its pane reporting."""
        result, why = unit_end(
            unit_result, session.killed_with, session.record.limits.runtime_max_sec
        )
        log.info("session '%s': %s", session.name, why or "the agent exited")
        await self.finish(session, End(result, why, 0, session.killed_with))

    async def finish(self, session: Session, end: End = CLEAN, screen: str | None = None) -> None:
        """The one end of a session's run, in one write: how it ended, through the state
        machine (stopped after a clean end, failed otherwise; kept whatever the disk says),
        with the screen captured from its dead pane (None: there was none). Its terminal's
        socket goes; the agent is no longer followed once the change is heard (the listener
        above). The conversation it was in and its usage are looked up after, off the lock.
        The caller holds the lock."""
        self._keep_screen(session, screen)
        fields: RecordChange = {
            "result": end.result,
            "exit_status": end.status,
            "exit_signal": end.signal,
        }
        if end.containment is not None:
            fields["containment"] = end.containment
        record = session.record
        if end.result != SUCCESS:
            event, fields["last_error"] = Event.FAIL, end.why
        elif record.state is State.STOPPING and record.dormant_reason is DormantReason.BUDGET:
            event = Event.OVER_BUDGET  # a stop for a budget: dormant, its LastError kept
        else:
            event, fields["last_error"] = Event.UNIT_GONE, end.why
        self.registry.change(session, event, **fields)
        self.registry.forget_end_causes(session)
        self.registry.settling(session, True)
        tmux.remove_socket(session.paths.socket)
        self.background.start(
            self.after_end(session, session.record.stopped_at),
            f"look up session '{session.name}''s conversation and usage",
        )
