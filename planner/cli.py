"""``cosample plan``: registered here, implemented in ``planner.commands``."""


def register(subparsers):  # replaced below once the planner CLI is written
    return None
