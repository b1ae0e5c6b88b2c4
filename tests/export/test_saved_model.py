"""SavedModel export reproduces the model and refuses a file as target."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from sphere_tf import export
from sphere_tf import layers


def _model():
    inputs = keras.Input((6, 6, 2))
    x = layers.DecoupledConv2D(3, 3, magnitude="seg", angular="linear")(inputs)
    return keras.Model(inputs, keras.layers.Flatten()(x))


def test_export_reloads_with_identical_outputs(tmp_path):
    model = _model()
    x = np.random.default_rng(1).standard_normal((2, 6, 6, 2)).astype(np.float32)
    model(x, training=True)
    path = export.export_saved_model(model, str(tmp_path / "sm"), verify_inputs=x)
    loaded = tf.saved_model.load(path)
    np.testing.assert_allclose(loaded.serve(x), model(x), rtol=1e-6, atol=1e-6)


def test_export_to_a_file_path_is_refused(tmp_path):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(ValueError, match="is a file"):
        export.export_saved_model(_model(), str(target))


def test_export_to_a_non_empty_folder_is_refused(tmp_path):
    (tmp_path / "kept.txt").write_text("x")
    with pytest.raises(ValueError, match="not empty"):
        export.export_saved_model(_model(), str(tmp_path))
    assert [p.name for p in tmp_path.iterdir()] == ["kept.txt"]
