"""hostagentctl: drive hostagent over D-Bus. It talks only through hostagent.client.

Exit codes: 0 success, 1 failure, 2 usage; ``status`` follows LSB: 0 running, 3 not running,
4 no such session.

The verbs are rows of one table (verbs.py). This module imports only that table at its top:
the simple forms of the verbs people and scripts run over and over (``list``, ``status``) go
to the blocking client (ctl_quick.py) without argparse, asyncio or dbus-fast; every other
command line is parsed by argparse (ctl_args.py) and runs on the asyncio client, whose modules
are imported only then, and only those its verb uses.
"""

from __future__ import annotations

import sys

from hostagent.cli.verbs import BY_NAME, JOURNAL, LOCAL, OWN, listing, load

TYPE_CHECKING = False  # typing's own import costs more than a quick verb's call
if TYPE_CHECKING:
    import argparse


async def run(args: argparse.Namespace) -> int:
    from hostagent.cli.ctl_fleet import hosts_of, run_fleet
    from hostagent.cli.ctl_options import UsageError
    from hostagent.cli.ctl_output import EXIT_FAILURE, EXIT_USAGE, fail
    from hostagent.client.library import Client, prefer_system
    from hostagent.errors import HostAgentError
    from hostagent.escape import printable

    verb = BY_NAME[args.verb]
    if verb.connection == LOCAL:
        if args.host or args.machine or args.address or args.fleet:
            print(
                f"hostagentctl {verb.name} reads this host's files; run it there.", file=sys.stderr
            )
            return EXIT_USAGE
        return load(verb)(args)  # type: ignore[operator,no-any-return]
    try:
        hosts = hosts_of(args)
    except HostAgentError as e:
        print(f"hostagentctl: {printable(e.message)}", file=sys.stderr)
        return EXIT_USAGE
    if hosts is not None:
        return await run_fleet(args, hosts)
    remote = bool(args.host or args.machine)
    # Like systemctl: another machine's system bus unless --user says otherwise. Locally, the
    # system daemon whenever it is installed, so every user looks in one place.
    system = args.system
    if system is None:
        system = remote or bool(args.address) or await prefer_system()
    args.system_bus = system
    if not verb.remote and (remote or args.address):
        print(f"hostagentctl {verb.name} reads this host's journal; run it there.", file=sys.stderr)
        return EXIT_USAGE
    if verb.connection == JOURNAL:
        from hostagent.cli.logs import logs, reads_journal_itself

        if reads_journal_itself(args):
            return logs(args)
    if verb.connection == OWN:  # keeps its own connection, and finds the bus again if it drops
        return await load(verb)(system, args.address, args.host, args.machine)  # type: ignore[operator,no-any-return]
    try:
        client = await Client.connect(system, args.address, args.host, args.machine)
    except (OSError, ValueError, HostAgentError) as e:
        where = args.host or args.machine or ("the system bus" if system else "the session bus")
        reason = e.message if isinstance(e, HostAgentError) else e
        if verb.name == "doctor" and not remote:
            from hostagent.cli.doctor import no_bus

            return no_bus(system, reason)
        print(f"Failed to connect to {where}: {reason}", file=sys.stderr)
        return 0 if verb.name == "hook" else EXIT_FAILURE
    agent = None
    if verb.acting:
        from hostagent.cli.polkitagent import PolkitAgent, wanted

        if wanted(system, not args.no_ask_password, remote):
            agent = PolkitAgent.start()
    try:
        return await load(verb)(client, args)  # type: ignore[operator,no-any-return]
    except HostAgentError as e:
        return fail(verb.name, getattr(args, "name", None), e)
    except UsageError as e:
        print(f"hostagentctl {verb.name}: {e}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if agent is not None:
            agent.stop()
        client.close()


def main(argv: list[str] | None = None) -> int:
    """hostagentctl; with no argv, the program itself (sys.argv), which a quick verb ends at
    once."""
    program = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["--list-verbs"]:
        sys.stdout.write(listing())
        return 0
    from hostagent.cli import ctl_quick

    quick = ctl_quick.recognise(argv)
    code = None if quick is None else ctl_quick.run(quick)
    if code is not None:
        if program:
            ctl_quick.exit_now(code)
        return code
    if sys.flags.no_site:
        # The packages' launcher starts without site (packaging/hostagentctl), which the quick
        # path does not need; the asyncio client's dependencies are found through it.
        import site

        site.main()
    return _main(argv)


def _main(argv: list[str]) -> int:
    """A command line the quick path does not take: argparse, then the asyncio client."""
    from hostagent.cli.ctl_args import bare_json_is_short, parser

    args = parser().parse_args(bare_json_is_short(argv))
    if args.list_verbs:
        sys.stdout.write(listing())
        return 0
    if not args.verb:  # a bare hostagentctl lists, as a bare systemctl does
        args = parser().parse_args(bare_json_is_short([*argv, "list"]))
    import asyncio
    import signal

    from hostagent.cli.terminal_safe import closed_pipe, guard_output

    output = getattr(args, "output", None)
    if output:  # -o json and friends are --json by systemctl's name
        from hostagent.cli.ctl_quick import OUTPUT

        args.json = OUTPUT[output]
    guard_output()
    if args.verb == "logs" and args.follow:
        # Ctrl-C ends a follow as it ends journalctl's, even where the parent left SIGINT
        # ignored (a job a shell put in the background): Python would not catch it then.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        code = asyncio.run(run(args))
        sys.stdout.flush()  # a closed pipe shows here, not in Python's own flush at exit
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return closed_pipe()
    return code


if __name__ == "__main__":
    sys.exit(main())
