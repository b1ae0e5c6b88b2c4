"""Tests for sphere_tf.callbacks.SOPTEpisodes (stochastic OPT episodes)."""

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf.callbacks import SOPTEpisodes
from sphere_tf.callbacks import sopt
from sphere_tf.layers import opt as opt_lib

LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def np_energy(kernel, power=2.0):
    w = np.asarray(kernel, np.float64).reshape(-1, np.shape(kernel)[-1])
    w = w / np.linalg.norm(w, axis=0, keepdims=True)
    n = w.shape[1]
    return sum(
        np.linalg.norm(w[:, i] - w[:, j]) ** (-power) for i in range(n) for j in range(n) if i != j
    ) / (n * (n - 1))


def _model():
    return keras.Sequential(
        [
            keras.Input((6, 6, 2)),
            opt_lib.OPTConv2D(6, 3, padding="same", stochastic_dims=6, seed=0, name="sconv"),
            keras.layers.BatchNormalization(name="bn"),
            keras.layers.ReLU(),
            keras.layers.GlobalAveragePooling2D(),
            opt_lib.OPTDense(5, stochastic_dims=3, seed=1, name="sfc"),
            opt_lib.OPTDense(4, seed=2, name="full"),  # full OPT: not touched by the callback
        ]
    )


def _data(n=24):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 6, 6, 2)).astype("float32"), rng.integers(0, 4, n).astype("int32")


def test_episodes_merge_resample_and_preserve_energy():
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss=LOSS, run_eagerly=True)
    conv, full = model.get_layer("sconv"), model.get_layer("full")
    v0 = ops.convert_to_numpy(conv.fixed_kernel).copy()
    idx0 = ops.convert_to_numpy(conv.stochastic_indices).copy()
    full_v0 = ops.convert_to_numpy(full.fixed_kernel).copy()
    callback = SOPTEpisodes(episode_length=2, seed=0)
    x, y = _data()
    model.fit(x, y, batch_size=8, epochs=2, verbose=0, callbacks=[callback])  # 6 steps -> 3 episodes
    assert callback.episodes_completed == 3
    assert callback.steps_in_episode == 0
    # Episodes ended right after the last step: R̃ = I and V holds the merged W.
    np.testing.assert_array_equal(ops.convert_to_numpy(conv.rotation_param), np.eye(6))
    assert np.abs(ops.convert_to_numpy(conv.fixed_kernel) - v0).max() > 1e-4  # V changed only through merges
    assert not np.array_equal(ops.convert_to_numpy(conv.stochastic_indices), idx0)
    assert np_energy(ops.convert_to_numpy(conv.fixed_kernel)) == pytest.approx(np_energy(v0), abs=1e-5)
    # Rows never sampled in any episode are untouched (the permuted-block transform is the identity there).
    np.testing.assert_array_equal(ops.convert_to_numpy(full.fixed_kernel), full_v0)
    assert np.abs(ops.convert_to_numpy(full.rotation_param)).max() > 0  # the full-OPT layer is not reset


def test_new_episode_resets_only_rotation_and_its_slots():
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss=LOSS, run_eagerly=True)
    x, y = _data()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    conv, bn = model.get_layer("sconv"), model.get_layer("bn")
    bn_before = [ops.convert_to_numpy(w).copy() for w in bn.weights]
    bias_before = ops.convert_to_numpy(conv.bias).copy()
    w_before = ops.convert_to_numpy(conv.effective_kernel())
    slots = {v.name: v for v in model.optimizer.variables}
    (rotation_slot,) = [v for name, v in slots.items() if name.endswith("sconv_rotation_momentum")]
    (other_slot,) = [v for name, v in slots.items() if name.endswith("bn_gamma_momentum")]
    assert np.abs(ops.convert_to_numpy(rotation_slot)).max() > 0
    other_before = ops.convert_to_numpy(other_slot).copy()
    callback = SOPTEpisodes(episode_length=100, seed=1)
    callback.set_model(model)
    callback.new_episode()
    np.testing.assert_allclose(ops.convert_to_numpy(conv.effective_kernel()), w_before, atol=1e-6)  # merge keeps W
    for w, b in zip(bn.weights, bn_before):
        np.testing.assert_array_equal(ops.convert_to_numpy(w), b)  # upstream reset BN here; we do not
    np.testing.assert_array_equal(ops.convert_to_numpy(conv.bias), bias_before)
    np.testing.assert_array_equal(ops.convert_to_numpy(rotation_slot), 0.0)
    np.testing.assert_array_equal(ops.convert_to_numpy(other_slot), other_before)


def test_reset_optimizer_slots_through_wrappers():
    from sphere_tf.optimizers import OPTOptimizer

    model = keras.Sequential(
        [keras.Input((4,)), opt_lib.OPTDense(3, orthogonalization="ogd", stochastic_dims=2, seed=0), keras.layers.Dense(2)]
    )
    optimizer = keras.optimizers.LossScaleOptimizer(OPTOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)))
    model.compile(optimizer=optimizer, loss=LOSS, run_eagerly=True)
    x = np.random.default_rng(0).standard_normal((8, 4)).astype("float32")
    y = np.array([0, 1] * 4, "int32")
    model.fit(x, y, epochs=1, verbose=0)
    layer = model.layers[0]
    assert sopt.reset_optimizer_slots(model.optimizer, [layer.rotation_param]) == 1


