"""The client side, which talks to the daemon only over the bus: the async library, other
machines' buses, a live picture that follows the daemon across restarts, and a small blocking
client for the verbs that must start fast (quick.py).

Nothing is imported here: ``hostagent.client.quick`` must not pay for the asyncio library.
"""
