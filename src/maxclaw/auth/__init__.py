"""Users, API tokens and roles."""
