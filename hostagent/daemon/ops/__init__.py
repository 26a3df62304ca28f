"""What happens to sessions: create, stop, resume, kill, remove, reconcile, recovery, and how a
run ends. The only callers of Registry.change and Endings.finish.
"""
