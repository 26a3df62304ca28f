"""The daemon's bus objects: the Manager and the per-session interfaces, served by a small
exporter. Only this package marshals, authorizes and delegates."""
