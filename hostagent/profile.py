"""The agent profile: the sandbox every session of an agent preset gets when its create asks
for nothing, in systemd.exec(5)'s words, and what asking for less than it is.

People run their agents with approvals off, so an agent is confined unless someone says
otherwise: the system read-only, the home read-only, /tmp its own, no setuid program raising a
privilege, its working tree (and a worktree's git directory) writable, its CLI's state
writable (the preset's ``state:``, added where the plan is made), the well-known secrets and
every other CLI's state hidden, and the caches builds write kept writable, so that ``npm ci``,
``pip install`` into a venv and ``cargo build`` work. The words are data in hostagent.yaml
(``sandbox.agents``), per host and per user; the ``shell`` preset, a person's own terminal,
says ``confined: false`` and gets none of them.

A create may ask for less (``-p ProtectHome=no``; ``--unconfined`` is the words that undo the
profile, UNCONFINED): the admin's policy may refuse it, the journal says it, and a create from
inside a session never may. The profile's words are written into the session's record, so a
changed profile applies to new sessions only, and an older session keeps what it had.

Pure: the caches are made, and the words checked against the host, by the daemon.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable
from dataclasses import dataclass, field

from hostagent import sandbox, sandboxpaths
from hostagent.sandbox import Sandbox

SECRETS = (
    "%h/.ssh",
    "%h/.gnupg",
    "%h/.aws",
    "%h/.azure",
    "%h/.config/gcloud",
    "%h/.kube",
    "%h/.docker/config.json",
    "%h/.netrc",
    "%h/.password-store",
)
CACHES = ("%h/.cache", "%h/.npm", "%h/.cargo/registry", "%h/go/pkg/mod", "%h/.m2", "%h/.gradle")
WORDS = (
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "PrivateTmp=yes",
    "NoNewPrivileges=yes",
    "ReadWritePaths=%{cwd} -%{gitdir}",
    "InaccessiblePaths=" + " ".join(f"-{p}" for p in SECRETS),
)
# What --unconfined stands for: each word back to systemd's default, each path list emptied.
UNCONFINED = (
    "ProtectSystem=no",
    "ProtectHome=no",
    "PrivateTmp=no",
    "NoNewPrivileges=no",
    *(f"{word}=" for word in sandbox.PATH_WORDS),
)


@dataclass
class AgentProfile:
    """hostagent.yaml's ``sandbox.agents``: the words an agent preset's session starts from,
    per user (by name) the words in their place, the caches made and kept writable, whether a
    user may ask for less, and whether a CLI's settings file is moved where a confined session
    can save it (the preset's ``relocate:``)."""

    words: list[str] = field(default_factory=lambda: list(WORDS))
    users: dict[str, list[str]] = field(default_factory=dict)
    caches: list[str] = field(default_factory=lambda: list(CACHES))
    loosen: bool = True
    relocate: bool = True

    def of(self, user: str) -> list[str]:
        return self.users.get(user, self.words)


def state_word(template: str, env: dict[str, str]) -> str:
    """A preset's state path template as a sandbox path with systemd's %h: {$VAR:-default}
    takes VAR from the preset's own environment only (a creator's never chooses what is
    hidden), else its default."""
    path = sandboxpaths.with_vars(template, env)
    path = path.replace("%", "%%").replace("{home}", "%h").replace("{cwd}", "%{cwd}")
    return path.rstrip("/") or "/"


def others_state(own: Iterable[str], others: Iterable[str]) -> list[str]:
    """Of other presets' state paths, those that hold none of own's and lie in none of them:
    what a session of own's preset is not to read (their sign-ins, their conversations)."""
    mine = list(own)
    out = []
    for path in others:
        if path.startswith("%h/") and not any(_related(path, p) for p in mine) and path not in out:
            out.append(path)
    return out


def _related(a: str, b: str) -> bool:
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def words_for(profile: AgentProfile, user: str, own: list[str], others: list[str]) -> list[str]:
    """The words a session of user's starts from: the profile's (the user's own where the admin
    gave them some), its caches writable, and other CLIs' state hidden. own and others: state
    paths as state_word makes them. None of it when the profile is empty for the user."""
    words = list(profile.of(user))
    if not words:
        return []
    if profile.caches:
        words.append("ReadWritePaths=" + " ".join(f"-{c}" for c in profile.caches))
    hidden = others_state(own, others)
    if hidden:
        words.append("InaccessiblePaths=" + " ".join(f"-{p}" for p in hidden))
    return words


def loosening(profile: list[str], asked: Iterable[str]) -> list[str]:
    """The words of asked that ask for less than profile confines: each read after the profile
    alone, so one that tightens is never counted with one that loosens."""
    base = sandbox.read(profile)
    return [w for w in asked if _is_word(w) and not sandbox.tighter(_after(profile, w), base)]


def _is_word(text: str) -> bool:
    return sandbox.is_word(text.partition("=")[0])


def _after(profile: list[str], word: str) -> Sandbox:
    return sandbox.read([*profile, word])


def caches_to_make(caches: Iterable[str], home: str) -> list[str]:
    """The cache directories of the profile's, in the owner's home, as paths."""
    out = []
    for cache in caches:
        path = cache.replace("%h", home)
        if path.startswith(home + "/") and "%" not in path:
            out.append(posixpath.normpath(path))
    return out
