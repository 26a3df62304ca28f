"""Benchmarks that run in the real-systemd sandbox and write docs/benchmarks.md."""
