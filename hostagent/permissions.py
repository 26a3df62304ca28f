"""Who may do what: every permission rule of the daemon, as pure functions.

Reading is open to every local user, as ``ps`` is. Acting on a session is for its owner, root,
or a caller polkit authorises for ``org.hostagent.HostAgent1.manage-any`` (the bus asks polkit:
daemon/bus/auth.py). A session is created for its caller; only root, on the system bus, may
create one for another user. The admin's caps bind everyone but root (and, where the admin
allows it, polkit's admins); root's own sessions are neither capped nor counted. Only root (or
the user a user daemon runs as) may reload the configuration. A hook report is believed only
from inside the session's scope, with the session's secret.

Pure, so that the lifecycle, admission and the hooks ask the same rules the bus does, and the
fast layer (and dev/mutants) checks every one of them.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Collection, Mapping

from hostagent import sandbox, sandboxpaths
from hostagent.errors import AccessDenied, InvalidArgs
from hostagent.options import CreateRequest, Maker
from hostagent.session import SessionRecord


def owner_may_act(caller_uid: int, owner_uid: int) -> bool:
    """The cheap rule that needs no polkit: the owner and root."""
    return caller_uid in (0, owner_uid)


def create_owner(caller_uid: int, requested: int | None, system: bool, daemon_uid: int) -> int:
    """Whose session a create makes: the caller's on the system bus, the daemon's user on a
    session bus; another user's only when root asks for it on the system bus."""
    owner = caller_uid if system else daemon_uid
    if requested is not None and requested != owner:
        if caller_uid != 0 or not system:
            raise InvalidArgs("Only root may create a session for another user ('user').")
        owner = requested
    return owner


def exempt_from_caps(caller_uid: int, system: bool) -> bool:
    """Whether the admin's caps bind this caller at all: not root, and not the one user of a
    user daemon. (polkit's admins may also pass them where users.admins_exceed says so.)"""
    return caller_uid == 0 or not system


def capped(owner_uid: int) -> bool:
    """Whether a user's sessions count against users.sessions and share a capped slice: root's
    do not."""
    return owner_uid != 0


def require_reload(caller_uid: int, daemon_uid: int) -> None:
    if caller_uid not in (0, daemon_uid):
        raise AccessDenied("Only root may reload hostagent's configuration.")


TOKEN_ENV = "HOSTAGENT_HOOK_TOKEN"  # the session's hook secret, in its processes' environment


def token_matches(given: str, expected: str) -> bool:
    return bool(expected) and hmac.compare_digest(given.encode(), expected.encode())


def require_inside(
    caller_unit: str | None, unit: str, name: str, token: str, expected_token: str
) -> None:
    """A hook report must come from a process inside the session's own scope that knows the
    session's secret: a pid alone can be reused by another user's process."""
    inside = bool(unit) and caller_unit == unit
    if not inside or (expected_token and not token_matches(token, expected_token)):
        raise AccessDenied(
            f"Only a process inside session '{name}' may report its hooks; "
            "run 'hostagentctl hook' from the agent's hook."
        )


def made_from_inside(inside: SessionRecord, req: CreateRequest, state: list[str]) -> None:
    """What a create asked for from inside session `inside` takes from it: its sandbox words
    first (sandbox_from_inside), and it as its parent, and its maker (state: where inside's CLI
    keeps its own state) for the checks the create makes once its preset is known."""
    req.asked = list(req.properties)
    req.properties = sandbox_from_inside(inside, req.properties)
    req.parent = inside.uuid
    req.maker = Maker(inside.name, inside.cwd, inside.repo, _words(inside), state)


def state_from_inside(maker: Maker, state: list[str], ctx: sandbox.Context) -> None:
    """AccessDenied when a session made from inside a sandbox would write state (its CLI's, its
    preset's) its maker cannot: state counts as ReadWritePaths= words, so a child of another
    preset does not hand its maker that preset's files (a config that runs commands later,
    outside every sandbox). ctx: what the owner's specifiers stand for."""
    box = sandbox.read(maker.words)
    if not box.confined:
        return
    beyond = sandboxpaths.uncovered(state, box, ctx, maker.state)
    if beyond:
        raise AccessDenied(
            f"A session made inside session '{maker.name}' writes only what it writes; this "
            f"preset's state ({' '.join(beyond)}) is not among it: make the session from "
            "outside every session, or give its maker ReadWritePaths= for it."
        )


def sandbox_from_inside(inside: SessionRecord, asked: list[str]) -> list[str]:
    """The properties of a session created from inside session `inside`: its sandbox words
    first (their %{cwd} and %{gitdir} pinned to its own tree, so a session made elsewhere is
    not given its maker's writable tree by moving), then the ones asked for; AccessDenied when
    those would loosen it. A call from a session with no sandbox asks for what it asks for."""
    return _within(_words(inside), asked, f"inside session '{inside.name}'")


