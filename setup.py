"""The one compiled part: the sFlow decoder's fast path (collector/_sflow.c, docs/dependencies.md).

Everything else is configured in pyproject.toml; setuptools builds the extension from source in
``pip install -e .`` (gcc and the Python headers: bin/bootstrap.sh). No prebuilt binaries.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("cosample.collector._sflow", ["collector/_sflow.c"],
                             extra_compile_args=["-O2"])])
