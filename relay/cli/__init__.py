"""The `talaria-relay` command: `main` (the parser and exit codes), the state commands (`state`:
status, check, rekey; `status`: what status shows), `transfer` (import), `grants`, `demo`,
`bench`, and `output` (how every command speaks). Nothing a web app embeds imports this package.
"""

from relay.cli.main import main

__all__ = ["main"]
