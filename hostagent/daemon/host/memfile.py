"""Sealed in-memory files (memfd), the replies that go out by descriptor.

A caller gets a descriptor of a memfd sealed against any change, as systemd's
DumpByFileDescriptor does: it reads at its own pace, and a caller who never reads holds a few
bytes of the daemon's connection rather than megabytes. ``sealed`` makes one of bytes the daemon
has; ``Bounded`` is one a helper writes into directly (a capture's tmux client, as its stdout),
so that the daemon never holds the text at all, with a bound on its size that the kernel
enforces: the file is made longer than its bound and sealed against growing, and the helper's
offset in the shared descriptor says how much it wrote. A write that would cross the file's end
is cut short at the last whole page before it, and the next one fails; so the margin past the
bound is more than a page, and whenever more than the bound came, the offset is past it.
"""

from __future__ import annotations

import fcntl
import os

_ALL_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_TAIL = 4096  # read back at a time when trailing newlines are taken off
_MARGIN = 1 << 20  # a Bounded's size past its limit: more than a page


def sealed(data: bytes, name: str) -> int:
    """A descriptor of a sealed memfd holding data, read from its start."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        _seal(fd)
    except BaseException:
        os.close(fd)
        raise
    return fd


class Bounded:
    """A memfd for a helper to write at most limit bytes into; ``fd`` is what it gets as its
    output (not close-on-exec in the helper: the spawn passes it as stdout)."""

    def __init__(self, name: str, limit: int) -> None:
        self.limit = limit
        self.fd = os.memfd_create(name, os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, limit + _MARGIN)  # sparse: no memory until written
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_GROW)
        except BaseException:
            os.close(self.fd)
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def seal(self) -> int | None:
        """Once the helper is done: the descriptor, cut to what was written, its trailing
        newlines but one taken off (the blank rows below a screen's last line), sealed and
        read from its start; the caller owns it. None (and closed) when more than limit bytes
        came, or the text with its newline is more."""
        written = os.lseek(self.fd, 0, os.SEEK_CUR)  # the offset is shared with the helper
        if written > self.limit:
            self.close()
            return None
        end = written
        while end > 0:
            start = max(0, end - _TAIL)
            tail = os.pread(self.fd, end - start, start)
            kept = tail.rstrip(b"\n")
            end = start + len(kept)
            if kept:
                break
        if end + 1 > self.limit:  # its newline included, as an inline capture is counted
            self.close()
            return None
        os.pwrite(self.fd, b"\n", end)  # one newline ends the text, as an inline capture's
        os.ftruncate(self.fd, end + 1)
        # OSError (EBUSY) when the helper, or a process it handed the descriptor to, maps the
        # file writable: then it is closed, and nobody is given a file that may still change.
        _seal(self.fd)
        fd, self.fd = self.fd, -1
        return fd


def _seal(fd: int) -> None:
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _ALL_SEALS)
    os.lseek(fd, 0, os.SEEK_SET)
