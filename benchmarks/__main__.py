"""`python -m benchmarks ARGS` is `talaria-relay bench ARGS` (the CLI's exit codes and errors)."""

import sys

from relay.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))
