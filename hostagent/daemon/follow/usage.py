"""Following what each session's agent uses, from its CLI's own record, as the owner.

When the session goes idle (a turn's end), when an id is learned while it runs, and once a run
has ended (``after_end``: with the conversation that end found, in one change), the daemon
reads the CLI's record of every conversation the session has had (its preset's ``usage``), as
the owner, in a helper scope under her slice: a ``python -I -S`` program
(``usagehelper.py``) that opens the records and reads them with ``hostagent/usage/readers.py``.
One reading per session at a time.

A reading replaces the session's per-conversation figures, so reading again counts nothing
twice, and a total survives restarts, reboots, resumes and a new conversation id. What rose
since the last reading goes into the owner's books (``state/ledger.py``) and the session's
count for the day, checked against the admin's budgets: a session over one stops at its turn's
end, dormant with reason ``budget`` (``Lifecycle.stop_for_budget``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import pwd
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from hostagent import activity, budgets, launch
from hostagent.daemon.follow.conversations.conversation import Conversations, ended_run
from hostagent.daemon.follow.usagehelper import PROGRAM
from hostagent.daemon.host import checkpoint
from hostagent.daemon.host.owner import OutputTooLarge
from hostagent.daemon.host.ports import OwnerPort
from hostagent.daemon.state.background import Background
from hostagent.daemon.state.ledger import Ledger
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.errors import HostAgentError
from hostagent.presets import IdSource, Preset
from hostagent.session import LIVE_STATES, Activity, RecordChange, State, now_usec
from hostagent.usage import Usage, since, total
from hostagent.usage.text import format_cost, format_tokens

log = logging.getLogger(__name__)

# Seconds after a turn's end to read again: a CLI may write its record after it has drawn its
# prompt (Qwen Code's memory sub-agent runs then), and nothing else wakes an idle session.
FOLLOW_UPS = (3.0, 15.0)


def session_usage(record_usage: dict[str, dict[str, Any]]) -> Usage:
    return total(Usage.from_dict(u) for u in record_usage.values())


def keyed(preset: Preset) -> bool:
    """Whether the CLI has conversation ids (its record read per id), else one per directory."""
    return preset.id_source is not IdSource.NONE


class UsageWatch:
    def __init__(
        self,
        registry: Registry,
        settings: Settings,
        background: Background,
        ledger: Ledger,
        conversations: Conversations,
        owners: OwnerPort,
        stop_for_budget: Callable[[Session, str], Awaitable[None]],
    ) -> None:
        self.registry = registry
        self.owners = owners
        self.conversations = conversations
        self.settings = settings
        self.background = background
        self.ledger = ledger
        self.stop_for_budget = stop_for_budget
        self._reading: set[str] = set()
        self._again: set[str] = set()
        # What each session showed when last heard of: activity, state, conversation id, and
        # the last hook report (a turn too quick to be seen working still ends with a hook).
        self._seen: dict[str, tuple[Activity, State, str, int]] = {}
        self._later: dict[str, list[asyncio.TimerHandle]] = {}
        # Sessions whose next reading follows a turn's end: a budget is checked after it.
        self._turn_ends: set[str] = set()

    # ---- Listener: a turn's end, an id learned --------------------------------------------

    def session_added(self, session: Session) -> None:
        """A new session, or one found at the daemon's start: a live one is read (turns may
        have ended while no daemon looked), an ended one only if its end was never read and
        no after_end is under way to read it."""
        record = session.record
        self._seen[session.name] = (session.activity, record.state, "", session.hooks_heard)
        unread = record.stopped_at > record.usage_read_at and not session.settling
        if record.state in LIVE_STATES or unread:
            # A new session: what a directory's record (Aider's) holds already is not its own.
            self.read_soon(session, baseline=record.state is State.STARTING and not record.usage)

    def session_removed(self, session: Session) -> None:
        self._seen.pop(session.name, None)
        self._again.discard(session.name)
        self._turn_ends.discard(session.name)
        for handle in self._later.pop(session.name, []):
            handle.cancel()
        self.ledger.forget(session.record.owner, session.record.uuid)

    def session_changed(self, session: Session) -> None:
        record = session.record
        now = (session.activity, record.state, record.agent_session, session.hooks_heard)
        before = self._seen.get(session.name)
        self._seen[session.name] = now
        if before is None or now == before:
            return
        idle = now[0] is Activity.IDLE
        went_idle = idle and (
            before[0] is not Activity.IDLE
            or (now[3] != before[3] and self._hook_ends_turn(session))
        )
        # A pane's first reading (after a start, the daemon's own) is read, and again later (a
        # quick turn may follow unseen), but it is no turn's end: budgets stop only at those.
        turn_ended = went_idle and before[0] is not Activity.UNKNOWN
        # A run's end is read by after_end; an id learned at that end comes with the reading.
        id_learned = now[2] != before[2] and now[1] in LIVE_STATES
        if went_idle or id_learned:
            self.read_soon(session, turn_end=turn_ended)
        if went_idle:
            self.read_later(session, turn_ended)

    def _hook_ends_turn(self, session: Session) -> bool:
        """Whether the last hook report says the agent went idle (Claude's Stop): a prompt
        submitted is heard while the screen still shows idle, and is no turn's end."""
        report, preset = session.last_hook, self.settings.preset(session.record.preset)
        if report is None or preset is None:
            return False
        verdict = activity.hook_verdict(preset.activity, report.event, report.subtype)
        return verdict is not None and verdict.activity is Activity.IDLE

    def read_later(self, session: Session, turn_end: bool = False) -> None:
        """Read again FOLLOW_UPS after a turn's end (turn_end) or a line sent; timers only."""
        for handle in self._later.pop(session.name, []):
            handle.cancel()
        loop = asyncio.get_running_loop()
        self._later[session.name] = [
            loop.call_later(delay, self._read_if_running, session, turn_end) for delay in FOLLOW_UPS
        ]

    def close(self) -> None:
        """No follow-up reading starts after this (the daemon stopping)."""
        for handles in self._later.values():
            for handle in handles:
                handle.cancel()
        self._later.clear()

    def _read_if_running(self, session: Session, turn_end: bool) -> None:
        if not session.removed and session.record.state is State.RUNNING:
            self.conversations.look_soon(session)  # a turn too quick to be seen: its id, too
            self.read_soon(session, turn_end=turn_end)

    def read_soon(self, session: Session, baseline: bool = False, turn_end: bool = False) -> None:
        """Read the session's usage soon (once more after a reading under way); after a
        turn's end (turn_end), check the budgets too: a session is stopped only there."""
        preset = self.settings.preset(session.record.preset)
        if preset is None or not preset.usage_format:
            return
        if turn_end:
            self._turn_ends.add(session.name)
        if session.name in self._reading:
            self._again.add(session.name)
            return
        self._reading.add(session.name)
        self.background.start(
            self._read(session, preset, baseline and not keyed(preset)),
            f"read session '{session.name}''s usage",
        )

    # ---- reading ------------------------------------------------------------------------------

    async def _read(self, session: Session, preset: Preset, baseline: bool) -> None:
        try:
            while True:
                self._again.discard(session.name)
                await self.read(session, preset, baseline)
                baseline = False
                if session.name not in self._again or session.removed:
                    return
        except (OSError, OutputTooLarge, KeyError) as e:  # a helper that could not run
            log.warning("session '%s': Failed to read its usage: %s", session.name, e)
        finally:
            self._reading.discard(session.name)

    def _patterns(self, session: Session, preset: Preset, agent_id: str = "") -> dict[str, str]:
        record = session.record
        ids = (
            [agent_id, record.agent_session, *record.agent_session_history]
            if keyed(preset)
            else [""]
        )
        home = session.owner.home
        return {
            i: launch.conversation_glob(preset.usage_file, i, home, record.cwd, record.env)
            for i in dict.fromkeys(ids)
            if i or not keyed(preset)
        }

    async def after_end(self, session: Session, run: int) -> None:
        """A run's end (its stop time run), recorded already: the conversation it ended in
        and its usage, both looked up off the lock, recorded in one change unless the session
        has moved on meanwhile (ending.py)."""
        preset = self.settings.preset(session.record.preset)
        if preset is None or not preset.usage_format:
            await self.conversations.after_end(session, run)
            return
        agent_id = await self.conversations.find(session)
        found = await self.found(session, preset, agent_id)
        async with session.lock:
            if not ended_run(session, run):
                return
            self.registry.settling(session, False)
            fields = self.conversations.id_fields(session, agent_id, "discovered", "")
            if found is not None:
                fields.update(self._fields(session, preset, found))
            if fields:
                self.registry.change(session, **fields)

    async def found(
        self, session: Session, preset: Preset, agent_id: str = ""
    ) -> dict[str, Usage] | None:
        """Each conversation's usage as its record says now (agent_id's too, when the session
        is about to take it); None when it could not be read."""
        patterns = self._patterns(session, preset, agent_id)
        if not patterns:
            return {}
        argv = [
            sys.executable,
            "-I",
            "-S",
            "-c",
            PROGRAM,
            preset.usage_format,
            json.dumps(patterns),
        ]
        # In a scope of its own under the owner's slice, as her own code runs: it parses what
        # she and her agent wrote (SQLite among it), and what that costs is hers.
        result = await self.owners.run(
            session.owner, argv, timeout=30.0, runs_user_code="usage reader"
        )
        if result is None or result[0] != 0:
            log.warning(
                "session '%s': Failed to read its usage: %s",
                session.name,
                "timed out" if result is None else result[2].decode(errors="replace")[-300:],
            )
            return None
        prices = self.settings.config.budgets.prices
        try:
            read = json.loads(result[1])
            return {str(k): budgets.priced(Usage.from_dict(v), prices) for k, v in read.items()}
        except (ValueError, AttributeError):
            return None

    async def read(self, session: Session, preset: Preset, baseline: bool = False) -> None:
        turn_end = session.name in self._turn_ends
        self._turn_ends.discard(session.name)
        found = await self.found(session, preset)
        if found is None:
            return
        async with session.lock:
            if session.removed:
                return
            if baseline:
                base = found.get("", Usage())
                self.registry.change(session, usage_base=base.to_dict())
                return
            fields = self._fields(session, preset, found)
            if fields:
                await checkpoint.reached(checkpoint.USAGE_ENTERED, session.name)
                self.registry.change(session, **fields)
        if turn_end:
            await self._check_budget(session)

    def _fields(self, session: Session, preset: Preset, found: dict[str, Usage]) -> RecordChange:
        """The record's fields a reading changes (the books entered on the way); {} when it
        found nothing new. An ended run's journal line is written once, at its first reading."""
        record = session.record
        if not keyed(preset):
            found = {"": since(Usage.from_dict(record.usage_base), found.get("", Usage()))}
        book = {**record.usage, **{k: u.to_dict() for k, u in found.items()}}
        added = since(session_usage(record.usage), session_usage(book))
        now = now_usec()
        day = budgets.day_of(now)
        today = Usage.from_dict(record.usage_today) if record.usage_day == day else Usage()
        fields: RecordChange = {}
        if book != record.usage:
            fields.update(
                {"usage": book, "usage_day": day, "usage_today": (today + added).to_dict()}
            )
        # The books count from their own marks, so a reading entered there whose record a
        # crash lost is not counted twice when it is read again (state/ledger.py).
        self.ledger.enter(
            record.owner,
            record.uuid,
            record.preset,
            now,
            {k: u.to_dict() for k, u in found.items()},
        )
        if record.state not in LIVE_STATES and (fields or record.stopped_at > record.usage_read_at):
            fields.update(self._end_line(session, session_usage(book)))
            fields["usage_read_at"] = now
        return fields

    def _end_line(self, session: Session, used: Usage) -> RecordChange:
        """The journal line of a run's usage, once per run: what the run added, in fields
        that journalctl can select and sum (HOSTAGENT_OWNER_UID=, HOSTAGENT_INPUT_TOKENS=)."""
        run = since(Usage.from_dict(session.record.usage_logged), used)
        if not (run.tokens or run.calls):
            return {}
        fields = {
            "HOSTAGENT_INPUT_TOKENS": str(run.input),
            "HOSTAGENT_OUTPUT_TOKENS": str(run.output),
            "HOSTAGENT_CACHE_READ_TOKENS": str(run.cache_read),
            "HOSTAGENT_CACHE_WRITE_TOKENS": str(run.cache_write),
            "HOSTAGENT_MODEL_CALLS": str(run.calls),
            "HOSTAGENT_MODEL": run.model,
        }
        if run.cost_usd is not None:
            fields["HOSTAGENT_COST_USD"] = f"{run.cost_usd:.6f}"
        log.info(
            "session '%s': this run used %s tokens in, %s out, in %d model calls, cost %s",
            session.name,
            format_tokens(run.input),
            format_tokens(run.output),
            run.calls,
            format_cost(run.cost_usd),
            extra={"journal": fields},
        )
        return {"usage_logged": used.to_dict()}

    # ---- budgets --------------------------------------------------------------------------

    def over_budget(self, uid: int, session: Session | None) -> str:
        """Why uid's sessions (or session alone, when given) may not go on today, or ""."""
        config = self.settings.config.budgets
        if not (config.user or config.session or config.users):
            return ""
        now = now_usec()
        day = budgets.day_of(now)
        owner_today = total(self.ledger.used(uid, day, now + 1).values())
        session_today = Usage()
        if session is not None and session.record.usage_day == day:
            session_today = Usage.from_dict(session.record.usage_today)
        name = session.owner.name if session is not None else _user_name(uid)
        lifted = self.ledger.lifted(uid, day)
        return budgets.over_budget(config, name, owner_today, session_today, lifted)

    async def _check_budget(self, session: Session) -> None:
        if session.record.state is not State.RUNNING or session.activity is not Activity.IDLE:
            return  # a turn still going is let finish; its end reads again
        why = self.over_budget(session.record.owner, session)
        if not why:
            return
        try:
            await self.stop_for_budget(session, why)
        except HostAgentError as e:  # said in a line: its next turn's end tries again
            log.warning("session '%s': Failed to stop it for its budget: %s", session.name, e)


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def usage_of(session: Session) -> Usage:
    return session_usage(session.record.usage)
