"""`python -m relay` is `talaria-relay`."""

import sys

from relay.cli import main

sys.exit(main())
