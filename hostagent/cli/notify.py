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
from dataclasses import dataclass

import sdnotify
from dbus_fast import BusType, Message, MessageType, Variant
from dbus_fast.aio import MessageBus

from hostagent.bus.call import CallError, add_match, call
from hostagent.client.follow import Follower, Link, SessionView
from hostagent.client.library import Client

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
        self, desktop: MessageBus, follower: Follower, attach: list[str], owner: int | None
    ) -> None:
        self.desktop = desktop
        self.owner = owner  # only this uid's sessions (the system daemon has everybody's)
        self.follower = follower
        self.attach = attach  # the command line that opens a terminal; the session name last
        self.known: dict[str, tuple[str, str]] = {}
        self.shown: dict[int, str] = {}  # notification id -> session name
        self.by_session: dict[str, int] = {}

    def changed(self) -> None:
        if self.follower.link is not Link.CONNECTED:
            return
        for view in list(self.follower.sessions.values()):
            if self.owner is None or view.owner == self.owner:
                self._look(view)

    def _look(self, view: SessionView) -> None:
        now = (view.state, view.activity)
        before = self.known.get(view.name)
        self.known[view.name] = now
        if before is None:
            return  # first sight: nothing changed yet
        alert = alert_for(view.name, before, now, view.dormant_reason, view.last_error)
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
                self.desktop, NOTIFICATIONS, NOTIFICATIONS_PATH, NOTIFICATIONS,
                "CloseNotification", "u", [nid],
            )  # fmt: skip


def attach_command(terminal: str, system: bool) -> list[str]:
    ctl = ["hostagentctl", "--system" if system else "--user", "attach"]
    return [*shlex.split(terminal), *ctl]


async def serve(system: bool, terminal: str) -> int:
    desktop = await MessageBus(bus_type=BusType.SESSION).connect()
    await add_match(desktop, f"type='signal',interface='{NOTIFICATIONS}'")

    async def connect() -> Client:
        return await Client.connect(system)

    notifier: Notifier
    follower = Follower(connect, lambda: notifier.changed())
    notifier = Notifier(
        desktop, follower, attach_command(terminal, system), os.getuid() if system else None
    )
    desktop.add_message_handler(notifier.on_message)
    await follower.start()
    log.info("Following the %s daemon", "system" if system else "user")
    sdnotify.SystemdNotifier().notify("READY=1")
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
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    try:
        return asyncio.run(serve(args.system, args.terminal))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
