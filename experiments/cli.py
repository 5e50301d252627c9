"""CLI of experiments (not written yet)."""


def register(subparsers):
    return None
