"""What the model can call: server lookups across clouds and the static inventory, and MCP servers.

The composition root builds everything through :func:`tools.catalog.build_toolset`.
"""
