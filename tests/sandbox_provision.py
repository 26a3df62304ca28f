"""What a sandbox's tree gets before it boots: a machine identity of its own, no idle services,
Debian's dotfiles for root, and hostagent "installed" from the read-only checkout the way its
package would install it (wrappers in /usr/bin and /usr/lib/hostagent, units, bus policy,
activation files, polkit, the example configuration).
"""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path

from tests.sandbox_daemon import CHECKPOINT_DIR

REPO = Path(__file__).resolve().parent.parent
GUEST_REPO = "/opt/hostagent"

_WRAPPER = """#!/bin/sh
# Installed by the hostagent test sandbox: runs the checkout at {repo}.
# Bytecode is cached outside the read-only checkout, as a package's py3compile would leave it.
export PYTHONPATH={repo} PYTHONPYCACHEPREFIX=/var/cache/hostagent-pycache
exec /usr/bin/python3 -m {module} "$@"
"""
# hostagentctl as its packages install it (packaging/hostagentctl), run from the checkout.
_CTL_LAUNCHER = """#!/usr/bin/python3 -S
# Installed by the hostagent test sandbox: packaging/hostagentctl, run from the checkout at
# {repo}, with its bytecode cached as above.
import sys

del sys.path[0]  # /usr/bin: not searched for imports, as in the packages' launcher
sys.path.append("{repo}")
sys.pycache_prefix = "/var/cache/hostagent-pycache"
from hostagent.cli.ctl import main

sys.exit(main())
"""
_SANDBOX_DROPIN = f"""[Service]
# The sandbox's daemon stays down when a test kills it, so the test decides when it returns.
Restart=no
# Tests park the daemon at named points (hostagent/daemon/host/checkpoint.py).
Environment=HOSTAGENT_CHECKPOINT_DIR={CHECKPOINT_DIR}
# Debian 13's systemd nested here now and then misses that the daemon's cgroup emptied after a
# test's SIGKILL, and a stop then sits out the stop timeout (90 s) with nothing left, past the
# harness's 60 s. The daemon itself stops in well under a second; no test measures this bound.
TimeoutStopSec=15s
"""
# Debian 13's systemd, nested in this machine's containers, now and then does not hear that a
# user manager's cgroup has emptied once it is stopped: a poweroff then waited out the unit's
# stop timeout (two minutes) with nothing left to stop, and the harness killed the machine
# after 60 s. No session under test runs in user@.service, so its wait is cut short here.
_USER_MANAGER_DROPIN = """[Service]
TimeoutStopSec=5s
"""
_IDLE_SERVICES = (
    "postgresql.service",
    "postgresql@.service",
    "redis-server.service",
    "nginx.service",
    "memcached.service",
    "docker.service",
    "docker.socket",
    "containerd.service",
    "packagekit.service",
)
_INSTALL = {  # file in units/ -> where a package puts it
    "hostagent.service": "etc/systemd/system/hostagent.service",
    "hostagent.slice": "etc/systemd/system/hostagent.slice",
    "user/hostagent.service": "etc/systemd/user/hostagent.service",
    "org.hostagent.HostAgent1.conf": "usr/share/dbus-1/system.d/org.hostagent.HostAgent1.conf",
    "org.hostagent.HostAgent1.service": "usr/share/dbus-1/system-services/org.hostagent.HostAgent1.service",
    "user/org.hostagent.HostAgent1.service": "usr/share/dbus-1/services/org.hostagent.HostAgent1.service",
    "org.hostagent.HostAgent1.policy": "usr/share/polkit-1/actions/org.hostagent.HostAgent1.policy",
    "hostagent.rules": "usr/share/polkit-1/rules.d/hostagent.rules",
    "user/hostagent-notify.service": "etc/systemd/user/hostagent-notify.service",
}
# Configuration files: installed once, as a package installs a conffile, and never over what a
# test (or an admin) wrote there since; provisioning runs at every boot.
_CONFFILES = {"hostagent.yaml": "etc/hostagent/hostagent.yaml"}
_MODULES = {  # program, where a package installs it -> module
    "usr/bin/hostagent": "hostagent.daemon.main",
    "usr/bin/hostagentctl": "hostagent.cli.ctl",
    "usr/lib/hostagent/hostagent-demo-agent": "hostagent.cli.demo_agent",
    "usr/bin/hostagent-notify": "hostagent.cli.notify",
}


def provision(r: Path, upper: Path, install: bool) -> None:
    """Make the overlay at r a machine for tests: an identity of its own, no idle services,
    and (with install) hostagent set up the way its package would."""
    machine_id = r / "etc" / "machine-id"
    if not (upper / "etc" / "machine-id").exists():
        machine_id.write_text(secrets.token_hex(16) + "\n")
    # Services this machine's kind runs that a sandbox has no use for, and that would
    # cost every sandbox a share of the two cores (PostgreSQL among them).
    for unit in _IDLE_SERVICES:
        mask = r / "etc/systemd/system" / unit
        if not mask.is_symlink():
            mask.parent.mkdir(parents=True, exist_ok=True)
            mask.symlink_to("/dev/null")
    # This machine's kind ships a policy-rc.d that forbids maintainer scripts to start or
    # stop services, as build chroots do; a real Debian host has none.
    (r / "usr/sbin/policy-rc.d").unlink(missing_ok=True)
    # root's dotfiles are this machine's (pyenv's init runs `pyenv rehash` in every
    # interactive shell); a sandbox's root gets Debian's own, as a fresh install has.
    for dot in ("bashrc", "profile"):
        skel = r / "usr/share/base-files" / f"dot.{dot}"
        if skel.exists():
            shutil.copyfile(skel, r / "root" / f".{dot}")
    user_manager = r / "etc/systemd/system/user@.service.d/sandbox.conf"
    user_manager.parent.mkdir(parents=True, exist_ok=True)
    user_manager.write_text(_USER_MANAGER_DROPIN)
    if not install:
        return
    for program, module in _MODULES.items():
        path = r / program
        path.parent.mkdir(parents=True, exist_ok=True)
        launcher = _CTL_LAUNCHER if module == "hostagent.cli.ctl" else _WRAPPER
        path.write_text(launcher.format(repo=GUEST_REPO, module=module))
        path.chmod(0o755)
    for src, dst in _INSTALL.items():
        target = r / dst
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO / "units" / src, target)
    for src, dst in _CONFFILES.items():
        target = r / dst
        if not (upper / dst).exists() and not (upper / dst).is_symlink():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(REPO / "units" / src, target)
    # The aliases `systemctl enable` makes, as the package's postinst does: bus activation of
    # the system daemon goes through one (units/org.hostagent.HostAgent1.service).
    for alias in _aliases(REPO / "units/hostagent.service"):
        link = r / "etc/systemd/system" / alias
        if not link.is_symlink():
            link.symlink_to("/etc/systemd/system/hostagent.service")
    dropin = r / "etc/systemd/system/hostagent.service.d/sandbox.conf"
    dropin.parent.mkdir(parents=True, exist_ok=True)
    dropin.write_text(_SANDBOX_DROPIN)


def _aliases(unit: Path) -> list[str]:
    return [
        line.split("=", 1)[1].strip()
        for line in unit.read_text().splitlines()
        if line.startswith("Alias=")
    ]
