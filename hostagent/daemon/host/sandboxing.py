"""What the daemon decides of a session's sandbox on this host, before anything of it starts:
the plan its first process will make (``namespace.py`` makes it), checked here so that a create
that cannot have its sandbox is refused whole; what keeps a sandboxed session from its siblings'
runtime files; and what this kernel and this mode can enforce, for ``doctor``.
"""

from __future__ import annotations

import ctypes
import dataclasses
import errno
import functools
import os
import platform
import struct
from collections.abc import Iterable, Mapping

from hostagent import laterrun, sandbox, sandboxmounts, sandboxpaths
from hostagent.daemon.host.namespace import (
    CLONE_NEWUSER,
    Plan,
    Veil,
    landlock_abi,
    libc,
    own_pids_as_user,
)
from hostagent.daemon.host.owner import passwd_env
from hostagent.daemon.state.paths import (
    LINK_TARGET,
    ROOT_HOOKS_DIR,
    SessionPaths,
    hooks_fifo,
    owner_link,
)
from hostagent.identity import Owner
from hostagent.presets import Preset
from hostagent.sandboxmounts import Mode


class SandboxError(OSError):
    """The sandbox cannot be made on this host, said before anything starts."""


def check(plan: Plan) -> None:
    """SandboxError for what would make the child fail, said in the daemon: a path that must
    exist and does not, or no inaccessible nodes to hide a path with."""
    for m in plan.mounts:
        if not m.optional and not os.path.lexists(m.path):
            raise SandboxError(errno.ENOENT, f"'{m.path}' does not exist; prefix it with '-'")
    if any(m.mode == Mode.INACCESSIBLE for m in plan.mounts) and not os.path.isdir(
        plan.inaccessible_root
    ):
        raise SandboxError(errno.ENOENT, f"{plan.inaccessible_root} is missing")


INACCESSIBLE_ROOT = "/run/systemd/inaccessible"  # made by systemd at boot, as its units use


def context(owner: Owner, cwd: str, repo: str) -> sandbox.Context:
    """What a session's specifiers stand for, on this daemon."""
    system = os.geteuid() == 0
    runtime_root = "/run" if system else f"/run/user/{owner.uid}"
    return sandbox.Context(
        owner.home, owner.name, owner.uid, runtime_root, cwd, sandbox.gitdir(cwd, repo)
    )


def cli_state(preset: Preset | None, owner: Owner, cwd: str) -> list[str]:
    """Where a session's CLI keeps its own state: its preset's paths, made concrete from the
    preset and the owner's passwd entry alone (sandboxpaths.state_paths); SandboxProblem for
    one outside the home."""
    if preset is None or not preset.state:
        return []
    return sandboxpaths.state_paths(
        preset.state, owner.home, cwd, {**passwd_env(owner), **preset.env}
    )


def cli_trusted(preset: Preset | None, owner: Owner, cwd: str) -> list[str]:
    """Its CLI's files that name commands to run (its preset's `trusted:`), made concrete as
    its state is (cli_state), from the preset and the owner's passwd entry alone: read-only in
    a confined session (laterrun.py)."""
    if preset is None or not preset.trusted:
        return []
    env = {**passwd_env(owner), **preset.env}
    return sandboxpaths.state_paths(preset.trusted, owner.home, cwd, env)


def session_plan(
    box: sandbox.Sandbox,
    ctx: sandbox.Context,
    owner: Owner,
    repo: str,
    paths: SessionPaths,
    state: Iterable[str] = (),
    resolved: Mapping[str, str] | None = None,
    trusted: Iterable[str] = (),
) -> Plan | None:
    """The plan for a session whose words read as box, its specifiers standing for ctx
    (context); with no word that confines it, the plan that keeps it apart from its siblings
    (None when this host can make none). repo: its worktree's repository, if any. state: the
    paths its CLI keeps its state in (cli_state), writable as its runtime directory is, unless
    a word says otherwise. resolved: each path of sandboxpaths.to_resolve's as the owner
    resolves it.
    trusted: its CLI's files that name commands (cli_trusted), read-only with what else runs
    later outside the session (laterrun.py), unless a word says otherwise. SandboxProblem or
    SandboxError when it cannot be made here (a writable path that resolves to a hidden one
    too), said before anything starts."""
    system = os.geteuid() == 0
    if not box.confined:
        return apart_plan(paths, owner, system)
    if not system and not _user_namespaces():
        raise SandboxError(
            errno.EPERM,
            "this host lets no user make a user namespace, which the user daemon's sandbox is "
            "made in (an admin allows it with sysctl user.max_user_namespaces, "
            "kernel.unprivileged_userns_clone=1 or "
            "kernel.apparmor_restrict_unprivileged_userns=0, or a service's "
            "RestrictNamespaces= refuses it); create the session on the system daemon "
            "(hostagentctl --system), or ask for no sandbox (--unconfined)",
        )
    user_runtime = f"/run/user/{owner.uid}"
    state = [p.rstrip("/") for p in state if p.rstrip("/")]
    problem = sandboxpaths.exposed(box, ctx, state, resolved or {})
    if problem:
        raise sandbox.SandboxProblem(problem)
    runtime_dir = str(paths.runtime_dir)
    found = sandboxmounts.mounts(
        box,
        ctx,
        keep=[runtime_dir],
        close=closed(user_runtime, system),
        state=state,
        resolved=resolved,
    )
    # The repository a session outside a worktree is in may be above its cwd; with none, its
    # own %{gitdir} (which a word may name, and the session may make).
    enclosing = ctx.gitdir if repo else enclosing_gitdir(ctx.cwd) or ctx.gitdir
    guard = dataclasses.replace(ctx, gitdir=enclosing)
    found = laterrun.guarded(
        found, box, guard, laterrun.later_run(guard, trusted), linked=os.path.islink
    )
    if sandboxmounts.hidden(runtime_dir, found):
        raise SandboxError(
            errno.EINVAL,
            f"a word hides {runtime_dir}, where the session's terminal lives (ProtectHome=yes "
            "or tmpfs hides /run/user); use ProtectHome=read-only, or the system daemon",
        )
    no_new_privileges = box.no_new_privileges or box.hides
    veils = tuple(v for v in apart(paths, owner) if not sandboxmounts.hidden(v.path, found))
    own_pids = system or own_pids_as_user()
    plan = Plan(tuple(found), INACCESSIBLE_ROOT, no_new_privileges, landlock_abi(), veils, own_pids)
    check(plan)
    return plan


