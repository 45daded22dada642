"""`relay` for threaded and WSGI web servers: `ThreadedRelayService` runs the async
`RelayService` on an event loop in a daemon thread; `SyncHost` is the `relay.host.Host` port with
plain methods, called off that loop on a small thread pool. `relay.wsgi` serves routes over it."""

from relay.threaded.facade import ThreadedRelayService
from relay.threaded.host import SyncHost

__all__ = ["SyncHost", "ThreadedRelayService"]
