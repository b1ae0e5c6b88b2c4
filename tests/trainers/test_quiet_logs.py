"""The trainers' log set-up: each TensorFlow warning is printed once, whatever the import order."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A main as `sphere_tf_cli/export.py` is: quiet logs first, TensorFlow imported (and logging) before `app.run`.
MAIN = """
from sphere_tf_cli import _quiet_logs
_quiet_logs.quiet_tensorflow_logs()
import tensorflow as tf
from tensorflow.python.platform import tf_logging
tf_logging.warning("before app.run")
from absl import app
app.run(lambda argv: tf_logging.warning("inside main"), argv=["main"])
"""


def test_tensorflow_warnings_print_once():
    proc = subprocess.run([sys.executable, "-c", MAIN], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("before app.run") == 1, proc.stderr[-3000:]
    assert proc.stderr.count("inside main") == 1, proc.stderr[-3000:]
