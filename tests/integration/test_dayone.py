"""An admin's first day (issue: day one for an admin): one place to look, systemctl's manners,
and sessions that say why they ended, on the real systemd."""

from __future__ import annotations

from tests.integration.helpers import create
from tests.sandbox import Sandbox


def test_every_user_looks_in_one_place(sb: Sandbox) -> None:
    roots = create(sb, "shell", name="roots-one")
    try:
        # No --system: alice's hostagentctl finds the system daemon, as it is installed.
        listed = sb.run("hostagentctl", "list", user="alice").check().stdout
        assert roots in listed and "listed on the system daemon." in listed, listed
        own = sb.run("hostagentctl", "--user", "list", user="alice").check().stdout
        assert roots not in own and "on your own daemon" in own, own
    finally:
        sb.ctl("rm", roots)


def test_stop_and_resume_are_idempotent_as_systemctl_is(sb: Sandbox) -> None:
    name = create(sb, "shell", user="alice")
    try:
        for verb in ("resume", "stop", "stop", "resume", "resume"):
            result = sb.ctl(verb, name, user="alice", system=True)
            assert (result.returncode, result.stderr) == (0, ""), (verb, result)
        missing = sb.ctl("stop", "no-such-session", user="alice", system=True)
        assert missing.returncode == 1 and "No session 'no-such-session'" in missing.stderr
    finally:
        sb.ctl("rm", name)
