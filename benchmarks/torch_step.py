"""`backends`' worker for PyTorch's own step: airbench94_muon's network and
optimizers, from the user's copy of the script, timed as compare times Keras'.

    python -m benchmarks.torch_step '{"script": ..., "batch": ..., "steps": ..., ...}'

The script is read with `anchor`'s CPU patches and run as a module (its
`__main__` block, the training, is not). One step is what its `main` does
per batch: the forward pass and the summed, label-smoothed loss under
bfloat16 autocast (with `mixed_bfloat16`), backward, then its fused Nesterov
SGD and Muon, on random images in its channels-last layout. Its loader's
augmentation is left out: it crops and flips the whole training set once
per epoch, not per step. Each step is timed by the wall clock; the first
and `warmup_steps` more are left out, as Keras' rows leave theirs.
"""

import contextlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks import anchor


def measure(job):
    import torch
    import torch.nn.functional as F

    # What the anchor's prelude reads: how many runs, and whether to autocast to bfloat16.
    os.environ.setdefault("ANCHOR_RUNS", "1")
    os.environ["ANCHOR_PRECISION"] = job["precision"]
    text, _ = anchor.patched(job["script"])
    airbench = {"__name__": "airbench94_muon"}
    exec(compile(text, job["script"], "exec"), airbench)

    torch.manual_seed(0)
    batch = job["batch"]
    model = airbench["CifarNet"]().to(memory_format=torch.channels_last)
    model.reset()
    images = torch.randn(batch, 3, 32, 32).to(memory_format=torch.channels_last)
    labels = torch.randint(0, 10, (batch,))
    model.init_whiten(images[:500])
    # main's optimizers, at its rates: SGD for the biases and the head, Muon for the filters.
    bias_lr, head_lr, wd = 0.053, 0.67, 2e-6 * batch
    filters = [p for p in model.parameters() if len(p.shape) == 4 and p.requires_grad]
    norm_biases = [p for n, p in model.named_parameters() if "norm" in n and p.requires_grad]
    optimizers = [
        torch.optim.SGD([dict(params=[model.whiten.bias], lr=bias_lr, weight_decay=wd / bias_lr),
                         dict(params=norm_biases, lr=bias_lr, weight_decay=wd / bias_lr),
                         dict(params=[model.head.weight], lr=head_lr, weight_decay=wd / head_lr)],
                        momentum=0.85, nesterov=True, fused=True),
        airbench["Muon"](filters, lr=0.24, momentum=0.6, nesterov=True)]
    autocast = (torch.autocast("cpu", dtype=torch.bfloat16)
                if job["precision"] == "mixed_bfloat16" else contextlib.nullcontext())
    model.train()
    times = []
    for _ in range(1 + job["warmup_steps"] + job["steps"]):
        started = time.perf_counter()
        with autocast:
            outputs = model(images, whiten_bias_grad=True)
            loss = F.cross_entropy(outputs, labels, label_smoothing=0.2, reduction="sum")
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()
        model.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - started)
    steady = sorted(1e3 * t for t in times[1 + job["warmup_steps"]:])
    median = statistics.median(steady)
    row = {"step_ms_median": median, "step_ms_p10": steady[len(steady) // 10],
           "step_ms_p90": steady[(9 * len(steady)) // 10], "images_per_s": batch / median * 1e3,
           "trace_s": max(times[0] - median / 1e3, 0.0), "mode_used": "torch eager",
           "versions": {"torch": torch.__version__}, "threads": torch.get_num_threads()}
    Path(job["out"]).write_text(json.dumps(row, indent=2))


if __name__ == "__main__":
    measure(json.loads(sys.argv[1]))
