"""What the daemon knows: the registry of sessions and the one way a record changes, the
records on disk, the settings, where runtime files live. Imports only the model.
"""
