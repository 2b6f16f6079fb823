"""`python -m keras_course_recipes multiworker NAME workers=N`: one run on N worker processes of this machine.

Each worker is `python -m keras_course_recipes run NAME execution.strategy=multi_worker`
with its own `TF_CONFIG` (the cluster of localhost ports, and its index), so
`tf.distribute.MultiWorkerMirroredStrategy` trains one model on all of them,
its collectives over gRPC (RING; NCCL is for GPUs). It is what running on N
hosts looks like, on one, and it prints the `TF_CONFIG` each host would need.

Worker 0, the chief, writes the run directory and prints to this terminal;
worker I writes its output to `workers/worker-I.log` there and keeps its own
training state in `workers/worker-I/`. If a worker fails, the others are
stopped; the same command with `run.resume=true` (or the same `run.dir`)
resumes every worker from the last epoch they all finished.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from keras_course_recipes import recipe_config, harness, rundir

from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import Command, count


def free_ports(count):
    """`count` TCP ports that nothing listens on now."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("localhost", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tf_config(cluster, index):
    return json.dumps({"cluster": {"worker": cluster}, "task": {"type": "worker", "index": index}})


def launch(name, workers, config_files=(), overrides=()):
    """Runs recipe `name` on `workers` local processes; returns the run directory.

    Raises:
        UserError: a worker failed (the others are stopped).
    """
    if workers < 2:
        raise UserError(f"workers= needs at least 2 worker processes, got {workers}; "
                        "for one, run the recipe without execution.strategy=multi_worker.")
    overrides = [*overrides, "execution.strategy=multi_worker"]
    config = recipe_config.resolve(name, config_files, overrides)
    # The run every worker joins: a new one, run.dir, or with run.resume the
    # latest unfinished one.
    run_dir, _ = harness.choose(config)
    (run_dir / "workers").mkdir(parents=True, exist_ok=True)
    # Every worker must resume from the same epoch: one killed while writing
    # its backup falls back to its previous state, and the others would not.
    restored = {directory: rundir.saved_epochs(directory / "backup") for directory in
                [run_dir, *(run_dir / "workers" / f"worker-{i}" for i in range(1, workers))]}
    if len(set(restored.values())) > 1:
        raise UserError("The workers' backups hold different epochs ("
                        + ", ".join(f"{d}: {n}" for d, n in restored.items())
                        + "), so they cannot resume together: start a new run.dir.")
    cluster = [f"localhost:{port}" for port in free_ports(workers)]
    command = [sys.executable, "-m", "keras_course_recipes", "run", name,
               *(f"--config={path}" for path in config_files), *overrides, f"run.dir={run_dir}"]
    host_args = [arg for arg in command[5:] if not arg.startswith("run.dir=")]
    print(f"{workers} workers on {', '.join(cluster)}; the chief writes {run_dir}, worker I "
          f"logs to {run_dir / 'workers'}/worker-I.log\n"
          f"On {workers} hosts instead, run on host I (0 is the chief), with a shared run.dir:\n"
          f"  TF_CONFIG='{tf_config([f'HOST{i}:PORT' for i in range(workers)], 'I')}' \\\n"
          f"    python -m keras_course_recipes run {name} {' '.join(host_args)} run.dir=SHARED/DIR\n",
          flush=True)

    processes, logs = [], []
    for index in range(workers):
        environment = {**os.environ, "TF_CONFIG": tf_config(cluster, index)}
        log = None if index == 0 else (run_dir / "workers" / f"worker-{index}.log").open("a")
        logs.append(log)
        processes.append(subprocess.Popen(command, env=environment, stdout=log,
                                          stderr=subprocess.STDOUT if log else None))
    try:
        failed = _wait(processes)
    except KeyboardInterrupt:
        _stop(processes)
        raise
    finally:
        for log in logs:
            if log:
                log.close()
    if failed is not None:
        index, code = failed
        tail = ("" if index == 0 else "\n" + _tail(run_dir / "workers" / f"worker-{index}.log"))
        raise UserError(f"worker {index} failed (exit {code}); the others were stopped. "
                        f"Run the same command with run.dir={run_dir} to resume every worker "
                        f"from their last finished epoch.{tail}")
    print(f"all {workers} workers finished; run directory: {run_dir}", flush=True)
    return run_dir


def _wait(processes):
    """Waits for every process; stops the rest when one fails. Returns
    `(index, exit code)` of the first failure, or None."""
    running = dict(enumerate(processes))
    while running:
        for index, process in list(running.items()):
            code = process.poll()
            if code is None:
                continue
            del running[index]
            if code != 0:
                _stop(running.values())
                return index, code
        time.sleep(0.5)
    return None


def _stop(processes, grace_s=10):
    for process in processes:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)  # lets a worker say it was interrupted
    deadline = time.monotonic() + grace_s
    for process in processes:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _tail(path, lines=20):
    text = Path(path).read_text(errors="replace").splitlines() if Path(path).exists() else []
    return "\n".join(f"  {line}" for line in text[-lines:])


COMMANDS = (
    Command("multiworker", "train on N local worker processes with MultiWorkerMirroredStrategy "
                           "(option workers=N)",
            launch, (count("workers", 2, minimum=2),),
            tensorflow_only="it runs tf.distribute's MultiWorkerMirroredStrategy"),
)
