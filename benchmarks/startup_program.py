"""The program benchmarks/startup.py runs: a torch.compile MLP training script, as in issue 29.

usage: startup_program.py [STEPS]   (default 50 timed steps after 5 warm-up steps)

Forward and backward compiled by Inductor (Triton kernels: what block_sched probes), cuBLAS GEMMs,
AdamW in eager ATen. Prints one JSON line: the final loss (the profiled runs must print the same),
the steps' wall time, and the wall clock of each step of the process (`marks`: benchmarks/startup.py
puts each step's time beside the plain runs', and takes `imported`, before any CUDA call, off the
paired differences: the program's own variation there is no cost of ours).
"""
import json
import sys
import time

MARKS = {"started": time.time()}  # wall clocks of the program's steps

import torch  # noqa: E402

MARKS["imported"] = time.time()
WARMUP = 5


def main(steps: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 2048), torch.nn.GELU(), torch.nn.LayerNorm(2048),
                                torch.nn.Linear(2048, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 256)).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randn(512, 1024, device="cuda")
    y = torch.randn(512, 256, device="cuda")
    torch.cuda.synchronize()
    MARKS["cuda"] = time.time()  # the first CUDA calls: the context, our runtime's start, the model's weights

    @torch.compile
    def fwd_bwd(x, y):
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    loss = None
    for i in range(WARMUP + steps):
        if i == WARMUP:
            torch.cuda.synchronize()
            MARKS["warmed"] = time.time()
            started = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = fwd_bwd(x, y)
        opt.step()
        if i == 0:
            torch.cuda.synchronize()
            MARKS["compiled"] = time.time()  # Dynamo, Inductor's caches, the Triton kernels loaded
    torch.cuda.synchronize()
    MARKS["timed"] = time.time()
    print(json.dumps({"loss": round(float(loss), 6), "steps": steps, "seconds": time.perf_counter() - started,
                      "marks": MARKS}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50)
