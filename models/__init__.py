"""Model builders: arguments in, an uncompiled `keras.Model` out."""

from models.mlp import mlp
from models.densenet import densenet, densenet_variant
from models.simple_cnn import simple_cnn

__all__ = ["densenet", "densenet_variant", "mlp", "simple_cnn"]
