"""A sandbox's paths as its owner's files make them: a preset's state paths made concrete, and
the rule that no writable path resolves to what a word hides.

Two ways out of a confined session went through paths: a create's environment picked a state
path (``-e CLAUDE_CONFIG_DIR=/home/alice/proj/..`` made the whole home writable, ~/.ssh and
~/.profile with it), and a link in a working directory (``ln -s / ~/proj/l``, then a cwd of
``~/proj/l/home/alice/.ssh``) carried ``ReadWritePaths=%{cwd}`` over the hidden ~/.ssh, since a
read-write path's copy is taken, links followed, before any word hides anything. So a state
path comes from the preset and the owner's passwd entry alone and lies in the home; every path
is resolved as the owner before the plan is made (``daemon/host/sandboxing.py``); and a
writable path that resolves to, or under, an inaccessible one is refused by name.

Pure.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping

from hostagent.sandbox import Context, Sandbox, SandboxProblem, expand

_VAR = re.compile(r"\{\$([A-Za-z_][A-Za-z0-9_]*):-([^{}]*(?:\{[a-z_]+\}[^{}]*)*)\}")


def with_vars(template: str, env: Mapping[str, str]) -> str:
    """template with each ``{$VAR:-default}`` replaced: VAR from env, else its default."""
    return _VAR.sub(lambda m: env.get(m.group(1)) or m.group(2), template)


def state_paths(templates: Iterable[str], home: str, cwd: str, env: Mapping[str, str]) -> list[str]:
    """A preset's state paths (where its CLI keeps its own state, writable in a sandboxed
    session) made concrete and normalized, a directory's with its '/'. env is the preset's and
    the owner's passwd entry's, never a creator's, so ``{$VAR:-default}`` takes VAR only from
    those, else its default. SandboxProblem for one not in the home (nor the home itself)."""
    out = []
    for template in templates:
        path = with_vars(template, env)
        path = path.replace("{home}", home).replace("{cwd}", cwd)
        body = posixpath.normpath(path) if path.startswith("/") else path
        if not _under(body, home) or "{" in body:
            raise SandboxProblem(
                f"state path '{template}' is '{path}' here, not a path in the home ({home}); "
                "the preset's state must name a directory or file in it"
            )
        out.append(body + "/" if path.endswith("/") else body)
    return out


def uncovered(paths: Iterable[str], box: Sandbox, ctx: Context, state: Iterable[str]) -> list[str]:
    """The paths (a session's state) that a session confined by box, whose CLI keeps its own
    in state, cannot write: at or under none of its ReadWritePaths= (expanded in ctx) or its
    state, nor in its home when ProtectHome=no leaves that writable. State counts as a
    ReadWritePaths= word when one session is checked to be confined at least as another."""
    writable = [expand(raw, ctx).lstrip("-") for raw in box.read_write]
    writable += [p.rstrip("/") for p in state]
    if box.protect_home == "no":
        writable.append(ctx.home)
    return [
        p
        for p in paths
        if not any(p.rstrip("/") == w or _under(p.rstrip("/"), w) for w in writable)
    ]


def to_resolve(box: Sandbox, ctx: Context, state: Iterable[str]) -> list[str]:
    """Every path of box's words (expanded) and of state, for the owner to resolve."""
    raws = (*box.read_write, *box.read_only, *box.inaccessible)
    words = [expand(raw, ctx).lstrip("-") for raw in raws]
    return sorted({ctx.cwd, *words, *(p.rstrip("/") for p in state)})


def exposed(box: Sandbox, ctx: Context, state: Iterable[str], resolved: Mapping[str, str]) -> str:
    """Why a writable path (a ReadWritePaths= word's, or state's) may not be made: it resolves
    through a link below another writable path, or to a path an InaccessiblePaths= word hides
    (or under it); "" when none does."""
    hidden = [(raw, _real(raw, ctx, resolved)) for raw in box.inaccessible]
    named = [(raw, expand(raw, ctx).lstrip("-")) for raw in box.read_write]
    named += [(p, p.rstrip("/")) for p in state]
    writable = [(raw, resolved.get(path, path)) for raw, path in named]
    for raw, path in named:
        for outer, top in named:
            # A link below another writable path may have been made from inside the session
            # (a -%{gitdir} missing at its start, made a link to the home): not followed.
            if _under(path, top) and resolved.get(path, path) != _moved(path, top, resolved):
                return (
                    f"'{raw}' is {resolved.get(path, path)} here, through a link in {outer} "
                    "(writable in the session); remove the link, or name the path it leads to"
                )
    for raw, path in writable:
        for word, secret in hidden:
            if path == secret or _under(path, secret):
                return (
                    f"'{raw}' is {path} here, which InaccessiblePaths={word} hides; make "
                    "writable only paths outside it (a working directory too, for %{cwd})"
                )
    return ""


def _moved(path: str, top: str, resolved: Mapping[str, str]) -> str:
    """path under top, where top resolves to: what path resolves to with no link below top."""
    return resolved.get(top, top).rstrip("/") + path[len(top.rstrip("/")) :]


def _real(raw: str, ctx: Context, resolved: Mapping[str, str]) -> str:
    body = expand(raw, ctx).lstrip("-")
    return resolved.get(body, body)


def _under(path: str, parent: str) -> bool:
    return path.startswith(parent.rstrip("/") + "/")
