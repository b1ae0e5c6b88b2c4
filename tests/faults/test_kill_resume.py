"""kill -9 at random points of a runner run, then the same command again: it ends bitwise where an uninterrupted
run ends, on the backend of this test process (TensorFlow, JAX, PyTorch: one file, every backend).

The run is the tiny config of tests/runners/_resume.py (6 steps an epoch, 2 epochs, a checkpoint every 2 steps,
a test evaluation after each epoch, precise BN, and on TensorFlow-equipped hosts the TF Serving export). A
seeded RNG draws where the child process dies, among the points the process resumed at its latest checkpoint
still meets (the uninterrupted run's event log is the schedule, `_children.CHILD`):

(a) during a training step: before it computes, after it computed but before its checkpoint callback, after that;
(b) during a checkpoint write, between its files: TensorFlow's version record and `partial_epoch.json` entry
    written but no checkpoint file, the files written but the `checkpoint` state file not naming them, the state
    updated but the older files not deleted, the checkpoint complete but the save not returned; the array
    format's (JAX, PyTorch) half a temporary archive, the archive renamed but not in the index, the index written
    but older archives not deleted, the checkpoint complete but the save not returned;
(c) during evaluation: a batch of the periodic test evaluation inside `fit`, of the final evaluation or of the
    error-rate pass;
(d) during export: a `.keras` save cut short (each epoch's, and the final one after precise BN), and where
    TensorFlow is installed the SavedModel written but not renamed into place, renamed but `models.config` not
    written, and the whole export done but `results.json` not written.

After each kill the steps recomputed are the steps done minus the latest complete checkpoint's step (at most
`checkpoint_every_steps`: a kill between a save's first file and its becoming the latest loses that save); nothing
else is lost. The fast tests run one chain of two kills each (b then c; a then d); the slow ones (`fault_seeds`
seeds) one chain of all four kinds per seed.
"""

import importlib.util
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.faults._children import BACKEND
from tests.faults._children import REPO
from tests.faults._children import EVERY_STEPS
from tests.faults._children import TOTAL_STEPS
from tests.faults._children import assert_same_run
from tests.faults._children import child_env
from tests.faults._children import data_dir  # noqa: F401  (a fixture)
from tests.faults._children import has_tensorflow
from tests.faults._children import read_log
from tests.faults._children import reference  # noqa: F401  (a fixture)
from tests.faults._children import results
from tests.faults._children import run_child
from tests.faults._children import run_config
from tests.faults._children import schedule
from sphere_tf.training import checkpoint as checkpoint_lib
from tests.faults.conftest import fault_seeds

KINDS = {
    "step": "during a training step",
    "save": "during a checkpoint write",
    "eval": "during evaluation",
    "export": "during export",
}
SAVE_PHASES = 4  # the sub-points of a checkpoint write, `_children.CHILD`
EXPORT_EVENTS = ("export_written", "export_renamed", "export_done")


def _met(events, name, resumed_at):
    """The events `name` of the schedule that a process restored at step `resumed_at` meets, in order: those of
    `fit` after its checkpoint (an epoch-end event at that very step came before the checkpoint), all later ones."""
    return [e for e in events if e["event"] == name and (e["stage"] != "fit" or e["step"] > resumed_at)]


def choose(kind, rng, reference, resumed_at, export_points, last_step=TOTAL_STEPS):
    """A kill point of `kind` for a process restored at `resumed_at` (fit-stage points at steps <= `last_step`,
    so a later kind of the chain still has its points; `export_points` the SavedModel export's), drawn by `rng`.
    A step's point needs no schedule: a chain that starts with one runs before the reference run is made."""
    if kind != "step":
        events = schedule(reference())
    if kind == "step":
        step = int(rng.integers(resumed_at + 1, last_step + 1))
        return {"event": "step", "step": step, "where": str(rng.choice(["begin", "before_save", "after_save"]))}
    if kind == "save":
        saves = [e for e in _met(events, "save", resumed_at) if e["step"] <= last_step]
        index = int(rng.integers(len(saves)))
        return {"event": "save", "index": index + 1, "phase": int(rng.integers(SAVE_PHASES)),
                "step": saves[index]["step"]}
    if kind == "eval":
        batches = [e for e in _met(events, "eval_batch", resumed_at) if e["stage"] != "fit" or e["step"] <= last_step]
        index = int(rng.integers(len(batches)))
        return {"event": "eval_batch", "index": index + 1, "stage": batches[index]["stage"]}
    saves = _met(events, "keras_save", resumed_at)
    points = [("keras_save", i + 1) for i in range(len(saves))] + [(name, 1) for name in export_points]
    name, index = points[int(rng.integers(len(points)))]
    return {"event": name, "index": index}


