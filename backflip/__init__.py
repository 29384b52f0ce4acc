"""backflip: a lab bench for deep reinforcement learning that makes silent failures loud."""

__version__ = "0.1.0"
