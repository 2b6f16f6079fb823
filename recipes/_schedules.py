"""Learning-rate schedules by name (`train.schedule`), per optimizer step."""

import keras

from recipes import UserError


def learning_rate(train_config, steps_per_epoch, lr=None):
    """The learning rate per optimizer step that `train.schedule` names,
    peaking at `lr` (default `train.lr`).

    `step`: the paper's, `train.lr` divided by 10 at 50% and again at 75% of
    the steps. `cosine`: a linear warm-up over `train.warmup_epochs`, then
    cosine decay to 0. `constant`: `train.lr` throughout, after the warm-up
    if there is one.
    """
    lr = train_config["lr"] if lr is None else lr
    total = train_config["epochs"] * steps_per_epoch
    warmup = train_config["warmup_epochs"] * steps_per_epoch
    if train_config["schedule"] == "step":
        # The rate moves on once `step` passes a boundary; step n is the (n+1)th.
        return keras.optimizers.schedules.PiecewiseConstantDecay(
            boundaries=[total // 2 - 1, total * 3 // 4 - 1], values=[lr, lr / 10, lr / 100])
    if train_config["schedule"] == "constant" and not warmup:
        return lr
    if warmup >= total:
        raise UserError(f"train.warmup_epochs={train_config['warmup_epochs']} leaves "
                        f"no epoch of the {train_config['epochs']} to train after it; lower it.")
    # alpha is the floor of the decay, as a fraction of lr: 1 keeps it constant.
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0 if warmup else lr, decay_steps=total - warmup,
        alpha=1.0 if train_config["schedule"] == "constant" else 0.0,
        warmup_target=lr if warmup else None, warmup_steps=warmup)
