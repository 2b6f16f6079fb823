"""Model builders: arguments in, an uncompiled `keras.Model` out."""

from models.mlp import mlp
from models.simple_cnn import simple_cnn

__all__ = ["mlp", "simple_cnn"]
