"""The HTTP layer: the ASGI app, its guard, the REST and MCP surfaces, health, forwarding to peers."""
