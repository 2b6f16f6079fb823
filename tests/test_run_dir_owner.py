"""A run directory is the kit's: it never trains into a folder that holds a
user's own files (nor the working directory, unless it is empty), a run
directory made before its mark existed still resumes, and a batch too large
for memory is one line that leaves no half-made run behind. Also the paths
of `recipes notebooks --dir` and the wheel-install advice of `recipes copy`.
Each case failed before the code it tests was written."""

import errno
import os
from pathlib import Path

import keras
import pytest

from conftest import TINY
from keras_course_recipes import __main__ as cli
from keras_course_recipes import errors, harness, history_csv, rundir
from keras_course_recipes.errors import UserError
from keras_course_recipes.tools import copy as copy_tool
from keras_course_recipes.tools import notebooks


def run(capsys, *args):
    """(exit status, stdout, stderr) of `python -m keras_course_recipes ARGS`, in this process."""
    capsys.readouterr()
    status = cli.run_cli([*map(str, args)])
    out, err = capsys.readouterr()
    return status, out, err


def one_line(err):
    lines = [line for line in err.splitlines() if line.strip()]
    return len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err


def contents(folder):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


# ---------------------------------------------------------------- whose folder

def test_a_folder_holding_a_users_own_files_is_refused_and_left_as_it_was(capsys, tmp_path):
    """run.dir=mine, holding the user's metrics.json and best.keras but no
    history.csv, trained with exit 0 and replaced both."""
    mine = tmp_path / "mine"
    (mine / "checkpoints").mkdir(parents=True)
    (mine / "metrics.json").write_text("[0.91, 0.93]\n")  # the user's: not a run's dict
    (mine / "checkpoints" / "best.keras").write_bytes(b"my model")
    before = contents(mine)
    status, _, err = run(capsys, "run", "mnist_mlp", *TINY, f"run.dir={mine}")
    assert status == 2 and one_line(err), err
    assert "not a run directory" in err and "run.dir" in err, err
    assert contents(mine) == before and (mine / "metrics.json").read_text() == "[0.91, 0.93]\n"


