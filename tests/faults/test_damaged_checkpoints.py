"""Damaged and lost checkpoints, on every backend: what a resumed run does with them.

A run stopped after its checkpoint of step 4 (checkpoints of steps 2 and 4 on disk) has a file of the latest
checkpoint truncated to half, emptied or one bit flipped, for every file a checkpoint consists of (TensorFlow:
``ckpt-4.index``, ``ckpt-4.data-*``, its ``checkpoint`` list and ``checkpoint_versions.json``; JAX and PyTorch:
``state-4.npz`` and the ``checkpoint.json`` index), then the same run is started again. Required: a warning that
names the damaged file, a resume from the newest checkpoint that is intact (the previous one when the values of
the latest are damaged, the latest itself when only a list of them is), and a run that ends exactly as the
uninterrupted run. No checkpoint readable, or none left beside a finished run's results, is an error: a run never
starts afresh over them. A library-level sweep flips random bits of every file: each flip is detected (a warning,
and an intact checkpoint's values restored) or changed nothing that is read (the latest values restored bitwise).
"""

import glob
import os
import shutil

import keras
import numpy as np
import pytest

from sphere_tf.runners import classifier
from sphere_tf.training import array_checkpoint
from sphere_tf.training import checkpoint
from tests.faults import _runner_faults as runs
from tests.faults.conftest import fault_seeds

BACKEND = keras.backend.backend()
KINDS = (["ckpt.index", "ckpt.data", "checkpoint (TensorFlow's list)", checkpoint.TF_VERSIONS_FILE]
         if BACKEND == "tensorflow" else ["state.npz", array_checkpoint.INDEX_FILE])


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    return runs.interrupted_run(str(tmp_path_factory.mktemp("interrupted") / "run"))


def _rerun_damaged(interrupted, tmp_path, capsys, kind, damage):
    """The interrupted run's copy with `kind` of the checkpoint of step 4 damaged, run again: (workdir, results,
    what the run printed, the damaged file)."""
    runs.reference()  # first, so that its output is not the rerun's
    workdir = runs.copy(interrupted, tmp_path / "run")
    path = runs.checkpoint_files(runs.state_dir(workdir), 4)[kind]
    runs.DAMAGES[damage](path, 4, kind)
    capsys.readouterr()
    results = classifier.train_and_evaluate(runs.config(), workdir)
    return workdir, results, capsys.readouterr().out, path


def _check_resume(kind, damage, out, path):
    """The warnings of a resume over a damaged file; returns the steps lost (retrained)."""
    if kind in runs.VALUE_FILES:
        # The latest checkpoint's values are gone: the previous checkpoint, named after the damaged file.
        assert "Warning: checkpoint" in out and os.path.basename(path) in out, out
        assert "trying the previous checkpoint" in out and "(step 2), the newest checkpoint that could be read" in out
        return 2
    # A list of the checkpoints: the files it lists are intact, so the latest is found without it.
    if kind == checkpoint.TF_VERSIONS_FILE and damage == "one bit flipped":
        # `"ckpt-4"` -> `"ckpt-5"` makes step 4's version unrecorded, which is read as this release's: nothing lost.
        assert "trying the previous checkpoint" not in out
    else:
        assert f"Warning: {path}" in out or f"Warning: checkpoint index {path}" in out or \
            f"Warning: TensorFlow's checkpoint list {path}" in out, out
    assert "Resumed from step 4 of 6" in out and "trying the previous checkpoint" not in out
    return 0


def test_a_truncated_latest_checkpoint_resumes_from_the_previous_one(interrupted, tmp_path, capsys, tally):
    """The reported case: the latest checkpoint's values cut in half (TensorFlow's `.index`, the array archive)."""
    kind = "ckpt.index" if BACKEND == "tensorflow" else "state.npz"
    workdir, results, out, path = _rerun_damaged(interrupted, tmp_path, capsys, kind, "truncated to half")
    lost = _check_resume(kind, "truncated to half", out, path)
    runs.assert_ends_as_the_reference(workdir, results)
    tally("damaged checkpoint", f"latest {kind} truncated to half, runner resumed", lost=f"{lost} steps retrained")


@pytest.mark.slow
@pytest.mark.parametrize("damage", list(runs.DAMAGES))
@pytest.mark.parametrize("kind", KINDS)
def test_every_file_of_the_latest_checkpoint_damaged(interrupted, tmp_path, capsys, tally, kind, damage):
    workdir, results, out, path = _rerun_damaged(interrupted, tmp_path, capsys, kind, damage)
    lost = _check_resume(kind, damage, out, path)
    runs.assert_ends_as_the_reference(workdir, results)
    tally("damaged checkpoint", f"latest {kind} {damage}, runner resumed", lost=f"{lost} steps retrained")


