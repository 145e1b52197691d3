"""`python -m serving_ledger.report build | summary | ledger | findings | explain ...`."""

import sys

from serving_ledger.report.cli import main

sys.exit(main())
