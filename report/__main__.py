"""`python -m report build | summary | ledger | findings | explain ...`."""

import sys

from report.cli import main

sys.exit(main())
