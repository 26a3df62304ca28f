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

from hostagent import BUS_NAME
from hostagent.bus.call import DBUS, CallError, call
from hostagent.cli.ctl_output import EXIT_FAILURE, emit_json
from hostagent.client.library import Client
from hostagent.errors import BadConfiguration, HostAgentError

POLKIT = "org.freedesktop.PolicyKit1"
SYSTEMD = "org.freedesktop.systemd1"
UNIT = "hostagent.service"
# How to get a daemon where there is none, for each bus.
GET_ONE = {
    True: "install the hostagent package (docs/admin-guide.md, 'Install')",
    False: "after 'pipx install', run 'hostagent --install-user'; or install the hostagent package",
}


async def _names(c: Client, *members: str) -> set[str]:
    """The bus's names, as the members asked (ListNames, ListActivatableNames) list them."""
    names: set[str] = set()
    for member in members:
        with contextlib.suppress(CallError):
            (found,) = await call(c.bus, DBUS, "/org/freedesktop/DBus", DBUS, member)
            names |= set(found)
    return names


async def _unit_file_state(c: Client) -> str:
    """What the bus's service manager says of hostagent.service's file; "" for none."""
    try:
        (state,) = await call(
            c.bus,
            SYSTEMD,
            "/org/freedesktop/systemd1",
            f"{SYSTEMD}.Manager",
            "GetUnitFileState",
            "s",
            [UNIT],
        )
    except CallError:
        return ""
    return str(state)


async def no_daemon(c: Client, a: argparse.Namespace, err: HostAgentError) -> int:
    """Nothing answers: say which of the unit, the activation file or the daemon itself is
    missing, and how to get it."""
    system = bool(a.system_bus)
    bus = "system" if system else "session"
    if isinstance(err, BadConfiguration):
        # It runs, and answers every call with what is wrong with its file and the fix.
        problems = [err.message]
    else:
        problems = await _why_none_answers(c, system, err)
    if a.json:
        emit_json(a, {"version": None, "mode": None, "problems": problems})
    else:
        answers = "refuses every call" if isinstance(err, BadConfiguration) else "none answers"
        print(f"daemon: {answers} on the {bus} bus")
        for p in problems:
            print(f"error: {p}")
        print(f"{len(problems)} problem(s) found")
    return EXIT_FAILURE


async def _why_none_answers(c: Client, system: bool, err: HostAgentError) -> list[str]:
    bus = "system" if system else "session"
    problems = []
    if not await _unit_file_state(c):
        problems.append(
            f"no {UNIT} unit on this {'host' if system else 'user manager'}: {GET_ONE[system]}"
        )
    if BUS_NAME not in await _names(c, "ListActivatableNames"):
        problems.append(
            f"the {bus} bus cannot start hostagent: no {BUS_NAME}.service "
            f"activation file; {GET_ONE[system]}"
        )
    if not problems:
        user = "" if system else " --user"
        problems.append(
            f"hostagent is installed but does not answer ({err.message}): "
            f"'systemctl{user} status {UNIT}' and 'journalctl{user} -u {UNIT}' say why"
        )
    return problems


def no_bus(system: bool, reason: object) -> int:
    """hostagentctl doctor when not even the bus answers."""
    if system:
        print(f"error: the system bus does not answer ({reason}): 'systemctl status dbus'")
    else:
        print(
            f"error: no session bus ({reason}): a user's own hostagent needs a login with a "
            "user manager and a session bus (dbus-user-session); without a login, "
            "'loginctl enable-linger USER', then log in once"
        )
    print("1 problem(s) found")
    return EXIT_FAILURE


def set_aside_note(files: list[str], mode: str) -> str:
    """What doctor says of damaged records the daemon set aside, and how to restore one."""
    state = "/var/lib/hostagent" if mode == "system" else "~/.local/state/hostagent"
    shown = ", ".join(files[-3:]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    restart = (
        "systemctl restart hostagent" if mode == "system" else "systemctl --user restart hostagent"
    )
    return (
        f"note: {len(files)} damaged record(s) set aside in {state}/corrupt ({shown}). A live "
        f"session's came back from its copy under /run; to bring back a stopped one, repair the "
        f"file, move it to {state}/sessions/NAME.yaml and run '{restart}'; then delete it."
    )


async def _agent_profile(
    c: Client, a: argparse.Namespace, ready: list[str], said: dict[str, object]
) -> None:
    """The agent profile a session of each ready agent would start from, and what its first
    confined create would do (a settings file moved) or refuse."""
    words: dict[str, list[str]] = {}
    notes: list[str] = []
    for name in ready:
        words[name], told = await c.agent_profile(name)
        notes += [n for n in told if n not in notes]
    said |= {"agent_profile": words, "agent_profile_notes": notes}
    if a.json:
        return
    confined = sorted(n for n, w in words.items() if w)
    print(f"agents confined by default: {', '.join(confined) or 'none'}")
    if confined:
        print(f"the agent profile: {' '.join(words[confined[0]])}")
    for note in notes:
        print(f"note: {note}")


async def verb_doctor(c: Client, a: argparse.Namespace) -> int:
    problems: list[str] = []
    try:
        props = await c.manager_properties()
    except HostAgentError as e:
        return await no_daemon(c, a, e)
    mode = props.get("Mode", "?")
    said = {"version": props.get("Version"), "mode": mode}
    if not a.json:
        print(
            f"daemon: hostagent {said['version']}, {mode} mode, answering on the "
            f"{'system' if mode == 'system' else 'session'} bus"
        )
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
    await _agent_profile(c, a, here, said)
    aside = list(props.get("SetAsideRecords") or [])
    said["set_aside_records"] = aside
    if aside and not a.json:
        print(set_aside_note(aside, mode))
    box = dict(props.get("Sandboxing") or {})
    said["sandboxing"] = box
    if box and not a.json:
        made = box.get("words") or f"none ({box.get('why_not', '')})"
        print(f"sandboxing words made here: {made}")
        print(f"sessions kept apart: {box.get('kept_apart', '')}")
        print(f"Landlock ABI: {box.get('landlock_abi', '?')}")
        print(f"IPAddressDeny= enforced: {box.get('ip_address_deny', '?')}")
    if mode == "system" and POLKIT not in await _names(c, "ListNames", "ListActivatableNames"):
        problems.append(  # polkitd starts on demand, so activatable is enough
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
