"""MaxClaw as an MCP server: any agent that loads tools from MCP can ask Max without blocking.

Two transports, one set of tools (``tools``) and one server (``server``):

- ``maxclaw mcp`` (``stdio``): a process an agent host starts; it talks to a MaxClaw server
  over the REST API with an agent token (``backend.RestBackend``).
- ``/mcp`` on ``maxclaw serve`` (``http``): streamable HTTP in stateless mode, authenticated
  with an agent token; the tools call the services in-process (``backend.ServiceBackend``).

Nothing about a conversation lives in the MCP process: cards, answers and deliveries are rows,
so any replica (or a restarted ``maxclaw mcp``) serves any call.
"""
