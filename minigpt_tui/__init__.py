"""minigpt-tui: train, save, resume, inspect and interrogate a Mini GPT on the CPU."""

__version__ = "0.1.0"
