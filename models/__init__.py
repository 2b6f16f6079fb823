"""Model builders: arguments in, an uncompiled `keras.Model` out.

Importing this package registers the custom layers and `AugmentedModel`, so
that a saved `.keras` file loads again. RevNet's layers are TensorFlow code
(tf.custom_gradient): without TensorFlow installed (Keras on JAX alone), the
package leaves them out.
"""

import importlib.util

from models.augmented import AugmentedModel, network_of
from models.batch_norm import FusedBatchNormalization
from models.fused_activation import FusedActivation
from models.densenet import densenet, densenet_variant
from models.densenet_whitened import densenet_whitened
from models.initializers import PartialIdentity
from models.mlp import mlp
from models.mnist_cnn import mnist_cnn
from models.schedules import PiecewiseLinear
from models.rnn import PythonLoopLSTM, row_lstm
from models.simple_cnn import simple_cnn
from models.test_time import average_views, flip_averaged, test_time_views, view_metrics
from models.whitening import PatchWhitening

if importlib.util.find_spec("tensorflow") is not None:
    from models.revnet import EntryUnit, ReversibleStage, revnet, revnet_variant

__all__ = ["AugmentedModel", "EntryUnit", "FusedActivation", "FusedBatchNormalization", "PartialIdentity", "PatchWhitening", "PiecewiseLinear",
           "PythonLoopLSTM", "ReversibleStage", "densenet", "densenet_variant", "densenet_whitened",
           "average_views", "flip_averaged", "mlp", "mnist_cnn", "network_of", "revnet", "revnet_variant", "row_lstm",
           "simple_cnn", "test_time_views", "view_metrics"]
