"""Cards: components posted by ``ask_user_question``, their state machine and their answers."""
