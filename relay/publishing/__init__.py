"""The publisher (`publisher.RelayPublisher`) and the parts it is made of, each one concept
(docs/design.md lists them)."""
