"""A real SLURM cluster on this one machine: `munged`, `slurmctld` and two `slurmd` "nodes".

    python -m src.launch.local_slurm --dir /tmp/slurm        # prints the SLURM_CONF to export; Ctrl+C stops it

The tests run every SLURM path against it (tests/test_slurm.py), and a user can try `cluster=slurm`
on a laptop the same way. Debian's packages (`apt-get install slurm-wlm munge`) are enough: no
systemd, no root-owned paths. Everything lives in one folder: its own munge key and socket, the
config, the controller's state, each node's spool, pid and log (`%n`: one slurmd per node name,
`slurmd -N node1`), on free ports of 127.0.0.1. The nodes share this machine's cores (each node
reports them all; jobs may share them). Their names do not resolve, so DDP across them needs
`MASTER_ADDR=127.0.0.1` in the submitting environment (sbatch passes it on). No accounting
database: submitit's `sacct` calls fail and it falls back to the result files; the SLURM launcher
tells a job that ended without a result from `squeue` (src/launch/slurm_launcher.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from src.core import cli
from src.core.paths import unwritable_reason
from src.core.ports import free_port
from src.core.process_group import alive, stat_fields, wait_until
from src.core.terminal import say

NODES = ("node1", "node2")
PARTITION = "cpu"
# The sweep the banner prints, as this cluster can run it: conf/cluster/slurm.yaml's defaults are a GPU
# cluster's (8 CPUs per task), which its nodes (this machine's cores each) could never start.
SWEEP_OVERRIDES = (
    "cluster=slurm", "cluster.accelerator=cpu", "cluster.devices=1", f"cluster.num_nodes={len(NODES)}",
    f"hydra.launcher.partition={PARTITION}", "hydra.launcher.cpus_per_task=1",
)  # fmt: skip
READY_S = 30.0  # how long the daemons get to come up
# A stop ends within STOP_S (10 s): the jobs get JOBS_GRACE_S to checkpoint on scancel's SIGTERM, the
# daemons DAEMONS_GRACE_S to exit on theirs, then whatever of the folder is left is killed.
JOBS_GRACE_S, DAEMONS_GRACE_S = 5.0, 1.5
CLIENT_TIMEOUT_S = 5.0  # scontrol/squeue/scancel of a stop: a controller that does not answer is being stopped anyway
# The processes a cluster of this module runs: found by the SLURM_CONF they inherit from it.
DAEMONS = frozenset({"munged", "slurmctld", "slurmscriptd", "slurmd", "slurmstepd"})
WATCH_EVERY_S = 1.0


class SlurmSetupError(RuntimeError):
    """A SLURM daemon is missing or did not start: the message says which and where its log is."""


def _tool(name: str) -> str:
    found = shutil.which(name) or next((p for p in (f"/usr/sbin/{name}", f"/usr/bin/{name}") if os.path.exists(p)), None)
    if found is None:
        raise SlurmSetupError(f"{name} not found: install Debian's slurm-wlm and munge (apt-get install slurm-wlm munge)")
    return found


def slurm_conf(folder: Path, ports: dict[str, int], cpus: int) -> str:
    nodes = "\n".join(
        f"NodeName={n} NodeHostname={socket.gethostname()} NodeAddr=127.0.0.1 Port={ports[n]} CPUs={cpus} "
        "RealMemory=4000 State=UNKNOWN"
        for n in NODES
    )
    return f"""\
