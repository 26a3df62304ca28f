"""A throwaway machine with a real systemd, system bus, polkit and tmux, for tests and the demo.

This machine's PID 1 is not systemd, so the sandbox boots an OS tree in systemd-nspawn: the
host's own Debian 12, or a Debian 13 tree (tests/sandbox_roots.py), on an overlay whose upper
dir keeps the container's writes (so /var/lib survives a reboot as on a disk), in the unified
cgroup layout unless asked for hybrid. The checkout is bind-mounted read-only at /opt/hostagent
and installed into the overlay the way a package would (tests/sandbox_provision.py).
docs/architecture.md, "Tests", says why it is built this way.

Cleanup is by pid and mount point, never by name: ``destroy`` ends nspawn and unmounts; a run
that died leaves an owner pid behind, and the next ``Sandbox`` reaps whatever such a dead run
left.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess
import time
from pathlib import Path

from tests.sandbox_daemon import DaemonControl, Parked
from tests.sandbox_host import (
    LIMIT_CONTROLLERS,
    STATE_ROOT,
    Result,
    SandboxError,
    is_mount,
    kill_container,
    reap_stale,
    sandbox_cgroups,
    teardown,
)
from tests.sandbox_provision import GUEST_REPO, REPO, provision
from tests.sandbox_roots import DEFAULT_SYSTEM, SYSTEMS, lower_dir

AGENTS_CACHE = Path("/var/cache/hostagent-agents")  # dev/agents' HOSTAGENT_AGENTS

GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
USERS = ("alice", "bob", "carol")  # carol is the admin polkit trusts in tests
BOOT_TIMEOUT = 90.0
# The cgroup layout a sandbox boots with. "unified" (cgroup v2 alone) is what every current
# distribution boots; "hybrid" is this build machine's own (v1 controllers beside a v2 tree),
# where the memory and pids controllers can be lent to the container for limits to bite.
LAYOUTS = ("unified", "hybrid")
DEFAULT_LAYOUT = os.environ.get("HOSTAGENT_SANDBOX_LAYOUT", "unified")


class Sandbox(DaemonControl):
    """One container: ``boot``, ``run``, ``reboot``, ``destroy``, and the daemon inside."""

    def __init__(
        self,
        name: str | None = None,
        install: bool = True,
        netns: str | None = None,
        layout: str = DEFAULT_LAYOUT,
        system: str = DEFAULT_SYSTEM,
        landlock: bool = True,
    ) -> None:
        """install=False boots a machine without hostagent, for installing the package.
        netns names a network namespace (ip netns) to join instead of a private network, so
        that several sandboxes can talk to each other on its loopback. layout is one of
        LAYOUTS, system one of tests/sandbox_roots.SYSTEMS. landlock=False refuses the Landlock
        calls inside, as a kernel without it (or nspawn's own default filter) would."""
        if layout not in LAYOUTS:
            raise SandboxError(f"cgroup layout '{layout}' is not one of {', '.join(LAYOUTS)}")
        if system not in SYSTEMS:
            raise SandboxError(f"no sandbox system '{system}'; use one of {', '.join(SYSTEMS)}")
        if layout == "hybrid" and SYSTEMS[system].suite:
            # systemd 256 and later refuse to boot on cgroup v1 unless forced from the kernel's
            # command line, which a container cannot set.
            raise SandboxError(f"{SYSTEMS[system].title} boots only the unified cgroup layout")
        self.system = system
        self.name = name or f"ha-{os.getpid()}-{secrets.token_hex(3)}"
        self.install = install
        self.netns = netns
        self.layout = layout
        self.landlock = landlock
        self.dir = STATE_ROOT / self.name
        self.upper, self.work, self.root = (self.dir / d for d in ("upper", "work", "root"))
        self.proc: subprocess.Popen[bytes] | None = None
        self.leader = 0
        self.boots = 0
        self.outside = ""  # this sandbox's cgroups that its own tree is under (boot)

    # ---- lifecycle ----------------------------------------------------------------------

    def boot(self) -> None:
        reap_stale()
        lower = lower_dir(self.system)
        for d in (self.upper, self.work, self.root):
            d.mkdir(parents=True, exist_ok=True)
        (self.dir / "owner.pid").write_text(str(os.getpid()))
        if not is_mount(self.root):
            subprocess.run(
                [
                    "mount",
                    "-t",
                    "overlay",
                    "overlay",
                    "-o",
                    f"lowerdir={lower},upperdir={self.upper},workdir={self.work}",
                    str(self.root),
                ],
                check=True,
            )
        provision(self.root, self.upper, self.install)
        cgroups = sandbox_cgroups(self.name, limits=self.layout == "hybrid")
        # What tests run inside (nsenter) starts in the same cgroups, above the container's
        # own tree, where systemd in it sees it as it saw the host's root before (see _command).
        self.outside = " ".join(str(c) for c in cgroups if c.parent.name not in LIMIT_CONTROLLERS)
        nspawn_env = {**os.environ, "HOSTAGENT_CGROUPS": " ".join(map(str, cgroups))}
        if self.layout == "unified":
            nspawn_env["SYSTEMD_NSPAWN_UNIFIED_HIERARCHY"] = "1"
        else:
            nspawn_env.pop("SYSTEMD_NSPAWN_UNIFIED_HIERARCHY", None)
        console = open(self.dir / "console.log", "ab")  # noqa: SIM115 - lives as long as nspawn
        self.proc = subprocess.Popen(
            [
                # nspawn starts inside cgroups of its own, so the container's view of each
                # hierarchy is a private subtree (tests/sandbox_host.py, _hierarchies).
                "/bin/sh",
                "-c",
                'for d in $HOSTAGENT_CGROUPS; do echo $$ > "$d/cgroup.procs"; done; exec "$@"',
                "sh",
                "systemd-nspawn",
                "-q",
                "-D",
                str(self.root),
                "--boot",
                f"--machine={self.name}",
                "--register=no",
                "--keep-unit",
                "--link-journal=no",
                *(
                    [f"--network-namespace-path=/run/netns/{self.netns}"]
                    if self.netns
                    else ["--private-network"]
                ),
                f"--bind-ro={REPO}:{GUEST_REPO}",
                # The agent CLIs dev/agents installed: this machine's own tree has them, another
                # system's sees them at the same path (Vibe's venv there is of its Python).
                *(
                    [f"--bind-ro={AGENTS_CACHE}"]
                    if lower != Path("/") and AGENTS_CACHE.is_dir()
                    else []
                ),
                # nspawn 252's system-call filter predates Landlock and refuses it, where a host
                # lets it through: a session's sandbox enters a Landlock domain (namespace.py).
                # Refused on purpose ("~"), for what must hold on a kernel without it.
                f"--system-call-filter={'' if self.landlock else '~'}landlock_create_ruleset "
                "landlock_add_rule landlock_restrict_self",
                "--console=pipe",
            ],
            stdin=subprocess.DEVNULL,
            stdout=console,
            stderr=console,
            start_new_session=True,
            env=nspawn_env,
        )
        console.close()
        (self.dir / "nspawn.pid").write_text(str(self.proc.pid))
        self.leader = self._find_leader()
        (self.dir / "leader.pid").write_text(str(self.leader))
        state = self.run("systemctl", "is-system-running", "--wait", timeout=BOOT_TIMEOUT)
        if state.stdout.strip() not in ("running", "degraded"):
            raise SandboxError(f"container did not boot: {state.stdout} {state.stderr}")
        if any(c.parent.name in LIMIT_CONTROLLERS for c in cgroups):
            self._enable_limits()
        self.boots += 1
        if self.boots == 1 and not (self.upper / "etc" / ".hostagent-users").exists():
            self._create_users()

    def _enable_limits(self) -> None:
        """Let the container's systemd enforce TasksMax= and MemoryMax=.

        On a host with cgroup v1 controllers (this machine's kind), nspawn mounts them
        read-only, so scopes in the container get no limits. The container sees only its own
        subtree of each (a cgroup namespace over the cgroups sandbox_cgroups made), so making
        those mounts writable is safe; re-executing PID 1 makes systemd use them.
        """
        for controller in LIMIT_CONTROLLERS:
            subprocess.run(
                [
                    "nsenter",
                    "-t",
                    str(self.leader),
                    "-m",
                    "mount",
                    "-o",
                    "remount,bind,rw",
                    f"/sys/fs/cgroup/{controller}",
                ],
                check=True,
            )
        self.run("systemctl", "daemon-reexec").check()
        self.run("systemctl", "is-system-running", "--wait", timeout=BOOT_TIMEOUT)

    def _find_leader(self) -> int:
        """nspawn's child is the container's PID 1; wait for it to appear."""
        assert self.proc is not None
        deadline = time.monotonic() + BOOT_TIMEOUT
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = (self.dir / "console.log").read_text(errors="replace")[-2000:]
                raise SandboxError(f"systemd-nspawn exited {self.proc.returncode}: {log}")
            with contextlib.suppress(OSError):
                pids = children.read_text().split()
                if pids and Path(f"/proc/{pids[0]}/ns/pid").exists():
                    # nspawn forks an inner child that execs systemd; wait for the exec.
                    # Then for its private bus socket, which systemctl needs.
                    comm = Path(f"/proc/{pids[0]}/comm").read_text().strip()
                    if (
                        comm == "systemd"
                        and Path(f"/proc/{pids[0]}/root/run/systemd/private").exists()
                    ):
                        return int(pids[0])
            time.sleep(0.05)
        raise SandboxError("container PID 1 did not appear")

    def _create_users(self) -> None:
        for user in USERS:
            self.run("useradd", "-m", "-s", "/bin/bash", user).check()
            self.run("loginctl", "enable-linger", user).check()
        self.run("touch", "/etc/.hostagent-users").check()

    def poweroff(self, timeout: float = 60.0) -> None:
        if self.proc is None:
            return
        self.run("systemctl", "poweroff", "--no-block")
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self._kill_nspawn()
        self.proc = None
        self.leader = 0

    def reboot(self) -> None:
        """Power off and boot the same tree: same disk, new boot id."""
        self.poweroff()
        self.boot()

    def destroy(self) -> None:
        if self.proc is not None:
            self._kill_nspawn()
            self.proc = None
        teardown(self.dir)

    def _kill_nspawn(self) -> None:
        """End the machine at once. SIGKILL to the container's PID 1 ends every process in its
        PID namespace; killing only nspawn would leave the container running, orphaned."""
        assert self.proc is not None
        kill_container(self.leader, self.dir)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def __enter__(self) -> Sandbox:
        try:
            self.boot()
        except BaseException:
            self.destroy()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    # ---- running things inside ----------------------------------------------------------

    def uid(self, user: str) -> int:
        return int(self.run("id", "-u", user).check().stdout)

    def user_env(self, user: str) -> dict[str, str]:
        uid = self.uid(user)
        return {
            "HOME": f"/home/{user}",
            "USER": user,
            "LOGNAME": user,
            "XDG_RUNTIME_DIR": f"/run/user/{uid}",
            "DBUS_SESSION_BUS_ADDRESS": f"unix:path=/run/user/{uid}/bus",
        }

    def _command(
        self, argv: tuple[str, ...], user: str | None, env: dict[str, str] | None, cwd: str
    ) -> list[str]:
        if not self.leader:
            raise SandboxError("the container is not running")
        base = {
            "PATH": GUEST_PATH,
            "LANG": "C.UTF-8",
            "HOME": "/root",
            "USER": "root",
            "TERM": "xterm-256color",
        }
        # nsenter's --wd resolves the directory before entering the mount namespace, so the
        # working directory is set by env(1) inside instead.
        prefix = [
            *("/bin/sh", "-c", 'for d in $0; do echo $$ > "$d/cgroup.procs"; done; exec "$@"'),
            self.outside,
            *("nsenter", "-t", str(self.leader), "-a"),
        ]
        if user is not None:
            base.update(self.user_env(user) if user not in ("root",) else {})
            prefix += ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups"]
        base.update(env or {})
        return [
            *prefix,
            "env",
            "-i",
            f"--chdir={cwd}",
            *(f"{k}={v}" for k, v in base.items()),
            *argv,
        ]

    def run(
        self,
        *argv: str,
        user: str | None = None,
        env: dict[str, str] | None = None,
        input: str | None = None,
        timeout: float = 60.0,
        cwd: str = "/",
    ) -> Result:
        """Run argv inside the container (as root, or as user) with a clean environment."""
        proc = subprocess.run(
            self._command(argv, user, env, cwd),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def popen(self, *argv: str, user: str | None = None, cwd: str = "/") -> subprocess.Popen:
        """Start argv inside the container and return at once; stdin and stdout are pipes."""
        return subprocess.Popen(
            self._command(argv, user, None, cwd),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def park(self, point: str, session: str = "") -> Parked:
        """Arm checkpoint point: the next daemon operation to reach it waits there (the next
        of that session's alone, when one is named)."""
        return Parked(self, point, session)

    def wait_unit_state(self, unit: str, states: tuple[str, ...], timeout: float = 30.0) -> str:
        """The unit's ActiveState once it is one of states ("" is not loaded)."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.run("systemctl", "show", "-P", "ActiveState", unit).stdout.strip()
            state = "" if state == "inactive" and not self._loaded(unit) else state
            if state in states:
                return state
            if time.monotonic() > deadline:
                raise SandboxError(f"{unit} stayed {state or 'unloaded'}, not {states}")
            time.sleep(0.05)

    def _loaded(self, unit: str) -> bool:
        return self.run("systemctl", "show", "-P", "LoadState", unit).stdout.strip() == "loaded"

    def sh(self, script: str, **kw: object) -> Result:
        return self.run("/bin/sh", "-c", script, **kw)  # type: ignore[arg-type]

    def boot_id(self) -> str:
        return self.run("cat", "/proc/sys/kernel/random/boot_id").check().stdout.strip()

    def cgroup_file(self, cgroup: str, controller: str, name: str) -> str:
        """The path inside the machine of a file of cgroup (systemd's ControlGroup, such as
        /hostagent.slice) for controller: one tree in the unified layout, one per controller
        in hybrid, where the name=systemd tree ("systemd") tracks processes."""
        if self.layout == "unified":
            return f"/sys/fs/cgroup{cgroup}/{name}"
        return f"/sys/fs/cgroup/{controller}{cgroup}/{name}"

    def controllers(self) -> set[str]:
        """The controllers systemd can use in the machine: what limits can be enforced."""
        if self.layout == "unified":
            return set(self.run("cat", "/sys/fs/cgroup/cgroup.controllers").stdout.split())
        listed = self.run("ls", "/sys/fs/cgroup").stdout.split()
        return {c for c in listed if self.run("test", "-w", f"/sys/fs/cgroup/{c}").returncode == 0}

    @property
    def bus_address(self) -> str:
        """The container's system bus, reachable from the host."""
        return f"unix:path=/proc/{self.leader}/root/run/dbus/system_bus_socket"
