"""airbench94_muon's training, in PyTorch, with each way the recipe differs
from it a switch: which of them costs or buys accuracy at 8 epochs.

`densenet_cifar10_cpu` on Muon's 8-epoch schedule (docs/cpu-hour.md) is
airbench94_muon's method in Keras, with a few differences: a DenseNet
(64, 192, 192 maps, each layer's input joined to its output) rather than
airbench's (64, 256, 256) chain, batch 1024 rather than 2000, Lookahead,
batch norm's epsilon 1e-5 rather than 1e-12, and Keras' head (a Glorot draw,
logits / 9) rather than airbench's (unit-deviation draw, logits / 256).
One 8-epoch run takes 15 minutes on two CPU cores and seeds differ by 0.1
to 0.4 point, so those differences cannot be told apart there; on a GPU a
run takes seconds. This file is airbench94_muon.py's loop written out
(KellerJordan/cifar10-airbench, MIT licence: its Muon, loader, network,
schedule and test-time views), with the same bfloat16 autocast that
`python -m benchmarks anchor` gives it on a CPU, and each difference a
variant: every variant trains `--runs` times on the same 45,000 images and
is measured on the same 5,000 held-out ones, variants interleaved run by run
so that a slow stretch of the machine falls on all of them.

    python -m benchmarks.airbench_ablation --data DIR --runs 8 [--variants a,b]

`DIR` is the recipes' `data.path`: a folder of `train/<class>/*` images,
such as the lossless CIFAR-10 archive unpacked (or, where that is too large
to copy, its arrays as `images.npy`, uint8 N x 32 x 32 x 3, and
`labels.npy`). `--synthetic` trains on random images instead (a check that
it runs, on any device). It needs PyTorch and Pillow, not TensorFlow or
Keras (`benchmarks/__init__.py`, which `-m` imports first, imports nothing), so
it runs on a GPU machine that has PyTorch alone.
"""

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

# airbench94_muon's settings; each variant changes some of them.
# Learning rates are per image of a summed loss, airbench's convention, so
# that they mean the same at any batch size.
AIRBENCH = dict(widths=(64, 256, 256), dense=False, batch=2000, bn_eps=1e-12, head="airbench",
                head_lr=0.67, bias_lr=0.053, whiten_lr=0.053, lookahead=False,
                tta_average="logits", muon_lr=0.24, epochs=8)
# The recipe's 8-epoch Muon command (docs/cpu-hour.md), in the same loop: its
# rates are for a mean loss over batch 1024 (train.lr 1.5, offsets at 64x).
RECIPE = dict(AIRBENCH, widths=(64, 192, 192), dense=True, batch=1024, bn_eps=1e-5,
              head="keras", head_lr=1.5 / 1024, bias_lr=64 * 1.5 / 1024, whiten_lr=1.5 / 1024,
              lookahead=True)
# The recipe's loop on airbench's network.
AIRBENCH_NET = dict(RECIPE, widths=(64, 256, 256), dense=False)
VARIANTS = {
    "airbench": AIRBENCH,
    "recipe": RECIPE,
    # The recipe with one of airbench's settings back.
    "recipe-batch2000": dict(RECIPE, batch=2000),
    "recipe-no-lookahead": dict(RECIPE, lookahead=False),
    "recipe-eps1e-12": dict(RECIPE, bn_eps=1e-12),
    "recipe-airbench-head": dict(RECIPE, head="airbench", head_lr=0.67),
    "recipe-airbench-bias-rates": dict(RECIPE, bias_lr=0.053, whiten_lr=0.053),
    "recipe-airbench-net": AIRBENCH_NET,
    # Candidates the recipe could take.
    "recipe-probabilities": dict(RECIPE, tta_average="probabilities"),
    "recipe-muon0.3": dict(RECIPE, muon_lr=0.3),
    # What might add to the recipe's loop on airbench's network.
    "recipe-airbench-net-no-lookahead": dict(AIRBENCH_NET, lookahead=False),
    "recipe-airbench-net-muon0.2": dict(AIRBENCH_NET, muon_lr=0.2),
    "recipe-airbench-net-batch1536": dict(AIRBENCH_NET, batch=1536),
    "recipe-airbench-net-batch768": dict(AIRBENCH_NET, batch=768),
}
MEAN = torch.tensor((0.4914, 0.4822, 0.4465))
STD = torch.tensor((0.2470, 0.2435, 0.2616))


def zeropower_via_newtonschulz5(G, steps=3, eps=1e-7):  # airbench94_muon's
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G.bfloat16()
    X /= (X.norm() + eps)
    if G.size(0) > G.size(1):
        X = X.T
    for _ in range(steps):
        A = X @ X.T
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(0) > G.size(1):
        X = X.T
    return X


