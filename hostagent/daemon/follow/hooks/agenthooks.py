"""The agents' hooks: each session's hooks file, the hooks FIFO of each owner, and what a report
says.

A preset with ``hooks:`` gets a settings file of the CLI's own format before each start,
whose hooks write one line (the session's name, its hook token, the event's fields) into the
owner's FIFO; tmux's pane-died hook writes there too. ``AgentHooks`` reads every owner's FIFO,
believes a line only with the session's own token, and hands it on: a pane's death to the
endings (``on_pane_died``, given by core.py), an event through ``HookFlow`` (a flood is paced)
to ``report_hook``, which records what the agent said it is doing and gives any conversation
id it names to ``Conversations``. ``ReportHook`` on the bus comes to ``report_hook`` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from hostagent import activity, hookrequest, mcp_registration, sandbox
from hostagent.daemon.follow.conversations.conversation import Conversations
from hostagent.daemon.follow.hooks import formats, hookpipe
from hostagent.daemon.follow.hooks.hookflow import HookFlow
from hostagent.daemon.host.runtimedir import write_file
from hostagent.daemon.state.background import Background
from hostagent.daemon.state.live import Session
from hostagent.daemon.state.paths import PANE_DIED, ROOT_HOOKS_DIR, SessionPaths
from hostagent.daemon.state.registry import Registry
from hostagent.daemon.state.settings import Settings
from hostagent.identity import Owner
from hostagent.options import CreateRequest
from hostagent.permissions import TOKEN_ENV, token_matches
from hostagent.presets import EXTENSIONS_DIR, Preset
from hostagent.session import SessionRecord, State

log = logging.getLogger(__name__)
# hostagentctl, where the daemon finds it: the program of every session's MCP server.
CTL = shutil.which("hostagentctl") or "hostagentctl"
ASK_MARGIN = 30  # seconds a waiting hook is given beyond the daemon's wait, to hear "none"
# Seconds between a hook's report that it asks (its FIFO line) and its question (a bus call,
# after a Python start) that the dialog drawn meanwhile is held back, at most.
ASK_GRACE = 5.0


def command_with_hooks(
    preset: Preset, command: list[str], paths: SessionPaths, server: list[str]
) -> list[str]:
    """The command with the preset's hook arguments, which name the session's hooks file (or
    the extension of hostagent's that reports for it), and those that register server
    (hostagent's MCP server; [] for none) in its CLI."""
    path, extension = str(paths.hooks_file), str(EXTENSIONS_DIR / preset.hooks_extension)
    hooked = list(command) + [
        a.replace("{hooks_file}", path).replace("{extension}", extension) for a in preset.hooks_args
    ]
    return hooked + _registration(preset, server, paths).args


def mcp_server(record: SessionRecord, system: bool) -> list[str]:
    """The command line of the session's MCP server; [] when it has none."""
    return mcp_registration.server_command(CTL, system) if record.mcp else []


def _registration(
    preset: Preset | None, server: list[str], paths: SessionPaths
) -> mcp_registration.Registration:
    if preset is None or not server or not preset.mcp_format:
        return mcp_registration.Registration()
    return mcp_registration.registration(preset.mcp_format, server, str(paths.mcp_file))


RETIRED_MAX = 4  # replaced FIFOs of one owner still read


class AgentHooks:
    def __init__(
        self,
        registry: Registry,
        settings: Settings,
        background: Background,
        conversations: Conversations,
        on_pane_died: Callable[[Session], None],
    ) -> None:
        """on_pane_died: told when a line says a session's pane died (tmux's hook;
        ending.py's agent_exited_soon verifies it)."""
        self.registry = registry
        self.settings = settings
        self.conversations = conversations
        self.pipes: dict[int, hookpipe.HookPipe] = {}
        # FIFOs removed or replaced under running sessions, still read: a session keeps the one
        # its start found in its veil, and its hooks and tmux's pane-died line go there.
        self.retired: dict[int, list[hookpipe.HookPipe]] = {}
        self.flow = HookFlow(self.report_hook, background)
        self.on_pane_died = on_pane_died

    # ---- a session's hooks file -------------------------------------------------------------

    def hooks_path(self, preset: Preset, session: Session) -> Path | None:
        """Where the session's hooks file goes; None when the CLI would not read it.

        Gemini CLI reads a system-defaults file only when it and every directory above it
        belong to root and nobody else may write them, so its file goes to a root-owned
        directory of the system daemon's; a user's daemon cannot make one, and Gemini's
        sessions there are read from the screen alone."""
        if preset.hooks_format not in formats.ROOT_OWNED_FORMATS:
            return session.paths.hooks_file
        if not self._writes_root_owned():
            return None
        return formats.root_hooks_file(self.registry.runtime_root, session.name)

    def _writes_root_owned(self) -> bool:
        """Whether this daemon can write a file only root may (the system daemon, as root)."""
        return self.registry.system and os.geteuid() == 0

    def mcp_server_for(self, preset: Preset, req: CreateRequest) -> list[str]:
        """The MCP server of a new session of preset's, as req asks or by default; [] for
        none. Gemini CLI reads it from its hooks file, which only the system daemon can write
        where Gemini takes it; a user's daemon closes its own bus to a sandboxed session, an
        agent's under the agent profile among them (its user is the daemon's)."""
        why_not = ""
        if preset.mcp_format in formats.ROOT_OWNED_FORMATS and not self._writes_root_owned():
            why_not = f"{preset.name} reads it only from a file a user's daemon cannot write"
        elif not self.registry.system and self._sandboxed_here(preset, req):
            why_not = (
                "a sandboxed session of a user's daemon cannot reach its bus (an agent's is, "
                "under the agent profile, unless created --unconfined)"
            )
        default = preset.mcp_default or self.settings.config.mcp
        if not mcp_registration.wanted(req.mcp, preset.mcp_format, default, preset.name, why_not):
            return []
        return mcp_registration.server_command(CTL, self.registry.system)

    def _sandboxed_here(self, preset: Preset, req: CreateRequest) -> bool:
        """Whether a create on this user's daemon makes a sandboxed session: its words over
        the agent profile's for the daemon's own user, when its preset is an agent's."""
        agents = self.settings.config.sandbox.agents
        words = agents.of(Owner.from_uid(os.getuid()).name) if preset.confined else []
        return sandbox.read([*words, *req.properties]).confined

    def hook_env(self, preset: Preset | None, session: Session) -> dict[str, str]:
        """Environment that points the CLI at the session's hooks file (Gemini, Qwen), and
        the secret its hooks' reports carry (tmux's pane-died hook carries it too)."""
        path = preset and preset.hooks_format and self.hooks_path(preset, session)
        if preset is None or not path:
            return {**self._tools(session, preset).env, TOKEN_ENV: session.record.hook_token}
        env = {k: v.replace("{hooks_file}", str(path)) for k, v in preset.hooks_env.items()}
        tools = self._tools(session, preset).env
        return {**env, **tools, TOKEN_ENV: session.record.hook_token}

    def write_hooks(self, session: Session, preset: Preset | None) -> None:
        """(Re)write the session's hooks file before each start; /run does not survive a boot.
        The owner's FIFO is read for every session: tmux reports a pane's end through it.
        The file naming hostagent's MCP server is written here too, for a session that has it."""
        self.open_pipe(session)
        tools = self._tools(session, preset)
        if tools.file_text:
            write_file(session.paths.mcp_file, tools.file_text)
        path = preset and preset.hooks_format and self.hooks_path(preset, session)
        if preset is None or not path:
            return
        command = hookpipe.hook_command(
            session.paths.runtime_dir, session.name, self.registry.system
        )
        ask = None
        if preset.hooks_ask:  # its hook outlives the daemon's wait: the daemon says "none"
            bus = "--system" if self.registry.system else "--user"
            argv = [CTL, bus, "hook", preset.hooks_ask, "--ask"]
            ask = (preset.hooks_ask, argv, self.settings.config.answer_wait + ASK_MARGIN)
        settings = formats.settings(
            preset.hooks_format, command, _admin_defaults(preset.hooks_defaults), ask
        )
        formats.write_settings(path, mcp_registration.with_settings(settings, tools.settings))

    def _tools(self, session: Session, preset: Preset | None) -> mcp_registration.Registration:
        """How the session's CLI is given its MCP server, if it has one."""
        server = mcp_server(session.record, self.registry.system)
        return _registration(preset, server, session.paths)

    def remove_hooks(self, session: Session) -> None:
        self.flow.forget(session.name)
        root_owned = ROOT_HOOKS_DIR + "/" + session.name + ".json"
        for path in (
            session.paths.hooks_file,
            session.paths.mcp_file,
            self.registry.runtime_root / root_owned,
        ):
            with contextlib.suppress(OSError):
                os.unlink(path)

    # ---- the hooks FIFO: one per owner, for the hooks and tmux's pane-died hook ------------

    def open_pipe(self, session: Session) -> None:
        """Read the hooks FIFO of the session's owner (once per owner; made again when it
        was removed or replaced since)."""
        uid = session.record.owner
        if uid in self.pipes:
            if self.pipes[uid].intact():
                return
            log.warning("The hooks FIFO of user %d was removed or replaced; making it again", uid)
            retired = self.retired.setdefault(uid, [])
            retired.append(self.pipes.pop(uid))
            if len(retired) > RETIRED_MAX:  # replaced again and again: the oldest goes
                retired.pop(0).close()
        pipe = hookpipe.HookPipe(session.owner, session.paths.runtime_dir, self._on_line)
        pipe.open()
        self.pipes[uid] = pipe

    def open_pipes(self) -> None:
        """After recovery: the FIFOs of every owner with running sessions."""
        for session in list(self.registry.sessions.values()):
            if session.record.state is State.RUNNING:
                try:
                    self.open_pipe(session)
                except (OSError, KeyError) as e:
                    log.warning("session '%s': cannot read its hooks: %s", session.name, e)

    def _on_line(self, uid: int, fields: list[str]) -> None:
        """A line from uid's FIFO: believed only with the session's own token."""
        name, token, event, agent_id, source, subtype = fields
        session = self.registry.sessions.get(name)
        if (
            session is None
            or session.removed
            or session.record.owner != uid
            or not token_matches(token, session.record.hook_token)
            or formats.event_problem(event)
        ):
            log.debug("Ignoring a hook line for %r from uid %d", name, uid)
            return
        if event == PANE_DIED:
            self.on_pane_died(session)
            return
        data: dict[str, object] = {
            "session_id": agent_id,
            "source": source,
            "notification_type": subtype,
        }
        self.flow.offer(session, event, data)

    async def report_hook(
        self, session: Session, event: str, data: dict[str, object], flood: bool = False
    ) -> None:
        """A hook of the agent reports event (from inside the session: auth checked that).
        In a flood (hookflow.py) a new conversation id is neither logged (the flood was, once)
        nor written at once (the newest of each second is)."""
        report = formats.read_report(event, data)
        async with session.lock:
            if session.removed:
                return
            self.registry.heard(session, report)
            if report.agent_session:
                self.conversations.set_id(
                    session, report.agent_session, "hook", report.source, flood=flood
                )
            preset = self.settings.preset(session.record.preset)
            verdict = preset and activity.hook_verdict(preset.activity, event, report.subtype)
            if verdict and session.watch is not None:
                session.watch.report_hook(verdict)
            if preset and preset.hooks_ask == event and session.watch is not None:
                session.watch.expect_hook(ASK_GRACE)
            # Heard even when the activity it reports is the one shown: a turn too quick to be
            # seen working still ended (follow/usage.py reads its usage then).
            self.registry.announce(session)

    async def ask(self, session: Session, event: str, data: dict[str, object]) -> str:
        """A hook that waits for its question's answer (hookrequest.py) reports event, asks,
        and gets the decision it prints: "allow", "deny", or "" when none comes within the
        admin's wait (the dialog is then the terminal's, read from the screen)."""
        await self.report_hook(session, event, data)
        watch = session.watch
        if watch is None or watch.closed or session.removed:
            return ""
        tool, tool_input = (str(data.get(k, "")) for k in hookrequest.FIELDS)
        asks = hookrequest.question(tool, tool_input)
        if asks is None:  # not a yes or no, or too long to show whole: the screen's to ask
            watch.hook_asks_not()
            return ""
        asked, reply = watch.asking.ask_hook(asks)
        self.registry.announce(session)
        try:
            return await asyncio.wait_for(asyncio.shield(reply), self.settings.config.answer_wait)
        except TimeoutError:
            return ""
        finally:  # its wait ended, or its hook left (the agent took an answer elsewhere)
            if watch.asking.end_hook(asked.id):
                self.registry.announce(session)


def _admin_defaults(path: str) -> dict[str, object]:
    """The admin's settings file that ours replaces (a path from the preset, under /etc)."""
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as e:
        log.warning("Ignoring %s: %s", path, e)
        return {}
    return data if isinstance(data, dict) else {}
