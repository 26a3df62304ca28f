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
            client.close()

    return asyncio.run(main())


async def add_match(client: Client, rule: str) -> None:
    await dbuscall.add_match(client.bus, rule)


async def wait_for_state(
    client: Client, name: str, state: str, action: Callable[[], Any], timeout: float
) -> list[str]:
    """Run action, then wait for PropertiesChanged carrying State == state; the states seen."""
    path = client.session_path(name)
    seen: list[str] = []
    done = asyncio.get_running_loop().create_future()

    def on_message(msg: Message) -> None:
        if (
            msg.message_type == MessageType.SIGNAL
            and msg.path == path
            and msg.member == "PropertiesChanged"
            and msg.body[0] == SESSION_INTERFACE
        ):
            value = msg.body[1].get("State")
            if value is not None:
                seen.append(value.value)
                if value.value == state and not done.done():
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
    await asyncio.wait_for(done, timeout)
    return seen
