"""`python -m serving_ledger run | build | summary | ledger | findings | next | export | explain`."""

import sys

from serving_ledger.cli import main

sys.exit(main())
