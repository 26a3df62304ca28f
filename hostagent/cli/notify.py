"""hostagent-notify: a desktop notification when one of your agents needs you or exits.

It follows a hostagent daemon (``hostagent.follow``) and speaks org.freedesktop.Notifications
on the desktop's session bus. A notification's actions are Attach, which opens your terminal on
the session, and Dismiss. A question the agent asks (its ``Question``) is told with its words
and a button per choice: pressing one answers it (the daemon takes one answer, from anywhere),
and the notification goes when the question does; with ``--remind``, a question still waiting
is told again. A user unit (hostagent-notify.service) runs it in graphical sessions.

    hostagent-notify [--system] [--terminal 'x-terminal-emulator -e'] [--remind 5min]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import html
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import sdnotify
from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from hostagent import values
from hostagent.bus.call import CallError, add_match, call
from hostagent.client.fleet import Host, fleet_hosts
from hostagent.client.fleet_follow import FleetFollower
from hostagent.client.follow import Follower, Link, SessionView
from hostagent.client.inbox import WaitingQuestion
from hostagent.client.library import Client
from hostagent.errors import HostAgentError

log = logging.getLogger("hostagent-notify")

NOTIFICATIONS = "org.freedesktop.Notifications"
NOTIFICATIONS_PATH = "/org/freedesktop/Notifications"
APP = "hostagent"
ENDED = frozenset({"stopped", "dormant", "failed"})
# A notification is worth little late; a server that hangs must not hold one for long.
NOTIFY_TIMEOUT = 5.0
ANSWER = "answer:"  # an action's key that answers: answer:ID:NUMBER
LABEL_MAX = 40  # a button's words, at most; the body has the question whole


@dataclass(frozen=True)
class Alert:
    name: str
    summary: str
    body: str
    urgency: int  # 0 low, 1 normal, 2 critical
    actions: tuple[tuple[str, str], ...] = (("attach", "Attach"), ("dismiss", "Dismiss"))


def alert_for(
    name: str, before: tuple[str, str], after: tuple[str, str], reason: str = "", why: str = ""
) -> Alert | None:
    """What (state, activity) changing from before to after is worth telling; reason is the
    DormantReason and why the LastError after it. Pure."""
    (state0, activity0), (state1, activity1) = before, after
    if activity1 == "blocked" and activity0 != "blocked":
        return Alert(name, f"{name} needs you", "The agent is waiting for your answer.", 2)
    if state1 == "dormant" and state0 != "dormant" and reason == "budget":
        return Alert(name, f"{name} stopped: over budget", why or "A budget was reached.", 2)
    if state0 == "running" and state1 in ENDED:
        return Alert(name, f"{name} exited", f"The session is {state1}.", 1)
    return None


def question_alert(key: str, q: WaitingQuestion) -> Alert:
    """A question told with a button per choice (its key answers it), then Attach. Pure."""
    buttons = tuple(
        (f"{ANSWER}{q.id}:{number}", _short(f"{number}. {label}"))
        for number, label in zip(q.numbers, q.choices, strict=False)
    )
    # Its words are the agent's: escaped, for a server that reads a body's markup.
    body = html.escape(
        "\n".join(filter(None, (q.detail, q.text))) or "The agent asks you to choose."
    )
    return Alert(key, f"{key} asks", body, 2, (*buttons, ("attach", "Attach")))


def _short(label: str) -> str:
    return label if len(label) <= LABEL_MAX else label[: LABEL_MAX - 1] + "…"


class Notifier:
    def __init__(
        self,
        desktop: MessageBus,
        follower: Follower | FleetFollower,
        attach: list[str],
        owner: int | None,
        remind: float = 0.0,
    ) -> None:
        self.desktop = desktop
        self.owner = owner  # only this uid's sessions (the system daemon has everybody's)
        self.follower = follower
        self.attach = attach  # the command line that opens a terminal; the session name last
        self.known: dict[str, tuple[str, str]] = {}
        self.shown: dict[int, str] = {}  # notification id -> session name
        self.by_session: dict[str, int] = {}
        self.remind = remind  # seconds after which a question still waiting is told again
        self.asked: dict[str, str] = {}  # session -> the id of the question it asks
        self.telling: dict[int, str] = {}  # notification id -> the question id it tells

    def changed(self) -> None:
        for view in list(self._ours()):
            self._look(view)

    def _ours(self) -> Iterator[SessionView]:
        """The sessions to tell about, of the daemons followed that are connected now."""
        f = self.follower
        if isinstance(f, FleetFollower):
            # In a fleet, ours are the sessions of the ssh user's uid on each host.
            for one in f.followers.values():
                if one.link is Link.CONNECTED:
                    uid = f.uids.get(one.host)
                    yield from (v for v in one.sessions.values() if v.owner == uid)
        elif f.link is Link.CONNECTED:
            owner = self.owner
            yield from (v for v in f.sessions.values() if owner is None or v.owner == owner)

    def _look(self, view: SessionView) -> None:
        now = (view.state, view.activity)
        before = self.known.get(view.key)
        self.known[view.key] = now
        asks = str(view.question.get("id", "")) if view.question else ""
        asked = self.asked.get(view.key, "")
        self.asked[view.key] = asks
        if before is None:
            return  # first sight: nothing changed yet
        if asks != asked:
            if asked:
                self._spawn(self._withdraw(view.key, asked))
            if asks:  # told with its choices, in place of "needs you"
                self._spawn(self._ask(view.key, asks))
                return
        # A fleet's session is named HOST:NAME, so the notification says which host it is on.
        alert = alert_for(view.key, before, now, view.dormant_reason, view.last_error)
        if alert is not None:
            self._spawn(self._notify(alert))

    @staticmethod
    def _spawn(coro: Any) -> None:
        asyncio.get_running_loop().create_task(coro)

    async def _ask(self, key: str, id: str) -> None:
        """Tell the question id session key asks, read whole from the daemon (on the system
        bus its words are not in the property); then, with --remind, again while it waits."""
        client, name = self.follower.client_for(key)
        if client is None:
            return
        try:
            waiting = await client.questions()
        except HostAgentError as e:
            log.warning("No question read for %s: %s", key, e.message)
            return
        q = next((q for q in waiting if q.session == name and q.id == id), None)
        if q is None or self.asked.get(key) != id:
            return  # answered or replaced meanwhile
        nid = await self._notify(question_alert(key, q))
        if nid:
            self.telling[nid] = id
        if self.remind > 0:
            asyncio.get_running_loop().call_later(
                self.remind, lambda: self._spawn(self._reminded(key, id))
            )

    async def _reminded(self, key: str, id: str) -> None:
        if self.asked.get(key) == id:
            log.info("Reminding: %s still asks", key)
            await self._ask(key, id)

    async def _withdraw(self, key: str, id: str) -> None:
        """The question id of session key is gone: its notification goes too."""
        nid = self.by_session.get(key, 0)
        if nid and self.telling.get(nid) == id:
            await self._close(nid)

    async def _answer(self, key: str, id: str, choice: str) -> None:
        client, name = self.follower.client_for(key)
        if client is None:
            log.warning("Not answered: %s's daemon is not connected", key)
            return
        try:
            label = await client.answer(name, choice, id)
        except HostAgentError as e:
            log.warning("Not answered: %s: %s", key, e.message)
            return
        log.info("Answered %s: %s", key, label)

    async def _notify(self, alert: Alert) -> int:
        replaces = self.by_session.get(alert.name, 0)
        actions = ["default", "Attach", *(word for pair in alert.actions for word in pair)]
        body = [
            APP,
            replaces,
            "utilities-terminal",
            alert.summary,
            alert.body,
            actions,
            {"urgency": Variant("y", alert.urgency), "category": Variant("s", "im.received")},
            -1,
        ]
        try:
            (nid,) = await call(
                self.desktop,
                NOTIFICATIONS,
                NOTIFICATIONS_PATH,
                NOTIFICATIONS,
                "Notify",
                "susssasa{sv}i",
                body,
                timeout=NOTIFY_TIMEOUT,
            )
        except CallError as e:
            log.warning("No notification shown for %s: %s", alert.name, e.text)
            return 0
        self.telling.pop(int(nid), None)
        self.shown[int(nid)] = alert.name
        self.by_session[alert.name] = int(nid)
        log.info("Notified: %s", alert.summary)
        return int(nid)

    def on_message(self, msg: Message) -> None:
        if msg.message_type is not MessageType.SIGNAL or msg.interface != NOTIFICATIONS:
            return
        if msg.member == "ActionInvoked":
            nid, key = msg.body
            name = self.shown.get(int(nid))
            if name is None:
                return
            if key in ("default", "attach"):
                self._open_terminal(name)
            elif key.startswith(ANSWER):
                id, _, choice = key[len(ANSWER) :].partition(":")
                self._spawn(self._answer(name, id, choice))
            self._spawn(self._close(int(nid)))
        elif msg.member == "NotificationClosed":
            self.telling.pop(int(msg.body[0]), None)
            name = self.shown.pop(int(msg.body[0]), None)
            if name is not None and self.by_session.get(name) == int(msg.body[0]):
                del self.by_session[name]

    def _open_terminal(self, name: str) -> None:
        argv = [*self.attach, name]
        log.info("Attaching: %s", shlex.join(argv))
        subprocess.Popen(argv, start_new_session=True, stdin=subprocess.DEVNULL)

    async def _close(self, nid: int) -> None:
        with contextlib.suppress(CallError):  # already gone
            await call(
                self.desktop,
                NOTIFICATIONS,
                NOTIFICATIONS_PATH,
                NOTIFICATIONS,
                "CloseNotification",
                "u",
                [nid],
            )


def attach_command(terminal: str, system: bool, where: list[str] | None = None) -> list[str]:
    ctl = ["hostagentctl", *(where or []), "--system" if system else "--user", "attach"]
    return [*shlex.split(terminal), *ctl]


async def serve(
    system: bool, terminal: str, hosts: list[Host] | None = None, remind: float = 0.0
) -> int:
    """Follow the local daemon, or with hosts a fleet's system daemons."""
    desktop = await MessageBus(bus_type=BusType.SESSION).connect()
    await add_match(desktop, f"type='signal',interface='{NOTIFICATIONS}'")

    async def connect() -> Client:
        return await Client.connect(system)

    notifier: Notifier
    follower: Follower | FleetFollower
    if hosts:
        system = True
        follower = FleetFollower(hosts, system, lambda: notifier.changed())
        where = [w for h in hosts for w in ("-H", h.target)]
        notifier = Notifier(
            desktop, follower, attach_command(terminal, system, where), None, remind
        )
    else:
        follower = Follower(connect, lambda: notifier.changed())
        owner = os.getuid() if system else None
        notifier = Notifier(desktop, follower, attach_command(terminal, system), owner, remind)
    desktop.add_message_handler(notifier.on_message)
    await follower.start()
    if isinstance(follower, FleetFollower):
        # Ready once every host was tried: what changes on a host reached by then is told.
        down = await follower.first_attempts()
        log.info(
            "Following %s%s",
            ", ".join(follower.followers),
            f" ({', '.join(down)} not reached yet)" if down else "",
        )
    else:
        log.info("Following the %s daemon", "system" if system else "user")
    sdnotify.SystemdNotifier().notify("READY=1")
    with contextlib.suppress(Exception):  # it raises what ended it, unless we did
        await desktop.wait_for_disconnect()  # type: ignore[no-untyped-call]
    follower.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="hostagent-notify", description=__doc__.splitlines()[0])
    p.add_argument(
        "--system",
        action="store_true",
        help="follow the system daemon (your sessions there) instead of your own",
    )
    p.add_argument(
        "--terminal",
        default=os.environ.get("HOSTAGENT_TERMINAL", "x-terminal-emulator -e"),
        help="the command that opens a terminal running what follows it",
    )
    p.add_argument(
        "-H",
        "--host",
        dest="hosts",
        action="append",
        default=[],
        metavar="[USER@]HOST[:PORT]",
        help="follow this host's system daemon over ssh (repeated: a fleet)",
    )
    p.add_argument(
        "--remind",
        default="0",
        metavar="DELAY",
        help="tell a question still waiting again after this long (30s, 5min; 0: never)",
    )
    p.add_argument(
        "--fleet", action="store_true", help="follow every host of the hosts file (hostagentctl(1))"
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        hosts = fleet_hosts(args.hosts, args.fleet) if args.hosts or args.fleet else None
    except HostAgentError as e:
        print(f"hostagent-notify: {e.message}", file=sys.stderr)
        return 2
    try:
        span = values.parse_timespan(args.remind)
        remind = 0.0 if span == values.INFINITY else float(span)  # infinity: never again
    except values.ValueProblem as e:
        print(f"hostagent-notify: --remind: {e}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(serve(args.system, args.terminal, hosts, remind))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
