"""The distro package: built and installed by the admin guide's own lines in a fresh systemd
machine (tests/integration/debs.py), checked with lintian, and used as an admin would. The RPM
spec and the PKGBUILD get the checks that run here; the Cockpit page's vendored xterm.js is
checked against the npm package its lock file pins."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import tarfile
from pathlib import Path

import pytest

from tests.integration.debs import BUILD_DIR, host
from tests.integration.helpers import agent_process
from tests.sandbox import REPO, Sandbox
from tests.sandbox_roots import DEFAULT_SYSTEM

pytestmark = [
    pytest.mark.core,
    pytest.mark.skipif(
        not shutil.which("dpkg-buildpackage")
        or not Path("/usr/share/perl5/Debian/Debhelper").is_dir(),
        reason="needs dpkg-buildpackage and debhelper (./dev/setup installs them)",
    ),
]


@pytest.fixture(scope="module")
def deb(debs: Path) -> Path:
    (package,) = debs.glob("hostagent_*_all.deb")
    return package


@pytest.mark.skipif(DEFAULT_SYSTEM != "debian12", reason="lintian runs on this machine's Debian 12")
def test_lintian_reports_no_errors_or_warnings(deb: Path) -> None:
    (changes,) = deb.parent.glob("hostagent_*.changes")
    result = host("lintian", "--fail-on", "error,warning", str(changes))
    assert result.returncode == 0, result.stdout + result.stderr
    assert not [line for line in result.stdout.splitlines() if line.startswith(("E:", "W:"))]


def test_the_build_says_no_warning(debs: Path) -> None:
    log = (debs / "build.log").read_text()
    # apt's notice that its output is not for scripts appears only when it is not on a terminal.
    apt = "WARNING: apt does not have a stable CLI interface"
    warnings = [
        line
        for line in log.splitlines()
        if ("Warning" in line or "WARNING" in line) and not line.startswith(apt)
    ]
    assert warnings == [], "\n".join(warnings)


def test_the_deb_depends_on_debians_own_packages(deb: Path) -> None:
    depends = host("dpkg-deb", "-f", str(deb), "Depends").stdout
    for package in ("python3-dbus-fast", "python3-yaml", "python3-sdnotify", "tmux"):
        assert package in depends
    contents = host("dpkg-deb", "-c", str(deb)).stdout
    for path in (
        "lib/systemd/system/hostagent.service",
        "usr/lib/systemd/user/hostagent.service",
        "usr/share/dbus-1/system-services/org.hostagent.HostAgent1.service",
        "usr/share/dbus-1/services/org.hostagent.HostAgent1.service",
        "usr/share/dbus-1/system.d/org.hostagent.HostAgent1.conf",
        "usr/share/polkit-1/actions/org.hostagent.HostAgent1.policy",
        "usr/lib/sysusers.d/hostagent.conf",
        "usr/lib/tmpfiles.d/hostagent.conf",
        "usr/share/man/man1/hostagentctl.1.gz",
        "usr/share/man/man8/hostagent.8.gz",
        "usr/share/bash-completion/completions/hostagentctl",
        "hostagent/builtin-presets/claude.yaml",
        "hostagent/agent-extensions/pi-hostagent.ts",
        "etc/hostagent/hostagent.yaml",
        "usr/lib/hostagent/hostagent-demo-agent",
    ):
        assert path in contents, path
    # The stand-in agent is hostagent's helper, not a command in users' PATH.
    assert "usr/bin/hostagent-demo-agent" not in contents
    conffiles = host("dpkg-deb", "-I", str(deb), "conffiles").stdout.split()
    assert "/etc/hostagent/hostagent.yaml" in conffiles


@pytest.mark.skipif(not shutil.which("rpmspec"), reason="needs rpm (./dev/setup installs it)")
def test_the_rpm_spec_parses_and_lints() -> None:
    spec = REPO / "packaging" / "rpm" / "hostagent.spec"
    assert host("rpmspec", "-P", str(spec)).returncode == 0
    lint = host("rpmlint", str(spec))
    assert " 0 errors" in lint.stdout, lint.stdout


def test_the_pkgbuild_parses_and_installs_what_the_deb_does() -> None:
    pkgbuild = REPO / "packaging" / "arch" / "PKGBUILD"
    assert host("bash", "-n", str(pkgbuild)).returncode == 0
    out = host(
        "bash",
        "-c",
        f'source "{pkgbuild}"; echo "${{pkgname[*]}} $pkgver";'
        " declare -f package_hostagent package_hostagent-cockpit",
    )
    assert out.stdout.startswith("hostagent hostagent-cockpit 0.2.0")
    for unit in (
        "hostagent.service",
        "sysusers.d/hostagent.conf",
        "hostagent.rules",
        "usr/share/cockpit/hostagent",
    ):
        assert unit in out.stdout


def test_the_cockpit_package_carries_the_page_and_xterms_licence(
    debs: Path, tmp_path: Path
) -> None:
    (page,) = debs.glob("hostagent-cockpit_*_all.deb")
    contents = host("dpkg-deb", "-c", str(page)).stdout
    for name in ("manifest.json", "index.html", "hostagent.js", "xterm.js", "xterm.css"):
        assert f"usr/share/cockpit/hostagent/{name}" in contents, name
    # Debian states xterm.js's licence in the package's copyright file.
    assert host("dpkg-deb", "-x", str(page), str(tmp_path)).returncode == 0
    copyright_ = (tmp_path / "usr/share/doc/hostagent-cockpit/copyright").read_text()
    assert "Files: cockpit/vendor/*" in copyright_ and "The xterm.js authors" in copyright_
    depends = host("dpkg-deb", "-f", str(page), "Depends").stdout
    assert "cockpit-bridge" in depends and "hostagent (= 0.2.0)" in depends


@pytest.fixture
def installed(admin_machine: tuple[Sandbox, Path]) -> Sandbox:
    """The machine where the admin guide's block built and installed the .deb."""
    return admin_machine[0]


