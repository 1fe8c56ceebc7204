"""A CuPy RawModule built from PTX (corpus vec kernels); saves the output to argv[1]."""
import sys
from pathlib import Path

import cupy as cp
import numpy as np

PTX = Path(__file__).parent / "vec.sm90.ptx"
N4 = 1 << 18


def main(out):
    mod = cp.RawModule(path=str(PTX))  # CuPy loads a .ptx file with cuModuleLoad
    saxpy4 = mod.get_function("saxpy4")
    rs = np.random.RandomState(0)
    x = cp.asarray(rs.standard_normal(4 * N4).astype(np.float32))
    y = cp.asarray(rs.standard_normal(4 * N4).astype(np.float32))
    saxpy4((N4 // 256,), (256,), (x, y, np.float32(0.5), np.int64(N4)))
    cp.cuda.runtime.deviceSynchronize()
    np.save(out, cp.asnumpy(y))
    print("cupy done")


if __name__ == "__main__":
    main(sys.argv[1])
