"""The corpus transformer block under torch.compile, forward and backward; saves output and grads to argv[1]."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "src"))
import numpy as np
import torch


class Block(torch.nn.Module):
    def __init__(s, d=256):
        super().__init__(); s.ln1 = torch.nn.LayerNorm(d); s.ln2 = torch.nn.LayerNorm(d)
        s.qkv = torch.nn.Linear(d, 3 * d); s.proj = torch.nn.Linear(d, d); s.fc1 = torch.nn.Linear(d, 4 * d); s.fc2 = torch.nn.Linear(4 * d, d)

    def forward(s, x):
        q, k, v = s.qkv(s.ln1(x)).chunk(3, -1)
        B, T, C = x.shape; h = lambda t: t.view(B, T, 4, C // 4).transpose(1, 2)
        att = (h(q) @ h(k).transpose(-1, -2) / 8).softmax(-1) @ h(v)
        x = x + s.proj(att.transpose(1, 2).reshape(B, T, C))
        return x + s.fc2(torch.nn.functional.gelu(s.fc1(s.ln2(x))))


def main(out, steps=1):
    torch.manual_seed(0)
    m = Block().cuda(); f = torch.compile(m, options={"max_autotune": False})
    x = torch.randn(8, 128, 256, device="cuda", requires_grad=True)
    for _ in range(steps):
        y = f(x); y.sum().backward()
    torch.cuda.synchronize()
    res = {"y": y.detach(), "xgrad": x.grad}
    res.update({f"g_{n}": p.grad for n, p in m.named_parameters()})
    np.savez(out, **{k: v.detach().cpu().contiguous().view(torch.uint8).numpy() for k, v in res.items()})
    print("inductor done")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
