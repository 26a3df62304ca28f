"""What a bus handler may return besides plain values: a large reply kept between changes
and marshalled once (``Prepared``), and a reply of one sealed file descriptor
(``FileReply``). The exporter (export.py) turns each into its message."""

from __future__ import annotations

import fcntl
import os
from dataclasses import dataclass, field
from typing import Any

from hostagent.bus.compat import marshal_body


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
    a sealed memfd, as systemd's DumpByFileDescriptor does, so a caller that never reads its
    replies holds a few bytes of the daemon's connection, not megabytes. The exporter closes
    the descriptor once the reply is written."""

    fd: int

    @classmethod
    def of(cls, data: bytes, name: str) -> FileReply:
        """data in a memfd sealed against any change, read from its start."""
        fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            fcntl.fcntl(
                fd,
                fcntl.F_ADD_SEALS,
                fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE,
            )
            os.lseek(fd, 0, os.SEEK_SET)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd)
