"""What a bus handler may return besides plain values: a large reply kept between changes
and marshalled once (``Prepared``), and a reply of one sealed file descriptor
(``FileReply``). The exporter (export.py) turns each into its message."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hostagent.bus.compat import marshal_body
from hostagent.daemon.host import memfile


@dataclass(frozen=True)
class Prepared:
    """A handler's single reply value that has already been through ``fix_value``: it is
    marshalled once and its bytes sent to every caller until the handler makes a new one. For
    large replies that a handler caches between changes."""

    value: Any
    _bodies: dict[str, bytes] = field(default_factory=dict, compare=False, repr=False)

    def body(self, signature: str) -> bytes:
        if signature not in self._bodies:
            self._bodies[signature] = marshal_body(signature, [self.value])
        return self._bodies[signature]


@dataclass(frozen=True)
class FileReply:
    """A handler's reply of one file descriptor (signature ``h``): large output goes through
    a sealed memfd (host/memfile.py). The exporter closes the descriptor once the reply is
    written."""

    fd: int

    @classmethod
    def of(cls, data: bytes, name: str) -> FileReply:
        """data in a memfd sealed against any change, read from its start."""
        return cls(memfile.sealed(data, name))
