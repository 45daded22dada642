"""The operator page: a read-only view of the relay state, served by the route table.

`facts` gathers the document (also served as JSON, and printed by `talaria-relay status`),
`judge` says once what is wrong, `page` renders it; `relay.routes` serves both under
`/relay/operator` and `/relay/operator.json` to callers the app's `operator=` predicate accepts.
docs/operator-page.md shows how to mount it.
"""
