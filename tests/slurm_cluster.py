"""A one-node SLURM cluster with accounting, inside a temporary directory, for the tests marked ``slurm``.

    python tests/slurm_cluster.py      # start one, print how to use it, stop it on Enter

What it runs (Debian 12's packages, SLURM 22.05; installed with apt-get where missing and where we are root):
munged with its own key and socket; a MariaDB server with its data directory, socket and port in the temporary
directory; slurmdbd on it (so ``sacct`` answers); slurmctld and one slurmd (ProctrackType=proctrack/linuxproc,
TaskPlugin=task/none: no cgroups needed; select/cons_tres; one partition). Every daemon's state, socket, key, log and
pid file is under the temporary directory, and :meth:`Cluster.stop` stops exactly the processes it started.
Clients find the cluster through ``SLURM_CONF`` (:attr:`Cluster.env`).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "slurmdbd", "mariadb-server")
BINARIES = ("slurmctld", "slurmd", "slurmdbd", "munged", "mariadbd", "mariadb-install-db", "sbatch", "sacct",
            "sacctmgr", "squeue", "scontrol", "scancel")
SBIN = ("/usr/sbin", "/usr/bin", "/sbin", "/bin")
NODE = "leaknode"
PARTITION = "debug"


class Unavailable(RuntimeError):
    """SLURM cannot be installed or started here; the message says why."""


def _which(name: str) -> str | None:
    return shutil.which(name) or next((f"{d}/{name}" for d in SBIN if os.access(f"{d}/{name}", os.X_OK)), None)


def install() -> float:
    """apt-get install the packages whose programs are missing (root only); returns the seconds it took."""
    if all(_which(b) for b in BINARIES):
        return 0.0
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise Unavailable("SLURM is not installed and cannot be installed here (needs root and apt-get): "
                          f"apt-get install {' '.join(PACKAGES)}")
    start = time.time()
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"],
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *PACKAGES]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise Unavailable(f"`{' '.join(cmd)}` failed: {(proc.stderr or proc.stdout).strip()[-500:]}")
    missing = [b for b in BINARIES if not _which(b)]
    if missing:
        raise Unavailable(f"installed {' '.join(PACKAGES)}, yet {', '.join(missing)} are missing")
    return time.time() - start


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait(what: str, check, timeout: float, log: Path | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if check():
            return
        time.sleep(0.25)
    tail = log.read_text()[-1500:] if log is not None and log.exists() else ""
    raise Unavailable(f"{what} did not come up within {timeout:.0f}s" + (f"; its log ends:\n{tail}" if tail else ""))


@dataclass
class Cluster:
    root: Path
    cpus: int
    env: dict = field(default_factory=dict)
    procs: list = field(default_factory=list)  # (name, Popen) of every daemon this cluster started
    start_seconds: float = 0.0

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def run(self, *cmd: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess:
        proc = subprocess.run([_which(cmd[0]) or cmd[0], *cmd[1:]], capture_output=True, text=True,
                              env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"`{' '.join(cmd)}` failed ({proc.returncode}): {proc.stderr.strip()[-800:]}")
        return proc

    def _start(self, name: str, cmd: list[str], log: str) -> subprocess.Popen:
        out = open(self.root / log, "ab")
        proc = subprocess.Popen([_which(cmd[0]) or cmd[0], *cmd[1:]], stdout=out, stderr=subprocess.STDOUT,
                                env=self.env, start_new_session=True, cwd=self.root)
        out.close()
        self.procs.append((name, proc))
        return proc

    def _alive(self, name: str) -> bool:
        return all(p.poll() is None for n, p in self.procs if n == name)

    def start(self) -> "Cluster":
        start = time.time()
        r = self.root
        host = socket.gethostname().split(".")[0]
        ports = {k: _free_port() for k in ("ctld", "slurmd", "dbd", "db")}
        mem = int(int(next(line.split()[1] for line in open("/proc/meminfo") if line.startswith("MemTotal"))) / 1024
                  * 0.8)
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        for k in [k for k in self.env if k.startswith(("SLURM_", "SBATCH_", "SRUN_", "SALLOC_")) and k != "SLURM_CONF"]:
            del self.env[k]  # a test run inside a SLURM job must not talk to the outer cluster
        # munge: its own key, socket, pid, log and seed
        key = r / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        sock = r / "munge.sock"
        self._start("munged", ["munged", "-F", "-f", f"--key-file={key}", f"--socket={sock}",
                               f"--pid-file={r / 'munged.pid'}", f"--log-file={r / 'munged.log'}",
                               f"--seed-file={r / 'munged.seed'}"], "munged.out")
        _wait("munged", lambda: sock.exists() or not self._alive("munged"), 20, r / "munged.out")
        if not self._alive("munged"):
            raise Unavailable(f"munged exited: {(r / 'munged.out').read_text()[-800:]}")
        # MariaDB for slurmdbd: data, socket and port here; no grant tables (only this test talks to it)
        db = r / "db"
        proc = subprocess.run([_which("mariadb-install-db"), "--no-defaults", f"--datadir={db}", "--user=root",
                               "--auth-root-authentication-method=normal", "--skip-test-db"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise Unavailable(f"mariadb-install-db failed: {(proc.stderr or proc.stdout)[-800:]}")
        self._start("mariadbd", ["mariadbd", "--no-defaults", f"--datadir={db}", f"--socket={r / 'db.sock'}",
                                 f"--port={ports['db']}", "--bind-address=127.0.0.1", "--user=root",
                                 f"--pid-file={r / 'db.pid'}", "--skip-grant-tables", "--innodb-buffer-pool-size=32M",
                                 "--skip-log-bin"], "mariadbd.out")
        _wait("mariadbd", lambda: (r / "db.sock").exists() or not self._alive("mariadbd"), 60, r / "mariadbd.out")
        (r / "slurmdbd.conf").write_text("\n".join([
            "AuthType=auth/munge", f"AuthInfo=socket={sock}", f"DbdHost={host}", "DbdAddr=127.0.0.1",
            f"DbdPort={ports['dbd']}", "SlurmUser=root", f"LogFile={r / 'slurmdbd.log'}",
            f"PidFile={r / 'slurmdbd.pid'}", "StorageType=accounting_storage/mysql", "StorageHost=127.0.0.1",
            f"StoragePort={ports['db']}", "StorageUser=root", "StorageLoc=slurm_acct_db", ""]))
        (r / "slurmdbd.conf").chmod(0o600)
        (r / "state").mkdir()
        (r / "spool").mkdir()
        self.conf.write_text("\n".join([
            "ClusterName=leaktest", f"SlurmctldHost={host}(127.0.0.1)", "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={ports['ctld']}", f"SlurmdPort={ports['slurmd']}",
            # cred_expire: also how long a requeued job waits before it may start again (default 120 s)
            "AuthType=auth/munge", f"AuthInfo=socket={sock},cred_expire=10", "CredType=cred/munge",
            f"StateSaveLocation={r / 'state'}", f"SlurmdSpoolDir={r / 'spool'}",
            f"SlurmctldPidFile={r / 'slurmctld.pid'}", f"SlurmdPidFile={r / 'slurmd.pid'}",
            f"SlurmctldLogFile={r / 'slurmctld.log'}", f"SlurmdLogFile={r / 'slurmd.log'}",
            f"PlugStackConfig={r / 'plugstack.conf'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU", "MpiDefault=none", "ReturnToService=2", "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2", "JobAcctGatherType=jobacct_gather/none",
            "JobCompType=jobcomp/none",
            "AccountingStorageType=accounting_storage/slurmdbd", "AccountingStorageHost=127.0.0.1",
            f"AccountingStoragePort={ports['dbd']}", f"AccountingStoragePass={sock}",  # munge's socket, for slurmdbd
            "KillWait=2", "MinJobAge=600", "InactiveLimit=0", "SlurmdTimeout=60",
            f"NodeName={NODE} NodeAddr=127.0.0.1 NodeHostname={host} CPUs={self.cpus} RealMemory={mem} State=UNKNOWN",
            f"PartitionName={PARTITION} Nodes={NODE} Default=YES MaxTime=INFINITE State=UP", ""]))
        (r / "plugstack.conf").write_text("")
        self._start("slurmdbd", ["slurmdbd", "-D"], "slurmdbd.out")

        def dbd_up() -> bool:
            if not self._alive("slurmdbd"):
                raise Unavailable(f"slurmdbd exited: {(r / 'slurmdbd.log').read_text()[-800:] if (r / 'slurmdbd.log').exists() else ''}"
                                  f"{(r / 'slurmdbd.out').read_text()[-800:]}")
            p = self.run("sacctmgr", "-i", "add", "cluster", "leaktest", check=False)
            return p.returncode == 0

        _wait("slurmdbd", dbd_up, 60, r / "slurmdbd.log")
        self._start("slurmctld", ["slurmctld", "-D", "-i"], "slurmctld.out")
        self._start("slurmd", ["slurmd", "-D", "-N", NODE], "slurmd.out")

        def idle() -> bool:
            for name in ("slurmctld", "slurmd"):
                if not self._alive(name):
                    log = r / f"{name}.log"
                    raise Unavailable(f"{name} exited: {log.read_text()[-800:] if log.exists() else ''}"
                                      f"{(r / f'{name}.out').read_text()[-800:]}")
            out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.strip()
            return out.startswith("idle")

        _wait("the node", idle, 60, r / "slurmctld.log")
        self.start_seconds = time.time() - start
        return self

    def stop(self) -> None:
        """Cancel the cluster's jobs (their processes are slurmd's), then stop the daemons this cluster started
        (SIGTERM, then SIGKILL after 10 s), the last started first."""
        if self._alive("slurmctld") and any(n == "slurmctld" for n, _ in self.procs):
            try:
                self.run("scancel", "--user=root", check=False, timeout=20)
                deadline = time.time() + 20
                while time.time() < deadline and self.run("squeue", "-h", check=False, timeout=20).stdout.strip():
                    time.sleep(0.5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        for name, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self.procs.clear()

    # -- what tests ask ------------------------------------------------------------------------------------
    def sacct(self, job_ids: list[str]) -> dict[str, str]:
        """job id -> its state in the accounting (``sacct -X``: the allocation, not its steps)."""
        out = self.run("sacct", "-n", "-P", "-X", "-j", ",".join(job_ids), "-o", "JobID,State").stdout
        return {line.split("|")[0]: line.split("|")[1].split()[0] for line in out.splitlines() if "|" in line}

    def settled(self, job_ids: list[str], timeout: float = 60) -> dict[str, str]:
        """:meth:`sacct` once every job has ended there (a job's result file can come before SLURM sees its end)."""
        deadline = time.time() + timeout
        while True:
            states = self.sacct(job_ids)
            ended = len(states) == len(set(job_ids)) and not set(states.values()) & {
                "PENDING", "RUNNING", "COMPLETING", "REQUEUED", "CONFIGURING", "SUSPENDED"}
            if ended or time.time() > deadline:
                return states
            time.sleep(0.5)

    def names(self) -> dict[str, str]:
        """job id -> name of every job in the queue."""
        out = self.run("squeue", "-h", "-o", "%i|%j").stdout
        return {line.split("|")[0]: line.split("|")[1] for line in out.splitlines() if "|" in line}

    def squeue(self) -> dict[str, str]:
        out = self.run("squeue", "-h", "-o", "%i|%T|%j").stdout
        return {line.split("|")[0]: line.split("|")[1] for line in out.splitlines() if "|" in line}


def start_cluster(root: Path | None = None, cpus: int | None = None) -> Cluster:
    """Install (where missing) and start a cluster; raises :class:`Unavailable` where it cannot be."""
    install()
    root = Path(root or tempfile.mkdtemp(prefix="slurm-", dir="/tmp"))  # short: socket paths are limited
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)  # munged refuses a socket directory others may write to
    cluster = Cluster(root, cpus or os.cpu_count() or 1)
    try:
        return cluster.start()
    except BaseException:
        cluster.stop()
        raise


if __name__ == "__main__":
    t = time.time()
    took = install()
    c = start_cluster()
    print(f"installed in {took:.1f}s, started in {c.start_seconds:.1f}s; export SLURM_CONF={c.conf}")
    try:
        input("Enter stops it: ")
    except EOFError:
        pass
    finally:
        c.stop()
