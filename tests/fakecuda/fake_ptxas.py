#!/usr/bin/env python3
"""The ptxas of the fake driver's tests (tests/conftest.py sets NEUTRINO_PTXAS to this file): writes
what fakecuda.c and tests/fakedriver.py load as a cubin, "FAKECUBIN\\0" and the PTX, to `-o FILE`.
`FAKE_PTXAS_FAIL=1` makes it refuse every input (the runtime then hands the PTX to the driver)."""

import os
import sys


def main(argv: list[str]) -> int:
    if os.environ.get("FAKE_PTXAS_FAIL"):
        print("ptxas fatal   : refused by FAKE_PTXAS_FAIL", file=sys.stderr)
        return 255
    out = argv[argv.index("-o") + 1]
    src = [a for a in argv if a.endswith(".ptx")][-1]
    with open(src, "rb") as fh:
        ptx = fh.read()
    with open(out, "wb") as fh:
        fh.write(b"FAKECUBIN\0" + ptx)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
