"""Backend-specific plug-ins (see sphere_tf/backends/tensorflow)."""