def test_the_working_directory_is_refused_unless_it_is_empty(capsys, tmp_path, monkeypatch):
    """run.dir=. scattered a run's files among the user's own."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("mine\n")
    for given in (".", str(tmp_path)):
        status, _, err = run(capsys, "run", "mnist_mlp", *TINY, f"run.dir={given}")
        assert status == 2 and one_line(err) and "working directory" in err, err
        assert contents(tmp_path) == ["notes.txt"]


def test_an_empty_folder_or_the_empty_working_directory_is_marked_as_a_run(
        tiny_config, tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    run_ = harness.open_run(tiny_config("mnist_mlp", f"run.dir={empty}"))
    run_.close()
    assert (empty / rundir.MARK).is_file()
    monkeypatch.chdir(empty)
    # Marked: the run's own folder, which the same command resumes from inside it.
    harness.open_run(tiny_config("mnist_mlp", "run.dir=.")).close()
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    harness.open_run(tiny_config("mnist_mlp", "run.dir=.")).close()
    assert (here / rundir.MARK).is_file()


def test_a_new_run_directory_is_marked_and_a_refused_one_leaves_nothing(tiny_config, tmp_path):
    config = tiny_config("mnist_mlp", f"run.dir={tmp_path / 'new' / 'run'}")
    opened = harness.open_run(config)
    assert (opened.dir / rundir.MARK).is_file()
    opened.close()  # nothing trained: the folder it made goes
    assert not (tmp_path / "new" / "run").exists()


def test_a_run_directory_made_before_the_mark_existed_still_resumes(tiny_config, tmp_path):
    """A 1.0.0 run directory: config.yaml and history.csv (or backup/), no mark."""
    config = tiny_config("mnist_mlp", "train.epochs=2")
    old = Path(config["run"]["dir"])
    old.mkdir()
    rundir.write_config(old, config)
    (old / "history.csv").write_text("epoch,accuracy,loss,time_epoch_s,val_accuracy,val_loss\n")
    opened = harness.open_run(config)
    opened.close()
    assert opened.initial_epoch == 0 and (old / "config.yaml").exists()
    # A backup without its config.yaml is a run's: refused for what it lacks, not as a stranger's.
    (old / "config.yaml").unlink()
    (old / "history.csv").unlink()
    (old / "backup").mkdir()
    (old / "backup" / rundir.BACKUP_METADATA).write_text('{"epoch": 1, "batch": 0}')
    with pytest.raises(UserError, match="holds a run's backup or history but no config.yaml"):
        harness.open_run(config)


# ---------------------------------------------------------------- notebooks --dir

@pytest.fixture
def read_only_folder(tmp_path):
    """A folder this process cannot write in: chmod 555, or /proc where it runs as root."""
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    yield folder if not os.access(folder, os.W_OK) else Path("/proc")
    folder.chmod(0o755)


def test_notebooks_dir_a_file_is_one_line(capsys, tmp_path):
    """It was a FileExistsError traceback."""
    (tmp_path / "file").write_text("x")
    status, _, err = run(capsys, "notebooks", "--dir", tmp_path / "file")
    assert status == 2 and one_line(err) and "is a file" in err, err
    status, _, err = run(capsys, "notebooks", "--dir", tmp_path / "file" / "below")
    assert status == 2 and one_line(err), err


def test_notebooks_dir_a_read_only_folder_is_one_line(capsys, read_only_folder):
    """It was an OSError traceback."""
    status, _, err = run(capsys, "notebooks", "--dir", read_only_folder)
    assert status == 2 and one_line(err) and "--dir" in err, err
    status, _, err = run(capsys, "notebooks", "--dir", read_only_folder / "mine")
    assert status == 2 and one_line(err) and "--dir" in err, err


# ---------------------------------------------------------------- copy, from a wheel

def test_copy_of_a_yaml_recipe_from_a_wheel_names_no_checkout_path(monkeypatch, tmp_path):
    """It named configs/densenet_cifar10_95.yaml, which a wheel user does not have."""
    monkeypatch.setattr(errors, "checkout", lambda: None)  # as from an installed wheel
    with pytest.raises(UserError) as raised:
        copy_tool.copy("densenet_cifar10_95", tmp_path / "mine")
    message = str(raised.value)
    assert "configs/" not in message and ".yaml" not in message, message
    for setting in ("copy densenet_cifar10_cpu", "train.epochs=11", "train.optimizer=muon",
                    "model.widths=[128, 384, 384]"):
        assert setting in message, message
    assert not (tmp_path / "mine").exists()


# ---------------------------------------------------------------- a batch too large for memory

def test_out_of_memory_is_recognised_on_each_backend():
    import tensorflow as tf

    class XlaRuntimeError(RuntimeError):  # jaxlib's, by name: importing JAX here is not needed
        pass

    assert rundir.out_of_memory(tf.errors.ResourceExhaustedError(
        None, None, "OOM when allocating tensor with shape[4096,4096]"))
    assert rundir.out_of_memory(XlaRuntimeError("RESOURCE_EXHAUSTED: Out of memory while "
                                                "trying to allocate 17179869184 bytes."))
    assert rundir.out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert rundir.out_of_memory(RuntimeError("[enforce fail at alloc_cpu.cpp:117] "
                                             "DefaultCPUAllocator: not enough memory: you "
                                             "tried to allocate 1099511627776 bytes."))
    assert not rundir.out_of_memory(tf.errors.ResourceExhaustedError(
        None, None, "events.out.tfevents; No space left on device"))  # a full disk
    assert not rundir.out_of_memory(RuntimeError("shapes do not match"))
    assert not rundir.out_of_memory(OSError(errno.ENOSPC, "No space left on device"))


class FailsToAllocate(keras.callbacks.Callback):
    """Stands in for an allocation that fails as batch `batch` of epoch `epoch` starts."""

    def __init__(self, epoch, batch=0):
        super().__init__()
        self.epoch, self.batch, self._now = epoch, batch, 0

    def on_epoch_begin(self, epoch, logs=None):
        self._now = epoch

    def on_train_batch_begin(self, batch, logs=None):
        import tensorflow as tf

        if (self._now, batch) == (self.epoch, self.batch):
            raise tf.errors.ResourceExhaustedError(
                None, None, "OOM when allocating tensor with shape[16,512] and type float")


def train_failing(capsys, monkeypatch, run_dir, epoch, *overrides):
    """The command line's run, its allocation failing at `epoch`'s first batch."""
    made = harness.callbacks
    monkeypatch.setattr(harness, "callbacks",
                        lambda run, probe=None: [*made(run, probe), FailsToAllocate(epoch)])
    return run(capsys, "run", "mnist_mlp", *TINY, f"run.dir={run_dir}", *overrides)


@pytest.mark.slow
def test_a_batch_too_large_before_the_first_epoch_is_one_line_and_leaves_no_run(
        capsys, monkeypatch, tmp_path):
    """It was a ResourceExhaustedError traceback, leaving .lock, config.yaml
    and an empty history.csv."""
    status, _, err = train_failing(capsys, monkeypatch, tmp_path / "run", 0)
    assert status == 2 and one_line(err), err
    assert "did not fit" in err and "data.batch_size=16" in err and "lower" in err, err
    assert not (tmp_path / "run").exists()
    # A folder that was there, empty: it stays, as empty as it was.
    (tmp_path / "empty").mkdir()
    status, _, err = train_failing(capsys, monkeypatch, tmp_path / "empty", 0)
    assert status == 2 and one_line(err) and "did not fit" in err, err
    assert contents(tmp_path / "empty") == []


@pytest.mark.slow
def test_a_batch_too_large_after_an_epoch_keeps_the_finished_epoch(capsys, monkeypatch,
                                                                    tmp_path):
    run_dir = tmp_path / "run"
    status, _, err = train_failing(capsys, monkeypatch, run_dir, 1, "train.epochs=2")
    assert status == 2 and one_line(err) and "did not fit" in err, err
    assert "1 finished epoch" in err and str(run_dir) in err, err
    assert history_csv.read_rows(run_dir / "history.csv")[0]["epoch"] == "0"
    assert len(history_csv.read_rows(run_dir / "history.csv")) == 1
    assert rundir.saved_epochs(run_dir / "backup") == 1 and not (run_dir / "metrics.json").exists()
