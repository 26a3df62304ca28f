"""A session's sandbox made: the mount namespace and the Landlock domain its first process
enters between fork and exec, as root, before setpriv drops it to the owner (on the user
daemon, as the owner, in a user namespace of the session's own: ``_own_user_namespace``).

This is what systemd's namespace code does for a service, done by the daemon because a scope's
processes are forked by its caller. ``sandboxmounts.mounts`` decides the mounts; here they are made:

- the child leaves the daemon's mount namespace (``unshare(CLONE_NEWNS)``), and marks every
  mount a slave, so mounts made later on the host still reach the session, and none of its own
  leave it; what must stay closed whatever is mounted later (her runtime directory, mounted
  again at each first login) is covered from above (``sandboxmounts.Closed``), where a later mount
  lands unseen;
- a read-write path is put back as it is outside: a copy of it (``open_tree``), taken before any
  mount is made, is moved over it (``move_mount``), so what is read-only outside stays so;
- a read-only path is bound onto itself and made read-only with all that is under it
  (``mount_setattr``, kernel 5.12);
- an inaccessible path gets the manager's inaccessible node of its type bound over it, as
  systemd's own ``/run/systemd/inaccessible``; an empty path (ProtectHome=tmpfs, PrivateTmp=)
  a tmpfs;
- a veiled directory (the owner's runtime directory, the root-owned hooks directory) gets a
  tmpfs over it, read-only, holding only the session's own entries, each a copy of the entry
  as it is outside (taken before any mount, as a read-write path's), and the links made for it:
  no other session's socket, FIFO or hooks file can be named from inside;
- the child then enters a Landlock domain of its own, so no process of the session can trace,
  read the memory or ``/proc/PID/root`` of, or (ABI 6) signal, a process outside it: not the
  daemon, not its owner's shell, not her other sessions;
- NoNewPrivileges= is prctl's ``PR_SET_NO_NEW_PRIVS``.

Mounts made by root before the drop cannot be undone by the owner: she has no CAP_SYS_ADMIN, and
a user namespace she makes copies them locked (mount_namespaces(7)).

The work in the child is a few system calls on values made in the daemon before the fork; a
failure there is written to the child's stderr and ends it with ``FAILED``, which the start
reports. Nothing is logged and no lock is taken in the child.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass

from hostagent.daemon.host import pidone
from hostagent.sandboxmounts import Mode, Mount

FAILED = 124  # the held child's exit status when its sandbox could not be made

_CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID = 0x00020000, 0x10000000, 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_SLAVE = 0x20, 0x1000, 0x4000, 0x80000
_AT_FDCWD = -100
_AT_RECURSIVE = 0x8000
_AT_SYMLINK_NOFOLLOW = 0x100
_OPEN_TREE_CLONE = 1
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
_PR_SET_NO_NEW_PRIVS = 38
# The same numbers on every architecture Debian builds hostagent for (the generic table).
_SYS = {"open_tree": 428, "move_mount": 429, "mount_setattr": 442}
_LANDLOCK = {"create_ruleset": 444, "add_rule": 445, "restrict_self": 446}
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_ACCESS_FS_EXECUTE = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, _LANDLOCK_SCOPE_SIGNAL = 1, 2


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


# The C library, loaded once; sandboxing.py asks the kernel through it too.
libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


@functools.cache  # the kernel's, for the daemon's life; asked at every admission and start
def landlock_abi() -> int:
    """The Landlock ABI this kernel offers, 0 when it has none (or it is not enabled)."""
    version = libc.syscall(_LANDLOCK["create_ruleset"], None, 0, _LANDLOCK_CREATE_RULESET_VERSION)
    return max(0, int(version))


@dataclass(frozen=True)
class Veil:
    """A directory the session sees empty but for its own entries: a tmpfs of mode, uid and
    gid over it, the entries keep bound back from the directory as it is outside (each must be
    there at the start, a directory or a FIFO or a regular file), and links (name, target)."""

    path: str
    uid: int
    gid: int
    mode: int
    keep: tuple[str, ...] = ()
    links: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Plan:
    """What one session's first process does before it execs, decided in the daemon."""

    mounts: tuple[Mount, ...]
    inaccessible_root: str  # the manager's inaccessible nodes: /run/systemd/inaccessible
    no_new_privileges: bool
    landlock_abi: int  # 0: no domain (the kernel has none)
    veils: tuple[Veil, ...] = ()
    own_pids: bool = False  # a PID namespace and /proc of its own (pidone.py)


def preexec(plan: Plan, report: int = -1) -> Callable[[], None]:
    """The function the forked child runs before it execs: it makes the plan or exits FAILED
    with the reason on its stderr. With own_pids as the owner, it returns in the namespace's
    first process only, whose pid the child it forked that from writes to report before it
    exits (as root, the forker forked it into the namespace itself)."""

    def run() -> None:
        try:
            _enter(plan, report)
        except OSError as e:
            message = f"hostagent: cannot make the session's sandbox: {e}\n"
            os.write(2, message.encode(errors="replace"))
            os._exit(FAILED)

    return run


