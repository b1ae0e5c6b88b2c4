"""Backend-specific accelerators of the layers' hot path, one subpackage per Keras backend.

Each subpackage is a plug-in: importing it registers an `sphere_tf.ops.acceleration.Accelerator`
for its backend, and `sphere_tf.ops.acceleration` imports it by name the first time a layer runs
under that backend. Nothing in the maths, layers or models imports a plug-in; every piece a plug-in
handles also has the reference implementation in `sphere_tf.ops.response`, which the plug-in's
parity tests compare against.
"""
