"""SavedModel export for TensorFlow Serving."""

import os

import tensorflow as tf


def export_saved_model(model, export_dir, verify_inputs=None, atol=1e-5):
    """Writes `model` as a SavedModel with a `serve` endpoint (and `serving_default`).

    Args:
        model: a built `keras.Model`.
        export_dir: str, the target folder (created; must not be a file).
        verify_inputs: optional batch; if given, the exported function is reloaded
            and must reproduce `model(verify_inputs)` within `atol`.
        atol: float, tolerance of that check.

    Returns:
        `export_dir`.

    Raises:
        ValueError: `export_dir` is a file or a non-empty folder; the reloaded
            SavedModel's outputs differ from the model's.
    """
    if os.path.isfile(export_dir):
        raise ValueError(f"export_dir {export_dir!r} is a file; expected a folder path.")
    if os.path.isdir(export_dir) and os.listdir(export_dir):
        raise ValueError(f"export_dir {export_dir!r} is not empty; expected a new or empty folder (nothing is "
                         "overwritten; `sphere_tf.export.export_model` writes versioned folders).")
    model.export(export_dir, format="tf_saved_model", verbose=False)
    if verify_inputs is not None:
        # Keep the loaded object alive: its variables die with it.
        loaded = tf.saved_model.load(export_dir)
        # A dict / list (a MarginHead model's images + labels) converts leaf by leaf.
        served = loaded.serve(tf.nest.map_structure(tf.convert_to_tensor, verify_inputs))
        expected = model(verify_inputs, training=False)
        diff = float(tf.reduce_max(tf.abs(tf.cast(served, tf.float32) - tf.cast(expected, tf.float32))))
        if not diff <= atol:
            raise ValueError(f"Exported SavedModel differs from the model by {diff} (> {atol}).")
    return export_dir