class Muon(torch.optim.Optimizer):  # airbench94_muon's
    def __init__(self, params, lr, momentum, nesterov=True):
        super().__init__(params, dict(lr=lr, momentum=momentum, nesterov=nesterov))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(g))
                buf.mul_(group["momentum"]).add_(g)
                g = g.add(buf, alpha=group["momentum"]) if group["nesterov"] else buf
                p.mul_(len(p) ** 0.5 / p.norm())
                update = zeropower_via_newtonschulz5(g.reshape(len(g), -1)).view(g.shape)
                p.add_(update.to(p.dtype), alpha=-group["lr"])


class BatchNorm(nn.BatchNorm2d):  # airbench's: Torch's momentum 0.4, no trained scale
    def __init__(self, channels, eps):
        super().__init__(channels, eps=eps, momentum=0.4)
        self.weight.requires_grad = False


class Conv(nn.Conv2d):  # airbench's: 3x3, no bias, the first filters identities
    def __init__(self, channels_in, channels_out):
        super().__init__(channels_in, channels_out, 3, padding="same", bias=False)

    def reset_parameters(self):
        super().reset_parameters()
        torch.nn.init.dirac_(self.weight.data[:self.weight.size(1)])


class Block(nn.Module):
    """conv, pool, BN, GELU, then conv, BN, GELU; with `dense`, the second
    one's maps are joined to its input's (the recipe's dense block)."""

    def __init__(self, channels_in, width, bn_eps, dense):
        super().__init__()
        self.conv1, self.norm1 = Conv(channels_in, width), BatchNorm(width, bn_eps)
        self.conv2, self.norm2 = Conv(width, width), BatchNorm(width, bn_eps)
        self.dense = dense
        self.channels_out = 2 * width if dense else width

    def forward(self, x):
        x = F.gelu(self.norm1(F.max_pool2d(self.conv1(x), 2)))
        y = F.gelu(self.norm2(self.conv2(x)))
        return torch.cat([x, y], 1) if self.dense else y


class Net(nn.Module):
    def __init__(self, widths, dense, bn_eps, head):
        super().__init__()
        self.whiten = nn.Conv2d(3, 24, 2, padding=0, bias=True)
        self.whiten.weight.requires_grad = False
        blocks, channels = [], 24
        for width in widths:
            blocks.append(Block(channels, width, bn_eps, dense))
            channels = blocks[-1].channels_out
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(channels, 10, bias=False)
        self.head_kind = head
        self.scale = 1 / channels if head == "airbench" else 1 / 9

    def reset(self):
        for module in self.modules():
            if isinstance(module, (nn.Conv2d, nn.BatchNorm2d, nn.Linear)):
                module.reset_parameters()
        w = self.head.weight.data
        if self.head_kind == "airbench":
            w *= 1 / w.std()  # a unit-deviation draw
        else:  # Keras' Dense: Glorot uniform
            bound = math.sqrt(6 / sum(w.shape))
            w.uniform_(-bound, bound)

    def init_whiten(self, images, eps=5e-4):  # airbench's
        c, (h, w) = images.shape[1], self.whiten.weight.shape[2:]
        patches = images.unfold(2, h, 1).unfold(3, w, 1).transpose(1, 3).reshape(-1, c, h, w).float()
        flat = patches.view(len(patches), -1)
        eigenvalues, eigenvectors = torch.linalg.eigh(flat.T @ flat / len(flat), UPLO="U")
        scaled = eigenvectors.T.reshape(-1, c, h, w) / torch.sqrt(eigenvalues.view(-1, 1, 1, 1) + eps)
        self.whiten.weight.data[:] = torch.cat((scaled, -scaled))

    def forward(self, x, whiten_bias_grad=True):
        b = self.whiten.bias
        x = F.gelu(F.conv2d(x, self.whiten.weight, b if whiten_bias_grad else b.detach()))
        x = self.blocks(x).amax((2, 3))  # airbench's MaxPool2d(3) on 3x3 maps
        return self.head(x) * self.scale


def batch_crop(images, size):  # airbench's, r <= 2
    r = (images.size(-1) - size) // 2
    shifts = torch.randint(-r, r + 1, size=(len(images), 2), device=images.device)
    out = torch.empty((len(images), 3, size, size), device=images.device, dtype=images.dtype)
    for sy in range(-r, r + 1):
        for sx in range(-r, r + 1):
            mask = (shifts[:, 0] == sy) & (shifts[:, 1] == sx)
            out[mask] = images[mask, :, r + sy:r + sy + size, r + sx:r + sx + size]
    return out


