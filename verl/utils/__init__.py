"""Small shared helpers of the trainer: injected clock, deterministic seeding."""
