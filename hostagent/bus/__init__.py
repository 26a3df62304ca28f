"""D-Bus plumbing shared by the daemon and its clients: one way to call, the escaping of object
paths, and the shim for dbus-fast 1.84's string lengths."""
