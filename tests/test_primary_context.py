"""shim/preload.c's count of the primary context's retains, against the fake driver."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from neutrino.runtime.start import build

FAKE = Path(__file__).parent / "fakecuda"


@pytest.fixture(scope="module")
def shim_and_fake(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("no C compiler")
    d = tmp_path_factory.mktemp("fakecuda")
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), str(FAKE / "fakecuda.c")], check=True)
    return build.build_shim(tmp_path_factory.mktemp("cache")), d


def _run(shim_and_fake, *args):
    shim, fake = shim_and_fake
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEUTRINO")}
    env.update(LD_PRELOAD=str(shim), LD_LIBRARY_PATH=str(fake))
    out = subprocess.run([sys.executable, str(FAKE / "primary_release_race.py"), *args], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")[-2]


def test_a_release_through_the_entry_point_before_cuda_11_is_counted(shim_and_fake):
    """Retained twice, released through cuDevicePrimaryCtxRelease (reached by dlsym), then through
    cuDevicePrimaryCtxRelease_v2: the first keeps the context, the second is the last and does not (before: the
    first was not seen, and the last release said "keeps": the plans and rings of a destroyed context kept)."""
    assert _run(shim_and_fake, "v1") == "keeps [1, 0]"


def test_two_releases_at_once_keep_the_context_once(shim_and_fake):
    """Retained twice, released by two threads at once (the teardown callback sleeps, so both are inside it
    together): the first release keeps the context (one retain is left), the second is the last and does not
    (before: both read the count 2 before either lowered it, both said "keeps", and the plans and rings of a
    destroyed context were kept)."""
    assert _run(shim_and_fake) == "keeps [0, 1]"
