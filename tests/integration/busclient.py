"""Talking to the sandbox's hostagent over its system bus from the test process, and
waiting for real bus signals with a timeout."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from dbus_fast import Message, MessageType

from hostagent import SESSION_INTERFACE
from hostagent.bus import call as dbuscall
from hostagent.client.library import Client
from tests.sandbox import Sandbox

T = TypeVar("T")


def with_client(sb: Sandbox, fn: Callable[[Client], Awaitable[T]]) -> T:
    async def main() -> T:
        client = await Client.connect(True, sb.bus_address)
        try:
            return await fn(client)
        finally:
            await client.aclose()

    return asyncio.run(main())


async def add_match(client: Client, rule: str) -> None:
    await dbuscall.add_match(client.bus, rule)


async def wait_for_state(
    client: Client, name: str, state: str, action: Callable[[], Any], timeout: float
) -> list[str]:
    """Run action, then wait for PropertiesChanged carrying State == state; the states seen."""
    return await wait_for_property(client, name, "State", lambda v: v == state, action, timeout)


async def wait_for_property(
    client: Client,
    name: str,
    prop: str,
    wanted: Callable[[Any], bool],
    action: Callable[[], Any],
    timeout: float,
    already: bool = False,
) -> list[Any]:
    """Run action, then wait for PropertiesChanged carrying a value of prop that is wanted;
    the values seen. already: a wanted value the property holds after action counts too."""
    path = client.session_path(name)
    seen: list[Any] = []
    done = asyncio.get_running_loop().create_future()

    def on_message(msg: Message) -> None:
        if (
            msg.message_type == MessageType.SIGNAL
            and msg.path == path
            and msg.member == "PropertiesChanged"
            and msg.body[0] == SESSION_INTERFACE
        ):
            value = msg.body[1].get(prop)
            if value is not None:
                seen.append(value.value)
                if wanted(value.value) and not done.done():
                    done.set_result(None)

    client.bus.add_message_handler(on_message)
    await add_match(
        client,
        f"type='signal',interface='org.freedesktop.DBus.Properties',"
        f"member='PropertiesChanged',path='{path}'",
    )
    # A blocking action (a command in the container) runs beside the loop, which keeps
    # reading the bus meanwhile.
    await asyncio.get_running_loop().run_in_executor(None, action)
    # Reached before the match was in place: the property says so now.
    current = (await client.properties(name)).get(prop) if already else None
    if already and wanted(current) and not done.done():
        seen.append(current)
        done.set_result(None)
    await asyncio.wait_for(done, timeout)
    return seen
