"""The testbed's one error type."""

from cosample.errors import CosampleError


class TestbedError(CosampleError):
    """Bad testbed configuration, a testbed already up or not up, or a step that failed."""

    __test__ = False  # not a pytest test class despite the name
