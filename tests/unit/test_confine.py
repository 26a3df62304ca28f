"""A helper that runs a user's code is held until it is in a scope of its own, and the scope
is ended after it (hostagent/daemon/host/confine.py); the real scope is shown on systemd by
tests/integration/test_hostile.py."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from hostagent.daemon.host import owner as owner_module
from hostagent.daemon.host.confine import helper_unit
from hostagent.daemon.host.systemd import SystemdError
from hostagent.identity import Owner
from hostagent.session import name_from_unit


class FakeConfiner:
    def __init__(self, refuse: bool = False) -> None:
        self.refuse = refuse
        self.entered: list[tuple[int, str, str]] = []  # pid, its cmdline then, what
        self.left: list[str] = []

    async def enter(self, owner: Owner, pid: int, what: str, timeout: float) -> str:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        self.entered.append((pid, cmdline, what))
        if self.refuse:
            raise SystemdError("refused")
        return "hostagent-helper:u0:1.scope"

    async def leave(self, unit: str) -> None:
        self.left.append(unit)


def me() -> Owner:
    return Owner.from_uid(os.getuid())


@pytest.mark.parametrize("refuse", [False, True], ids=["scoped", "refused"])
def test_a_users_code_runs_only_once_it_is_in_its_scope(tmp_path: Path, refuse: bool) -> None:
    ran = tmp_path / "ran"
    confiner = FakeConfiner(refuse)

    async def body() -> tuple[int, bytes, bytes] | None:
        return await owner_module.Helpers(confiner).run(
            me(),
            ["/bin/sh", "-c", f"echo ran > {ran}; echo out"],
            10,
            runs_user_code="login shell lookup",
        )

    result = asyncio.run(body())
    ((_pid, cmdline, what),) = confiner.entered
    assert "hostagent-helper" in cmdline and what == "login shell lookup"  # still the shim
    if refuse:
        assert result is None and not ran.exists() and confiner.left == []
    else:
        assert result is not None and result[0] == 0 and result[1] == b"out\n"
        assert ran.exists() and confiner.left == ["hostagent-helper:u0:1.scope"]


def test_a_helper_of_ours_is_not_confined() -> None:
    confiner = FakeConfiner()

    async def body() -> None:
        helpers = owner_module.Helpers(confiner)
        assert await helpers.run(me(), ["/bin/true"], 10) == (0, b"", b"")

    asyncio.run(body())
    assert confiner.entered == []


def test_a_user_code_helpers_output_is_bounded() -> None:
    async def body() -> None:
        with pytest.raises(owner_module.OutputTooLarge):
            await owner_module.Helpers(FakeConfiner()).run(
                me(),
                ["/bin/sh", "-c", "yes"],
                10,
                runs_user_code="login shell lookup",
                limit=owner_module.USER_CODE_OUTPUT,
            )

    asyncio.run(body())


def test_a_helper_scope_is_never_taken_for_a_session() -> None:
    unit = helper_unit(1001)
    assert unit.startswith("hostagent-") and unit.endswith(".scope")
    assert name_from_unit(unit) is None
