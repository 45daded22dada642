"""`python -m relay` is `talaria-relay`."""

from relay.cli import main

raise SystemExit(main())
