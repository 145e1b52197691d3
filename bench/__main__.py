"""`python -m bench run ...`: the collector's command line."""

import sys

from bench.cli import main

sys.exit(main())
