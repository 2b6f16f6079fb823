"""Model builders: arguments in, an uncompiled `keras.Model` out.

Importing this package registers the custom layers and `AugmentedModel`, so
that a saved `.keras` file loads again.
"""

from models.augmented import AugmentedModel, network_of
from models.densenet import densenet, densenet_variant
from models.mlp import mlp
from models.mnist_cnn import mnist_cnn
from models.revnet import EntryUnit, ReversibleStage, revnet, revnet_variant
from models.rnn import PythonLoopLSTM, row_lstm
from models.simple_cnn import simple_cnn
from models.test_time import flip_averaged

__all__ = ["AugmentedModel", "EntryUnit", "PythonLoopLSTM", "ReversibleStage", "densenet",
           "densenet_variant", "flip_averaged", "mlp", "mnist_cnn", "network_of", "revnet", "revnet_variant",
           "row_lstm", "simple_cnn"]
