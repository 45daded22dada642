"""`relay` for threaded and WSGI web servers: the async `RelayService` behind plain calls.

`ThreadedRelayService` runs the service on an event loop in a daemon thread of its own;
`SyncHost` is the `relay.host.Host` port with plain methods, called off that loop on a small
thread pool. `relay.wsgi` serves the browser routes over it.
"""

from relay.threaded.facade import ThreadedRelayService
from relay.threaded.host import SyncHost

__all__ = ["SyncHost", "ThreadedRelayService"]
