"""Two torchrun agents on this host as two nodes (c10d rendezvous, one worker each), and what
survives what: the same `anyformer train ... --resume auto` job run uninterrupted, then with a
worker killed (SIGKILL) after the first checkpoint, during a checkpoint's write, and with every
process sent SIGTERM (a preempted job) and the same command launched again. Each interrupted job's
weights are compared bit for bit with the uninterrupted job's.

    python benchmarks/elastic_restart.py            # the mnist recipe, 40 steps (~8 min on 2 cores);
                                                    # writes results/<processor>/elastic.md
    python benchmarks/elastic_restart.py --quick --no-write   # a tiny ViT, 16 steps (~2 min)

The kill during a write uses benchmarks/elastic_worker.py as the worker: anyformer, with the
checkpoint of one step written half, flushed, then held for a few seconds, so that the kill lands
inside the write. Both "nodes" share this host's file system (the run directory, the data, the
speed plan's cache), as machines of a cluster share a network file system.
"""
from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("ANYFORMER_SHARED_DATA", ROOT.parent / "shared" / "data"))

FULL = ["train", "mnist", "--max-steps", "40", "--checkpoint-every", "8", "--amp", "none", "--resume", "auto"]
QUICK = ["train", "--model", "vit-mnist", "--set", "width=48", "--set", "depth=2", "--set", "heads=4",
         "--set", "mlp_hidden=96", "--set", "patch_size=7", "--max-steps", "16", "--checkpoint-every", "4",
         "--limit-train", "640", "--limit-eval", "200", "--batch-size", "32", "--amp", "none", "--threads", "1",
         "--resume", "auto"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                kids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return kids


def rank_of(pid: int) -> int | None:
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for item in env:
        if item.startswith(b"RANK="):
            return int(item[5:])
    return None


class Job:
    """Two agents (`--nnodes=2 --nproc-per-node=1`) meeting at one c10d endpoint on this host."""

    def __init__(self, work: Path, name: str, args: list[str], out: Path, env: dict[str, str],
                 worker: str | None = None) -> None:
        self.name, self.out, self.logs = name, out, [work / f"{name}.node{i}.log" for i in (0, 1)]
        port = free_port()
        target = [worker] if worker else ["-m", "anyformer"]
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=1",
               "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{port}", "--max-restarts=2",
               *target, *args, "--out", str(out), "--no-progress"]
        self.cmd = cmd
        self.start = time.monotonic()
        self.agents = []
        for log in self.logs:
            with open(log, "a") as f:
                self.agents.append(subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=f, stderr=subprocess.STDOUT))

    def worker(self, rank: int, timeout: float = 120) -> int:
        """The pid of the worker that holds `rank` now."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for agent in self.agents:
                for pid in children(agent.pid):
                    if rank_of(pid) == rank:
                        return pid
            time.sleep(0.05)
        raise TimeoutError(f"{self.name}: no worker of rank {rank}")

    def wait(self, timeout: float = 900) -> list[int]:
        codes = [a.wait(timeout=timeout) for a in self.agents]
        self.seconds = time.monotonic() - self.start
        return codes

    def log(self) -> str:
        return "\n".join(f"--- node log {i}\n{p.read_text()}" for i, p in enumerate(self.logs))


def wait_for(what: str, ready, timeout: float = 600, poll: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(poll)


def checkpoint(out: Path, step: int) -> Path:
    return out / "checkpoints" / f"step-{step:09d}.pt"


def listing(out: Path) -> str:
    folder = out / "checkpoints"
    names = sorted(os.listdir(folder)) if folder.is_dir() else []
    return ", ".join(f"{n} ({(folder / n).stat().st_size:,} B)" for n in names if (folder / n).exists()) or "-"


def weights(out: Path) -> dict:
    from safetensors.torch import load_file
    return load_file(out / "model.safetensors")


def same_weights(a: Path, b: Path) -> tuple[bool, int]:
    import torch
    wa, wb = weights(a), weights(b)
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), len(wa)


def metrics(out: Path) -> list[dict]:
    timing = ("time", "images_per_s", "flops_per_s")
    return [{k: v for k, v in json.loads(line).items() if k not in timing}
            for line in (out / "metrics.jsonl").read_text().splitlines()]


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def lines(log: str, pattern: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if re.search(pattern, line)]


def scenario_kill(work: Path, env: dict, args: list[str], name: str, rank: int, step: int, during_write: bool,
                  write_hold_s: float) -> dict:
    out = work / name
    flag = work / f"{name}.writing"
    worker = None
    job_env = dict(env)
    if during_write:
        job_env["ANYFORMER_SLOW_WRITE"] = f"{step}:{write_hold_s}:{flag}"
        worker = str(ROOT / "benchmarks" / "elastic_worker.py")
    job = Job(work, name, args, out, job_env, worker)
    if during_write:
        wait_for(f"the step-{step} checkpoint's write", flag.exists)
        on_disk = listing(out)
    else:
        wait_for(f"the step-{step} checkpoint", checkpoint(out, step).exists)
    pid = job.worker(rank)
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic() - job.start
    if not during_write:
        on_disk = listing(out)
    codes = job.wait()
    log = job.log()
    return {"name": name, "codes": codes, "killed": f"rank {rank} (pid {pid}) at {killed:.1f} s",
            "on_disk_at_kill": on_disk, "log": log, "out": out, "seconds": job.seconds, "cmd": job.cmd}


def scenario_sigterm(work: Path, env: dict, args: list[str], step: int) -> dict:
    """Every process of the job (both agents and both workers) is sent SIGTERM once the step-`step`
    checkpoint exists, as a scheduler preempting the job would; then the same command again."""
    name = "sigterm-then-relaunch"
    out = work / name
    job = Job(work, name, args, out, env)
    wait_for(f"the step-{step} checkpoint", checkpoint(out, step).exists)
    workers = [job.worker(0), job.worker(1)]
    for pid in [a.pid for a in job.agents] + workers:
        os.kill(pid, signal.SIGTERM)
    sent = time.monotonic() - job.start
    first_codes = job.wait()
    first_log = job.log()
    on_disk = listing(out)
    again = Job(work, name + "-relaunch", args, out, env)
    codes = again.wait()
    return {"name": name, "first_codes": first_codes, "codes": codes, "sent": f"{sent:.1f} s",
            "on_disk_after_stop": on_disk, "first_log": first_log, "log": again.log(), "out": out,
            "seconds": job.seconds + again.seconds, "cmd": again.cmd}


def cpu_facts() -> dict[str, str]:
    text = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
    fact = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines() if ":" in line)}
    return {"cpu": fact.get("Model name", platform.processor()), "family": fact.get("CPU family", "?"),
            "model": fact.get("Model", "?"), "cores": str(os.cpu_count())}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="a tiny ViT and 16 steps instead of the mnist recipe's 40")
    p.add_argument("--no-write", action="store_true", help="print only; do not write results/<processor>/elastic.md")
    p.add_argument("--keep", action="store_true", help="keep the run directories and logs (printed)")
    a = p.parse_args()
    args = QUICK if a.quick else FULL
    every = int(args[args.index("--checkpoint-every") + 1])
    work = Path(tempfile.mkdtemp(prefix="anyformer-elastic-"))
    env = {**os.environ, "ANYFORMER_DATA": str(DATA), "ANYFORMER_CACHE": str(work / "cache"), "PYTHONUNBUFFERED": "1"}
    env.pop("ANYFORMER_DEBUG", None)
    facts = {"date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"), **cpu_facts(),
             "load before": " ".join(f"{x:.2f}" for x in os.getloadavg())}
    import torch
    facts["torch"] = torch.__version__
    print(f"{facts}\nwork folder: {work}", flush=True)

    ref = Job(work, "uninterrupted", args, work / "uninterrupted", env)
    ref_codes = ref.wait()
    print(f"uninterrupted: agents exit {ref_codes} in {ref.seconds:.0f} s", flush=True)
    if ref_codes != [0, 0]:
        print(ref.log())
        return 1
    results = [
        scenario_kill(work, env, args, "sigkill-node1-after-first-checkpoint", 1, every, False, 0),
        scenario_kill(work, env, args, "sigkill-node1-during-a-write", 1, 2 * every, True, 4.0),
        scenario_kill(work, env, args, "sigkill-writer-during-a-write", 0, 2 * every, True, 4.0),
        scenario_sigterm(work, env, args, 2 * every),
    ]
    rows, details = [], []
    ok = True
    for r in results:
        same, n = same_weights(ref.out, r["out"])
        same_metrics = metrics(work / "uninterrupted") == metrics(r["out"])
        summary = json.loads((r["out"] / "summary.json").read_text()) if (r["out"] / "summary.json").exists() else {}
        good = same and r["codes"] == [0, 0]
        ok &= good
        resumed = lines(r["log"], r"^resumed from ")
        restarts = sorted(set(lines(r["log"], r"^restart \d+")))
        rows.append(f"| {r['name']} | {r['codes']} | {len(restarts) or '-'} | "
                    f"{'; '.join(x.split('/checkpoints/')[-1] for x in resumed) or '-'} | "
                    f"{'**bit-identical**' if same else 'DIFFERENT'} ({n} tensors) | "
                    f"{'same' if same_metrics else 'different'} | {summary.get('test_accuracy', '-')} | "
                    f"{r['seconds']:.0f} s |")
        d = [f"### {r['name']}", "", f"- agents' exit codes: {r['codes']}"]
        if "killed" in r:
            d.append(f"- SIGKILL: {r['killed']}; checkpoints on disk at the kill: {r['on_disk_at_kill']}")
        else:
            d += [f"- SIGTERM to both agents and both workers at {r['sent']}; agents exited {r['first_codes']}; "
                  f"checkpoints on disk after the stop: {r['on_disk_after_stop']}",
                  *[f"- first launch: `{x}`" for x in lines(r["first_log"], r"stopped by signal|^rendezvous")]]
        d += [f"- `{x}`" for x in lines(r["log"], r"^(rendezvous|restart|resumed from|--resume)")]
        d += [f"- model.safetensors sha256 {sha(r['out'] / 'model.safetensors')} "
              f"(uninterrupted: {sha(work / 'uninterrupted' / 'model.safetensors')}); "
              f"checkpoints at the end: {listing(r['out'])}", ""]
        details.append("\n".join(d))
    ref_summary = json.loads((work / "uninterrupted" / "summary.json").read_text())
    facts["load after"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    command = " ".join(["torchrun --nnodes=2 --nproc-per-node=1 --rdzv-backend=c10d --rdzv-endpoint=127.0.0.1:PORT "
                        "--max-restarts=2 -m anyformer", *args, "--out DIR --no-progress"])
    report = "\n".join([
        f"# Elastic restarts: two torchrun agents as two nodes on one host ({facts['date'][:10]})", "",
        f"Machine: {facts['cpu']} (family {facts['family']}, model {facts['model']}), {facts['cores']} cores, "
        f"torch {facts['torch']}; both agents on this host, gloo. Load average (1, 5, 15 min) before "
        f"{facts['load before']}, after {facts['load after']}: the wall times are not speed figures.", "",
        f"Command, run by each of the two agents: `{command}`", "",
        f"`python benchmarks/elastic_restart.py{' --quick' if a.quick else ''}` "
        f"(uninterrupted job: {ref.seconds:.0f} s, test accuracy {ref_summary.get('test_accuracy')}).", "",
        "| job | agents' exit codes | restarts | resumed from | weights vs uninterrupted | metrics.jsonl | "
        "test accuracy | wall |", "|---|---|---|---|---|---|---|---|", *rows, "", *details])
    print(report, flush=True)
    if not a.no_write:
        sys.path.insert(0, str(ROOT / "benchmarks"))
        from bench_common import RESULTS, processor_folder
        path = RESULTS / processor_folder() / ("elastic-quick.md" if a.quick else "elastic.md")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(report + "\n")
        print(f"written: {path}")
    if a.keep or not ok:
        print(f"run directories and logs kept in {work}")
    else:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
