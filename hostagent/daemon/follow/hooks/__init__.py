"""The agents' hooks: their settings files, the FIFO they report into, and the flow of what they report."""
