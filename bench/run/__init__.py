"""One run: its configuration from the command line, the Lightning trainer and module built for it,
the training and its result, evaluation of a checkpoint, memory plans, timing."""
