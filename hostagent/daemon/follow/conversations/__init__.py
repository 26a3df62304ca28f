"""Each session's agent conversation: its id kept current, found on disk or in a CLI's listing, and whether it can be resumed."""
