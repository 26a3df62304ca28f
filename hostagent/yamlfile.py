"""Reading YAML settings files so that every error names its file, line and field.

PyYAML's plain loaders forget positions. Here a document is composed into nodes first, and the
line of every mapping key is kept beside the plain data, so validation code can say
"/etc/hostagent/hostagent.yaml:7: field 'limits.tasks_max': must be a positive integer".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

# libyaml's safe loader where PyYAML has it (Debian's and PyPI's do); its nodes carry lines too.
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SettingsError(Exception):
    """A settings file that cannot be used; str() is the one line to show."""

    def __init__(self, path: Path | str, line: int | None, field: str | None, msg: str) -> None:
        where = f"{path}:{line}" if line else str(path)
        what = f"field '{field}': {msg}" if field else msg
        super().__init__(f"{where}: {what}")


class Document:
    """Plain data plus the line of each dotted key path."""

    def __init__(self, path: Path, data: Any, lines: dict[str, int]) -> None:
        self.path = path
        self.data = data
        self._lines = lines

    @property
    def lines(self) -> dict[str, int]:
        return self._lines

    def error(self, field: str | None, msg: str) -> SettingsError:
        line = None
        key = field or ""
        while key and line is None:
            line = self._lines.get(key)
            key = key.rpartition(".")[0]
        return SettingsError(self.path, line or self._lines.get(""), field, msg)


def load(path: Path) -> Document:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SettingsError(path, None, None, f"cannot be read: {e}") from None
    try:
        node = yaml.compose(text, Loader=LOADER)
        data = yaml.load(text, Loader=LOADER)  # a safe loader: libyaml's, else PyYAML's
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise SettingsError(path, mark.line + 1 if mark else None, None, problem) from None
    lines: dict[str, int] = {}
    if node is not None:
        lines[""] = node.start_mark.line + 1
        _collect_lines(node, "", lines)
    return Document(path, {} if data is None else data, lines)


def _collect_lines(node: yaml.Node, prefix: str, lines: dict[str, int]) -> None:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = f"{prefix}.{key_node.value}" if prefix else str(key_node.value)
            lines[key] = key_node.start_mark.line + 1
            _collect_lines(value_node, key, lines)


def expect_mapping(doc: Document, value: Any, field: str | None) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise doc.error(field, "must be a mapping")
    return value


def expect_str_list(doc: Document, value: Any, field: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise doc.error(field, "must be a list of strings")
    return value


def expect_str_map(doc: Document, value: Any, field: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise doc.error(field, "must be a mapping of strings to strings")
    return value


def reject_unknown(doc: Document, data: dict[str, Any], known: set[str], prefix: str) -> None:
    for key in data:
        if key not in known:
            field = f"{prefix}.{key}" if prefix else str(key)
            raise doc.error(field, f"unknown key; expected one of {', '.join(sorted(known))}")
