"""`python -m neutrino …`: the same as the `neutrino` command."""

import sys

from neutrino.cli import main

sys.exit(main())
