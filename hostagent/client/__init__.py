"""The client side, which talks to the daemon only over the bus: the async library, other
machines' buses, and a live picture that follows the daemon across restarts."""

from hostagent.client.library import Client, SessionRow, default_system

__all__ = ["Client", "SessionRow", "default_system"]
