"""The daemon's main: the command line, the process set up around the event loop, and one
run of the server (server.py). ``--install-user`` writes a user unit for a pip install.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys

from hostagent import __version__
from hostagent import log as logsetup
from hostagent.daemon.host import userunit
from hostagent.daemon.host.owner import NO_SETPRIV, SETPRIV
from hostagent.daemon.process import (
    freeze_imports,
    raise_fd_limit,
    run_loop,
    watch_children_with_pidfds,
)
from hostagent.daemon.server import Server

log = logging.getLogger("hostagent")


def _user_unit(install: bool) -> int:
    done, problems = (userunit.install if install else userunit.uninstall)(os.environ)
    for line in done:
        print(line)
    for problem in problems:
        print(f"hostagent: {problem}", file=sys.stderr)
    if install and not problems:
        print("hostagentctl now starts your own daemon on first use ('hostagentctl doctor').")
    return 1 if problems else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="hostagent", description=__doc__)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--system", action="store_true", help="serve the system bus (as root)")
    mode.add_argument("--user", action="store_true", help="serve the session bus (default)")
    mode.add_argument(
        "--install-user",
        action="store_true",
        help="write a user unit and a session-bus activation file for this install into your "
        "home (for an install with pip or pipx), then exit",
    )
    mode.add_argument(
        "--uninstall-user",
        action="store_true",
        help="stop your own daemon and remove what --install-user wrote, then exit",
    )
    parser.add_argument("--debug", action="store_true", help="log debug messages")
    parser.add_argument("--version", action="version", version=f"hostagent {__version__}")
    args = parser.parse_args(argv)
    if args.install_user or args.uninstall_user:
        return _user_unit(install=args.install_user)
    logsetup.setup(args.debug)
    if args.system and os.geteuid() != 0:
        log.error("--system needs root; use --user to serve your own session bus")
        return 2
    if args.system and SETPRIV is None:  # every session and helper starts through it
        log.error("%s, then start hostagent again", NO_SETPRIV)
        return 2
    # `systemctl kill --kill-whom=main -s USR2 hostagent` writes every thread's stack to the
    # journal: the first thing to look at when the daemon hangs.
    faulthandler.register(signal.SIGUSR2, all_threads=True)
    try:
        watch_children_with_pidfds()
        raise_fd_limit()
        freeze_imports()
        rc = run_loop(Server(system=args.system).run())
    except (OSError, ConnectionError) as e:
        log.error("Failed to start: %s", e)
        return 1
    os._exit(rc)  # see run_loop: nothing that is left may hold the stop


if __name__ == "__main__":
    sys.exit(main())
