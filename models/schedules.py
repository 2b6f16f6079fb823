"""A learning-rate schedule that Keras lacks: linear between points (cifar10-airbench's triangle)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="models")
class PiecewiseLinear(keras.optimizers.schedules.LearningRateSchedule):
    """The learning rate interpolated linearly between `(step, value)` points,
    and held at the last value after the last point.

    Keras has `PiecewiseConstantDecay` (steps) and warm-up plus cosine decay,
    not this. cifar10-airbench's schedule is a triangle: from 0.2 of the peak
    up to the peak at 23% of the steps, then down to 0.07 of it at the end.

    Args:
        steps: the points' optimizer steps, increasing, the first 0.
        values: the learning rate at each point.
        stop: from this step on, the rate is 0 (airbench stops training its
            whitening layer's bias after 3 epochs); None never stops.

    Example:

    ```python
    total = 10 * steps_per_epoch
    schedule = PiecewiseLinear([0, int(0.23 * total), total], [0.2 * lr, lr, 0.07 * lr])
    ```
    """

    def __init__(self, steps, values, stop=None):
        steps, values = [int(s) for s in steps], [float(v) for v in values]
        if (len(steps) != len(values) or len(steps) < 2 or steps[0] != 0
                or any(b <= a for a, b in zip(steps, steps[1:]))):
            raise ValueError("PiecewiseLinear needs two or more points with increasing steps "
                             f"from 0, received: steps={steps}, values={values}")
        self.steps, self.values, self.stop = steps, values, stop

    def __call__(self, step):
        step = ops.cast(step, "float32")
        rate = ops.convert_to_tensor(self.values[-1], "float32")
        # From the last segment back, so that the segment `step` is in wins.
        for start, end, low, high in reversed(list(zip(self.steps, self.steps[1:],
                                                       self.values, self.values[1:]))):
            along = (step - start) / (end - start)
            rate = ops.where(step < end, low + (high - low) * along, rate)
        return rate if self.stop is None else ops.where(step < self.stop, rate, 0.0)

    def get_config(self):
        return {"steps": self.steps, "values": self.values, "stop": self.stop}
