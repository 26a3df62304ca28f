"""The chaos suite: random operations and random faults below the daemon, with an invariant
check after every step, on a real systemd.

Seeded and bounded: HOSTAGENT_CHAOS_SEED picks the run (a failure prints it, so it can be
replayed) and HOSTAGENT_CHAOS_SECONDS its length (CI runs the default; run it longer by hand).

Faults: the daemon SIGKILLed, or restarted, in the middle of a call or on its own, or once a
create has made its worktree and before its record; PID 1 re-executed (as a systemd package
upgrade does) and reloaded; a full state filesystem; records and usage books cut short or
overwritten with garbage; a record and its copy removed under the running daemon; a unit ending while recovery is parked; hostagentctl
killed mid-call; an agent exiting by itself; a reboot under the auto policy.

Invariants, once the daemon has settled: every record parses and is complete; every hostagent
scope has a record; each record's state is the bus's, and running exactly when its unit is
active; no session the test was told was created is missing (a damaged record comes back
from its copy); no tmux server that should live was killed.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from dataclasses import dataclass, field

import yaml

from hostagent.daemon.host import checkpoint
from hostagent.daemon.state.recordfile import RecordError, record_from_dict
from tests.sandbox import Sandbox

SESSIONS = "/var/lib/hostagent/sessions"
STATE = "/var/lib/hostagent"
REPO = "/root/chaos-repo"  # where creates with a worktree are made
SECONDS = float(os.environ.get("HOSTAGENT_CHAOS_SECONDS", "100"))
SEED = int(os.environ.get("HOSTAGENT_CHAOS_SEED") or random.SystemRandom().randrange(1 << 32))
SETTLE_TIMEOUT = 30.0


@dataclass
class Model:
    """What the test knows should be true."""

    # name -> running | stopped | any (exists, state unknown) | maybe (may not exist)
    expected: dict[str, str] = field(default_factory=dict)
    counter: int = 0
    faults: dict[str, int] = field(default_factory=dict)

    def new_name(self) -> str:
        self.counter += 1
        return f"c{self.counter}"

    def fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1


class Chaos:
    def __init__(self, sb: Sandbox, rng: random.Random) -> None:
        self.sb = sb
        self.rng = rng
        self.m = Model()
        self.log: list[str] = []

    # ---- the state directory on a small filesystem of its own --------------------------

    def mount_state(self) -> None:
        self.sb.sh(
            f"mkdir -p {STATE} && mount -t tmpfs -o size=2m,mode=0700 tmpfs {STATE}"
            f" && if [ -d /var/lib/hostagent-saved ]; then cp -a /var/lib/hostagent-saved/. {STATE}/;"
            " rm -rf /var/lib/hostagent-saved; fi"
        ).check()

    def ensure_daemon(self) -> None:
        if self.sb.run("systemctl", "is-active", "-q", "hostagent").returncode != 0:
            self.sb.run("systemctl", "reset-failed", "hostagent.service")
            self.sb.daemon_start()

    # ---- operations ---------------------------------------------------------------------

    def pick(self, *states: str) -> str | None:
        names = [n for n, s in self.m.expected.items() if not states or s in states]
        return self.rng.choice(sorted(names)) if names else None

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        result = self.sb.ctl(*args)
        self.log.append(f"hostagentctl {' '.join(args)} -> {result.returncode}")
        if result.returncode != 0:
            err = result.stderr.strip()
            assert "Internal error" not in err and "Traceback" not in err, err
            assert len(err.splitlines()) <= 2, err
        return result  # type: ignore[return-value]

    def op_create(self) -> None:
        name = self.m.new_name()
        if self.ctl("new", "--preset", "shell", "--name", name, "--cwd", "/tmp").returncode == 0:
            self.m.expected[name] = "running"

    def op_stop(self) -> None:
        name = self.pick("running")
        if name and self.ctl("stop", name).returncode == 0:
            self.m.expected[name] = "stopped"

    def op_resume(self) -> None:
        name = self.pick("stopped")
        if name and self.ctl("resume", name).returncode == 0:
            self.m.expected[name] = "running"

    def op_remove(self) -> None:
        name = self.pick()
        if name and self.ctl("rm", name).returncode == 0:
            del self.m.expected[name]

    def op_agent_exits(self) -> None:
        name = self.pick("running")
        if name:
            self.sb.run("tmux", "-S", f"/run/hostagent/0/{name}.sock", "kill-server")
            self.m.expected[name] = "stopped"
            self.m.fault("agent exited")

    # ---- faults -------------------------------------------------------------------------

    def during_a_call(self, fault: str) -> None:
        """A call in flight while fault strikes: its outcome is not known, only that the
        session must end up consistent."""
        name = self.pick()
        verb = self.rng.choice(["stop", "resume", "rm"]) if name else "new"
        if name is None:
            name = self.m.new_name()
            args = ["new", "--preset", "shell", "--name", name, "--cwd", "/tmp"]
        else:
            args = [verb, name]
        proc = self.sb.popen("hostagentctl", "--system", *args)
        if fault == "kill-daemon":
            self.sb.daemon_kill()
        elif fault == "reexec":
            self.sb.run("systemctl", "daemon-reexec").check()
        elif fault == "kill-client":
            proc.kill()
        proc.communicate(timeout=120)
        # A create cut short may have left nothing at all, and a remove may have finished:
        # an absent session is allowed then, not "missing".
        self.m.expected[name] = "maybe" if args[0] in ("new", "rm") else "any"
        self.log.append(f"{fault} during hostagentctl {' '.join(args)}")
        self.m.fault(fault)

    def fault_full_disk(self) -> None:
        self.sb.sh(f"dd if=/dev/zero of={STATE}/filler bs=4k 2>/dev/null; true").check()
        for _ in range(self.rng.randint(1, 3)):
            self.rng.choice([self.op_create, self.op_stop, self.op_resume, self.op_remove])()
        self.sb.run("rm", "-f", f"{STATE}/filler").check()
        self.m.fault("full disk")

    def fault_damage_record(self) -> None:
        name = self.pick()
        if name is None:
            return
        self.sb.daemon_stop()
        path = f"{SESSIONS}/{name}.yaml"
        size = len(self.sb.run("cat", path).stdout)
        if self.rng.random() < 0.5:
            self.sb.run("truncate", "-s", str(self.rng.randrange(max(size, 1))), path).check()
            self.m.fault("torn record")
        else:
            self.sb.sh(f"head -c 300 /dev/urandom > {path}").check()
            self.m.fault("garbage record")
        self.sb.daemon_start()
        # The record comes back from its copy under /run, running or stopped: nothing changes.
        self.log.append(f"damaged the record of {name}")

    def fault_kill_mid_worktree_create(self) -> None:
        """Killed when a create has made its worktree, branch and runtime files and has no
        record yet: the next start leaves nothing of it, and the name can be created again."""
        name = self.m.new_name()
        args = ["new", "--preset", "shell", "--name", name, "--cwd", REPO, "--worktree"]
        with self.sb.park(checkpoint.CREATE_MADE, name) as parked:
            proc = self.sb.popen("hostagentctl", "--system", *args)
            parked.wait()
            self.sb.daemon_kill()
        proc.communicate(timeout=120)
        self.ensure_daemon()
        leftovers = self.sb.sh(
            f"git -C {REPO} branch --list hostagent/{name}; ls -d {REPO}/.git/hostagent-worktrees/"
            f"{name} /run/hostagent/0/{name}.* 2>/dev/null; true"
        ).stdout
        assert leftovers == "", f"seed {SEED}: a killed create of {name} left {leftovers!r}"
        if self.ctl(*args).returncode == 0:
            self.m.expected[name] = "running"
        self.log.append(f"kill-daemon mid worktree create of {name}")
        self.m.fault("kill mid worktree create")

    def fault_tear_books(self) -> None:
        """The usage books (and the ones before) cut short: set aside, the daemon serves on."""
        self.sb.daemon_stop()
        self.sb.sh(
            f'for f in {STATE}/usage/*.json*; do [ -f "$f" ] && truncate -s 7 "$f"; done; true'
        ).check()
        self.sb.daemon_start()
        assert self.ctl("usage", "--since", "today").returncode == 0
        self.m.fault("torn books")

    def fault_lose_record_and_copy(self) -> None:
        """A record and its copy (or every copy) removed under the running daemon, then a
        restart: the daemon wrote them back from memory, so the session keeps its identity."""
        name = self.pick()
        if name is None:
            return
        uuid = yaml.safe_load(self.sb.run("cat", f"{SESSIONS}/{name}.yaml").stdout)["uuid"]
        copies = "/run/hostagent/records"
        gone = copies if self.rng.random() < 0.3 else f"{copies}/{name}.yaml"
        self.sb.run("rm", "-rf", f"{SESSIONS}/{name}.yaml", gone).check()
        self.sb.daemon_restart()
        kept = yaml.safe_load(self.sb.run("cat", f"{SESSIONS}/{name}.yaml").stdout) or {}
        assert kept.get("uuid") == uuid, f"seed {SEED}: {name} came back as {kept.get('uuid')}"
        self.m.fault("record and copy removed")

    def fault_unit_ends_during_recovery(self) -> None:
        name = self.pick("running")
        self.sb.daemon_stop()
        with self.sb.park(checkpoint.RECOVERY_LISTED) as parked:
            start = self.sb.popen("systemctl", "start", "hostagent.service")
            parked.wait()
            if name:
                self.sb.run("systemctl", "stop", f"hostagent-{name}.scope").check()
                self.m.expected[name] = "stopped"
            parked.release()
        start.communicate(timeout=120)
        self.m.fault("unit ended during recovery")

    def fault_reboot(self) -> None:
        self.sb.daemon_stop()
        self.sb.sh(f"cp -a {STATE}/. /var/lib/hostagent-saved/").check()
        self.sb.reboot()
        self.mount_state()
        self.ensure_daemon()
        for name, state in self.m.expected.items():
            # auto resumes every session the reboot made dormant; stopped ones stay stopped
            self.m.expected[name] = "any" if state == "any" else state
        self.m.fault("reboot")

    # ---- the invariant check ------------------------------------------------------------

    def views(self) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """(records, units, bus): name -> state, each as its source says."""
        out = self.sb.sh(
            f'for f in {SESSIONS}/*.yaml; do [ -e "$f" ] && {{ echo "=== $f"; cat "$f"; }}; done'
        ).stdout
        records: dict[str, str] = {}
        for chunk in out.split("=== ")[1:]:
            path, _, text = chunk.partition("\n")
            name = path.rsplit("/", 1)[1].removesuffix(".yaml")
            try:
                records[name] = record_from_dict(yaml.safe_load(text), name).state.value
            except (RecordError, yaml.YAMLError) as e:
                raise AssertionError(f"record of {name} is not whole: {e}") from None
        units = {}
        listing = self.sb.run(
            "systemctl", "list-units", "hostagent-*.scope", "--all", "--plain", "--no-legend"
        ).stdout
        for line in listing.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0].startswith("hostagent-"):
                units[parts[0][len("hostagent-") : -len(".scope")]] = parts[2]
        bus = {r["name"]: r["state"] for r in json.loads(self.sb.ctl("--json", "list").stdout)}
        return records, units, bus

    def problems(self) -> list[str]:
        records, units, bus = self.views()
        found = []
        for name, state in units.items():
            if state in ("active", "activating") and name not in records:
                found.append(f"scope of {name} is {state} without a record")
        for name, state in records.items():
            live = units.get(name, "") in ("active", "activating", "deactivating")
            if bus.get(name) != state:
                found.append(f"{name}: record {state}, bus {bus.get(name)}")
            if (state == "running") != live or state in ("starting", "stopping"):
                found.append(f"{name}: record {state}, unit {units.get(name) or 'gone'}")
        for name, expected in self.m.expected.items():
            if name not in records:
                if expected != "maybe":
                    found.append(f"{name}: told created, record missing")
            elif expected not in ("any", "maybe") and records[name] != expected:
                found.append(f"{name}: expected {expected}, record {records[name]}")
        return found

    def check(self) -> None:
        self.ensure_daemon()
        deadline = time.monotonic() + SETTLE_TIMEOUT
        while (found := self.problems()) and time.monotonic() < deadline:
            time.sleep(0.2)  # a reconcile or an auto resume still under way
        if found:
            tail = "\n".join(self.log[-15:])
            raise AssertionError(f"seed {SEED}: {found}\nlast steps:\n{tail}")
        # What "any" became is now known.
        _, _, bus = self.views()
        for name in list(self.m.expected):
            if self.m.expected[name] in ("any", "maybe"):
                if name in bus:
                    self.m.expected[name] = bus[name]
                else:
                    del self.m.expected[name]


def test_chaos(fresh_sandbox: Sandbox) -> None:
    sb = fresh_sandbox
    rng = random.Random(SEED)
    chaos = Chaos(sb, rng)
    sb.sh(
        "mkdir -p /etc/hostagent && printf 'recovery:\\n  policy: auto\\n  max_parallel: 4\\n"
        "  stagger_sec: 0.1\\n' > /etc/hostagent/hostagent.yaml"
    ).check()
    chaos.mount_state()
    sb.sh(
        f"rm -rf {REPO} && mkdir -p {REPO} && cd {REPO} && git init -q -b main"
        " && git -c user.name=c -c user.email=c@c commit -q --allow-empty -m start"
    ).check()
    sb.daemon_start()
    steps = [
        (chaos.op_create, 6),
        (chaos.op_stop, 4),
        (chaos.op_resume, 4),
        (chaos.op_remove, 2),
        (chaos.op_agent_exits, 1),
        (lambda: chaos.during_a_call("kill-daemon"), 2),
        (lambda: chaos.during_a_call("reexec"), 2),
        (lambda: chaos.during_a_call("kill-client"), 1),
        (lambda: sb.run("systemctl", "daemon-reload").check(), 1),
        (sb.daemon_restart, 1),
        (chaos.fault_full_disk, 1),
        (chaos.fault_damage_record, 1),
        (chaos.fault_unit_ends_during_recovery, 1),
        (chaos.fault_kill_mid_worktree_create, 1),
        (chaos.fault_tear_books, 0.5),
        (chaos.fault_lose_record_and_copy, 1),
        (chaos.fault_reboot, 0.3),
    ]
    actions, weights = zip(*steps, strict=True)
    deadline = time.monotonic() + SECONDS
    count = 0
    while time.monotonic() < deadline:
        rng.choices(actions, weights)[0]()
        chaos.check()
        count += 1
    print(f"chaos: seed {SEED}, {count} steps, faults {chaos.m.faults}, 0 invariant violations")
    assert count > 0
