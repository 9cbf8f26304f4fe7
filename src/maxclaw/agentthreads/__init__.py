"""What an agent reads and takes from its threads outside a turn (MCP, command hooks)."""