USERS_RUNTIME = "/run/user"  # where logind mounts each user's runtime directory


def closed(user_runtime: str, system: bool) -> list[sandboxmounts.Closed]:
    """What of the owner's is closed in a confined session: her user manager and session bus,
    through which anything could be started outside the sandbox.

    On the system daemon, all of her runtime directory, by an empty /run/user over it: logind
    mounts it again at each first login, and a mount made later on the host reaches the
    session (its mounts are slaves of the host's), so a cover on the directory itself would go
    with the mount it covers at a logout and the next one be seen, and one that is not there at
    the start could not be covered at all; a mount landing under /run/user is not seen. Her
    directory is 0700 as each other user's, so the session sees nothing less. On the user
    daemon, only their sockets: its own runtime directory is in hers, and the session ends with
    her user manager, before her directory can be unmounted."""
    if system:
        # systemd's tmpfiles makes it at boot; made here where it did not, so it can be covered.
        if os.geteuid() == 0:
            os.makedirs(USERS_RUNTIME, 0o755, exist_ok=True)
        return [sandboxmounts.Closed(user_runtime, USERS_RUNTIME, Mode.TMPFS)]
    return [
        sandboxmounts.Closed(f"{user_runtime}/{p}", f"{user_runtime}/{p}")
        for p in ("bus", "systemd")
    ]


def enclosing_gitdir(cwd: str) -> str:
    """The git directory of the repository cwd is in, as git would find it going up: "" when
    there is none, or the nearest .git is not a directory (a linked worktree's gitfile)."""
    d = os.path.normpath(cwd)
    while True:
        dot = os.path.join(d, ".git")
        if os.path.lexists(dot):
            return dot if os.path.isdir(dot) and not os.path.islink(dot) else ""
        if d == "/":
            return ""
        d = os.path.dirname(d)


def apart_plan(paths: SessionPaths, owner: Owner, system: bool) -> Plan | None:
    """What keeps a session with no sandbox apart from its siblings, on the system daemon: a PID
    namespace and /proc of its own (it sees, signals and traces its own processes only), their
    runtime files veiled (root makes the mount namespace) and a Landlock domain of its own (no
    trace of, and from ABI 6 no signal to, a process outside the session). None on the user
    daemon: without root, the namespace needs a user namespace and the domain needs
    no-new-privileges, and with either sudo and every setuid program stop working in the
    session; a word that confines it (NoNewPrivileges=yes, say) keeps it apart there."""
    if not system:
        return None
    return Plan((), INACCESSIBLE_ROOT, False, landlock_abi(), tuple(apart(paths, owner)), True)


def apart(paths: SessionPaths, owner: Owner) -> list[Veil]:
    """What keeps a session from its siblings' runtime files: its owner's runtime directory
    shows it its own directory, the owner's hooks FIFO and the owner's link to its socket;
    the root-owned hooks directory, its own hooks file if it has one. None for a session an
    older hostagent started, whose files are side by side with its siblings'."""
    if paths.legacy:
        return []
    name = paths.directory.name.removesuffix(".d")
    runtime = Veil(
        str(paths.runtime_dir),
        owner.uid,
        owner.gid,
        0o700,
        keep=(paths.directory.name, hooks_fifo(paths.runtime_dir).name),
        links=((owner_link(paths.runtime_dir, name).name, LINK_TARGET.format(name=name)),),
    )
    veils = [runtime]
    root_hooks = paths.runtime_dir.parent / ROOT_HOOKS_DIR  # the system daemon's alone
    if os.geteuid() == 0 and root_hooks.is_dir():
        own = f"{name}.json"
        keep = (own,) if (root_hooks / own).exists() else ()
        veils.append(Veil(str(root_hooks), 0, 0, 0o755, keep=keep))
    return veils