def test_no_readable_checkpoint_is_an_error_not_a_fresh_start(interrupted, tmp_path, tally):
    workdir = runs.copy(interrupted, tmp_path / "run")
    directory = runs.state_dir(workdir)
    for step in (2, 4):
        runs.truncate_half(runs.checkpoint_files(directory, step)["ckpt.data" if BACKEND == "tensorflow"
                                                                  else "state.npz"])
    before = sorted(os.listdir(directory))
    with pytest.raises(checkpoint.CorruptCheckpointError, match="no checkpoint in .* can be read") as raised:
        classifier.train_and_evaluate(runs.config(), workdir)
    assert "Not starting afresh" in str(raised.value)
    assert "-2" in str(raised.value) and "-4" in str(raised.value)  # both named
    assert sorted(os.listdir(directory)) == before and not os.path.exists(os.path.join(workdir, "results.json"))
    tally("damaged checkpoint", "every checkpoint's values truncated", lost="the run: refused, nothing overwritten")


def _remove_checkpoints(directory, keep=("config.json",)):
    for name in os.listdir(directory):
        if name not in keep:
            os.remove(os.path.join(directory, name))


def test_a_workdir_whose_checkpoints_are_gone_is_refused(interrupted, tmp_path, tally):
    # A finished run (results.json) whose checkpoint folder was emptied: not trained again from step 0 over it.
    finished, _, _ = runs.reference()
    workdir = runs.copy(finished, tmp_path / "finished")
    _remove_checkpoints(runs.state_dir(workdir))
    with open(os.path.join(workdir, "results.json")) as f:
        results_before = f.read()
    with pytest.raises(checkpoint.CorruptCheckpointError, match="results.json") as raised:
        classifier.train_and_evaluate(runs.config(), workdir)
    assert "no checkpoint" in str(raised.value) and "Not training afresh" in str(raised.value)
    with open(os.path.join(workdir, "results.json")) as f:
        assert f.read() == results_before
    # The whole folder gone: the same.
    shutil.rmtree(runs.state_dir(workdir))
    with pytest.raises(checkpoint.CorruptCheckpointError, match="results.json"):
        classifier.train_and_evaluate(runs.config(), workdir)
    tally("lost checkpoints", "a finished run's checkpoints deleted", lost="nothing: refused")
    # Its results gone too, its history left: an epoch ended after the first checkpoint (step 2 of 6).
    workdir = runs.copy(finished, tmp_path / "history")
    _remove_checkpoints(runs.state_dir(workdir), keep=("config.json", checkpoint.HISTORY_FILE))
    os.remove(os.path.join(workdir, "results.json"))
    with pytest.raises(checkpoint.CorruptCheckpointError, match=checkpoint.HISTORY_FILE):
        classifier.train_and_evaluate(runs.config(), workdir)
    tally("lost checkpoints", "the checkpoints and results of a run deleted, its history left",
          lost="nothing: refused")
    # An interrupted run (no results yet): partial_epoch.json, written only after a checkpoint, tells.
    workdir = runs.copy(interrupted, tmp_path / "interrupted")
    _remove_checkpoints(runs.state_dir(workdir), keep=("config.json", checkpoint.PARTIAL_FILE))
    with pytest.raises(checkpoint.CorruptCheckpointError, match=checkpoint.PARTIAL_FILE) as raised:
        classifier.train_and_evaluate(runs.config(), workdir)
    assert "Not starting afresh" in str(raised.value)
    assert sorted(os.listdir(runs.state_dir(workdir))) == ["config.json", checkpoint.PARTIAL_FILE]
    tally("lost checkpoints", "an interrupted run's checkpoints deleted", lost="nothing: refused")


# The library-level sweep: the checkpoint driver of tests/training/test_checkpoint_recovery.py, a Dense layer
# under SGD with momentum, checkpoints of steps 2 and 4.
STEPS_PER_EPOCH = 4


def _values(model):
    return [keras.ops.convert_to_numpy(v).copy() for v in model.variables + model.optimizer.variables]


def _trained(directory, steps):
    """The values after `steps` steps (a fresh fit: the same as the checkpoint of that step holds)."""
    model = runs.dense_model()
    checkpoint.fit_resumable(model, runs.dense_stream, epochs=1, directory=directory, steps_per_epoch=steps, every_steps=2,
                             max_to_keep=3, verbose=0)
    return model