def test_enable_now_and_activation_by_the_first_call(installed: Sandbox) -> None:
    sb = installed
    sb.run("systemctl", "enable", "--now", "hostagent").check()
    assert sb.run("systemctl", "is-active", "hostagent").stdout.strip() == "active"
    sb.run("systemctl", "stop", "hostagent").check()
    sb.run(
        "busctl",
        "call",
        "org.hostagent.HostAgent1",
        "/org/hostagent/HostAgent1",
        "org.hostagent.HostAgent1.Manager",
        "ListSessions",
    ).check()
    assert sb.run("systemctl", "is-active", "hostagent").stdout.strip() == "active"
    assert sb.run("getent", "group", "hostagent-admin").returncode == 0  # sysusers.d ran
    assert sb.run("stat", "-c", "%a", "/var/lib/hostagent").stdout.strip() == "700"


def test_a_broken_configuration_is_answered_at_once_through_the_packages_alias(
    installed: Sandbox,
) -> None:
    """With the package's dbus-org alias, an exiting daemon left every call waiting out the
    bus's 25 s activation timeout; the daemon as packaged answers at once instead."""
    sb = installed
    conf = "/etc/hostagent/hostagent.yaml"
    names = set(sb.run("systemctl", "show", "-P", "Names", "hostagent").stdout.split())
    assert names == {"hostagent.service", "dbus-org.hostagent.HostAgent1.service"}
    sb.run("cp", conf, f"{conf}.good").check()
    try:
        sb.sh(f"printf 'limits:\\n  tasks_max: lots\\n' > {conf}").check()
        sb.run("systemctl", "stop", "hostagent").check()
        listed = sb.run("hostagentctl", "--system", "list", user="alice", timeout=10)
        assert listed.returncode == 1 and listed.stderr.count("\n") == 1, listed.stderr
        assert f"{conf}:2: field 'limits.tasks_max'" in listed.stderr
        assert "then run 'systemctl reload hostagent'" in listed.stderr
    finally:
        sb.run("mv", f"{conf}.good", conf).check()
    sb.run("systemctl", "reload", "hostagent").check()
    sb.ctl("list", user="alice", system=True).check()


