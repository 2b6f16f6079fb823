"""The record and measurement tools, run from a checkout, never installed: the
kit's wheel holds what a student uses, and these measure the recipes against
cifar10-airbench (PyTorch) and across Keras' backends.

    python -m benchmarks anchor NAME --script AIRBENCH.py [runs=N] [key=value ...]
    python -m benchmarks backends NAME [variants=...] [steps=N] [--script airbench94_muon.py]
    python -m benchmarks.airbench_ablation --data DIR --runs 8 [--variants a,b]

`make anchor` and `make benchmark-backends` run the first two. This file
imports nothing: the ablation runs where PyTorch alone is installed.
"""
