"""HTTP and WebSocket layer: thin routes over the services."""
