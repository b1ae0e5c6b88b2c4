"""Quiets TensorFlow's and absl's INFO lines for a trainer run, before TensorFlow is imported.

TensorFlow reads its C++ log level once, at import, and `import sphere_tf`
imports TensorFlow, so `sphere_tf.training.progress` is loaded here from its
file (found without importing the package) and `quiet_tensorflow_logs` runs
first. absl's `--verbosity` (`-v`) brings the lines back: 0 for INFO, n >= 1
for TensorFlow's VLOG(n) too.
"""

import importlib.util
import os


def quiet_tensorflow_logs():
    """`progress.quiet_tensorflow_logs()` with the verbosity of `sys.argv`, and absl's log handler installed
    now; returns the verbosity.

    TensorFlow gives its "tensorflow" logger a handler of its own when the root logger has none at its
    first log line; `app.run` adds absl's to the root later, so every TensorFlow warning of a main that
    imports TensorFlow before `app.run` printed twice. With absl's handler there first, it prints once.
    """
    from absl import logging as absl_logging  # noqa: PLC0415 (absl does not import TensorFlow)

    absl_logging.use_absl_handler()
    package = importlib.util.find_spec("sphere_tf").submodule_search_locations[0]
    spec = importlib.util.spec_from_file_location(
        "sphere_tf_progress_early", os.path.join(package, "training", "progress.py")
    )
    progress = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(progress)
    return progress.quiet_tensorflow_logs()