def test_no_sopt_layer_and_bad_arguments():
    model = keras.Sequential([keras.Input((4,)), opt_lib.OPTDense(3)])
    model.compile(optimizer="sgd", loss="mse", run_eagerly=True)
    with pytest.raises(ValueError, match="no OPT layer with `stochastic_dims`"):
        model.fit(np.zeros((2, 4)), np.zeros((2, 3)), verbose=0, callbacks=[SOPTEpisodes(2)])
    with pytest.raises(ValueError, match="Invalid value for argument `episode_length`"):
        SOPTEpisodes(0)
    with pytest.raises(ValueError, match="not an S-OPT layer"):
        model.layers[0].resample_stochastic_dims()
    config = SOPTEpisodes(5, seed=3, reset_optimizer_state=False, merge_on_train_end=True).get_config()
    clone = SOPTEpisodes.from_config(config)  # the config records the sphere_tf version too
    assert clone.get_config() == config


def test_merge_on_train_end():
    model = _model()
    model.compile(optimizer="sgd", loss=LOSS, run_eagerly=True)
    x, y = _data(8)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[SOPTEpisodes(10, merge_on_train_end=True)])
    conv = model.get_layer("sconv")
    np.testing.assert_array_equal(ops.convert_to_numpy(conv.rotation_param), np.eye(6))


def _resumable_run(directory, epochs):
    """fit_resumable over 3 batches per epoch with S-OPT episodes of 4 steps; returns (model, callback)."""
    import tensorflow as tf

    from sphere_tf.training import fit_resumable

    keras.utils.set_random_seed(0)  # the same initial weights in both runs
    model = _model()
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss=LOSS)
    x, y = _data(24)
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)
    callback = SOPTEpisodes(episode_length=4, seed=7)
    fit_resumable(model, dataset, epochs=epochs, directory=directory, every_steps=1, callbacks=[callback], verbose=0)
    return model, callback


@pytest.mark.tensorflow_only
def test_episodes_continue_identically_after_resume(tmp_path):
    full, full_callback = _resumable_run(str(tmp_path / "full"), epochs=2)  # 6 steps; an episode ends at step 4
    # Interrupted: 3 steps, then a new process-like start (new model, new callback) resumes to step 6.
    first, first_callback = _resumable_run(str(tmp_path / "cut"), epochs=1)
    assert (first_callback.steps_in_episode, first_callback.episodes_completed) == (3, 0)
    del first, first_callback
    resumed, resumed_callback = _resumable_run(str(tmp_path / "cut"), epochs=2)
    # The restored counter ends the episode at global step 4 (a fresh counter would wait until step 7).
    assert (full_callback.steps_in_episode, full_callback.episodes_completed) == (2, 1)
    assert (resumed_callback.steps_in_episode, resumed_callback.episodes_completed) == (2, 1)
    conv_full, conv_resumed = full.get_layer("sconv"), resumed.get_layer("sconv")
    # Episode 1's rows come from the generator keyed by (seed, 1), in layer order.
    rng = np.random.default_rng([7, 1])
    expected = np.sort(rng.choice(conv_full._d, 6, replace=False))
    sfc_expected = np.sort(rng.choice(full.get_layer("sfc")._d, 3, replace=False))
    np.testing.assert_array_equal(ops.convert_to_numpy(conv_full.stochastic_indices), expected)
    np.testing.assert_array_equal(ops.convert_to_numpy(full.get_layer("sfc").stochastic_indices), sfc_expected)
    for a, b in zip(full.weights, resumed.weights):
        np.testing.assert_allclose(ops.convert_to_numpy(b), ops.convert_to_numpy(a), rtol=0, atol=1e-6, err_msg=a.path)


def test_checkpoint_state_is_keras_variables_and_restores_the_drawn_seed():
    """The state is plain Keras variables: copying their values restores the episode stream on any backend."""
    callback = SOPTEpisodes(episode_length=3)  # seed drawn at random
    callback._steps_in_episode.assign(2)
    callback._episodes_completed.assign(5)
    other = SOPTEpisodes(episode_length=3)
    state, other_state = callback.checkpoint_state(), other.checkpoint_state()
    assert all(isinstance(v, keras.Variable) and not v.trainable for v in state.values())
    for name, variable in other_state.items():
        variable.assign(state[name])
    assert (other.steps_in_episode, other.episodes_completed) == (2, 5)
    np.testing.assert_array_equal(other.episode_rng(6).integers(0, 1 << 30, 4),
                                  callback.episode_rng(6).integers(0, 1 << 30, 4))
    with pytest.raises(ValueError, match="Invalid value for argument `seed`"):
        SOPTEpisodes(3, seed=2**31)  # JAX holds int64 variables as int32


@pytest.mark.tensorflow_only
def test_checkpoint_state_restores_the_drawn_seed(tmp_path):
    import tensorflow as tf

    callback = SOPTEpisodes(episode_length=3)  # seed drawn at random
    callback._steps_in_episode.assign(2)
    callback._episodes_completed.assign(5)
    path = tf.train.Checkpoint(**callback.checkpoint_state()).write(str(tmp_path / "state"))
    other = SOPTEpisodes(episode_length=3)
    tf.train.Checkpoint(**other.checkpoint_state()).read(path).assert_consumed()
    assert (other.steps_in_episode, other.episodes_completed) == (2, 5)
    np.testing.assert_array_equal(other.episode_rng(6).integers(0, 1 << 30, 4),
                                  callback.episode_rng(6).integers(0, 1 << 30, 4))
    with pytest.raises(ValueError, match="Invalid value for argument `seed`"):
        SOPTEpisodes(3, seed=-1)
