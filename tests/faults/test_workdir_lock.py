"""One run per workdir (`sphere_tf.training.workdir_lock`), on the backend of this test process.

Two runs of the runner's main started on one workdir at once: one trains, the other is refused on one line
naming the workdir and the first's pid and host, and the first ends bitwise as an uninterrupted run (the
refused one wrote nothing, so no checkpoint of the two interleaves). A run killed with `kill -9` while it holds
the lock leaves the lock file behind, and the same command resumes: the kernel released the flock with the
process. A process forked by the holder (a data loader's worker) does not keep the lock past the holder. Each
task (classification, adversarial, face) is refused while another process holds its workdir.
"""

import glob
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from sphere_tf import runners
from sphere_tf.configs.adversarial import fashion_mnist_cnn9
from sphere_tf.configs.face import fashion_mnist_open_set
from sphere_tf.training import workdir_lock
from tests.faults._children import REPO
from tests.faults._children import assert_same_run
from tests.faults._children import child_env
from tests.faults._children import data_dir  # noqa: F401  (a fixture)
from tests.faults._children import reference  # noqa: F401  (a fixture)
from tests.faults._children import run_config

# The runner's main (`sphere-tf run`), paused after global step `pause_at` until the file `go` exists: the run
# holds its lock and is mid-training while the test acts. It marks the pause with `<go>.paused-<pid>`.
PAUSED_MAIN = r"""
import os, runpy, sys, time
pause_at, go = int(sys.argv[1]), sys.argv[2]
from sphere_tf.training import checkpoint
original = checkpoint.StepCheckpoint.on_train_batch_end
def on_train_batch_end(self, batch, logs=None):
    original(self, batch, logs)
    if self.step == pause_at:
        open("%s.paused-%d" % (go, os.getpid()), "w").close()
        while not os.path.exists(go):
            time.sleep(0.05)
checkpoint.StepCheckpoint.on_train_batch_end = on_train_batch_end
sys.argv = ["sphere_tf_cli.run"] + sys.argv[3:]
runpy.run_module("sphere_tf_cli.run", run_name="__main__", alter_sys=True)
"""
TIMEOUT_S = 600


def main_arguments(tmp_path, data_dir, workdir):  # noqa: F811
    """`--config=<file> --workdir=<workdir>` for the runner's main, the config of the reference run."""
    path = tmp_path / "config.py"
    path.write_text(f"def get_config():\n    return {run_config(data_dir)!r}\n")
    return [f"--config={path}", f"--workdir={workdir}"]


def paused_main(pause_at, go, arguments):
    return subprocess.Popen([sys.executable, "-c", PAUSED_MAIN, str(pause_at), str(go), *arguments], cwd=REPO,
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, what):
    deadline = time.monotonic() + TIMEOUT_S
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_of_two_runs_started_on_one_workdir_the_second_is_refused_and_the_first_is_unaffected(
        data_dir, reference, tmp_path, tally):  # noqa: F811
    workdir, go = tmp_path / "run", tmp_path / "go"
    arguments = main_arguments(tmp_path, data_dir, workdir)
    runs = [paused_main(3, go, arguments) for _ in range(2)]
    try:
        # Whichever takes the lock first trains and pauses at step 3; the other must end, refused. Both paused
        # would mean both trained on the workdir.
        wait_for(lambda: any(run.poll() is not None for run in runs) or len(glob.glob(f"{go}.paused-*")) == 2,
                 "one of the two runs to be refused")
        refused = [run for run in runs if run.poll() is not None]
        assert len(refused) == 1, "both runs trained on one workdir"
        refused = refused[0]
        holder = runs[1] if refused is runs[0] else runs[0]
        stdout, stderr = refused.communicate()
        assert refused.returncode == 1, stderr[-3000:]
        assert stderr.strip().splitlines()[-1].startswith(
            f"Error: The workdir {workdir} is in use by another run: pid {holder.pid} on host "
            f"{socket.gethostname()}, started "), stderr[-3000:]
        assert "Resumed" not in stdout and "Epoch" not in stdout
        record = workdir_lock.holder(workdir)
        assert record["pid"] == holder.pid and f"--workdir={workdir}" in record["command"]
        go.touch()
        stdout, stderr = holder.communicate(timeout=TIMEOUT_S)
        assert holder.returncode == 0, stderr[-3000:]
    finally:
        for run in runs:
            if run.poll() is None:
                run.kill()
    assert "Resumed" not in stdout  # one run from step 0 to the end, as the reference
    assert_same_run(str(workdir), reference())  # bitwise: nothing of the refused run reached the checkpoints
    assert os.path.isfile(workdir / workdir_lock.LOCK_FILE) and workdir_lock.holder(workdir) is None
    tally("concurrent runs", "a second run started on a workdir in use", tried=1,
          lost="none: refused before writing, the first run unaffected")


