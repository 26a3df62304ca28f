"""Which preset files make up the presets: directories in order, a later file of a name taking
the place of an earlier one, and ``extends``, a preset written as the changes to another.

``extends: NAME`` starts a preset from NAME's settings as loaded so far and lays the file's own
over them: a mapping merges key by key (at any depth), anything else (a list, a string) is
replaced whole. A preset that extends its own name extends the definition it overrides (an
admin's /etc/hostagent/presets.d/opencode.yaml with ``extends: opencode`` changes only what it
says of the built-in one). Kept apart from the parsing (presets/__init__.py), which sees one merged
document, so that a preset's fields are checked in one place.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from hostagent import yamlfile

T = TypeVar("T")


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """over laid on base: mappings merged key by key, anything else replaced."""
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def name_of(doc: yamlfile.Document) -> str:
    """The name a file gives its preset (the file's stem unless it says); a bad one is the
    parser's to refuse."""
    data = doc.data
    name = data.get("name") if isinstance(data, dict) else None
    return name if isinstance(name, str) else doc.path.stem


class Loader(Generic[T]):
    """The files of each name in the order read, parsed with their bases on demand.

    parse turns one merged document into a preset (presets.parse_preset); on_error is told of
    a file that cannot be used, and its name then keeps the last earlier file that can."""

    def __init__(
        self,
        parse: Callable[[yamlfile.Document], T],
        on_error: Callable[[yamlfile.SettingsError], None],
    ) -> None:
        self._parse = parse
        self._on_error = on_error
        self._files: dict[str, list[yamlfile.Document]] = {}
        # (name, index) -> the merged data and the preset; None for a file that failed
        self._done: dict[tuple[str, int], tuple[dict[str, Any], T] | None] = {}
        self._resolving: list[tuple[str, int]] = []

    def add(self, doc: yamlfile.Document) -> None:
        self._files.setdefault(name_of(doc), []).append(doc)

    def read(self, dirs: list[Path], but: Path | None = None) -> None:
        """Every *.yaml file of dirs, in order, but one (a file being checked, added after
        them); one that cannot be read is an error told."""
        for d in dirs:
            if not d.is_dir():
                continue
            for path in sorted(d.glob("*.yaml")):
                if but is not None and path.resolve() == but.resolve():
                    continue
                try:
                    self.add(yamlfile.load(path))
                except yamlfile.SettingsError as e:
                    self._on_error(e)

    def presets(self) -> dict[str, T]:
        """Every name's preset: its latest file that can be used."""
        out: dict[str, T] = {}
        for name in self._files:
            found = self.preset(name)
            if found is not None:
                out[name] = found
        return out

    def preset(self, name: str) -> T | None:
        """name's preset from its latest file that can be used; None if none can."""
        found = self._latest(name, len(self._files.get(name, [])))
        return None if found is None else found[1]

    def _latest(self, name: str, below: int) -> tuple[dict[str, Any], T] | None:
        """The latest file of name before index below that can be used."""
        for index in reversed(range(below)):
            found = self._resolve(name, index)
            if found is not None:
                return found
        return None

    def _resolve(self, name: str, index: int) -> tuple[dict[str, Any], T] | None:
        key = (name, index)
        if key not in self._done:
            try:
                self._done[key] = self._build(name, index)
            except yamlfile.SettingsError as e:
                self._done[key] = None
                self._on_error(e)
        return self._done[key]

    def _build(self, name: str, index: int) -> tuple[dict[str, Any], T]:
        doc = self._files[name][index]
        data = doc.data
        if not isinstance(data, dict) or "extends" not in data:
            return data, self._parse(doc)
        base_name = data["extends"]
        if not isinstance(base_name, str) or not base_name:
            raise doc.error("extends", "must be the name of a preset")
        if (name, index) in self._resolving:
            chain = " -> ".join(n for n, _ in self._resolving)
            raise doc.error("extends", f"presets extend each other in a circle ({chain}); break it")
        self._resolving.append((name, index))
        try:
            # Its own name: the definition this file overrides; else that name's latest.
            below = index if base_name == name else len(self._files.get(base_name, []))
            base = self._latest(base_name, below)
        finally:
            self._resolving.pop()
        if base is None:
            raise doc.error(
                "extends",
                f"no preset '{base_name}' loads to be extended; "
                "name one that `hostagentctl presets` lists",
            )
        own = {k: v for k, v in data.items() if k != "extends"}
        together = merged(base[0], {"name": name, **own})
        whole = yamlfile.Document(doc.path, together, doc.lines)
        return together, self._parse(whole)
