"""The daemon: the registry of sessions, their lifecycle, and the edges it drives (systemd,
tmux, the sidecar store). docs/architecture.md draws how the parts depend on each other."""
