"""hostagent: AI coding agents as transient systemd scopes, driven over D-Bus."""

__version__ = "0.2.0"

BUS_NAME = "org.hostagent.HostAgent1"
MANAGER_PATH = "/org/hostagent/HostAgent1"
SESSION_PATH_PREFIX = "/org/hostagent/HostAgent1/session"
MANAGER_INTERFACE = "org.hostagent.HostAgent1.Manager"
SESSION_INTERFACE = "org.hostagent.HostAgent1.Session"
# A counter with no value (no accounting, or no running scope), as systemd says it.
UINT64_MAX = (1 << 64) - 1
