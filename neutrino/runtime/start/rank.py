"""Which rank of a distributed job this process is, from its launcher's environment.

One job: read the variables that torchrun, MPI launchers and Slurm set for
each process they start, so that every rank's trace directory and `start`
event say which rank it holds. Read once, at start-up; nothing here touches
the GPU.

The first launcher family whose rank variable is set wins, in this order:

    torchrun / torch.distributed   RANK, LOCAL_RANK, WORLD_SIZE
    Open MPI                       OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_SIZE
    MVAPICH                        MV2_COMM_WORLD_RANK, MV2_COMM_WORLD_LOCAL_RANK, MV2_COMM_WORLD_SIZE
    MPICH / Intel MPI (PMI)        PMI_RANK, MPI_LOCALRANKID, PMI_SIZE
    PMIx                           PMIX_RANK, -, -
    Slurm (srun)                   SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS

torchrun comes first because a `torchrun` started by srun sees Slurm's
variables too, and RANK is the one that tells its workers apart. Slurm's
SLURM_PROCID counts only when the step has more than one task (a batch
script's single process has SLURM_PROCID=0 too).
"""

from __future__ import annotations

import os
from collections import namedtuple
from collections.abc import Mapping

# (launcher, rank variable, local rank variable, world size variable)
LAUNCHERS = (
    ("torchrun", "RANK", "LOCAL_RANK", "WORLD_SIZE"),
    ("openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("mvapich", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_LOCAL_RANK", "MV2_COMM_WORLD_SIZE"),
    ("pmi", "PMI_RANK", "MPI_LOCALRANKID", "PMI_SIZE"),
    ("pmix", "PMIX_RANK", None, None),
    ("slurm", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
)


class RankInfo(namedtuple("RankInfoFields", ("rank", "local_rank", "world_size", "launcher"))):
    """rank, local_rank and world_size (None where unknown); launcher: which family of variables said
    so. A named tuple: the launcher imports this module (neither attrs nor dataclasses there)."""

    __slots__ = ()

    def fields(self) -> dict:
        """The fields of the `start` event."""
        return {"rank": self.rank, "local_rank": self.local_rank, "world_size": self.world_size,
                "rank_from": self.launcher}


def _int(env: Mapping[str, str], name: str | None) -> int | None:
    if name is None:
        return None
    try:
        value = int(env.get(name, "").strip())
    except ValueError:
        return None
    return value if value >= 0 else None


def rank_from_env(env: Mapping[str, str] | None = None) -> RankInfo | None:
    """The rank this process holds, or None when no launcher said (a plain process)."""
    env = os.environ if env is None else env
    for launcher, rank_var, local_var, size_var in LAUNCHERS:
        rank = _int(env, rank_var)
        if rank is None:
            continue
        size = _int(env, size_var)
        if launcher == "slurm" and (size is None or size < 2):
            continue
        return RankInfo(rank, _int(env, local_var), size, launcher)
    return None


# NVLink multicast (NVLS) in NCCL, PyTorch's symmetric memory and NVSHMEM can put a shared
# host's GPUs out of service: the launcher turns it off for the programs it runs, unless the
# user set these variables, and says so in each process's `start` event (`env_defaults`).
COLLECTIVE_DEFAULTS = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
ENV_DEFAULTS = "NEUTRINO_ENV_DEFAULTS"  # the variables the launcher set, comma-separated


def set_collective_defaults(env: dict[str, str]) -> list[str]:
    """Set COLLECTIVE_DEFAULTS in `env` where the user did not; returns the names set."""
    added = [name for name in COLLECTIVE_DEFAULTS if name not in env]
    for name in added:
        env[name] = COLLECTIVE_DEFAULTS[name]
    env[ENV_DEFAULTS] = ",".join(added)
    return added


def start_fields(env: Mapping[str, str] | None = None) -> dict:
    """What the launcher's environment says about this process, for its `start` event."""
    env = os.environ if env is None else env
    info = rank_from_env(env)
    out = info.fields() if info is not None else {}
    if "CUDA_VISIBLE_DEVICES" in env:
        out["cuda_visible_devices"] = env["CUDA_VISIBLE_DEVICES"]
    added = [name for name in env.get(ENV_DEFAULTS, "").split(",") if name]
    if added:
        out["env_defaults"] = {name: env.get(name) for name in added}
    return out
