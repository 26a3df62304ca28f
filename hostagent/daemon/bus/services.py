"""The daemon's parts that the bus objects call, handed to them once when they are exported.

The bus layer reaches nothing else: it reads, validates, authorizes, calls one of these, and
replies.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from hostagent.daemon.bus.auth import Authorizer
from hostagent.daemon.bus.placement import Placement
from hostagent.daemon.follow.hooks.agenthooks import AgentHooks
from hostagent.daemon.follow.terminal import Terminal
from hostagent.daemon.follow.usage import UsageWatch
from hostagent.daemon.host import sandboxing
from hostagent.daemon.host.counters import ScopeCounters
from hostagent.daemon.host.ports import Emitter, JournalPort, OwnerPort, ScopeRunner, SystemdPort
from hostagent.daemon.ops.lifecycle import Lifecycle
from hostagent.daemon.state.answerbook import AnswerBook
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.permissions import act_from_inside, has_owner_rights, tree_of
from hostagent.sandbox import SandboxProblem


@dataclass(frozen=True)
class Services:
    lifecycle: Lifecycle
    owners: OwnerPort
    hooks: AgentHooks
    auth: Authorizer
    placement: Placement
    exporter: Emitter
    reload: Callable[[], None]
    journal: JournalPort
    usage: UsageWatch
    counters: ScopeCounters
    answers: AnswerBook

    @property
    def registry(self) -> Registry:
        return self.lifecycle.registry

    @property
    def terminal(self) -> Terminal:
        return self.lifecycle.terminal

    @property
    def scopes(self) -> ScopeRunner:
        return self.lifecycle.scopes

    @property
    def systemd(self) -> SystemdPort:
        return self.lifecycle.scopes.systemd

    @property
    def settings(self) -> Settings:
        return self.lifecycle.settings

    @property
    def system(self) -> bool:
        return self.lifecycle.registry.system

    def daemon_uid(self) -> int:
        return 0 if self.system else os.getuid()

    async def caller_session(self, sender: str) -> Session | None:
        """The session whose scope the caller's connection came from (placement.py), None
        outside every session: what a call from inside a sandbox may do depends on it.
        AccessDenied when that cannot be known for certain."""
        unit = await self.placement.unit(sender)
        return self.registry.by_unit(unit) if unit else None

    def owner_rights(self, inside: Session) -> bool:
        """Whether a call from inside session inside has its owner's rights, not only those
        over the sessions made from inside it (permissions.has_owner_rights)."""
        records = {
            s.record.uuid: s.record for s in self.registry.sessions.values() if not s.removed
        }
        return has_owner_rights(inside.record, records, self._rights)

    def _rights(self, preset_name: str) -> str:
        preset = self.settings.preset(preset_name)
        return preset.rights if preset is not None else ""

    def act_from_inside(self, inside: Session, target: Session) -> None:
        """AccessDenied unless a call from inside session inside may act on target: its tree
        (or its owner's, with her rights), confined at least as it is (permissions.py)."""
        act_from_inside(
            inside.record,
            target.record,
            self.registry.lineage(target),
            self.owner_rights(inside),
            (self.cli_state(inside), self.cli_state(target)),
            sandboxing.context(inside.owner, inside.record.cwd, inside.record.repo),
        )

    def cli_state(self, session: Session) -> list[str]:
        """Where session's CLI keeps its own state (sandboxing.cli_state), which counts as
        its writable paths when a session inside a sandbox makes or acts on another; none
        when its preset's is no longer a path in the home."""
        try:
            return sandboxing.cli_state(
                self.settings.preset(session.record.preset), session.owner, session.record.cwd
            )
        except SandboxProblem:
            return []

    async def caller_tree(self, sender: str) -> tuple[Session, set[str]] | None:
        """For a call from inside a session without its owner's rights: that session, and the
        uuids of the sessions it sees (permissions.tree_of); None when the caller sees all."""
        inside = await self.caller_session(sender)
        if inside is None or self.owner_rights(inside):
            return None
        parents = {s.record.uuid: s.record.parent for s in self.registry.sessions.values()}
        return inside, tree_of(inside.record.uuid, parents)
