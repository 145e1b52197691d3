"""The compiled read path (`bench._streamread`, Linux only); everything else is in pyproject.toml.

The extension is optional: where it cannot be built (no C compiler, not Linux) the install
still succeeds and `bench.httpstream` reads through the event loop instead.
"""

import sys

from setuptools import Extension, setup

ext = []
if sys.platform == "linux":
    ext.append(Extension("bench._streamread", ["bench/_streamread.c"], optional=True,
                         extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE"]))

setup(ext_modules=ext)
