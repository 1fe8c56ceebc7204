"""Starts app.py once per rank like torchrun does: RANK, LOCAL_RANK, WORLD_SIZE in each child's
environment, which inherits ours (LD_PRELOAD included). usage: ranks.py N PTXFILE KERNEL LAUNCHES"""
import os
import subprocess
import sys

if __name__ == "__main__":
    n, rest = int(sys.argv[1]), sys.argv[2:]
    app = os.path.join(os.path.dirname(os.path.abspath(__file__)), "app.py")
    children = [subprocess.Popen([sys.executable, app, *rest],
                                 env=dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(n)))
                for r in range(n)]
    sys.exit(max(c.wait() for c in children))