def _restore(directory):
    model = runs.dense_model()
    saver = checkpoint.StepCheckpoint(directory, every_steps=2, max_to_keep=3)
    saver.set_model(model)
    return saver.restore(), _values(model)


def test_random_damage_is_detected_or_changes_nothing(tmp_path, capsys, tally):
    source = str(tmp_path / "source")
    _trained(source, STEPS_PER_EPOCH)
    intact = {2: _values(_trained(str(tmp_path / "two"), 2)), 4: _values(_trained(str(tmp_path / "four"), 4))}
    rng = np.random.default_rng(0)
    flips = 4 * fault_seeds()  # bits per file: 8 in CI, 80 in the full fault run
    for kind, path in runs.checkpoint_files(source, 4).items():
        size = os.path.getsize(path)
        cases = [("truncated to half", runs.truncate_half), ("emptied", runs.empty)]
        cases += [("one random bit flipped", lambda p, b=int(b): runs.flip_bit(p, b))
                  for b in rng.choice(size * 8, size=flips, replace=False)]
        outcomes = {}
        for case, damage in cases:
            work = str(tmp_path / "work")
            shutil.rmtree(work, ignore_errors=True)
            shutil.copytree(source, work)
            damage(os.path.join(work, os.path.basename(path)))
            capsys.readouterr()
            step, values = _restore(work)
            out = capsys.readouterr().out
            if "Warning:" in out:
                assert os.path.basename(path) in out, (kind, case, out)
            matches = [s for s, want in intact.items() if all(np.array_equal(a, b) for a, b in zip(values, want))]
            # Never values of no intact checkpoint (silently wrong numbers), and never an older checkpoint without a
            # warning; a change that nothing reads (a timestamp, JSON spacing) restores the latest values bitwise.
            assert matches == [step], (kind, case, step, out)
            assert step == 4 or "Warning:" in out, (kind, case, out)
            outcomes.setdefault(case, []).append(4 - step)
        for case, lost in outcomes.items():
            tally("damaged checkpoint", f"{kind} {case}, library restore", tried=len(lost),
                  lost="0 steps: the latest restored" if not max(lost) else
                  f"at most {max(lost)} steps: a warning, the previous checkpoint restored")


def test_a_damaged_list_with_no_checkpoint_left_is_an_error(tmp_path):
    """The list of the checkpoints damaged and no checkpoint file beside it: an error naming the list."""
    directory = str(tmp_path / "ckpt")
    _trained(directory, STEPS_PER_EPOCH)
    files = runs.checkpoint_files(directory, 4)
    listing = files["checkpoint (TensorFlow's list)" if BACKEND == "tensorflow" else array_checkpoint.INDEX_FILE]
    runs.empty(listing)
    for path in glob.glob(os.path.join(directory, "ckpt-*")) + glob.glob(os.path.join(directory, "state-*")):
        os.remove(path)
    with pytest.raises(checkpoint.CorruptCheckpointError, match="no checkpoint") as raised:
        _restore(directory)
    assert listing in str(raised.value)


def test_after_falling_back_two_checkpoints_the_run_goes_on_without_false_alarms(tmp_path, capsys, tally):
    """The checkpoints of steps 4 and 6 damaged, 2 restored: the resumed run saves 4 again, after 6 in the list
    (the order of the saves, not of the steps); the next resume reads that list as sound and restores 4 without a
    warning."""
    directory = str(tmp_path / "ckpt")
    checkpoint.fit_resumable(runs.dense_model(), runs.dense_stream, epochs=1, directory=directory, steps_per_epoch=6, every_steps=2,
                             max_to_keep=3, verbose=0)
    for step in (4, 6):
        runs.truncate_half(runs.checkpoint_files(directory, step)["ckpt.data" if BACKEND == "tensorflow"
                                                                 else "state.npz"])
    capsys.readouterr()
    result = checkpoint.fit_resumable(runs.dense_model(), runs.dense_stream, epochs=1, directory=directory, steps_per_epoch=4,
                                      every_steps=2, max_to_keep=3, verbose=0)  # trains steps 3 and 4 again
    assert result["initial_step"] == 2 and capsys.readouterr().out.count("trying the previous checkpoint") == 2
    step, values = _restore(directory)
    assert step == 4 and "Warning" not in capsys.readouterr().out
    for got, want in zip(values, _values(_trained(str(tmp_path / "four"), 4))):
        np.testing.assert_array_equal(got, want)
    tally("damaged checkpoint", "the two latest checkpoints' values truncated (library resume)",
          lost="4 steps retrained; no false alarm afterwards")
