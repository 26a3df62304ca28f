"""The programs: hostagentctl (with watch), hostagent-notify, and the stand-in agent CLI."""
