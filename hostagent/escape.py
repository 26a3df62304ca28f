"""A caller's text, made safe to show: no character of it acts on a terminal or a log.

Names are checked, but a cwd, a command line, a branch or a screen is the session owner's own
text, and it is read by others: an admin in ``hostagentctl status``, anyone in the journal. An
ESC in it could retitle or clear the reader's terminal; a newline could forge a line of its own
(``Owner: 0``, ``removed by root``). As systemd does, such characters are shown escaped
(``\\x1b``, ``\\x0a``).
"""

from __future__ import annotations

# Line breaks and tabs are the layout of our own output; every other character that is not
# printable is escaped (C0, DEL, C1, and the format characters that reorder text).
_LAYOUT = frozenset("\n\t")


def _escaped(c: str) -> str:
    code = ord(c)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: object) -> str:
    """text as one line that shows as it is: every non-printable character escaped."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() else _escaped(c) for c in s)


def safe_lines(text: str) -> str:
    """text with its line breaks and tabs kept and every other control character escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in _LAYOUT else _escaped(c) for c in text)
