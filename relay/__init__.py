"""Talaria Relay publisher for Hermes/Talaria web servers, with its state in SQL.

    from relay import RelayService, open_store

The modules, top down: `service` (the current publisher and its swaps, tuned by
`PublisherOptions`), `pairing` and `unpairing` (registration and enrollment; forgetting them),
`publishing` (the package of the publisher: `publishing.publisher.RelayPublisher` composing its
parts, `states`, the pure row builder; `outbox`, viewed and deleted acknowledgements;
`announcements`; `loop`, passes and backoff; `logs`; and the rest, one concept each),
`presence`, `client` (signed HTTP), `protocol` (the wire), `host` (the port the web app
implements), `store` (all state, one repository), `errors`, `health` (what a probe asks),
`metrics` and `tracing` (OpenTelemetry, no-ops without an SDK); `routes`, the browser-facing
routes once, served by `asgi` for Starlette or FastAPI (the optional extra `web`, imported only
on request) and by `wsgi` for WSGI apps; `operator`, the operator page; `threaded`, the service
behind blocking calls for threaded servers; `testing`, a dev relay and a host in memory for
tests; and `cli`, the `talaria-relay` command.
"""

from relay.errors import (
    CallTimeoutError,
    CorruptStateError,
    InvalidInputError,
    KeyPassphraseError,
    MissingExtraError,
    RelayError,
    RelayHttpError,
    RelayPairingError,
    RelayRequestError,
    RelayResponseError,
    RelayTimeoutError,
    RelayUnreachableError,
    SchemaError,
    ServiceNotStartedError,
    ServiceStoppedError,
    SessionNotFoundError,
    StaleConfigError,
    StoreError,
    StoreUnavailableError,
    TransferConflictError,
)
from relay.health import Health
from relay.host import ActiveRun, AgentSessionRow, Host, IndexRow, SessionMeta
from relay.publishing.options import PublisherOptions
from relay.service import RelayService
from relay.store import RelayStore, open_store
from relay.version import __version__ as __version__

__all__ = [
    "ActiveRun",
    "AgentSessionRow",
    "CallTimeoutError",
    "CorruptStateError",
    "Health",
    "Host",
    "IndexRow",
    "InvalidInputError",
    "KeyPassphraseError",
    "MissingExtraError",
    "PublisherOptions",
    "RelayError",
    "RelayHttpError",
    "RelayPairingError",
    "RelayRequestError",
    "RelayResponseError",
    "RelayService",
    "RelayStore",
    "RelayTimeoutError",
    "RelayUnreachableError",
    "SchemaError",
    "ServiceNotStartedError",
    "ServiceStoppedError",
    "SessionMeta",
    "SessionNotFoundError",
    "StaleConfigError",
    "StoreError",
    "StoreUnavailableError",
    "TransferConflictError",
    "open_store",
]
