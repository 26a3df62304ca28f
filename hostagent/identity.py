"""A session's owner: who a user is, as passwd says it.

A value the whole daemon passes around (the registry keeps one per session, every helper runs as
one); running things as the owner is daemon/host/owner.py's.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass


@dataclass(frozen=True)
class Owner:
    uid: int
    gid: int
    name: str
    home: str
    shell: str
    groups: tuple[int, ...]

    @classmethod
    def from_uid(cls, uid: int) -> Owner:
        pw = pwd.getpwuid(uid)  # KeyError for an unknown uid
        groups = tuple(os.getgrouplist(pw.pw_name, pw.pw_gid))
        return cls(uid, pw.pw_gid, pw.pw_name, pw.pw_dir, pw.pw_shell or "/bin/sh", groups)
