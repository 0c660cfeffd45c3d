"""Sources: each turns one kind of input into ``SourceBatch``es of ``Sample``s; malformed input is
counted by reason in the batch, never raised."""