def sandbox_defaults(
    defaults: list[str], asked: list[str], user: str, maker: Maker | None = None
) -> list[str]:
    """The properties of a new session of user's under the admin's sandbox defaults for them:
    those words first, then the ones asked for; AccessDenied when those would loosen them.
    For a create from inside maker, the defaults' %{cwd} and %{gitdir} stand for the maker's
    tree, as its own words do (sandbox_from_inside): else the child's words, the maker's
    pinned, were never the defaults' words, and every create from inside was refused."""
    if maker is not None:
        defaults = [sandbox.pinned(w, maker.cwd, maker.repo) for w in defaults]
    return _within(defaults, asked, f"for {user} by the admin (hostagent.yaml)")


def _within(own: list[str], asked: list[str], made: str) -> list[str]:
    """own's words, then asked's, when asked tightens or keeps what own confines."""
    if not own:
        return asked
    merged = [*own, *asked]
    if not sandbox.tighter(sandbox.read(merged), sandbox.read(own)):
        raise AccessDenied(
            f"A session made {made} is confined at least as "
            f"{' '.join(sandbox.read(own).shown())}; ask for no word that loosens that."
        )
    return merged


def act_from_inside(
    inside: SessionRecord,
    target: SessionRecord,
    lineage: Collection[str],
    owner_rights: bool,
    states: tuple[list[str], list[str]] = ([], []),
    ctx: sandbox.Context | None = None,
) -> None:
    """What a call from inside session `inside` may act on (resume, type into, read, stop):
    itself, and the sessions made from inside it and theirs (target's lineage, the uuids of its
    parent, grandparent, ...), unless its preset gives it its owner's rights; and, from inside
    a sandboxed session, only sessions confined at least as it is, else typing into an
    unconfined one would undo the sandbox. states: where each one's CLI keeps its own state,
    counted as its words (a session of another preset writes that preset's files), with ctx,
    what the owner's specifiers stand for."""
    if not owner_rights and inside.uuid != target.uuid and inside.uuid not in lineage:
        raise AccessDenied(
            f"Session '{target.name}' was not made from inside session '{inside.name}', from "
            "inside which only the sessions it made may be acted on; act on it from outside "
            "every session, or give the session's preset 'rights: owner'."
        )
    own = sandbox.read(_words(inside))
    if inside.name == target.name or not own.confined:
        return
    beyond = sandboxpaths.uncovered(states[1], own, ctx, states[0]) if ctx else []
    if beyond or not sandbox.tighter(sandbox.read(_words(target)), own):
        raise AccessDenied(
            f"Session '{target.name}' is less confined than session '{inside.name}', from "
            "inside which it cannot be acted on; act on it from outside every session."
        )


def answer_from_inside(
    inside: SessionRecord, target: SessionRecord, makers: Collection[str]
) -> None:
    """A session never answers its own question nor one of its makers' (makers: the uuids of
    the sessions inside was made from inside): an agent that approves itself, or has a child
    approve it, has no approvals. Typing into its own terminal is answering, so SendText is
    held to this as well."""
    if inside.uuid == target.uuid or target.uuid in makers:
        whose = "its own" if inside.uuid == target.uuid else f"its maker '{target.name}''s"
        raise AccessDenied(
            f"Session '{inside.name}' may not answer or type into {whose} terminal: an agent "
            "that approves itself has no approvals; answer from outside every session "
            f"('hostagentctl answer {target.name} CHOICE' in your own terminal)."
        )


def has_owner_rights(
    record: SessionRecord, records: Mapping[str, SessionRecord], rights: Callable[[str], str]
) -> bool:
    """Whether a call from inside record's session has its owner's rights: its preset's
    (rights(preset) is "owner"), and so has every session it was made from inside, up to one
    made outside every session (records: the sessions known, by uuid). A session made from
    inside another gets no more rights than its maker, and one whose maker is gone, its rights
    no longer known, gets none of its owner's."""
    seen: set[str] = set()
    while rights(record.preset) == "owner":
        if not record.parent:
            return True
        above = records.get(record.parent)
        if above is None or record.parent in seen:
            return False
        seen.add(record.parent)
        record = above
    return False


def tree_of(root: str, parents: Mapping[str, str]) -> set[str]:
    """The uuids a call from inside session root sees: root's, and those of the sessions made
    from inside it and theirs (parents: each session's uuid -> its parent's)."""
    children: dict[str, list[str]] = {}
    for uuid, parent in parents.items():
        children.setdefault(parent, []).append(uuid)
    seen, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in seen:
                seen.add(child)
                todo.append(child)
    return seen


def require_in_tree(inside: SessionRecord, target: SessionRecord, tree: Collection[str]) -> None:
    if target.uuid not in tree:
        raise AccessDenied(
            f"Session '{target.name}' was not made from inside session '{inside.name}', from "
            "inside which only the sessions it made are shown; look it up from outside every "
            "session, or give the session's preset 'rights: owner'."
        )


def _words(record: SessionRecord) -> list[str]:
    return [
        sandbox.pinned(p, record.cwd, record.repo)
        for p in record.properties
        if sandbox.is_word(p.partition("=")[0])
    ]
