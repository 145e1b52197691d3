import sys

from serving_ledger.report.cli import main

sys.exit(main())