def test_a_session_runs_unhardened_and_man_and_completion_work(installed: Sandbox) -> None:
    sb = installed
    sb.ctl(
        "new",
        "--preset",
        "shell",
        "--name",
        "pkg",
        "--cwd",
        "/home/alice",
        user="alice",
        system=True,
    ).check()
    assert sb.run("systemctl", "is-active", "hostagent-pkg.scope").stdout.strip() == "active"
    # Her slice got its caps at runtime, and systemd does not call it changed on disk.
    slice_ = f"hostagent-u{sb.uid('alice')}.slice"
    status = sb.run("systemctl", "status", "--no-pager", "-n0", slice_)
    assert "changed on disk" not in status.stdout + status.stderr, status.stdout
    assert sb.run("systemctl", "show", "-P", "NeedDaemonReload", slice_).stdout.strip() == "no"
    # Nothing of the service's sandboxing reaches the session: it sees the host's mounts (and,
    # over them, only what keeps it apart from her other sessions: the veils of the runtime
    # directories), may gain privileges (sudo), and runs no seccomp filter.
    proc = agent_process(sb, "pkg")

    def mount_points(pid: int | str) -> set[str]:
        return set(sb.run("awk", "{print $5}", f"/proc/{pid}/mountinfo").check().stdout.split())

    ours, hosts = mount_points(proc.pid), mount_points(1)
    assert hosts <= ours, hosts - ours
    assert all(p.startswith("/run/hostagent/") for p in ours - hosts), ours - hosts

    def confinement(pid: int | str) -> list[str]:
        status = sb.run("cat", f"/proc/{pid}/status").stdout.splitlines()
        return [line for line in status if line.startswith(("NoNewPrivs", "Seccomp", "CapBnd"))]

    # As confined as the machine's PID 1 (nspawn's own seccomp filter), no more.
    assert confinement(proc.pid) == confinement(1)
    page = sb.run("man", "-P", "cat", "hostagentctl", env={"MANWIDTH": "80"})
    assert page.returncode == 0 and "drive hostagent" in page.stdout

    def complete(*words: str) -> set[str]:
        """What bash offers for the last (empty) word after words, as alice."""
        line = " ".join(["hostagentctl", *words, ""])
        script = (
            "source /usr/share/bash-completion/bash_completion;"
            " source /usr/share/bash-completion/completions/hostagentctl;"
            f" COMP_WORDS=(hostagentctl {' '.join(words)} ''); COMP_CWORD={len(words) + 1};"
            f" COMP_LINE='{line}'; COMP_POINT={len(line)};"
            ' _hostagentctl; echo "${COMPREPLY[@]}"'
        )
        result = sb.run("bash", "-c", script, user="alice")
        assert result.returncode == 0, result.stderr
        return set(result.stdout.split())

    assert {"list", "new", "resume", "attach"} <= complete()
    assert "pkg" in complete("--system", "stop")
    assert "pkg" in complete("stop", "--system")  # global options after the verb, too
    # Only her own sessions to act on; everyone's to read. Values, not sessions, for options.
    sb.ctl("new", "--preset", "shell", "--name", "roots", system=True).check()
    try:
        assert "roots" not in complete("--system", "stop")
        assert "roots" in complete("--system", "status")
        assert {"TERM", "KILL"} <= complete("--system", "kill", "pkg", "-s")
        assert "MemoryMax=" in complete("new", "-p")
        assert "alice" in complete("list", "--owner")
    finally:
        sb.ctl("rm", "roots", system=True)


