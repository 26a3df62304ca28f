"""The example /etc/hostagent/hostagent.yaml the packages ship: every key the daemon reads is
in it, commented out, and uncommented it is a file the daemon accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hostagent import config, yamlfile

EXAMPLE = Path(__file__).resolve().parents[2] / "units" / "hostagent.yaml"


def uncommented(text: str) -> str:
    """The example with its keys uncommented: a key's line is '#' then the key or two spaces
    of indentation; prose is '# ' then words."""
    return re.sub(r"(?m)^#(?=\S|  )", "", text)


def leaf_keys(data: dict[str, object], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in data.items():
        path = f"{prefix}{key}"
        # Per-user word lists (sandbox.users.NAME) are read as one key: sandbox.users.
        by_user = (
            key == "users"
            and isinstance(value, dict)
            and all(isinstance(v, list) for v in value.values())
        )
        keys |= leaf_keys(value, f"{path}.") if isinstance(value, dict) and not by_user else {path}
    return keys


def test_as_shipped_every_key_is_commented_out(tmp_path: Path) -> None:
    path = tmp_path / "hostagent.yaml"
    path.write_text(EXAMPLE.read_text())
    assert config.parse_config(yamlfile.load(path)) == config.Config(source=str(path))


def test_uncommented_it_is_accepted_and_names_every_key_the_daemon_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "hostagent.yaml"
    path.write_text(uncommented(EXAMPLE.read_text()))
    doc = yamlfile.load(path)
    read: set[str] = set()
    reject_unknown = yamlfile.reject_unknown

    def record(
        doc: yamlfile.Document, data: dict[str, object], allowed: set[str], where: str
    ) -> None:
        read.update(f"{where}.{key}" if where else key for key in allowed)
        reject_unknown(doc, data, allowed, where)

    monkeypatch.setattr(yamlfile, "reject_unknown", record)
    config.parse_config(doc)
    # A key with keys under it (budgets, budgets.user) is a group, not a leaf.
    groups = {".".join(key.split(".")[:n]) for key in read for n in range(1, key.count(".") + 1)}
    assert sorted(leaf_keys(doc.data)) == sorted(read - groups)
