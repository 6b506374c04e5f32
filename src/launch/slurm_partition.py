"""What a SLURM partition can hold, asked of `sinfo` before a sweep records or submits anything.

sbatch accepts a job the partition can never start (more CPUs per node than any node has, more nodes
than it has): the job then pends for ever with reason `PartitionConfig`. And a partition that does
not exist was refused by sbatch only after the sweep's run was recorded, which a re-run could not
finish. Both are the user's configuration, refused here in one `config error:` line. Where `sinfo`
cannot answer (no controller reached, another SLURM's output), nothing is refused here: sbatch
says why in its own words (src/launch/slurm_launcher.py).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from src.core.paths import ConfigError

SINFO_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Node:
    name: str
    cpus: int
    memory_mb: int


@dataclass(frozen=True)
class Partition:
    name: str
    default: bool
    nodes: tuple[Node, ...]


def _number(text: str) -> int:
    found = re.match(r"\d+", text.strip())
    return int(found.group()) if found else 0


def partitions() -> dict[str, Partition] | None:
    """Every partition (hidden ones too) with its nodes, by name; None when sinfo cannot say."""
    try:
        done = subprocess.run(["sinfo", "--all", "--noheader", "--Node", "--format=%P|%N|%c|%m"],
                              capture_output=True, text=True, timeout=SINFO_TIMEOUT_S)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    found: dict[str, tuple[bool, dict[str, Node]]] = {}
    for line in done.stdout.splitlines():
        fields = line.split("|")
        if len(fields) != 4:
            return None  # not the format asked for: not ours to read
        label, node, cpus, memory = fields
        name = label.strip().rstrip("*")
        default, nodes = found.setdefault(name, (label.strip().endswith("*"), {}))
        nodes[node.strip()] = Node(node.strip(), _number(cpus), _number(memory))
    return {name: Partition(name, default, tuple(nodes.values())) for name, (default, nodes) in found.items()}


def _value(config: DictConfig, key: str) -> object:
    return OmegaConf.select(config, key, default=None)


def check_partition(config: DictConfig) -> None:
    """ConfigError when the sweep's SLURM partition does not exist, or no job of it could ever start
    there (too few nodes with enough CPUs and memory for one job's nodes x tasks x CPUs per task)."""
    known = partitions()
    if not known:
        return
    asked = _value(config, "hydra.launcher.partition")
    if asked is None:
        defaults = [p for p in known.values() if p.default]
        if not defaults:
            return  # sbatch names the missing partition
        partition = defaults[0]
        field = f"hydra.launcher.partition (unset: the default, {partition.name})"
    elif str(asked) not in known:
        raise ConfigError(
            f"hydra.launcher.partition={asked}: SLURM has no such partition (sinfo lists: {', '.join(sorted(known))}); "
            "nothing was recorded"
        )
    else:
        partition = known[str(asked)]
        field = f"hydra.launcher.partition={asked}"
    nodes = int(_value(config, "hydra.launcher.nodes") or 1)
    tasks = int(_value(config, "hydra.launcher.tasks_per_node") or 1)
    cpus_per_task = int(_value(config, "hydra.launcher.cpus_per_task") or 1)
    mem_gb = _value(config, "hydra.launcher.mem_gb")
    cpus = tasks * cpus_per_task
    memory_mb = int(float(mem_gb) * 1024) if mem_gb else 0
    fit = [n for n in partition.nodes if n.cpus >= cpus and n.memory_mb >= memory_mb]
    if len(fit) >= nodes:
        return
    biggest = max(partition.nodes, key=lambda n: (n.cpus, n.memory_mb))

    def named(key: str, cluster_key: str, value: object) -> str:  # the key the user set: cluster.* feeds the launcher's
        return f"{cluster_key}={value}" if _value(config, cluster_key) == value else f"{key}={value}"

    if biggest.cpus < cpus:
        devices = named("hydra.launcher.tasks_per_node", "cluster.devices", tasks)
        too_big = f"{devices} x hydra.launcher.cpus_per_task={cpus_per_task}"
        need = f"{cpus} CPUs on each of its {nodes} node(s)"
        fix = (f"set hydra.launcher.cpus_per_task={biggest.cpus // tasks} or fewer" if biggest.cpus >= tasks
               else f"set {devices.split('=')[0]}={biggest.cpus} or fewer, with hydra.launcher.cpus_per_task=1")  # fmt: skip
    elif not fit:
        too_big, need = f"hydra.launcher.mem_gb={mem_gb}", f"{memory_mb} MB on each of its {nodes} node(s)"
        fix = f"set hydra.launcher.mem_gb={biggest.memory_mb // 1024} or less (null: the partition's default)"
    else:  # enough of each node, too few nodes
        too_big, need = named("hydra.launcher.nodes", "cluster.num_nodes", nodes), f"{nodes} nodes"
        fix = f"set {too_big.split('=')[0]}={len(fit)} or fewer"
    raise ConfigError(
        f"{too_big}: a job needs {need}; {field} has {len(partition.nodes)} node(s), {len(fit)} of them big enough "
        f"(the largest: {biggest.cpus} CPUs, {biggest.memory_mb} MB): the job could never start (SLURM would keep it "
        f"pending); nothing was recorded: {fix}"
    )