def batches(labels, batch, epoch, padded):
    """airbench's epoch: fresh 2-pixel crops of the reflected-padded,
    once randomly flipped images, mirrored as a whole on odd epochs, shuffled."""
    epoch_images = batch_crop(padded, 32)
    if epoch % 2 == 1:
        epoch_images = epoch_images.flip(-1)
    order = torch.randperm(len(epoch_images), device=epoch_images.device)
    for i in range(len(epoch_images) // batch):
        index = order[i * batch:(i + 1) * batch]
        yield epoch_images[index], labels[index]


def views(model, images, average):
    """airbench's six test-time views, averaged as logits or probabilities."""
    def one(x):
        logits = model(x).float()
        return logits if average == "logits" else logits.softmax(1)

    def mirror(x):
        return 0.5 * one(x) + 0.5 * one(x.flip(-1))

    padded = F.pad(images, (1,) * 4, "reflect")
    shifted = 0.5 * mirror(padded[:, :, 0:32, 0:32]) + 0.5 * mirror(padded[:, :, 2:34, 2:34])
    return 0.5 * mirror(images) + 0.5 * shifted


def train_once(settings, data, seed, device):
    """One run of `settings` (8 epochs unless --epochs); its held-out accuracy on one view and on six."""
    torch.manual_seed(seed)
    train_images, train_labels, held_images, held_labels = data
    batch, epochs = settings["batch"], settings["epochs"]
    model = Net(settings["widths"], settings["dense"], settings["bn_eps"], settings["head"])
    model = model.to(device).to(memory_format=torch.channels_last)
    model.reset()
    model.init_whiten(train_images[:5000])
    steps_per_epoch = len(train_images) // batch
    total, whiten_steps = epochs * steps_per_epoch, 3 * steps_per_epoch
    wd = 2e-6 * batch
    bias_lr, head_lr, whiten_lr = settings["bias_lr"], settings["head_lr"], settings["whiten_lr"]
    filters = [p for p in model.parameters() if p.ndim == 4 and p.requires_grad]
    norm_biases = [p for n, p in model.named_parameters() if "norm" in n and p.requires_grad]
    sgd = torch.optim.SGD([dict(params=[model.whiten.bias], lr=whiten_lr, weight_decay=wd / whiten_lr),
                           dict(params=norm_biases, lr=bias_lr, weight_decay=wd / bias_lr),
                           dict(params=[model.head.weight], lr=head_lr, weight_decay=wd / head_lr)],
                          momentum=0.85, nesterov=True)
    muon = Muon(filters, lr=settings["muon_lr"], momentum=0.6)
    for optimizer in (sgd, muon):
        for group in optimizer.param_groups:
            group["initial_lr"] = group["lr"]
    # The recipe's Lookahead: every float weight and statistic, from epoch 3.
    averaged = [t for t in [*model.parameters(), *model.buffers()] if t.is_floating_point()]
    average = None

    flipped = torch.where((torch.rand(len(train_images), device=device) < 0.5).view(-1, 1, 1, 1),
                          train_images.flip(-1), train_images)
    padded = F.pad(flipped, (2,) * 4, "reflect")
    step = 0
    for epoch in range(epochs):
        model.train()
        if settings["lookahead"] and epoch >= 3 and average is None:
            average = [t.detach().clone() for t in averaged]
        for inputs, labels in batches(train_labels, batch, epoch, padded):
            with torch.autocast(device.type, dtype=torch.bfloat16):
                outputs = model(inputs, whiten_bias_grad=step < whiten_steps)
                loss = F.cross_entropy(outputs.float(), labels, label_smoothing=0.2, reduction="sum")
            loss.backward()
            sgd.param_groups[0]["lr"] = sgd.param_groups[0]["initial_lr"] * max(0, 1 - step / whiten_steps)
            for group in sgd.param_groups[1:] + muon.param_groups:
                group["lr"] = group["initial_lr"] * (1 - step / total)
            sgd.step()
            muon.step()
            model.zero_grad(set_to_none=True)
            step += 1
            if average is not None and (step % 5 == 0 or step % steps_per_epoch == 0):
                # Every 5 steps the average moves towards the weights, and the
                # weights to it; at an epoch's end, the weights become it.
                keep = 0.95 ** 5 * (step / total) ** 3 if step % 5 == 0 else 1.0
                with torch.no_grad():
                    for a, t in zip(average, averaged):
                        a.lerp_(t, 1 - keep)
                        t.copy_(a)
    model.eval()
    with torch.no_grad(), torch.autocast(device.type, dtype=torch.bfloat16):
        one_view = torch.cat([model(x).float() for x in held_images.split(2000)])
        six = torch.cat([views(model, x, settings["tta_average"]) for x in held_images.split(2000)])
    return ((one_view.argmax(1) == held_labels).float().mean().item(),
            (six.argmax(1) == held_labels).float().mean().item())


def read_folder(folder):
    """(images, labels) of `folder`'s `train/<class>/*` images, as the
    recipes' `data.source=folder` reads them, decoded by Pillow. In the
    official training order when every file name starts with its index (the
    lossless CIFAR-10 archive's `<index>_<class>.png`), else by class and name;
    or `images.npy` and `labels.npy` if the folder holds them instead."""
    import numpy as np
    if (folder / "images.npy").exists():
        return np.load(folder / "images.npy"), np.load(folder / "labels.npy")
    from PIL import Image
    classes = sorted(p.name for p in (folder / "train").iterdir() if p.is_dir())
    files = [(c, f) for c, name in enumerate(classes) for f in sorted((folder / "train" / name).iterdir())]
    indices = [f.name.split("_")[0] for _, f in files]
    if all(index.isdigit() for index in indices):
        files = [files[i] for i in np.argsort([int(index) for index in indices], kind="stable")]
    images = np.stack([np.asarray(Image.open(f).convert("RGB")) for _, f in files])
    return images, np.array([c for c, _ in files])


def load(arguments, device):
    """(train images, labels, held-out images, labels) on `device`: a seeded
    tenth of the images held out, the images normalized as airbench does."""
    if arguments.synthetic:
        generator = torch.Generator().manual_seed(0)
        images = torch.randint(0, 256, (arguments.synthetic, 32, 32, 3), generator=generator,
                               dtype=torch.uint8)
        labels = torch.randint(0, 10, (arguments.synthetic,), generator=generator)
    else:
        images, labels = read_folder(Path(arguments.data).expanduser())
        images, labels = torch.from_numpy(images), torch.from_numpy(labels.astype("int64"))
    held_out = max(1, len(images) // 10)  # 5,000 of CIFAR-10's 50,000, as the recipe holds out
    order = torch.randperm(len(images), generator=torch.Generator().manual_seed(0))
    images = ((images.float() / 255 - MEAN) / STD).permute(0, 3, 1, 2)
    images = images.to(device).contiguous(memory_format=torch.channels_last)
    labels = labels.to(device)
    train, held = order[held_out:].to(device), order[:held_out].to(device)
    return images[train], labels[train], images[held], labels[held]


def parse(argv=None):
    """The command line's arguments, with `names`: the variants to run;
    a wrong one stops here in one line (argparse's exit status 2)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.airbench_ablation",
                                     description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data", help="a folder of train/<class>/* images (data.path's)")
    source.add_argument("--synthetic", type=int, help="train on this many random images")
    parser.add_argument("--runs", type=int, default=8, help="runs of each variant")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--epochs", type=int, help="instead of 8 (a short check)")
    parser.add_argument("--out", help="append each run here as a JSON line")
    arguments = parser.parse_args(argv)
    for option in ("runs", "epochs", "synthetic"):
        if getattr(arguments, option) is not None and getattr(arguments, option) < 1:
            parser.error(f"--{option} must be at least 1, got {getattr(arguments, option)}")
    arguments.names = arguments.variants.split(",")
    unknown = [n for n in arguments.names if n not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    if arguments.data:
        folder = Path(arguments.data).expanduser()
        if not ((folder / "train").is_dir() or (folder / "images.npy").is_file()):
            parser.error(f"--data {arguments.data} holds neither train/<class>/* images nor "
                         "images.npy: give the folder data.path names.")
    return arguments


def main(argv=None):
    arguments = parse(argv)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    data = load(arguments, device)
    batch = max(VARIANTS[name]["batch"] for name in arguments.names)
    if len(data[0]) < batch:
        raise SystemExit(f"error: {len(data[0]):,} training images, fewer than one batch of "
                         f"{batch:,}: give more images.")
    print(f"{len(data[0]):,} training images, {len(data[2]):,} held out, on {device}", flush=True)
    results = {name: [] for name in arguments.names}
    for run in range(arguments.runs):
        for name in arguments.names:
            settings = dict(VARIANTS[name])
            if arguments.epochs:
                settings["epochs"] = arguments.epochs
            start = time.perf_counter()
            one, six = train_once(settings, data, seed=run, device=device)
            seconds = time.perf_counter() - start
            results[name].append(six)
            print(f"{name:22s} run {run}: {one:.4f} one view, {six:.4f} six views, {seconds:.1f} s",
                  flush=True)
            if arguments.out:
                with open(arguments.out, "a") as out:
                    out.write(json.dumps(dict(variant=name, run=run, one_view=one, six_views=six,
                                              seconds=seconds)) + "\n")
    print("\n| variant | runs | six-view accuracy, mean | standard deviation |\n|---|---|---|---|")
    for name, accuracies in results.items():
        spread = statistics.stdev(accuracies) if len(accuracies) > 1 else float("nan")
        print(f"| {name} | {len(accuracies)} | {100 * statistics.mean(accuracies):.2f}% "
              f"| {100 * spread:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
