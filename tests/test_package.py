"""The kit as a package (pyproject.toml): what `pip install` gives a student who
has no clone, from a wheel, an editable clone or a git URL, and the
`recipes` command it adds, run from a folder that is not a clone."""

import subprocess
import sys
import zipfile

import pytest

import keras_course_recipes as kit
from conftest import ROOT, kit_source


@pytest.mark.slow  # pip builds the wheel in a process
def test_the_wheel_holds_the_kit_and_the_yaml_recipes(fresh_pythons):
    names = zipfile.ZipFile(fresh_pythons.wheel).namelist()
    for path in ("runs.py", "settings.py", "rundir.py", "errors.py", "tools/compare.py",
                 "recipes/mnist_mlp.py", "models/mlp.py", "callbacks/timing.py",
                 "configs/densenet_cifar10_95.yaml"):
        assert f"keras_course_recipes/{path}" in names, path
    # One top-level import package, the project's own: no `recipes`, `models` or `callbacks`.
    assert {name.split("/")[0] for name in names if not name.split("/")[0].endswith(
        ".dist-info")} == {"keras_course_recipes"}
    # The record tools are the checkout's (benchmarks/), not a student's.
    assert not [name for name in names if "anchor" in name or "airbench" in name]
    entry_points = next(name for name in names if name.endswith("entry_points.txt"))
    assert "recipes = keras_course_recipes.__main__:entry_point" in zipfile.ZipFile(
        fresh_pythons.wheel).read(entry_points).decode()


