"""The memfds replies go out in: sealed against any change, and, written by a helper into
a bounded one, cut to what it wrote, its trailing newlines but one taken off, or refused
when it wrote more than the bound."""

from __future__ import annotations

import errno
import mmap
import os
import subprocess

import pytest

from hostagent.daemon.host import memfile

LIMIT = 10_000


def contents(fd: int) -> bytes:
    with os.fdopen(fd, "rb") as f:
        return f.read()


@pytest.mark.parametrize(
    ("writes", "kept"),
    [
        ([b"abc\n\n\n"], b"abc\n"),
        ([b"abc"], b"abc\n"),
        ([], b"\n"),
        ([b"\n\n"], b"\n"),
        ([b"a" + b"\n" * 5000, b"\n" * 4000], b"a\n"),  # newlines across read-back chunks
        ([b"x" * (LIMIT - 1)], b"x" * (LIMIT - 1) + b"\n"),
        ([b"x" * LIMIT], None),  # its newline makes it one more than the bound
        ([b"x" * 4096] * 3, None),
        ([b"x\n"] * (LIMIT // 2 + 1), None),  # over the bound before its newlines come off
    ],
)
def test_a_bounded_file_keeps_what_was_written_or_nothing(
    writes: list[bytes], kept: bytes | None
) -> None:
    out = memfile.Bounded("test", LIMIT)
    for chunk in writes:
        os.write(out.fd, chunk)
    fd = out.seal()
    assert out.fd == -1  # handed over, or closed
    assert (None if fd is None else contents(fd)) == kept


def test_a_helper_writes_into_it_through_the_descriptor_it_shares() -> None:
    out = memfile.Bounded("test", LIMIT)
    subprocess.run(["sh", "-c", "printf 'one\\ntwo\\n\\n\\n'"], stdout=out.fd, check=True)
    fd = out.seal()
    assert fd is not None and contents(fd) == b"one\ntwo\n"


def test_the_kernel_holds_the_bound_and_the_offset_tells_it_was_passed() -> None:
    out = memfile.Bounded("test", LIMIT)
    assert os.write(out.fd, b"x" * (2 << 20)) < 2 << 20  # cut short at the file's end
    with pytest.raises(OSError) as e:
        os.write(out.fd, b"x" * 4096)
    assert e.value.errno == errno.EPERM
    assert out.seal() is None and out.fd == -1


@pytest.mark.parametrize("make", [lambda: memfile.sealed(b"kept", "test"), None])
def test_what_the_caller_gets_cannot_be_changed(make: object) -> None:
    if make is None:
        out = memfile.Bounded("test", LIMIT)
        os.write(out.fd, b"kept\n\n")
        fd = out.seal()
    else:
        fd = make()  # type: ignore[operator]
    assert fd is not None
    assert os.lseek(fd, 0, os.SEEK_CUR) == 0
    for change in (lambda: os.write(fd, b"x"), lambda: os.ftruncate(fd, 1)):
        with pytest.raises(PermissionError):
            change()
    assert contents(fd).startswith(b"kept")


def test_a_file_still_mapped_for_writing_is_not_handed_out() -> None:
    out = memfile.Bounded("test", LIMIT)
    os.write(out.fd, b"kept\n")
    with mmap.mmap(out.fd, 4096, mmap.MAP_SHARED, mmap.PROT_WRITE), pytest.raises(OSError) as e:
        out.seal()
    assert e.value.errno == errno.EBUSY and out.fd >= 0  # still ours, for close
    out.close()
    assert out.fd == -1
