"""A dev Talaria Relay: the publisher-facing endpoints with the real relay's checks, in memory.

    relay = DevRelay()
    invitation = relay.mint_invitation()
    transport = httpx.ASGITransport(app=relay)
    async with httpx.AsyncClient(transport=transport, base_url="http://relay.test") as client:
        ...

Ported from the relay's Convex source (`http.ts`, `pairing.ts`, `publishers.ts`,
`completions.ts`): same checks, same order, same status codes and bodies. Each request is handled
by one synchronous call between reading the body and sending the answer, so no other request can
interleave between its checks and its changes. The `/admin/*` endpoints have no authentication:
they exist for loopback tests and the demo only.
"""
