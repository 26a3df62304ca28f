"""Object-path labels escaped the way sd_bus_path_encode(3) does.

Both our session objects and systemd's unit objects use this escaping, so one pair of functions
serves the bus layer and the systemd client.
"""

from __future__ import annotations

# Spelled out rather than taken from the string module, which imports re: hostagentctl's quick
# path reads this module, and re with its imports would cost it a fifth of its time.
_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")


def label_encode(label: str) -> str:
    """Escape one path label: bytes outside [A-Za-z0-9], and a leading digit, become _xx."""
    if not label:
        return "_"
    out = []
    for i, byte in enumerate(label.encode()):
        ch = chr(byte)
        if ch in _SAFE and not (i == 0 and ch.isdigit()):
            out.append(ch)
        else:
            out.append(f"_{byte:02x}")
    return "".join(out)


def label_decode(label: str) -> str:
    """Reverse of label_encode; raises ValueError on a malformed label."""
    if label == "_":
        return ""
    if not label.isascii():
        raise ValueError(f"'{label}' is not an escaped label")
    return hex_unescaped(label, "_").decode()


def hex_unescaped(text: str, marker: str) -> bytes:
    """text's bytes, with each marker and the two hex digits after it made the byte they name
    (sd_bus_path_encode's _xx, a D-Bus address's %xx); ValueError on a malformed escape."""
    raw = bytearray()
    i = 0
    while i < len(text):
        if text[i] == marker:
            raw.append(int(text[i + 1 : i + 3], 16))
            i += 3
        else:
            raw += text[i].encode()
            i += 1
    return bytes(raw)


def path_encode(prefix: str, label: str) -> str:
    return f"{prefix}/{label_encode(label)}"


def path_decode(prefix: str, path: str) -> str | None:
    """The label under prefix, or None when path is not directly below it."""
    head = prefix + "/"
    if not path.startswith(head) or "/" in path[len(head) :]:
        return None
    try:
        return label_decode(path[len(head) :])
    except (ValueError, UnicodeDecodeError):
        return None