def why(error: Exception) -> str:
    """A session_plan refusal in words for the caller."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror
    return str(error)


def support(system: bool) -> dict[str, str]:
    """What this kernel and this mode enforce of a sandbox, in words for doctor and the
    Manager's Sandboxing property."""
    abi = landlock_abi()
    made = (system and os.geteuid() == 0) or _user_namespaces()
    return {
        "words": " ".join(sandbox.WORDS) if made else "",
        "why_not": "" if made else "this host lets no user make a user namespace",
        "landlock_abi": str(abi),
        "kept_apart": kept_apart(system, abi, system or (made and own_pids_as_user())),
        "user_namespaces": "yes" if _user_namespaces() else "no",
        "ip_address_deny": ip_problem(system) or "yes",
    }


def kept_apart(system: bool, abi: int, own_pids: bool) -> str:
    """What no process of a session can do to one outside it, in words: on the system daemon
    every session has a PID namespace of its own; on the user daemon a sandboxed one, where
    the host lets a user mount its /proc (own_pids), else it rests on Landlock alone."""
    if own_pids:
        which = "a session" if system else "a sandboxed session"
        return (
            f"no process outside {which} seen, signalled, traced or its /proc read: it has a "
            "PID namespace and /proc of its own" + ("; Landlock as a second layer" if abi else "")
        )
    if abi >= 6:
        return "no trace, /proc/PID/root or signal out of a sandboxed session"
    if abi:
        return (
            "no trace or /proc/PID/root out of a sandboxed session; signals are not scoped "
            "before Landlock ABI 6 (Linux 6.12)"
        )
    return "nothing: Landlock is not enabled (add 'landlock' to the kernel's lsm= list)"


def ip_problem(system: bool) -> str:
    """Why IPAddressDeny=/IPAddressAllow= would not be enforced on this daemon's sessions,
    "" when they would: systemd ignores them, with a line in its own journal, where it cannot."""
    if not system or os.geteuid() != 0:
        return "a user's service manager attaches no BPF program to a unit"
    return ip_firewall()


@functools.cache  # the kernel's and the machine's, for the daemon's life
def _user_namespaces() -> bool:
    """Whether this process may make a user namespace here: Debian's and Ubuntu's switches
    (Ubuntu's AppArmor rule lets one be made, without the right to mount in it), then a
    child that tries (a container's seccomp filter may refuse it)."""
    for path, refused in (
        ("/proc/sys/user/max_user_namespaces", "0"),
        ("/proc/sys/kernel/unprivileged_userns_clone", "0"),
        ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1"),
    ):
        try:
            with open(path) as f:
                if f.read().strip() == refused:
                    return False
        except OSError:
            continue
    pid = os.fork()
    if pid == 0:  # nothing but the call and the exit in the child
        os._exit(0 if libc.unshare(CLONE_NEWUSER) == 0 else 1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


_BPF_PROG_LOAD, _BPF_PROG_TYPE_CGROUP_SKB = 5, 8
# r0 = 1 (let the packet pass); exit: the least program the kernel takes for a cgroup.
_PASS_ALL = bytes.fromhex("b7000000010000009500000000000000")


@functools.cache  # the kernel's and the manager's, for the daemon's life
def ip_firewall() -> str:
    """Why systemd cannot enforce IPAddressDeny=/IPAddressAllow= here ("" when it can): it
    attaches a cgroup BPF program to the unit, which needs the unified cgroup hierarchy and a
    kernel that loads one (as systemd itself finds out, by loading a trivial one)."""
    if not os.path.exists("/sys/fs/cgroup/cgroup.controllers") and not os.path.isdir(
        "/sys/fs/cgroup/unified"
    ):
        return "systemd's IP firewall needs the unified cgroup hierarchy (cgroup v2)"
    insns = ctypes.create_string_buffer(_PASS_ALL, len(_PASS_ALL))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = (ctypes.c_uint8 * 128)()
    struct.pack_into(
        "=IIQQ",
        attr,
        0,
        _BPF_PROG_TYPE_CGROUP_SKB,
        2,
        ctypes.addressof(insns),
        ctypes.addressof(license_),
    )
    fd = libc.syscall(_SYS_BPF.get(platform.machine(), -1), _BPF_PROG_LOAD, attr, 128)
    if fd < 0:
        return f"the kernel loads no cgroup BPF program here ({os.strerror(ctypes.get_errno())})"
    os.close(fd)
    return ""


_SYS_BPF = {"x86_64": 321, "aarch64": 280, "riscv64": 280, "ppc64le": 361, "s390x": 351}
