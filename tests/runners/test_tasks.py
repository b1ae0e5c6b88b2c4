"""The runner's task registry: a config's `task` picks what runs, a user's task is one `register_task`, and each
task's own validation takes a config that still names it."""

import warnings

import pytest

from sphere_tf import runners
from sphere_tf.runners import adversarial
from sphere_tf.runners import classifier
from sphere_tf.runners import face
from sphere_tf.runners import schema
from sphere_tf.runners import tasks


@pytest.fixture
def echo_task():
    calls = []
    task = runners.Task(
        validate=lambda config: {"echo": dict(config)},
        run=lambda config, workdir: calls.append((config, workdir)) or {"ran": workdir},
        dry_run=lambda config, probe_steps=3: {"config": config, "probe_steps": probe_steps},
        dry_run_lines=lambda plan: [f"echo {plan['probe_steps']}"],
        schema=lambda: {"value": 0},
    )
    runners.register_task("test_echo", task)
    yield calls
    del tasks.TASKS["test_echo"]


def test_a_users_task_runs_from_its_config(echo_task):
    assert "test_echo" in runners.list_tasks()
    assert runners.run({"task": "test_echo", "value": 2}, "/tmp/w") == {"ran": "/tmp/w"}
    assert echo_task == [({"value": 2}, "/tmp/w")]  # the task sees its config without the task key
    assert runners.validate({"task": "test_echo", "value": 3}) == ("test_echo", {"echo": {"value": 3}})
    plan = runners.dry_run({"task": "test_echo"}, probe_steps=1)
    assert plan["task"] == "test_echo" and runners.dry_run_lines(plan) == ["echo 1"]
    with pytest.raises(KeyError, match="test_echo"):
        runners.register_task("test_echo", runners.get_task("test_echo"))
    with pytest.raises(TypeError, match="Task"):
        runners.register_task("test_not_a_task", lambda config, workdir: None)


def test_the_packaged_tasks_and_the_default():
    assert {"classification", "adversarial", "face"} <= set(runners.list_tasks())
    assert runners.get_task("classification") is classifier.TASK
    assert runners.get_task("adversarial") is adversarial.TASK
    assert runners.get_task("face") is face.TASK
    name, config = runners.split_task({"seed": 1})
    assert name == "classification" and config == {"seed": 1}
    assert set(runners.get_task("face").schema()) == set(schema.DEFAULTS) | {"verification", "training_set"}
    assert runners.get_task("adversarial").schema() == adversarial.DEFAULTS


def test_an_unknown_task_names_the_key_and_the_valid_ones():
    with pytest.raises(runners.ConfigError, match=r"'task'.*'classificaton'.*classification"):
        runners.split_task({"task": "classificaton"})


def test_a_tasks_validation_takes_its_own_name_and_refuses_another():
    checked = classifier.validate({"task": "classification"})
    assert "task" not in checked and checked["seed"] == schema.DEFAULTS["seed"]
    with pytest.raises(schema.ConfigError, match="'task'.*'classification' task"):
        classifier.validate({"task": "face"})
    with pytest.raises(schema.ConfigError, match="'task'.*'adversarial' task"):
        adversarial.validate({"task": "classification"})


def test_the_face_task_validates_once_with_its_sections():
    checked = face.validate({"task": "face", "data": {"name": "face_folder"},
                             "verification": {"batch_size": 8}})
    assert checked["verification"]["batch_size"] == 8 and checked["training_set"]["images"] == 0
    assert checked["export_class_matrix"] is False  # face models serve embeddings
    with pytest.raises(schema.ConfigError, match="verification.pair"):
        face.validate({"verification": {"pair": "x"}})


def test_the_old_import_paths_warn_and_resolve():
    from sphere_tf import adversarial as adversarial_lib
    from sphere_tf import evaluation
    from sphere_tf import training

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert training.classifier is classifier
        assert adversarial_lib.run_experiment is adversarial.run_experiment
        assert evaluation.train_face is face.train_face
    assert [str(w.message).split(" moved")[0] for w in caught] == [
        "sphere_tf.training.classifier", "sphere_tf.adversarial.run_experiment", "sphere_tf.evaluation.train_face"]
    assert all(issubclass(w.category, DeprecationWarning) for w in caught)
