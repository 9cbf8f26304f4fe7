"""Presence: which thread a user's live client has in focus (feeds the due-time rule)."""
