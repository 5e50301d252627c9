"""CLI of costmodel (not written yet)."""


def register(subparsers):
    return None