def test_remove_and_purge_leave_running_sessions_to_a_reinstall(
    installed: Sandbox, deb: Path
) -> None:
    """A purge with sessions live takes the records, not the sessions: a reinstalled daemon
    finds each again with its identity (preset, conversation id, limits, start time) from the
    copies under /run/hostagent."""
    sb = installed
    if sb.run("systemctl", "is-active", "hostagent-pkg.scope").stdout.strip() != "active":
        sb.ctl("new", "--preset", "shell", "--name", "pkg", user="alice", system=True).check()
    sb.ctl(
        "new",
        "--preset",
        "demo-agent",
        "--name",
        "pkg-agent",
        "--cwd",
        "/tmp",
        "-p",
        "MemoryMax=300M",
        user="alice",
        system=True,
    ).check()
    before = json.loads(sb.ctl("--json", "status", "pkg-agent", system=True).check().stdout)
    assert before["agent_session_id"] and before["preset"] == "demo-agent"
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    removed = sb.run("apt-get", "remove", "-y", "hostagent", env=env, timeout=300).check()
    assert "2 session(s) still run in their own scopes" in removed.stderr + removed.stdout
    assert sb.run("systemctl", "is-active", "hostagent").stdout.strip() != "active"
    assert sb.run("systemctl", "is-active", "hostagent-pkg.scope").stdout.strip() == "active"
    assert sb.run("test", "-d", "/var/lib/hostagent/sessions").returncode == 0
    purged = sb.run("apt-get", "purge", "-y", "hostagent", env=env, timeout=300).check()
    assert "/run/hostagent is kept for them" in purged.stderr + purged.stdout
    assert sb.run("test", "-e", "/var/lib/hostagent").returncode != 0
    assert not (sb.root / "usr/bin/hostagentctl").exists()
    # The session kept its terminal, and a reinstalled daemon adopts it: user work survives.
    sock = f"/run/hostagent/{sb.uid('alice')}/pkg.sock"
    assert sb.run("test", "-S", sock).returncode == 0
    reinstalled = sb.run(
        "apt-get", "install", "-y", f"{BUILD_DIR}/{deb.name}", env=env, timeout=300
    )
    assert reinstalled.returncode == 0, reinstalled.stderr[-2000:]
    sb.run("systemctl", "start", "hostagent").check()
    listed = sb.ctl("--json", "list", system=True).check().stdout
    assert '"pkg"' in listed and '"running"' in listed, listed
    assert "2 records restored from their copies" in sb.journal(this_run=True)
    after = json.loads(sb.ctl("--json", "status", "pkg-agent", system=True).check().stdout)
    for key in ("preset", "agent_session_id", "limits", "started_at", "uuid", "state"):
        assert after[key] == before[key], key
    sb.ctl("rm", "pkg-agent", system=True).check()
    # apt purge of an installed package runs postrm twice (remove, then purge): said once.
    purged = sb.run("apt-get", "purge", "-y", "hostagent", env=env, timeout=300).check()
    assert (purged.stderr + purged.stdout).count("still run in their own scopes") == 1
    sb.run("apt-get", "install", "-y", f"{BUILD_DIR}/{deb.name}", env=env, timeout=300).check()
    sb.run("systemctl", "start", "hostagent").check()
    sb.ctl("rm", "pkg", system=True).check()
    # Nothing running: purge takes the runtime directory too.
    purged = sb.run("apt-get", "purge", "-y", "hostagent", env=env, timeout=300).check()
    assert sb.run("test", "-e", "/run/hostagent").returncode != 0


@pytest.mark.skipif(not shutil.which("npm"), reason="needs npm (./dev/setup installs it)")
def test_the_vendored_xterm_is_the_npm_package_the_lock_pins(tmp_path: Path) -> None:
    cockpit = REPO / "cockpit"
    lock = json.loads((cockpit / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/@xterm/xterm"]
    packed = host("npm", "pack", "--silent", f"@xterm/xterm@{pinned['version']}", cwd=tmp_path)
    assert packed.returncode == 0, packed.stderr
    tarball = tmp_path / packed.stdout.split()[-1]
    algorithm, digest = pinned["integrity"].split("-", 1)
    assert (
        base64.b64encode(hashlib.new(algorithm, tarball.read_bytes()).digest()).decode() == digest
    )
    with tarfile.open(tarball) as tar:
        for inside, vendored in (
            ("package/lib/xterm.js", "xterm.js"),
            ("package/css/xterm.css", "xterm.css"),
            ("package/LICENSE", "xterm.LICENSE"),
        ):
            member = tar.extractfile(inside)
            assert (
                member is not None and member.read() == (cockpit / "vendor" / vendored).read_bytes()
            )
