"""Headless subcommands, one module per group; each exposes ``register(subparsers)``."""
