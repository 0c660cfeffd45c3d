"""Models of the PPO dataflow: actor/reference (HF causal LM), critic (value head), reward."""
