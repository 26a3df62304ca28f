"""The program the daemon runs as a session's owner to read her CLI's usage records.

It is ``python -I -S -c PROGRAM FORMAT SPEC``: no site directories, no environment, nothing of
the owner's; SPEC maps each conversation id to the glob of its record. The program is
``hostagent/usage/__init__.py``, ``hostagent/readers.py`` and ``hostagent/records.py``
(standard library only, each linted and typed as any module) joined into one text; the last
opens each record and prints every conversation's ``Usage`` as JSON. It runs from its text,
not from an import of hostagent, so the owner needs no access to the daemon's installation.
"""

from __future__ import annotations

from pathlib import Path

from hostagent import usage
from hostagent.usage import readers, records


def _joined(*modules: Path) -> str:
    """The modules as one text: a later module's ``from __future__`` and ``from hostagent``
    imports go, since what they import is defined above it."""
    texts = []
    for n, module in enumerate(modules):
        lines = module.read_text(encoding="utf-8").splitlines(keepends=True)
        drop = ("from __future__ ", "from hostagent")
        texts.append("".join(x for x in lines if not (n and x.startswith(drop))))
    return "".join(texts)


PROGRAM = _joined(*(Path(str(m.__file__)) for m in (usage, readers, records)))
