"""The compiled parts: the sFlow decoder's fast path (collector/_sflow.c), the plan slices'
(cosample/plan/_slices.c, which hashes with OpenSSL's libcrypto) and a two-phase plan set's
first phase (cosample/plan/_transition.c) and the plan's host table writer (planner/_hostjson.c),
docs/dependencies.md.

Everything else is configured in pyproject.toml; setuptools builds the extension from source in
``pip install -e .`` (gcc and the Python headers: bin/bootstrap.sh). No prebuilt binaries.
"""

from setuptools import Extension, setup

# optional: a host without a compiler (an agent host needs none of the collector) still
# installs; the collector then decodes in Python alone, a third as fast, and
# tests/collector/test_decode_compiled.py fails where the tests run.
# The same for the slices: without it the controller builds them in Python (docs/results.md,
# "Plan slices"), and tests/plan/test_slices_compiled.py fails where the tests run. And for a
# two-phase plan set's first phase (cosample/plan/_transition.c): without it the controller
# lowers the plans in Python, and tests/plan/test_transition_compiled.py fails. And for the
# plan's host table (planner/_hostjson.c): without it hostjson writes it in Python,
# and tests/planner/test_hostjson_compiled.py fails. And for the analyser's per-frame fast path
# (appmon/_fastpath.c): without it the analyser runs in Python alone, and
# tests/appmon/test_fastpath.py fails.
setup(
    ext_modules=[
        Extension(
            "cosample.collector._sflow",
            ["collector/_sflow.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "cosample.plan._slices",
            ["cosample/plan/_slices.c"],
            depends=["cosample/plan/_hosttable.h"],
            extra_compile_args=["-O2", "-Wno-deprecated-declarations"],
            libraries=["crypto"],
            optional=True,
        ),
        Extension(
            "cosample.plan._transition",
            ["cosample/plan/_transition.c"],
            depends=[
                "cosample/plan/_hosttable.h",
                "cosample/plan/_jsonnumber.h",
                "cosample/plan/_hostfields.h",
            ],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "cosample.appmon._fastpath",
            ["appmon/_fastpath.c"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
        Extension(
            "cosample.planner._hostjson",
            ["planner/_hostjson.c"],
            depends=["cosample/plan/_hosttable.h", "cosample/plan/_jsonnumber.h"],
            extra_compile_args=["-O2"],
            optional=True,
        ),
    ]
)
