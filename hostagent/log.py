"""Logging for the journal: no timestamps (journald adds them), sd-daemon priority prefixes."""

from __future__ import annotations

import logging
import os
import sys

_PRIORITY = {
    logging.DEBUG: 7,
    logging.INFO: 6,
    logging.WARNING: 4,
    logging.ERROR: 3,
    logging.CRITICAL: 2,
}


class JournalFormatter(logging.Formatter):
    """``<N>message`` under systemd (JOURNAL_STREAM set), ``LEVEL: message`` on a terminal."""

    def __init__(self, journal: bool) -> None:
        super().__init__()
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        if self.journal:
            prio = _PRIORITY.get(record.levelno, 6)
            return "\n".join(f"<{prio}>{line}" for line in text.splitlines())
        return f"{record.levelname.lower()}: {text}"


def setup(debug: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JournalFormatter(bool(os.environ.get("JOURNAL_STREAM"))))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if debug else logging.INFO)
