"""The host's edges: the systemd client, tmux, the scope runner, /proc and pidfds, running
things as a session's owner, git worktrees; and ports.py, the edges as the core sees them.
Imports the model and state/paths only.
"""
