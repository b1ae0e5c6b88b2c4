"""`sphere_tf.callbacks.LabelRangeCheck`: out-of-range MarginHead labels fail clearly in compiled `fit` (XLA too)."""

import keras
import numpy as np
import pytest

from sphere_tf import callbacks
from sphere_tf.layers import MarginHead
from sphere_tf.training import model as training_model


def _margin_model(model_class=keras.Model):
    features, labels = keras.Input((4,)), keras.Input((), dtype="int32")
    head = MarginHead(3, loss_type="cosface", name="head")
    return model_class([features, labels], head(keras.layers.Dense(4)(features), labels=labels))


def _data(bad_label):
    x = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    y = np.array([0, 1, 2, 0, 1, bad_label, 2, 0], np.int32)
    return [x, y], y


def _compile(model, jit_compile):
    model.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=jit_compile)


@pytest.mark.parametrize("jit_compile", [True, False])
def test_out_of_range_label_in_compiled_fit_raises_naming_the_range(jit_compile):
    model = _margin_model()
    _compile(model, jit_compile)
    x, y = _data(bad_label=7)
    # Without XLA the in-step check raises first (its own error type per backend); under XLA only the
    # callback can, with the head's name.
    name = "MarginHead 'head': " if jit_compile and keras.backend.backend() == "tensorflow" else ""
    with pytest.raises(Exception, match=name + r".*class id in \[0, 3\)"):
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[callbacks.LabelRangeCheck()])


@pytest.mark.tensorflow_only
def test_xla_fit_without_the_callback_gives_nan_and_the_count():
    """What the callback guards against: under XLA the step itself cannot raise."""
    model = _margin_model()
    _compile(model, jit_compile=True)
    x, y = _data(bad_label=-1)
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert np.isnan(history.history["loss"][0])
    assert model.get_layer("head").invalid_label_count() == 1


@pytest.mark.tensorflow_only  # until SphereTrainingMixin.train_step runs off TensorFlow (issue 22, paradigms)
def test_sphere_model_adds_the_check_and_valid_labels_train():
    model = _margin_model(training_model.SphereModel)
    _compile(model, jit_compile=True)
    x, y = _data(bad_label=2)
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert model.get_layer("head").invalid_label_count() == 0
    x, y = _data(bad_label=3)
    with pytest.raises(Exception, match=r"class id in \[0, 3\)"):
        model.fit(x, y, batch_size=4, epochs=1, verbose=0)


def test_count_is_layer_state_not_a_weight():
    model = _margin_model()
    head = model.get_layer("head")
    assert len(head.weights) == 2  # kernel and iteration, as in files saved before the count existed
    assert any(v.name == "invalid_labels" for v in head.non_trainable_variables)
