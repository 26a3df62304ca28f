"""What happens to sessions: create, stop, resume, kill, remove, reconcile, recovery, and how a
run ends. The only movers of the state machine (Registry.change with an event) and the only
callers of Endings.finish; follow/ changes the fields it follows, without an event.
"""
