"""The one compiled part: the sFlow decoder's fast path (collector/_sflow.c, docs/dependencies.md).

Everything else is configured in pyproject.toml; setuptools builds the extension from source in
``pip install -e .`` (gcc and the Python headers: bin/bootstrap.sh). No prebuilt binaries.
"""

from setuptools import Extension, setup

# optional: a host without a compiler (an agent host needs none of the collector) still
# installs; the collector then decodes in Python alone, a third as fast, and
# tests/collector/test_decode_compiled.py fails where the tests run.
setup(ext_modules=[Extension("cosample.collector._sflow", ["collector/_sflow.c"],
                             extra_compile_args=["-O2"], optional=True)])
