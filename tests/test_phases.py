"""anchor --profile's phases: py-spy's stacks sorted into where the time went."""

import pytest

from benchmarks import phases
from keras_course_recipes.errors import UserError

RUN = "_run_module_as_main (<frozen runpy>:198);train (keras_course_recipes/harness.py:67)"
FIT = f"{RUN};run (recipes/densenet_cifar10_cpu.py:423);fit (keras/src/backend/tensorflow/trainer.py:377)"
TRACE = "func_graph_from_py_func (tensorflow/python/framework/func_graph.py:1080)"
STEP = "quick_execute (tensorflow/python/eager/execute.py:53)"
SCRIPT = "main (airbench94_muon_cpu.py:396)"


def frames(stack):
    return [(m["name"], m["file"]) for m in map(phases.FRAME.match, stack.split(";"))]


@pytest.mark.parametrize("stack, phase", [
    (f"{FIT};{STEP}", "training steps"),
    (f"{FIT};{TRACE}", "training steps"),  # the step's own tracing: Timing's trace_s moves it
    (f"{FIT};evaluate (keras/src/backend/tensorflow/trainer.py:450);{TRACE}",
     "tracing and compiling"),
    (f"{FIT};evaluate (keras/src/backend/tensorflow/trainer.py:450);{STEP}", "evaluation"),
    (f"{FIT};on_epoch_end (keras/src/callbacks/model_checkpoint.py:210);{STEP}",
     "checkpoints and logs"),
    (f"{RUN};build (recipes/densenet_cifar10_cpu.py:180);load (keras_course_recipes/data.py:90)",
     "reading images"),
    (f"{RUN};build (recipes/densenet_cifar10_cpu.py:180);adapt (keras/src/layers/x.py:1)",
     "statistics and model"),
    (f"{RUN};build (keras/src/layers/layer.py:200)", "other"),  # a layer's build is not the recipe's
    (f"{RUN};_find_and_load (<frozen importlib._bootstrap>:1176)", "imports"),
    (f"<module> (airbench94_muon_cpu.py:450);{SCRIPT};step (airbench94_muon_cpu.py:80)",
     "training steps"),
    (f"<module> (airbench94_muon_cpu.py:450);{SCRIPT};evaluate (airbench94_muon_cpu.py:335)",
     "evaluation"),
    (f"<module> (airbench94_muon_cpu.py:450);{SCRIPT};init_whiten (airbench94_muon_cpu.py:250)",
     "statistics and model"),
    ("<module> (airbench94_muon_cpu.py:450);main (somewhere_else.py:1)", "other"),
])
def test_each_stack_falls_in_its_phase(stack, phase):
    assert phases.phase_of(frames(stack)) == phase


def test_phases_are_the_main_threads_shares_of_the_wall_time(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text(
        f"thread (7): MainThread;{FIT};{STEP} 60\n"
        f"thread (7);{RUN};_find_and_load (<frozen importlib._bootstrap>:1176) 20\n"  # unnamed yet
        f"thread (7): MainThread;{FIT};evaluate (keras/src/backend/tensorflow/trainer.py:450) 20\n"
        # another thread's samples count for nothing
        f"thread (9): Thread-1;_bootstrap (threading.py:1002);run (threading.py:982);{STEP} 500\n"
        "a damaged line\n")
    seconds = phases.phases(raw, wall_s=200.0, trace_s=10.0)
    assert list(seconds) == list(phases.NAMES)
    assert seconds["training steps"] == pytest.approx(120.0 - 10.0)
    assert seconds["tracing and compiling"] == pytest.approx(10.0)
    assert seconds["evaluation"] == pytest.approx(40.0)
    assert seconds["imports"] == pytest.approx(40.0)
    assert sum(seconds.values()) == pytest.approx(200.0)


def test_no_sample_of_the_main_thread_is_one_line(tmp_path):
    raw = tmp_path / "raw.txt"
    raw.write_text("thread (9): Thread-1;f (x.py:1) 5\n")
    with pytest.raises(UserError, match="no sample of the run's main thread"):
        phases.phases(raw, wall_s=1.0)


def test_the_main_thread_is_found_unnamed_by_where_its_stacks_start(tmp_path):
    raw = tmp_path / "raw.txt"  # a process that never imported threading: no names
    raw.write_text("thread (5);<module> (airbench94_muon_cpu.py:5);main (airbench94_muon_cpu.py:3) 40\n"
                   "thread (6);_bootstrap (threading.py:1002);run (x.py:1) 40\n")
    assert phases.phases(raw, wall_s=2.0)["training steps"] == pytest.approx(2.0)