def _call(result: int, what: str, path: str = "") -> int:
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}", path or None)
    return result


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str = "") -> None:
    _call(
        libc.mount(
            source.encode() if source else None,
            target.encode(),
            fstype.encode() if fstype else None,
            ctypes.c_ulong(flags),
            data.encode() if data else None,
        ),
        "mount",
        target,
    )


def _setattr(path: str, attr_set: int) -> None:
    attr = _MountAttr(attr_set, 0, 0, 0)
    _call(
        libc.syscall(
            _SYS["mount_setattr"],
            _AT_FDCWD,
            path.encode(),
            _AT_RECURSIVE,
            ctypes.byref(attr),
            ctypes.sizeof(attr),
        ),
        "mount_setattr",
        path,
    )


def _clone(path: str, follow: bool = True) -> int:
    """A detached copy of the mounts at path and under it, as they are now; -1 if missing.
    follow=False: a symbolic link at path itself is not followed (it fails)."""
    flags = (
        _OPEN_TREE_CLONE | _AT_RECURSIVE | os.O_CLOEXEC | (0 if follow else _AT_SYMLINK_NOFOLLOW)
    )
    fd = libc.syscall(_SYS["open_tree"], _AT_FDCWD, path.encode(), flags)
    if fd < 0 and ctypes.get_errno() == errno.ENOENT:
        return -1
    return _call(fd, "open_tree", path)


def _node(root: str, path: str) -> str:
    """The inaccessible node that stands in for what path is (systemd's choice by type)."""
    mode = os.stat(path).st_mode
    for test, name in (
        (stat.S_ISDIR, "dir"),
        (stat.S_ISREG, "reg"),
        (stat.S_ISFIFO, "fifo"),
        (stat.S_ISSOCK, "sock"),
        (stat.S_ISCHR, "chr"),
        (stat.S_ISBLK, "blk"),
    ):
        if test(mode):
            return os.path.join(root, name)
    raise OSError(errno.EINVAL, "no inaccessible node for its type", path)


