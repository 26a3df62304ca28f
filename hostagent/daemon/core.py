"""The daemon's parts, wired once: who holds whom and who listens to whom, in one place.

The arrows run one way: bus → lifecycle → {reconcile, endings, hooks, conversations,
terminal, usage} → registry → {store, session}; the edges (systemd, tmux, the scope runner,
running things as the owner, worktrees, the store) come in from outside as ports, so the
server hands in the real ones and the fast tests hand in fakes. No part registers itself
anywhere, and none is given a callback after it is made: ``assemble`` makes each part with
the parts and callbacks it calls as constructor arguments (none has a default, so a missing
one is a TypeError, not a call into nothing) and makes the listeners listen; the server
connects systemd's signals to the reconciler. ``front`` puts the bus objects over the core;
the tests use both as the server does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hostagent.daemon.bus.auth import Authorizer
from hostagent.daemon.bus.manager import BusFrontend
from hostagent.daemon.bus.placement import Placement
from hostagent.daemon.bus.services import Services
from hostagent.daemon.follow.activations import ActivationWatch
from hostagent.daemon.follow.autoanswer import AutoAnswer
from hostagent.daemon.follow.conversations.conversation import Conversations
from hostagent.daemon.follow.hooks.agenthooks import AgentHooks
from hostagent.daemon.follow.terminal import Terminal
from hostagent.daemon.follow.usage import UsageWatch
from hostagent.daemon.host import journal
from hostagent.daemon.host.counters import ScopeCounters
from hostagent.daemon.host.journal import JournalReaders
from hostagent.daemon.host.ports import Emitter, OwnerPort, ScopeRunner, WorktreePort
from hostagent.daemon.ops.ending import Endings
from hostagent.daemon.ops.leftovers import Leftovers
from hostagent.daemon.ops.lifecycle import Lifecycle
from hostagent.daemon.ops.reconcile import Reconciler
from hostagent.daemon.ops.recover import Recovery, RecoveryReport, resume_dormant
from hostagent.daemon.state.answerbook import AnswerBook
from hostagent.daemon.state.background import Background
from hostagent.daemon.state.creates import PendingCreates
from hostagent.daemon.state.ledger import Ledger
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.daemon.state.store import SidecarStore

log = logging.getLogger(__name__)


@dataclass
class Core:
    settings: Settings
    registry: Registry
    scopes: ScopeRunner
    terminal: Terminal
    conversations: Conversations
    hooks: AgentHooks
    endings: Endings
    reconciler: Reconciler
    lifecycle: Lifecycle
    background: Background
    usage: UsageWatch
    activations: ActivationWatch
    answers: AnswerBook

    @classmethod
    def assemble(
        cls,
        *,
        scopes: ScopeRunner,
        owners: OwnerPort,
        worktrees: WorktreePort,
        store: SidecarStore,
        settings: Settings,
        runtime_root: Path,
        system: bool,
        boot_id: str,
    ) -> Core:
        background = Background()
        registry = Registry(store, runtime_root, system)
        conversations = Conversations(registry, settings, background, owners)
        ledger = Ledger(store.directory / "usage", store.corrupt_dir, registry.records)
        # The store is made before the registry it is read into (the server's, a test's).
        store.holdings = registry.records
        usage = UsageWatch(
            registry,
            settings,
            background,
            ledger,
            conversations,
            owners,
            # The one arrow back up: a turn that ended over a budget is stopped by the
            # lifecycle, which is made below from what usage is given to. It is called only
            # once a session has run, long after assemble has returned.
            lambda session, why: lifecycle.stop_for_budget(session, why),
        )
        terminal = Terminal(registry, scopes.tmux, settings, usage.read_later)
        endings = Endings(registry, scopes, background, usage.after_end)
        hooks = AgentHooks(registry, settings, background, conversations, endings.agent_exited_soon)
        reconciler = Reconciler(registry, scopes, endings, background)
        lifecycle = Lifecycle(
            registry,
            scopes,
            owners,
            worktrees,
            terminal,
            conversations,
            hooks,
            endings,
            reconciler,
            settings,
            PendingCreates(store.directory / "creating"),
            boot_id,
            usage.over_budget,
        )
        answers = AnswerBook(store.directory / "answers")
        rules = AutoAnswer(registry, scopes.tmux, settings, answers, background)
        registry.listeners += [terminal, endings, conversations, usage, rules]
        activations = ActivationWatch(registry, scopes, endings.guard, journal.follow)
        return cls(
            settings,
            registry,
            scopes,
            terminal,
            conversations,
            hooks,
            endings,
            reconciler,
            lifecycle,
            background,
            usage,
            activations,
            answers,
        )

    def front(
        self,
        auth: Authorizer,
        placement: Placement,
        exporter: Emitter,
        reload: Callable[[], None],
    ) -> BusFrontend:
        """The bus objects over this core, listening to the registry; export_all puts them
        on the bus."""
        journal = JournalReaders(self.registry.system)
        counters = ScopeCounters(self.scopes.systemd)
        services = Services(
            self.lifecycle,
            self.lifecycle.owners,
            self.hooks,
            auth,
            placement,
            exporter,
            reload,
            journal,
            self.usage,
            counters,
            self.answers,
        )
        frontend = BusFrontend(services)
        self.registry.listeners.append(frontend)
        return frontend

    async def recover(self) -> RecoveryReport:
        """Recovery at start, then one reconcile pass over the units heard of meanwhile; the
        hooks FIFOs of running sessions are read again before any client is served."""
        report = await Recovery(
            self.registry,
            self.scopes,
            self.settings,
            self.reconciler,
            self.endings,
            self.lifecycle.forget,
            Leftovers(self.registry, self.lifecycle.pending, self.lifecycle.worktrees),
            self.lifecycle.boot_id,
        ).run()
        self.reconciler.recovered()
        self.hooks.open_pipes()
        return report

    def loops(self) -> list[Coroutine[Any, Any, None]]:
        """What runs for as long as the daemon serves: the terminal watches, a look at each
        running session's agent, the containment guard, the bus activations followed."""
        return [
            self.terminal.watch_all(),
            self.look_for_ended(),
            self.endings.guard.run(),
            self.activations.run(),
        ]

    async def resume_dormant(self, names: list[str], max_parallel: int, stagger: float) -> None:
        """The auto policy's resumes, after READY (ops/recover.py)."""
        await resume_dormant(self.lifecycle, self.registry, names, max_parallel, stagger)

    async def look_for_ended(self, parallel: int = 8) -> None:
        """A pane that died while the daemon was away reported to nobody: look at each running
        session once, a few at a time. The daemon does this after READY, so that a thousand
        live sessions (two tmux calls each) do not hold up its start."""

        async def look(session: Session) -> None:
            try:
                await self.endings.agent_exited(session)
            except Exception:
                log.exception("session '%s': failed to look at its agent", session.name)

        await self.registry.for_each_running(look, parallel)
