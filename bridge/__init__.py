"""gym-mcp-bridge: any NeMo Gym resources server behind MCP and Gym's HTTP contract."""

__version__ = "0.1.0"
