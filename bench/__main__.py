"""`python -m serving_ledger.bench run ...`: the collector's command line."""

import sys

from serving_ledger.bench.cli import main

sys.exit(main())
