import sys

from serving_ledger.bench.cli import main

sys.exit(main())
