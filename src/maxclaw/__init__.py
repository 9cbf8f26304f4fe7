"""MaxClaw rich messages: non-blocking questions for AI agents."""

__version__ = "0.1.0"
