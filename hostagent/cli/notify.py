"""hostagent-notify: a desktop notification when one of your agents needs you or exits.

It follows a hostagent daemon (``hostagent.follow``) and speaks org.freedesktop.Notifications
on the desktop's session bus. A notification's actions are Attach, which opens your terminal on
the session, and Dismiss. A user unit (hostagent-notify.service) runs it in graphical sessions.

    hostagent-notify [--system] [--terminal 'x-terminal-emulator -e']
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import sdnotify
from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from hostagent.bus.call import CallError, add_match, call
from hostagent.client.fleet import Host, fleet_hosts
from hostagent.client.fleet_follow import FleetFollower
from hostagent.client.follow import Follower, Link, SessionView
from hostagent.client.library import Client
from hostagent.errors import HostAgentError

log = logging.getLogger("hostagent-notify")

NOTIFICATIONS = "org.freedesktop.Notifications"
NOTIFICATIONS_PATH = "/org/freedesktop/Notifications"
APP = "hostagent"
ENDED = frozenset({"stopped", "dormant", "failed"})
# A notification is worth little late; a server that hangs must not hold one for long.
NOTIFY_TIMEOUT = 5.0


@dataclass(frozen=True)
class Alert:
    name: str
    summary: str
    body: str
    urgency: int  # 0 low, 1 normal, 2 critical


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


class Notifier:
    def __init__(
        self,
        desktop: MessageBus,
        follower: Follower | FleetFollower,
        attach: list[str],
        owner: int | None,
    ) -> None:
        self.desktop = desktop
        self.owner = owner  # only this uid's sessions (the system daemon has everybody's)
        self.follower = follower
        self.attach = attach  # the command line that opens a terminal; the session name last
        self.known: dict[str, tuple[str, str]] = {}
        self.shown: dict[int, str] = {}  # notification id -> session name
        self.by_session: dict[str, int] = {}

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
        if before is None:
            return  # first sight: nothing changed yet
        # A fleet's session is named HOST:NAME, so the notification says which host it is on.
        alert = alert_for(view.key, before, now, view.dormant_reason, view.last_error)
        if alert is not None:
            asyncio.get_running_loop().create_task(self._notify(alert))

    async def _notify(self, alert: Alert) -> None:
        replaces = self.by_session.get(alert.name, 0)
        body = [
            APP,
            replaces,
            "utilities-terminal",
            alert.summary,
            alert.body,
            ["default", "Attach", "attach", "Attach", "dismiss", "Dismiss"],
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
            return
        self.shown[int(nid)] = alert.name
        self.by_session[alert.name] = int(nid)
        log.info("Notified: %s", alert.summary)

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
            asyncio.get_running_loop().create_task(self._close(int(nid)))
        elif msg.member == "NotificationClosed":
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


async def serve(system: bool, terminal: str, hosts: list[Host] | None = None) -> int:
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
        notifier = Notifier(desktop, follower, attach_command(terminal, system, where), None)
    else:
        follower = Follower(connect, lambda: notifier.changed())
        owner = os.getuid() if system else None
        notifier = Notifier(desktop, follower, attach_command(terminal, system), owner)
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
        return asyncio.run(serve(args.system, args.terminal, hosts))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
