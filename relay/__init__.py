"""Talaria Relay publisher for Hermes/Talaria web servers, with its state in SQL.

    from relay import RelayService, open_store

This module gathers the public names; the modules and their layers are mapped in docs/design.md.
The web faces (`asgi` for Starlette or FastAPI, the optional extra `web`; `wsgi`), `threaded`
(blocking calls for threaded servers) and `testing` (a dev relay, a host in memory) are imported
only on request.
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
