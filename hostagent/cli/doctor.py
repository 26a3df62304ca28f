"""hostagentctl doctor: what on this host would keep a session from working, said with what
to do about each.

It asks the daemon that answers (which one, its mode and version), then looks around as the
caller: tmux, each preset's program as the caller's login shell finds it (the daemon looks, as
the caller: ListAgents), polkit on the system bus, linger for a user's own daemon.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil

from hostagent.bus.call import DBUS, CallError, call
from hostagent.cli.ctl_output import EXIT_FAILURE, emit_json
from hostagent.client.library import Client

POLKIT = "org.freedesktop.PolicyKit1"


async def verb_doctor(c: Client, a: argparse.Namespace) -> int:
    problems: list[str] = []
    props = await c.manager_properties()
    mode = props.get("Mode", "?")
    said = {"version": props.get("Version"), "mode": mode}
    if not a.json:
        print(f"daemon: hostagent {said['version']}, {mode} mode, answering on the "
              f"{'system' if mode == 'system' else 'session'} bus")  # fmt: skip
    local = not (a.host or a.machine or a.address)
    if local and shutil.which("tmux") is None:
        problems.append("tmux is not installed: 'apt install tmux'")
    found = await c.agents()
    here: list[str] = []
    missing: list[str] = []
    for name, _, command in await c.presets():
        (here if not command or found.get(name, ("",))[0] else missing).append(name)
    said |= {"presets_ready": sorted(here), "presets_not_installed": sorted(missing)}
    if not a.json:
        print(f"presets ready here: {', '.join(sorted(here)) or 'none'}")
    if missing and not a.json:
        print(f"presets whose program is not installed for you: {', '.join(sorted(missing))}")
    if mode == "system":
        names: set[str] = set()
        for member in ("ListNames", "ListActivatableNames"):  # polkitd starts on demand
            with contextlib.suppress(CallError):
                (found,) = await call(c.bus, DBUS, "/org/freedesktop/DBus", DBUS, member)
                names |= set(found)
        if POLKIT not in names:
            problems.append(
                "polkit is not running: only root may act on other users' sessions "
                "('apt install polkitd')"
            )
    if mode == "user" and local:
        user = os.environ.get("USER") or str(os.getuid())
        if not os.path.exists(f"/var/lib/systemd/linger/{user}"):
            problems.append(
                f"linger is off: sessions die at logout; run 'loginctl enable-linger {user}'"
            )
    if a.json:
        emit_json(a, {**said, "problems": problems})
    else:
        for p in problems:
            print(f"warning: {p}")
        print("ok" if not problems else f"{len(problems)} problem(s) found")
    return 0 if not problems else EXIT_FAILURE
