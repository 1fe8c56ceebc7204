"""Plain PyTorch eager ops (SASS-only kernels, cuBLAS): nothing to probe; saves outputs to argv[1]."""
import sys

import numpy as np
import torch


def main(out):
    torch.manual_seed(0)
    a = torch.randn(512, 512, device="cuda"); b = torch.randn(512, 512, device="cuda")
    c = (a @ b).softmax(-1) + torch.nn.functional.gelu(a).sum(0)
    torch.cuda.synchronize()
    np.save(out, c.cpu().numpy())
    print("eager done")


if __name__ == "__main__":
    main(sys.argv[1])
