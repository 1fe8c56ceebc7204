"""Results leaving the launch path: the drain (writer) into the trace, analysis callbacks after the
last launch, and the exit report."""