@pytest.mark.slow  # in CI's fast subset, every kill test resumes past a lock its killed run held
def test_a_run_killed_while_it_holds_the_lock_resumes_with_the_same_command(data_dir, reference, tmp_path,
                                                                              tally):  # noqa: F811
    workdir, go = tmp_path / "run", tmp_path / "go"
    arguments = main_arguments(tmp_path, data_dir, workdir)
    run = paused_main(7, go, arguments)
    try:
        wait_for(lambda: glob.glob(f"{go}.paused-*") or run.poll() is not None, "the run to reach step 7")
        assert run.poll() is None, run.communicate()[1][-3000:]
        assert workdir_lock.holder(workdir)["pid"] == run.pid
        os.kill(run.pid, signal.SIGKILL)
        run.wait(timeout=TIMEOUT_S)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == -signal.SIGKILL
    # The lock file stays, still naming the killed process; the lock itself went with it.
    assert os.path.isfile(workdir / workdir_lock.LOCK_FILE) and workdir_lock.holder(workdir) is None
    process = subprocess.run([sys.executable, "-m", "sphere_tf_cli.run", *arguments], cwd=REPO, env=child_env(),
                             capture_output=True, text=True, timeout=TIMEOUT_S)
    assert process.returncode == 0, process.stderr[-3000:]
    assert "Resumed from step 6 of 12" in process.stdout, process.stdout[-2000:]
    assert_same_run(str(workdir), reference())
    tally("kill -9", "of the run holding the workdir lock", tried=1,
          lost="1 step recomputed (checkpoint every 2); the lock does not block the resume")


# Takes the lock (twice: a task inside another, as the face task runs the classification task, is a no-op), forks
# a worker that sleeps on, prints the worker's pid and sleeps until killed.
FORKING_HOLDER = r"""
import os, sys, time
from sphere_tf.training import workdir_lock
workdir_lock.acquire(sys.argv[1])
workdir_lock.acquire(sys.argv[1])
worker = os.fork()
if worker == 0:
    time.sleep(120)
    os._exit(0)
print(worker, flush=True)
time.sleep(120)
"""


def test_a_worker_forked_by_a_killed_holder_does_not_keep_the_lock(tmp_path, tally):
    workdir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", FORKING_HOLDER, str(workdir)], cwd=REPO, env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    worker = None
    try:
        line = holder.stdout.readline()
        assert line.strip().isdigit(), holder.communicate()[1][-3000:]
        worker = int(line)
        assert workdir_lock.holder(workdir)["pid"] == holder.pid
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=TIMEOUT_S)
        os.kill(worker, 0)  # the worker, inheritor of the holder's descriptors at the fork, lives on
        # ... and yet the workdir is free: the worker closed its copy of the lock's descriptor at the fork.
        assert workdir_lock.holder(workdir) is None
        with workdir_lock.hold(workdir) as path:
            assert workdir_lock.holder(workdir)["pid"] == os.getpid() and path == str(workdir / "run.lock")
        assert workdir_lock.holder(workdir) is None
    finally:
        if holder.poll() is None:
            holder.kill()
        if worker is not None:
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                pass
    tally("kill -9", "of the run holding the workdir lock, a worker it forked still alive", tried=1,
          lost="none: the worker does not hold the lock")


def test_every_task_is_refused_while_another_process_holds_the_workdir(data_dir, tmp_path, tally):  # noqa: F811
    # classification, adversarial and face each lock the workdir they write; each is refused here, after its own
    # checks and before it writes anything, with the holder named.
    workdir = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", FORKING_HOLDER, str(workdir)], cwd=REPO, env=child_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    adversarial = fashion_mnist_cnn9.get_config("quick").to_dict()
    adversarial["data"]["manual_dir"] = data_dir
    face = fashion_mnist_open_set.get_config("quick").to_dict()
    face["data"]["manual_dir"] = str(tmp_path / "no_identity_folder")  # refused before the data are read
    configs = {"classification": run_config(data_dir), "adversarial": adversarial, "face": face}
    try:
        worker = holder.stdout.readline()
        assert worker.strip().isdigit(), holder.communicate()[1][-3000:]
        for task, config in configs.items():
            with pytest.raises(workdir_lock.WorkdirLockedError, match=f"pid {holder.pid} on host "):
                runners.run(config, str(workdir))
            assert sorted(os.listdir(workdir)) == [workdir_lock.LOCK_FILE], task
    finally:
        holder.kill()
        holder.wait()
        if worker.strip().isdigit():
            os.kill(int(worker), signal.SIGKILL)
    tally("concurrent runs", "a run of each task (classification, adversarial, face) on a workdir in use",
          tried=len(configs), lost="none: refused before writing")
