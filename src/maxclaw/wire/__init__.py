"""The wire models: the request and response shapes both the server and the client speak.

A leaf: it imports nothing of the project, so either side can depend on it.
"""
