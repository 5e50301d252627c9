"""CLI of agents (not written yet)."""


def register(subparsers):
    return None
