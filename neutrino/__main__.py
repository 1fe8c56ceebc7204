"""`python -m neutrino …`: the same as the `neutrino` command."""

from neutrino.runtime.start.quick_exit import console_main

console_main()
