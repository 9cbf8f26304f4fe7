"""web capability."""
