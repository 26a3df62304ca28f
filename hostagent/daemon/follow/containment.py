"""Whether a session's processes stay in its scope, and go when its agent does.

The scope is what makes a session's limits and accounting true. Two ways out are known from
real CLIs: a process of the agent's that moves itself into another cgroup (``systemd-run
--scope``, a tmux built with systemd that files panes under the user's manager), and a server
the agent starts and leaves behind when it exits (Codex's shared ``app-server``, which then
keeps the scope from ever emptying and serves later sessions' work from inside it). Neither is
stopped here, only seen: the session's ``Containment`` property says what was found, and the
journal has a line. The scope's stop ends what was left behind.

Reading /proc (host/procfs.py) is all this needs: a process's parent, children and cgroup
are readable by anyone. Running sessions are looked at from each agent down its own process tree (the kernel's
list of each thread's children), so the cost follows the sessions' processes, not everything
the host runs. What a tree walk cannot see: a process that double-forks (its parent exits, so
it is no longer the agent's descendant) and then leaves the scope. docs/security.md says so.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

from hostagent.daemon.host.pidone import NAME as INIT
from hostagent.daemon.host.ports import SystemdPort
from hostagent.daemon.host.procfs import Process, family, read
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.registry import Registry
from hostagent.session import State

log = logging.getLogger(__name__)

LEFTOVER_GRACE_SEC = 2.0  # what an exiting agent's own children (a SessionEnd hook) may take
CHECK_INTERVAL_SEC = 30.0  # how often running sessions are looked at for escaped processes
TMUX_SERVER = "tmux: server"
PIPE = "cat"  # the pane's output, copied by tmux's pipe-pane for the daemon


def tree(root: int) -> dict[int, Process]:
    """root and its living descendants, or nothing when root has no descendants: a lone
    process cannot have left its own cgroup behind, and reading it would be most of what an
    idle session costs the guard."""
    pids = family(root)
    if len(pids) < 2:
        return {}
    return {pid: proc for pid in pids if (proc := read(pid)) is not None}


def descendants(procs: dict[int, Process], root: int) -> list[Process]:
    children: dict[int, list[Process]] = {}
    for proc in procs.values():
        children.setdefault(proc.ppid, []).append(proc)
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child.pid)
    return found


def escaped(procs: dict[int, Process], agent_pid: int) -> list[Process]:
    """The agent's living descendants that are not in the agent's own cgroup."""
    agent = procs.get(agent_pid)
    if agent is None or not agent.cgroup:
        return []
    return [p for p in descendants(procs, agent_pid) if p.cgroup != agent.cgroup and not p.zombie]


def left_behind(procs: Iterable[Process | None]) -> list[Process]:
    """What still lives in a scope whose agent has exited, but for its tmux server, the
    server's own output pipe (pipe-pane's cat) and its PID namespace's init (pidone.py: the
    one process of the scope whose parent is outside it, which a name alone would not tell)."""
    alive = [p for p in procs if p is not None and not p.zombie]
    pids = {p.pid for p in alive}
    servers = {p.pid for p in alive if p.comm == TMUX_SERVER}
    return [
        p
        for p in alive
        if p.pid not in servers
        and not (p.ppid in servers and p.comm == PIPE)
        and not (p.comm == INIT and p.ppid not in pids)
    ]


def describe(procs: list[Process], what: str) -> str:
    names = ", ".join(f"{p.comm} ({p.pid})" for p in procs[:5])
    more = f" and {len(procs) - 5} more" if len(procs) > 5 else ""
    return f"{len(procs)} process{'es' if len(procs) != 1 else ''} {what}: {names}{more}"


async def leftovers(pids_of_scope: list[int]) -> list[Process]:
    """Processes the exited agent left in its scope, once its own exiting children had
    LEFTOVER_GRACE_SEC to go; read from /proc, rechecked by pid."""
    deadline = asyncio.get_running_loop().time() + LEFTOVER_GRACE_SEC
    while True:
        found = left_behind(read(pid) for pid in pids_of_scope)
        if not found or asyncio.get_running_loop().time() >= deadline:
            return found
        await asyncio.sleep(0.1)
        pids_of_scope = [p.pid for p in found]


class Guard:
    """Looks at every running session now and then for processes that left its scope, and
    says what a session's exited agent left behind (Endings calls ``after_exit``)."""

    def __init__(self, registry: Registry, systemd: SystemdPort) -> None:
        self.registry = registry
        self.systemd = systemd

    async def run(self) -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_SEC)
            try:
                await self.check()
            except Exception:
                log.exception("Failed to look for processes outside their scopes")

    async def check(self) -> None:
        running = [
            s
            for s in self.registry.sessions.values()
            if s.record.state is State.RUNNING and s.pane_pid
        ]
        # One trip to a thread for all of them: a thousand trees of an idle shell each are a
        # thousand short reads, not worth a thread hop each.
        trees = await asyncio.to_thread(lambda: [tree(s.pane_pid) for s in running])
        for session, procs in zip(running, trees, strict=True):
            if session.record.state is State.RUNNING and session.pane_pid:
                out = escaped(procs, session.pane_pid)
                if out:
                    where = ", ".join(sorted({p.cgroup for p in out}))
                    async with session.lock:  # a flag is a change like any other
                        if session.record.state is State.RUNNING and not session.removed:
                            self.flag(
                                session, describe(out, f"of the agent left its scope for {where}")
                            )

    async def after_exit(self, session: Session) -> str:
        """The agent has exited: what it left behind in its scope, said in words ("" for
        nothing), for the end's record (ending.py). The caller holds the lock and stops the
        scope next."""
        pids = await self.systemd.unit_pids(session.record.unit)
        left = await leftovers([p for p in pids if p != session.pane_pid])
        if not left:
            return ""
        note = describe(left, "left behind by the agent")
        log.warning("session '%s': %s", session.name, note)
        return note

    def flag(self, session: Session, note: str) -> None:
        """Say what escaped; the caller holds the session's lock."""
        if note == session.record.containment:
            return
        log.warning("session '%s': %s", session.name, note)
        self.registry.change(session, containment=note)
