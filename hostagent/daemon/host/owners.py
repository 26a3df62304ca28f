"""The owner port (ports.OwnerPort) as the daemon runs it: a session's environment, its owner's
runtime directory, cwd and programs checked, and helpers run, each as the owner (owner.py,
runtimedir.py, agents.py).

The one object ops/ and follow/ are handed for anything done with a user's rights; the fast
layer's fake stands in for it, so no test reaches past it into the module functions.
"""

from __future__ import annotations

from hostagent.daemon.host import agents, owner, runtimedir
from hostagent.daemon.state.paths import SessionPaths
from hostagent.identity import Owner


class Owners:
    def __init__(self, system: bool, helpers: owner.Helpers) -> None:
        self.system = system  # the system daemon: an owner's runtime directory is theirs
        self.helpers = helpers

    def environment(
        self, who: Owner, preset_env: dict[str, str], caller_env: dict[str, str]
    ) -> dict[str, str]:
        return owner.build_env(who, preset_env, caller_env, self.system)

    def prepare_runtime_dir(self, paths: SessionPaths, name: str, who: Owner) -> None:
        runtimedir.prepare_session_dir(paths, name, who)

    async def check_cwd(self, who: Owner, cwd: str) -> str | None:
        return await owner.check_cwd(self.helpers, who, cwd)

    async def resolve(self, who: Owner, paths: list[str]) -> dict[str, str] | None:
        return await owner.resolve_paths(self.helpers, who, paths)

    async def find_program(self, who: Owner, program: str) -> agents.Found:
        """Where the owner's login shell finds program (AgentNotFound if nowhere)."""
        return await agents.resolve(self.helpers, who, program)

    async def program_problem(self, who: Owner, program: str, path: str) -> str | None:
        """Why the owner cannot run program, looked up in path as the agent's exec will."""
        return await owner.program_problem(self.helpers, who, program, path)

    async def installed(
        self, who: Owner, programs: dict[str, str]
    ) -> dict[str, tuple[str, str, str]]:
        """For each name -> program: (where the login shell finds it, its version, why not),
        asked afresh (ListAgents)."""
        return await agents.installed(self.helpers, who, programs, self.environment(who, {}, {}))

    async def run(
        self,
        who: Owner,
        argv: list[str],
        timeout: float = 10.0,
        env: dict[str, str] | None = None,
        runs_user_code: str = "",
        limit: int = 0,
    ) -> tuple[int, bytes, bytes] | None:
        return await self.helpers.run(
            who, argv, timeout, env=env, runs_user_code=runs_user_code, limit=limit
        )
