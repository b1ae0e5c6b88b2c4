"""Fixtures of the runner tests that other test folders define: the NumPy LFW reference of the face task's CLI test."""

from tests.evaluation.conftest import lfw_reference  # noqa: F401  (a fixture)
