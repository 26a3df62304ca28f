"""hostagent: AI coding agents as transient systemd scopes, driven over D-Bus."""

__version__ = "0.1.0"

BUS_NAME = "org.hostagent.HostAgent1"
MANAGER_PATH = "/org/hostagent/HostAgent1"
SESSION_PATH_PREFIX = "/org/hostagent/HostAgent1/session"
MANAGER_INTERFACE = "org.hostagent.HostAgent1.Manager"
SESSION_INTERFACE = "org.hostagent.HostAgent1.Session"