def recipes_command(python, *args, cwd):
    return subprocess.run([str(python.parent / "recipes"), *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_the_recipes_command_of_the_wheel_works_from_any_folder(fresh_pythons, tmp_path):
    """`python -m keras_course_recipes` said `No module named recipes` outside the checkout."""
    listed = recipes_command(fresh_pythons.kit, "list", cwd=tmp_path)
    assert listed.returncode == 0 and "densenet_cifar10_95" in listed.stdout, listed.stderr
    shown = recipes_command(fresh_pythons.kit, "show", "densenet_cifar10_95", cwd=tmp_path)
    assert shown.returncode == 0 and "recipe: densenet_cifar10_95" in shown.stdout, shown.stderr
    refused = recipes_command(fresh_pythons.kit, "run", "mnist_mpl", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr.startswith("error: Unknown recipe 'mnist_mpl'.")
    version = recipes_command(fresh_pythons.kit, "--version", cwd=tmp_path)
    assert version.stdout == f"keras-course-recipes {kit.__version__}\n", version.stderr
    # The wheel's metadata reads its version from the same line, and ships the license.
    metadata = next(name for name in zipfile.ZipFile(fresh_pythons.wheel).namelist()
                    if name.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(fresh_pythons.wheel).read(metadata).decode()
    assert f"\nVersion: {kit.__version__}\n" in text and "License-File: LICENSE" in text


def test_the_version_is_printed_and_recorded_where_results_are():
    from keras_course_recipes import __main__ as cli, machine

    with pytest.raises(SystemExit) as exit_:
        cli.build_parser().parse_args(["--version"])
    assert exit_.value.code == 0
    assert machine.versions()["keras-course-recipes"] == kit.__version__
    assert f"## {kit.__version__}" in (ROOT / "CHANGELOG.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize("how", ["editable", "git URL"])
def test_pip_installs_the_kit_from_a_clone_or_its_git_url(how, tmp_path):
    """`pip install -e .` (what `make setup` does) and `pip install git+URL`, into
    a fresh environment that sees the pinned stack; `--no-deps`: nothing downloads."""
    import sysconfig

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")],
                   check=True)
    python = tmp_path / "env" / "bin" / "python"
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True).stdout.strip()
    (tmp_path / purelib / "pinned_stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    if how == "editable":
        source = ["--editable", str(kit_source(tmp_path / "checkout"))]
    else:  # the committed tree, as a git URL gives it
        clone = tmp_path / "clone"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        source = [f"keras-course-recipes @ git+file://{clone}"]
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                                "--quiet", "--no-deps", *source], capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr[-3000:]
    where = subprocess.run([str(python), "-c", "import keras_course_recipes as kit; "
                            "print(kit.CONFIGS_DIR, kit.RECIPES_DIR, len(kit.names()))"],
                           cwd=tmp_path, capture_output=True, text=True)
    configs, lessons, count = where.stdout.split()
    assert int(count) == len(kit.names()), where.stderr
    if how == "editable":  # the checkout's folders, mapped into the package
        assert (configs, lessons) == (str(tmp_path / "checkout" / "configs"),
                                      str(tmp_path / "checkout" / "recipes"))
    else:
        assert configs.endswith("site-packages/keras_course_recipes/configs")
        assert lessons.endswith("site-packages/keras_course_recipes/recipes")


@pytest.mark.slow
def test_a_recipe_trains_where_fcntl_does_not_exist(tmp_path, fresh_pythons):
    """Windows has no fcntl; keras_course_recipes/runs.py imported it at the top, so a recipe
    could not even be imported there."""
    import shutil

    from test_copy import TINY_COPY

    shutil.copyfile(ROOT / "recipes" / "mnist_mlp.py", tmp_path / "mnist_mlp.py")
    script = ("import runpy, sys; sys.modules['fcntl'] = None; "  # import fcntl now fails
              "sys.argv = ['mnist_mlp.py', *sys.argv[1:]]; "
              "runpy.run_path('mnist_mlp.py', run_name='__main__')")
    result = subprocess.run([str(fresh_pythons.kit), "-c", script, *TINY_COPY], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and "/metrics.json" in result.stdout, result.stderr[-3000:]
    assert "only soft file lock is available" in result.stderr  # filelock's one line


def test_without_fcntl_a_second_process_is_still_refused(tmp_path, monkeypatch):
    import filelock

    from keras_course_recipes import rundir

    from keras_course_recipes.errors import UserError

    monkeypatch.setattr(filelock, "FileLock", filelock.SoftFileLock)  # what it is without fcntl
    first = rundir.lock_run_dir(tmp_path)
    with pytest.raises(UserError, match="is in use by another process: two processes"):
        rundir.lock_run_dir(tmp_path)
    first.release()
    assert not (tmp_path / ".lock").exists()


def test_a_missing_part_is_advised_as_this_install_brings_it(tmp_path, monkeypatch):
    """A checkout's make setup installs the pinned stack; elsewhere, the extra."""
    from keras_course_recipes import errors

    assert errors.install_advice("plot") == "make setup"
    assert "requirements-torch.txt" in errors.install_advice("torch")
    monkeypatch.setattr(errors, "__file__",
                        str(tmp_path / "site-packages" / "keras_course_recipes" / "errors.py"))
    assert errors.install_advice("plot") == 'pip install "keras-course-recipes[plot]"'


# Each missing part, blocked in the wheel's environment (`sys.modules[name] = None`:
# import fails, find_spec finds nothing), and the line the installed kit gives.
MISSING = [
    (["tensorflow", "matplotlib"], ["-m", "keras_course_recipes", "compare", "mnist_mlp"],
     'error: compare needs TensorFlow, which is not installed here: pip install '
     '"keras-course-recipes[tensorflow]"; without it, `recipes run NAME execution.backend=jax` '
     'trains the recipes that run on JAX.'),
    (["matplotlib"], ["-m", "keras_course_recipes", "curves", "runs"],
     'error: curves draws its PNGs with matplotlib, which is not installed here: pip install '
     '"keras-course-recipes[plot]".'),
    (["torch"], ["-m", "keras_course_recipes", "run", "mnist_mlp", "execution.backend=torch"],
     'error: execution.backend=torch needs torch, which is not installed in this environment: '
     'pip install "keras-course-recipes[torch]".'),
    (["tensorflow"], ["mnist_mlp.py"],
     'error: tensorflow, Keras\' default backend, is not installed here: pip install '
     '"keras-course-recipes[tensorflow]", or run KERAS_BACKEND=jax python mnist_mlp.py.'),
]


@pytest.mark.slow
@pytest.mark.parametrize("blocked, argv, line", MISSING, ids=lambda item: str(item)[:40])
def test_the_installed_kit_names_the_extra_that_brings_a_missing_part(blocked, argv, line,
                                                                     tmp_path, fresh_pythons):
    import shutil

    shutil.copyfile(ROOT / "recipes" / "mnist_mlp.py", tmp_path / "mnist_mlp.py")
    script = (f"import runpy, sys; sys.modules.update(dict.fromkeys({blocked!r})); "
              f"sys.argv = {argv!r}; "
              + ("runpy.run_module('keras_course_recipes', run_name='__main__')" if argv[0] == "-m" else
                 f"runpy.run_path({argv[0]!r}, run_name='__main__')"))
    if argv[0] == "-m":
        script = script.replace(f"sys.argv = {argv!r}", f"sys.argv = {['recipes', *argv[2:]]!r}")
    result = subprocess.run([str(fresh_pythons.kit), "-c", script], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == line, \
        result.stderr[-3000:]
    assert "Traceback" not in result.stderr