def _enter(plan: Plan, report: int) -> None:
    if plan.mounts or plan.veils or plan.own_pids:
        # As root, the forker forked this one into its PID namespace (forker.py); as the
        # owner it makes the user namespace that gives it the right first, then forks.
        if os.geteuid() == 0:
            _call(libc.unshare(_CLONE_NEWNS), "unshare")
        else:
            _own_user_namespace()
            if plan.own_pids:
                _own_pids(report)
        _mount(None, "/", None, _MS_REC | _MS_SLAVE)
        if plan.own_pids:  # before the words, so that one about /proc applies to this one
            _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
        # Each read-write path and each veiled directory's own entry as it is now, before any
        # word changes it. An entry is the owner's to replace: a link there is not followed.
        copies = {m.path: _clone(m.path) for m in plan.mounts if m.mode == Mode.READ_WRITE}
        kept = {
            os.path.join(v.path, e): _clone(os.path.join(v.path, e), follow=False)
            for v in plan.veils
            for e in v.keep
        }
        for m in plan.mounts:
            if not os.path.lexists(m.path):
                if m.optional:
                    continue
                raise OSError(errno.ENOENT, "does not exist", m.path)
            _make(plan, m, copies)
        for v in plan.veils:
            _veil(v, kept)
    if plan.no_new_privileges:
        _call(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
    if plan.landlock_abi:
        landlock_domain(plan.landlock_abi)


def _own_pids(report: int) -> None:
    """Into a PID namespace of the session's own: this process forks the namespace's first
    process, says its pid on report and exits; that one, pid 1 inside, goes on to mount the
    /proc that shows the session its own processes only (in its own mount namespace, as only
    a process of the PID namespace can), and then to pidone.py's loop."""
    _call(libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
    pidone.into_child(report)


@functools.cache  # the host's, for the daemon's life
def own_pids_as_user() -> bool:
    """Can a user make a PID namespace with its own /proc in a user namespace of hers here?
    The kernel refuses the /proc where parts of the host's are covered (in a container, say);
    a child and its child try, once."""
    pid = os.fork()
    if pid == 0:  # nothing but the calls and the exit in the child
        try:
            _own_user_namespace()
            _mount(None, "/", None, _MS_REC | _MS_SLAVE)
            _call(libc.unshare(CLONE_NEWPID), "unshare(CLONE_NEWPID)")
            inner = os.fork()
            if inner == 0:
                try:
                    _mount("proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC)
                except OSError:
                    os._exit(1)
                os._exit(0)
            os._exit(os.waitstatus_to_exitcode(os.waitpid(inner, 0)[1]))
        except BaseException:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _own_user_namespace() -> None:
    """The user daemon's way to a mount namespace: a user namespace of the session's own, in
    which its user is herself (one uid and one gid mapped to themselves) and holds the
    capabilities to mount, until tmux's exec drops them. The mounts it copies are locked
    (mount_namespaces(7)): nothing in the session can take one away to see what it hides."""
    uid, gid = os.getuid(), os.getgid()
    _call(libc.unshare(CLONE_NEWUSER | _CLONE_NEWNS), "unshare(CLONE_NEWUSER)")
    for name, text in (
        ("setgroups", "deny"),
        ("uid_map", f"{uid} {uid} 1"),
        ("gid_map", f"{gid} {gid} 1"),
    ):
        fd = os.open(f"/proc/self/{name}", os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)


def _make(plan: Plan, m: Mount, copies: dict[str, int]) -> None:
    if m.mode == Mode.READ_WRITE:
        fd = copies[m.path]
        if fd >= 0:
            flags = _MOVE_MOUNT_F_EMPTY_PATH
            _call(
                libc.syscall(_SYS["move_mount"], fd, b"", _AT_FDCWD, m.path.encode(), flags),
                "move_mount",
                m.path,
            )
    elif m.mode == Mode.READ_ONLY:
        if m.path != "/":  # the root is a mount point already, and its own in this namespace
            _mount(m.path, m.path, None, _MS_BIND | _MS_REC)
        _setattr(m.path, _MOUNT_ATTR_RDONLY)
    elif m.mode == Mode.INACCESSIBLE:
        _mount(_node(plan.inaccessible_root, m.path), m.path, None, _MS_BIND)
        sealed = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
        _mount(None, m.path, None, _MS_REMOUNT | _MS_BIND | sealed)
    else:
        mode = "0755" if m.mode == Mode.TMPFS else "1777"
        read_only = _MS_RDONLY if m.mode == Mode.TMPFS else 0
        _mount("tmpfs", m.path, "tmpfs", read_only | _MS_NOSUID | _MS_NODEV, f"mode={mode}")


def _veil(v: Veil, kept: dict[str, int]) -> None:
    options = f"mode={v.mode:o},uid={v.uid},gid={v.gid},size=64k,nr_inodes=64"
    _mount("tmpfs", v.path, "tmpfs", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, options)
    for entry in v.keep:
        path, fd = os.path.join(v.path, entry), kept[os.path.join(v.path, entry)]
        if fd < 0:
            raise OSError(errno.ENOENT, "is missing", path)
        kind = os.fstat(fd).st_mode
        if stat.S_ISDIR(kind):
            os.mkdir(path, 0o700)
        elif stat.S_ISFIFO(kind) or stat.S_ISREG(kind):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        else:
            raise OSError(errno.EINVAL, "is neither a directory, a FIFO nor a file", path)
        _call(
            libc.syscall(
                _SYS["move_mount"], fd, b"", _AT_FDCWD, path.encode(), _MOVE_MOUNT_F_EMPTY_PATH
            ),
            "move_mount",
            path,
        )
    for name, target in v.links:
        os.symlink(target, os.path.join(v.path, name))
    # Nothing of the session's can be left in it; its own entries are mounts of their own.
    sealed = _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    _mount(None, v.path, None, _MS_REMOUNT | sealed)


def landlock_domain(abi: int) -> None:
    """A domain of the session's own: from ABI 6 scoped (signals, abstract sockets); before it,
    one that handles only execute and allows it everywhere, for what every domain gives, no
    trace of a process outside it."""
    if abi >= 6:
        attr = _RulesetAttr(0, 0, _LANDLOCK_SCOPE_SIGNAL | _LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET)
        size = ctypes.sizeof(attr)
    else:
        attr = _RulesetAttr(_LANDLOCK_ACCESS_FS_EXECUTE, 0, 0)
        size = 8  # ABI 1 to 3 know only handled_access_fs
    ruleset = _call(
        libc.syscall(_LANDLOCK["create_ruleset"], ctypes.byref(attr), size, 0), "landlock"
    )
    try:
        if abi < 6:
            root = os.open("/", os.O_PATH | os.O_CLOEXEC)
            try:
                rule = _PathBeneath(_LANDLOCK_ACCESS_FS_EXECUTE, root)
                _call(
                    libc.syscall(
                        _LANDLOCK["add_rule"],
                        ruleset,
                        _LANDLOCK_RULE_PATH_BENEATH,
                        ctypes.byref(rule),
                        0,
                    ),
                    "landlock_add_rule",
                )
            finally:
                os.close(root)
        _call(libc.syscall(_LANDLOCK["restrict_self"], ruleset, 0), "landlock_restrict_self")
    finally:
        os.close(ruleset)
