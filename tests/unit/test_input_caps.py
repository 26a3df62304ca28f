"""Bad input is cheap: a path, an assignment and option 'properties' have caps, checked
before anything is parsed, and an error over a cap names the size, never the text; the
shell-quoted words split as shlex splits them, at C speed."""

from __future__ import annotations

import contextlib
import random
import shlex
import time

import pytest
from dbus_fast import Message, Variant

from hostagent import sandbox, shellwords
from hostagent.config import LIMIT_BOUNDS
from hostagent.errors import InvalidArgs
from hostagent.options import (
    CREATE_ARGS_MAX,
    MAX_ARGV_ENTRIES,
    MAX_ENV_ENTRIES,
    MAX_PROPERTIES_BYTES,
    OPTION_TYPES,
    cwd_problem,
    parse_options,
    size_problem,
)
from hostagent.sandbox import MAX_LINE, PATH_MAX, SandboxProblem

WORD = "ReadWritePaths="


def _path(size: int, char: str = "a") -> str:
    """An absolute path of size UTF-8 bytes (char is one or two bytes)."""
    width = len(char.encode())
    return "/" + char * ((size - 1) // width) + "a" * ((size - 1) % width)


def _line(size: int) -> str:
    """A valid path word of size bytes: distinct paths of 1000 bytes, and one for the rest."""
    paths: list[str] = []
    left = size - len(WORD)
    while left > 1001:
        paths.append(f"/{len(paths):03d}" + _path(996))
        left -= 1001
    paths.append(_path(left))
    text = WORD + " ".join(paths)
    assert len(text.encode()) == size
    return text


def _properties(size: int) -> list[str]:
    """Path words of size bytes in all, counting a newline between two."""
    lines, left = [], size
    while left > 8001 + 100:
        lines.append(_line(8000))
        left -= 8001
    return [*lines, _line(left)]


@pytest.mark.parametrize(
    ("size", "char", "refused"),
    [
        (PATH_MAX - 1, "a", False),  # at the cap: the kernel's PATH_MAX counts the NUL
        (PATH_MAX, "a", True),  # one over
        (PATH_MAX - 1, "é", False),  # bytes, not characters
        (PATH_MAX, "é", True),
        (PATH_MAX * 3, "a", True),
    ],
)
def test_a_path_is_capped_at_path_max(size: int, char: str, refused: bool) -> None:
    path = _path(size, char)
    assert len(path.encode()) == size
    if not refused:
        assert sandbox.check(WORD + path) == WORD + path
        assert sandbox.read([WORD + f"-'{path}'"]).read_write == ("-" + path,)
        return
    with pytest.raises(SandboxProblem) as e:
        sandbox.check(WORD + path)
    assert str(e.value) == (
        f"ReadWritePaths= path takes at most 4095 bytes; this one takes {size}"
        " (PATH_MAX, 4096, counts its NUL)"
    )


@pytest.mark.parametrize(
    ("size", "refused"),
    [(MAX_LINE, False), (MAX_LINE + 1, True), (400_000, True)],  # at, one over, the attack's
)
def test_a_words_value_is_capped_before_it_is_parsed(size: int, refused: bool) -> None:
    text = _line(len(WORD) + size)
    if not refused:
        assert sandbox.check(text)
        return
    said = f"ReadWritePaths= takes at most {MAX_LINE} bytes; this one takes {size}"
    for check in (sandbox.check, lambda t: sandbox.read([t])):
        with pytest.raises(SandboxProblem) as e:
            check(text)
        assert str(e.value) == said


@pytest.mark.parametrize(
    "text",
    [
        WORD + "'" + "a" * (MAX_LINE + 1),  # unbalanced: refused on its size, not its quotes
        "ProtectSystem=" + "x" * (MAX_LINE + 1),
        WORD + "/" + "\\" * (MAX_LINE + 1),
    ],
)
def test_a_line_over_the_cap_is_not_parsed_or_echoed(text: str) -> None:
    value = text.partition("=")[2]
    with pytest.raises(SandboxProblem, match=f"this one takes {len(value)}$"):
        sandbox.check(text)


@pytest.mark.parametrize(
    ("size", "refused"),
    [(MAX_PROPERTIES_BYTES, False), (MAX_PROPERTIES_BYTES + 1, True), (400_000, True)],
)
def test_option_properties_is_capped_as_a_whole(size: int, refused: bool) -> None:
    assigned = _properties(size)
    assert len("\n".join(assigned).encode()) == size
    if not refused:
        assert parse_options({"properties": ("as", assigned)}).properties == assigned
        return
    with pytest.raises(InvalidArgs) as e:
        parse_options({"properties": ("as", assigned)})
    assert str(e.value) == (
        f"Option 'properties' takes at most {MAX_PROPERTIES_BYTES} bytes; this one takes {size}."
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        # Within the caps, a bad value is quoted cut, with an ellipsis.
        (WORD + "a" * 4000, "not '" + "a" * 80 + "'…"),
        ("ProtectHome=" + "b" * 4000, "not '" + "b" * 80 + "'…"),
        ("PrivateTmp=" + "c" * 4000, "not '" + "c" * 80 + "'…"),
        (WORD + "/x%q" + "d" * 4000, "has specifier '%q'"),
    ],
)
def test_an_error_quotes_a_cut_of_the_value(text: str, said: str) -> None:
    with pytest.raises(SandboxProblem) as e:
        sandbox.check(text)
    assert said in str(e.value) and len(str(e.value)) < 300


