"""The publisher (`publisher.RelayPublisher`) and the parts it is made of, each one concept.

`states` builds a profile's rows from records (pure), `fanout` sends the profiles' snapshots
side by side, `signing` signs them under the registration, `runs` tells the store what this
replica hosts, `announcements` sends session-started events, `outbox` sends viewed and deleted
acknowledgements, `loop` runs coalesced passes with backoff, and `logs` reports what happened
(once, where a failure repeats every pass).
"""
