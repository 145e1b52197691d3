"""The compiled read path (`serving_ledger.bench._streamread`, Linux only); everything else is in pyproject.toml.

The extension is optional: where it cannot be built (no C compiler, not Linux) the install
still succeeds and `serving_ledger.bench.httpstream` reads through the event loop instead.
"""

import sys

from setuptools import Extension, setup

ext = []
if sys.platform == "linux":
    ext.append(Extension("serving_ledger.bench._streamread", ["bench/_streamread.c"], optional=True,
                         extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE"]))

setup(ext_modules=ext)