def test_more_paths_than_a_session_may_have_are_refused_before_each_is_checked() -> None:
    many = WORD + " ".join(["/" + "%q" * 10] * (sandbox.MAX_PATHS + 1))
    said = f"names {sandbox.MAX_PATHS + 1} paths; a session has at most {sandbox.MAX_PATHS}"
    with pytest.raises(SandboxProblem, match=said):
        sandbox.check(many)


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("", []),
        ("  /a\t/b\n/c ", ["/a", "/b", "/c"]),
        ("'/srv/a b' %h/.ssh", ["/srv/a b", "%h/.ssh"]),
        ('"/x\\"y" "/a\\b"', ['/x"y', "/a\\b"]),  # a backslash in double quotes escapes " and \
        ("/a\\ b -'/c'\"/d\"", ["/a b", "-/c/d"]),
        ("'' \"\"", ["", ""]),
        ("'it''s'", ["its"]),
        ("/a\\\n/b", ["/a\n/b"]),
    ],
)
def test_shellwords_split_as_shlex(line: str, words: list[str]) -> None:
    assert shellwords.split(line) == words == shlex.split(line)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ("'/a", "No closing quotation"),
        ('"/a', "No closing quotation"),
        ('"/a\\\\', "No closing quotation"),
        ('"/a\\', "No escaped character"),
        ("/a\\", "No escaped character"),
        ("/a '/b' \"", "No closing quotation"),
    ],
)
def test_shellwords_refuse_as_shlex(line: str, said: str) -> None:
    for split in (shellwords.split, shlex.split):
        with pytest.raises(ValueError, match=said):
            split(line)


def test_shellwords_agree_with_shlex_on_random_lines() -> None:
    pieces = ["a", "/", " ", "\t", "\n", "'", '"', "\\", "%h", "-", "é"]
    rnd = random.Random(70)
    for _ in range(20_000):
        line = "".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 12)))
        try:
            want: object = shlex.split(line)
        except ValueError as e:
            want = str(e)
        try:
            got: object = shellwords.split(line)
        except ValueError as e:
            got = str(e)
        assert got == want, repr(line)


@pytest.mark.parametrize(
    "line",
    [
        "'" + "a" * 400_000 + "'",  # the attack's: one quoted word of 400 KB
        '"/' + "\\a" * 200_000 + '"',
        "/" + "\\a" * 200_000,
        "'/" + "a" * 400_000,
    ],
)
def test_shellwords_cost_is_c_speed(line: str) -> None:
    """shlex takes about two seconds over each of these; the bound is loose for a busy CI."""
    started = time.perf_counter()
    with contextlib.suppress(ValueError):
        shellwords.split(line)
    assert time.perf_counter() - started < 0.5


def test_a_create_at_every_cap_fits_under_the_header_limit() -> None:
    """CREATE_ARGS_MAX is what a valid CreateSession's arguments may take on the bus: one at
    every cap at once fits, so only a call that cannot be valid is refused from its header."""
    argv = ["a" * 127] * MAX_ARGV_ENTRIES  # 128 KiB with their NULs
    env = {f"K{i:03d}": "v" * 250 for i in range(MAX_ENV_ENTRIES)}  # 64 KiB with = and NUL
    options = {
        "command": Variant("as", argv[:1]),
        "args": Variant("as", argv[1:]),
        "env": Variant("a{ss}", env),
        "properties": Variant("as", _properties(MAX_PROPERTIES_BYTES)),
        "agent_session": Variant("s", "s" * 128),
        "worktree": Variant("s", "w" * 200),
        "base": Variant("s", "b" * 200),
        "user": Variant("u", 1000),
        "columns": Variant("q", 1000),
        "rows": Variant("q", 1000),
        "mcp": Variant("b", True),
        **{key: Variant("t", hi) for key, (_, hi) in LIMIT_BOUNDS.items()},
    }
    assert len(options) == len(OPTION_TYPES) - 1  # all but prompt, which shares argv's room
    parse_options({k: (v.signature, v.value) for k, v in options.items()})
    assert size_problem(argv, env) is None
    body = ["n" * 64, "p" * 64, _path(PATH_MAX - 1), options]
    wire = Message(path="/", member="CreateSession", signature="sssa{sv}", body=body)
    body_len = int.from_bytes(wire._marshall(False)[4:8], "little")
    assert CREATE_ARGS_MAX - 24 * 1024 < body_len <= CREATE_ARGS_MAX  # and little room spare


@pytest.mark.parametrize(
    ("size", "refused"), [(PATH_MAX - 1, False), (PATH_MAX, True), (400_001, True)]
)
def test_a_cwd_is_capped_at_path_max_and_its_size_named(size: int, refused: bool) -> None:
    said = cwd_problem(_path(size))
    if not refused:
        assert said is None
        return
    assert said == f"Working directory must be shorter than 4096 bytes; this one takes {size}."
