"""Keras callbacks this repository adds to what `keras.callbacks` provides."""

from callbacks.diagnostics import Diagnostics
from callbacks.divergence_stop import DivergenceStop, TrainingDiverged
from callbacks.epoch_seeds import EpochSeeds
from callbacks.execution_mode_check import ExecutionModeCheck, execution_mode
from callbacks.graph_writer import GraphWriter
from callbacks.lookahead import Lookahead
from callbacks.run_estimate import RunEstimate
from callbacks.timing import Timing

__all__ = ["Diagnostics", "DivergenceStop", "EpochSeeds", "ExecutionModeCheck", "GraphWriter",
           "Lookahead", "RunEstimate", "Timing", "TrainingDiverged", "execution_mode"]