def kill_then_resume(workdir, config, reference, kinds, rng, tally, export_points=EXPORT_EVENTS):
    """Kills a run of `config` in `workdir` once per kind of `kinds` (in order, each drawn among the points the
    restored process meets), then runs the same command to its end; checks what each kill cost and that the
    run ends as the reference; tallies each kind."""
    export_points = export_points if config["export"] else ()
    if BACKEND != "tensorflow":  # the SavedModel is written by a TensorFlow child process, beyond these hooks
        export_points = tuple(point for point in export_points if point == "export_done")
    state_dir = os.path.join(workdir, "checkpoints", "train")
    resumed_at, recomputed = 0, {}
    for position, kind in enumerate(kinds):
        # Leave the later kinds of the chain something to kill: a step or save kill stops 4 steps before the end
        # when a save kill follows it, evaluation and export points are always met.
        last_step = TOTAL_STEPS - 2 * EVERY_STEPS if "save" in kinds[position + 1:] else TOTAL_STEPS
        point = choose(kind, rng, reference, resumed_at, export_points, last_step)
        log = os.path.join(workdir + f".log{position}.jsonl")
        process = run_child(config, workdir, log, kill=point)
        lines = read_log(log)
        assert process.returncode == -signal.SIGKILL and lines and lines[-1]["event"] == "killed", (
            point, process.returncode, process.stderr[-3000:])
        assert not os.path.exists(os.path.join(workdir, "results.json"))
        latest = checkpoint_lib.latest_step(state_dir)
        lost = lines[-1]["step"] - latest
        # The latest complete checkpoint is never more than one save interval behind, nor ahead of the work done.
        assert 0 <= lost <= EVERY_STEPS, (point, lines[-1], latest)
        if kind == "step" and point["where"] != "before_save":
            assert lost <= EVERY_STEPS - 1, (point, latest)  # a save due at a completed step was written
        recomputed.setdefault(kind, []).append(lost)
        resumed_at = latest
    process = run_child(config, workdir, workdir + ".final.jsonl")
    assert process.returncode == 0, process.stderr[-3000:]
    if resumed_at:
        assert f"Resumed from step {resumed_at} of {TOTAL_STEPS}" in process.stdout, process.stdout[-2000:]
    assert_same_run(workdir, reference())
    if config["export"]:
        # One export, as the uninterrupted run makes: no second version after a kill between the export and
        # results.json, no temporary folder left by a kill inside it.
        model_dir = os.path.join(workdir, "export", config["model"]["name"])
        assert sorted(os.listdir(model_dir)) == ["1"], os.listdir(model_dir)
        assert results(workdir)["export_dir"] == os.path.join(model_dir, "1")
    for kind, values in recomputed.items():
        tally("kill -9", KINDS[kind], tried=len(values),
              lost=f"≤ {max(values)} steps recomputed (checkpoint every {EVERY_STEPS}), 0 lost")


def test_killed_during_a_checkpoint_write_then_during_evaluation_ends_as_the_uninterrupted_run(
        data_dir, reference, tmp_path, tally):  # noqa: F811
    rng = np.random.default_rng([0, sum(map(ord, BACKEND))])
    kill_then_resume(str(tmp_path / "run"), run_config(data_dir), reference, ["save", "eval"], rng, tally)


@pytest.mark.slow  # CI's fast subset kills a checkpoint write and an evaluation (above); this chain costs 50 s more
def test_killed_during_a_step_then_during_export_ends_as_the_uninterrupted_run(
        data_dir, reference, tmp_path, tally):  # noqa: F811
    # The chain with the export starts with a step's kill, which needs no schedule: under xdist the other test
    # makes the reference run meanwhile. The SavedModel points after its rename only: the resumed run then keeps
    # that export instead of making another (an export is 15 s of CPU, more than a whole tiny run); the slow tests
    # draw from all of them.
    rng = np.random.default_rng([1, sum(map(ord, BACKEND))])
    kill_then_resume(str(tmp_path / "run"), run_config(data_dir, export=has_tensorflow()), reference,
                     ["step", "export"], rng, tally, export_points=EXPORT_EVENTS[1:])


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(fault_seeds(default=2)))
def test_killed_at_four_random_points_ends_as_the_uninterrupted_run(data_dir, reference, tmp_path, tally,
                                                                     seed):  # noqa: F811
    rng = np.random.default_rng([100 + seed, sum(map(ord, BACKEND))])
    kill_then_resume(str(tmp_path / "run"), run_config(data_dir, export=has_tensorflow()), reference,
                     ["step", "save", "eval", "export"], rng, tally)


# A runner on JAX or PyTorch exports in a TensorFlow child process (`sphere_tf.export.reload`); here the runner
# (a JAX process) starts that export and is killed with SIGKILL two seconds later, while the child still loads.
EXPORTING_PARENT = r"""
import os, signal, subprocess, sys, time
from sphere_tf.export import reload
def run(args, **kwargs):
    child = subprocess.Popen(args, env=kwargs.get("env"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(sys.argv[3], "w") as f:
        f.write(str(child.pid))
    time.sleep(2)
    os.kill(os.getpid(), signal.SIGKILL)
reload.subprocess.run = run
reload.export_model_file(sys.argv[1], sys.argv[2])
"""


def _alive(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return "\nState:\tZ" not in f.read()  # a zombie has ended
    except FileNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not (has_tensorflow() and importlib.util.find_spec("jax") and os.path.isdir("/proc")),
                    reason="needs TensorFlow and JAX in one environment, and Linux")
def test_an_export_child_dies_with_its_killed_runner(reference, tmp_path, tally):  # noqa: F811
    export_base, pid_file = tmp_path / "export", tmp_path / "child.pid"
    parent = subprocess.run(
        [sys.executable, "-c", EXPORTING_PARENT, os.path.join(reference(), "checkpoints", "model.keras"),
         str(export_base), str(pid_file)],
        cwd=REPO, env=dict(child_env(), KERAS_BACKEND="jax"), capture_output=True, text=True, timeout=600)
    assert parent.returncode == -signal.SIGKILL, parent.stderr[-3000:]
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 120  # the child notices once it has imported TensorFlow and read its request
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    alive = _alive(child)
    if alive:
        os.kill(child, signal.SIGKILL)
    assert not alive, "the export child outlived its killed runner"
    assert not export_base.exists() or not os.listdir(export_base)  # it wrote nothing
    tally("kill -9", "of a JAX runner while its TensorFlow export child runs", tried=1,
          lost="nothing: the child ends with it, no orphan export")