ClusterName=normsweep
SlurmctldHost={socket.gethostname()}(127.0.0.1)
SlurmctldPort={ports["slurmctld"]}
SlurmdPort={ports[NODES[0]]}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={folder}/munge/munge.socket
SlurmUser={os.environ.get("USER", "root") if os.geteuid() else "root"}
SlurmdUser=root
StateSaveLocation={folder}/state
SlurmdSpoolDir={folder}/spool/%n
SlurmctldPidFile={folder}/slurmctld.pid
SlurmdPidFile={folder}/slurmd.%n.pid
SlurmctldLogFile={folder}/log/slurmctld.log
SlurmdLogFile={folder}/log/slurmd.%n.log
PlugStackConfig={folder}/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
ReturnToService=2
MailProg=/bin/true
KillWait=10
MinJobAge=600
SlurmdTimeout=60
# No backup controller here: a sweep waits this long (+ MessageTimeout) for a silent one, not 120 s.
SlurmctldTimeout=5
InactiveLimit=0
{nodes}
PartitionName={PARTITION} Nodes={",".join(NODES)} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
"""


def _environ_has(pid: str, entry: bytes) -> bool:
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or not ours to read
        return False


def folder_processes(conf: Path) -> list[int]:
    """Every process of the cluster configured by `conf`: its daemons (each started with SLURM_CONF in
    its environment), the step daemons they fork (`slurmstepd`, which outlive a stopped slurmd: PPID 1)
    and the jobs those run (each in its step daemon's session)."""
    entry = f"SLURM_CONF={conf}".encode()
    daemons, sessions, fields = [], set(), {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields[pid] = stat_fields(pid)
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm in DAEMONS and _environ_has(pid, entry):
            daemons.append(int(pid))
            if comm == "slurmstepd":
                sessions.add(fields[pid][3])
    jobs = [int(pid) for pid, f in fields.items() if f[3] in sessions and int(pid) not in daemons]
    return [p for p in (*daemons, *jobs) if p != os.getpid()]


@dataclass
class LocalSlurm:
    folder: Path
    conf: Path
    pids: list[int] = field(default_factory=list)
    names: list[str] = field(default_factory=list)  # each daemon's name, as `pids`: what a watch names

    @property
    def env(self) -> dict[str, str]:
        """What a client (sbatch, squeue, a sweep) needs in its environment to use this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf), "MASTER_ADDR": "127.0.0.1"}

    @classmethod
    def start(cls, folder: Path) -> LocalSlurm:
        folder = folder.resolve()
        for sub in ("munge", "state", "spool", "log"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        (folder / "munge").chmod(0o700)
        key = folder / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        (folder / "plugstack.conf").touch()
        ports = {"slurmctld": free_port(), **{n: free_port() for n in NODES}}
        conf = folder / "slurm.conf"
        conf.write_text(slurm_conf(folder, ports, os.cpu_count() or 1))
        cluster = cls(folder, conf)
        env = cluster.env
        m = folder / "munge"
        try:
            cluster._daemon([_tool("munged"), "--force", f"--key-file={key}", f"--socket={m}/munge.socket",
                             f"--pid-file={m}/munged.pid", f"--log-file={m}/munged.log", f"--seed-file={m}/seed"],
                            m / "munged.pid", env)  # fmt: skip
            cluster._daemon([_tool("slurmctld"), "-c", "-f", str(conf)], folder / "slurmctld.pid", env)
            for node in NODES:
                cluster._daemon([_tool("slurmd"), "-N", node, "-f", str(conf)], folder / f"slurmd.{node}.pid", env)
            cluster._wait_idle()
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _daemon(self, command: list[str], pid_file: Path, env: dict[str, str]) -> None:
        """Start a daemon that forks itself; its pid is read from its pid file."""
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            raise SlurmSetupError(f"{Path(command[0]).name} did not start: {(done.stderr or done.stdout).strip()}")
        deadline = time.monotonic() + READY_S
        while not (pid_file.is_file() and pid_file.read_text().strip()):
            if time.monotonic() > deadline:
                raise SlurmSetupError(f"{Path(command[0]).name} wrote no pid file ({pid_file}); see {self.folder}/log")
            time.sleep(0.1)
        self.pids.append(int(pid_file.read_text().split()[0]))
        self.names.append(Path(command[0]).name + (f" {command[2]}" if command[1] == "-N" else ""))

    def _wait_idle(self) -> None:
        deadline = time.monotonic() + READY_S
        while True:
            out = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True, text=True)
            states = dict(line.split() for line in out.stdout.splitlines() if line.strip())
            if out.returncode == 0 and all(states.get(n) == "idle" for n in NODES):
                return
            if time.monotonic() > deadline:
                raise SlurmSetupError(f"the nodes did not come up ({out.stdout.strip() or out.stderr.strip()}); see {self.folder}/log")
            time.sleep(0.3)

    def restart(self) -> None:
        """Start it again in its folder after `stop` (new ports, the same SLURM_CONF path, its state
        cleared): two clusters on one machine share node names and launch each other's jobs."""
        again = LocalSlurm.start(self.folder)
        self.conf, self.pids[:], self.names[:] = again.conf, again.pids, again.names

    def run(self, *command: str) -> subprocess.CompletedProcess[str]:
        """A SLURM client command (squeue, scontrol, scancel, ...) against this cluster."""
        return subprocess.run(list(command), env=self.env, capture_output=True, text=True, timeout=60)

    def dead(self) -> str | None:
        """The first of its daemons no longer running, as `slurmd node1` (pid 123); None while all run."""
        return next((f"{name} (pid {pid})" for name, pid in zip(self.names, self.pids, strict=True) if not alive(pid)), None)

    def stop(self) -> None:
        """Cancel every job without requeueing it, then stop the daemons, and kill whatever of the
        cluster is left: within about 10 s, nothing of its folder running.

        Requeue=0 first: a job that checkpoints on scancel's SIGTERM asks SLURM to requeue it, and a
        cluster being stopped (and started again clean) would never run it again; a requeue said to the
        sweep then was a promise broken (`scontrol requeue` is refused instead: "presently disabled").
        The step daemons do not stop with slurmd (they are reparented to init), so they are found by
        the SLURM_CONF they inherited and stopped with their jobs."""
        if self.pids:
            jobs = self._client("squeue", "-h", "-o", "%i").split()
            if jobs:
                self._client("scontrol", "update", f"jobid={','.join(jobs)}", "Requeue=0")
                self._client("scancel", *jobs)
            wait_until(lambda: not [p for p in folder_processes(self.conf) if _comm(p) == "slurmstepd"], JOBS_GRACE_S)
        for pid in self.pids:
            _signal(pid, signal.SIGTERM)
        wait_until(lambda: not any(alive(p) for p in self.pids), DAEMONS_GRACE_S)
        for pid in folder_processes(self.conf):
            _signal(pid, signal.SIGKILL)
        wait_until(lambda: not folder_processes(self.conf), 1.0)
        self.pids.clear()
        self.names.clear()

    def _client(self, *command: str) -> str:
        """A SLURM client command's output ('' when it fails or the controller does not answer)."""
        try:
            return subprocess.run(list(command), env=self.env, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S).stdout
        except (OSError, subprocess.TimeoutExpired):
            return ""


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def main(argv: list[str] | None = None) -> None:
    parser = cli.parser(
        "python -m src.launch.local_slurm",
        "A real SLURM cluster (munged, slurmctld, two slurmd nodes) on this machine, for trying cluster=slurm;\n"
        "it runs until Ctrl+C or SIGTERM stops it (exit 0), or one of its daemons dies (one line naming it, exit 1).",
        overrides=None,
    )
    parser.add_argument("--dir", type=Path, default=Path(".local_slurm"), help="where its config, state and logs live")
    args = parser.parse_args(argv)
    problem = unwritable_reason(args.dir)
    if problem:
        parser.error(f"--dir {args.dir}: {problem}")
    try:
        cluster = LocalSlurm.start(args.dir)
    except SlurmSetupError as err:
        raise SystemExit(f"error: {err}") from None
    say(f"[normsweep] SLURM up: nodes {', '.join(NODES)} in partition {PARTITION}; in another shell:\n"
          f"  export SLURM_CONF={cluster.conf} MASTER_ADDR=127.0.0.1\n"
          f"  python -m src.train -m {' '.join(SWEEP_OVERRIDES[:4])} \\\n"
          f"    {' '.join(SWEEP_OVERRIDES[4:])} \\\n"
          "    logger.tracking_uri=http://127.0.0.1:5050   # a team server (make server)\n"
          "Ctrl+C stops it")  # fmt: skip
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    died = None
    try:
        while died is None:
            time.sleep(WATCH_EVERY_S)
            died = cluster.dead()
        say(f"error: {died} stopped: the local SLURM cannot run jobs without it (its log: {cluster.folder / 'log'}, "
            f"munged's: {cluster.folder / 'munge'}); stopping the others")  # fmt: skip
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()
    say(f"[normsweep] SLURM stopped: its jobs cancelled without requeueing, nothing of {cluster.folder} left running")
    if died is not None:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
