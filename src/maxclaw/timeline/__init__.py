"""Threads, messages and the inbox path that wakes a thread."""
