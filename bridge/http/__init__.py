"""The HTTP layer: the ASGI app, its guards, the REST and MCP surfaces, health, forwarding to peers."""
