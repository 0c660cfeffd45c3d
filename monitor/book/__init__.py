"""The alert book: what a tick's changes do to each alert (pending, firing, resolved), annotated and
committed with its evidence and plots into the transition log that alerting follows."""
