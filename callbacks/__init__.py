"""Keras callbacks this repository adds to what `keras.callbacks` provides."""

from callbacks.execution_mode_check import ExecutionModeCheck
from callbacks.timing import Timing

__all__ = ["ExecutionModeCheck", "Timing"]
