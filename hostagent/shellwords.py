"""A line split into words by the shell's quoting rules, as ``shlex.split`` does, in a few
regular-expression passes. Pure.

The sandbox's path words are quoted as a shell quotes (``'/srv/a b'``, ``"/x\\"y"``,
``/a\\ b``). ``shlex.split`` reads a line one character at a time in Python, some 5 µs a
character: a CreateSession with 400 KB of quoted path held the daemon's one thread two
seconds, and every other caller waited behind it. The same words come out of this module in
microseconds, so that what a line costs is its length at C speed, whatever its quotes.

The rules are shlex's in POSIX mode with whitespace splitting and no comments: words are
separated by spaces, tabs, carriage returns and newlines; outside quotes a backslash takes the
next character as it is; within single quotes nothing is special; within double quotes a
backslash escapes only a double quote or a backslash, and is kept before anything else; an
empty pair of quotes is an empty word. ValueError, with shlex's words, for an unclosed quote
or a backslash at the end.
"""

from __future__ import annotations

import re

_BLANK = " \t\r\n"
# A whole word: unquoted characters, escapes and quoted runs, with nothing between them. Each
# alternative starts with a different character, so the match never backtracks.
_WORD = rf"""(?:[^{_BLANK}'"\\]+|\\.|'[^']*'|"(?:[^"\\]|\\.)*")+"""
# Blanks, a word, or the one character where no word could start: an unclosed quote or a
# backslash at the very end.
_SCAN = re.compile(rf"[{_BLANK}]+|({_WORD})|(.)", re.S)
# The pieces of one word, unquoted one by one.
_PIECE = re.compile(r"""([^'"\\]+)|\\(.)|'([^']*)'|"((?:[^"\\]|\\.)*)\"""", re.S)
_IN_DOUBLE = re.compile(r'\\([\\"])')


def too_long(text: str, most: int) -> str | None:
    """What is wrong with text's length, if it is over most UTF-8 bytes: said with its size,
    never its text, so that no error carries a huge value back. Cheap enough to ask before
    anything else is done with it: a text under a quarter of most is not even encoded."""
    if len(text) <= most // 4:
        return None
    size = len(text.encode(errors="surrogateescape"))
    return f"takes at most {most} bytes; this one takes {size}" if size > most else None


def split(line: str) -> list[str]:
    """The words of line, unquoted, as ``shlex.split(line)`` gives them."""
    words = []
    for m in _SCAN.finditer(line):
        word, stray = m.group(1), m.group(2)
        if stray is not None:
            raise ValueError(_unclosed(stray, line[m.start() :]))
        if word is not None:
            words.append(_unquoted(word))
    return words


def _unquoted(word: str) -> str:
    if not any(c in word for c in "'\"\\"):
        return word  # the common case: nothing quoted
    out = []
    for m in _PIECE.finditer(word):
        plain, escaped, single, double = m.groups()
        if plain is not None:
            out.append(plain)
        elif escaped is not None:
            out.append(escaped)
        elif single is not None:
            out.append(single)
        else:
            out.append(_IN_DOUBLE.sub(r"\1", double))
    return "".join(out)


def _unclosed(stray: str, rest: str) -> str:
    """shlex's words for where reading stopped: a backslash with nothing after it (at the end,
    or an odd run of them ending an unclosed double quote), else an unclosed quote."""
    trailing = len(rest) - len(rest.rstrip("\\"))
    if stray == "\\" or (stray == '"' and trailing % 2 == 1):
        return "No escaped character"
    return "No closing quotation"
