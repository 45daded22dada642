"""The operator page, read-only: `facts` gathers the document (also served as JSON, and printed
by `talaria-relay status`), `judge` says once what is wrong, `page` renders it; `relay.routes`
serves both to the callers the app's `operator=` predicate accepts (docs/operator-page.md)."""
