"""`python -m serving_ledger run | build | summary | ledger | findings | explain`."""

import sys

from serving_ledger.cli import main

sys.exit(main())
