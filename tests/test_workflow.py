"""The fork's CI workflow is one GitHub Actions accepts: checked against the schema
check-jsonschema ships (actionlint cannot be installed offline), in this process."""

import pytest
from check_jsonschema import main as check_jsonschema

from conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


def lint(path):
    """check-jsonschema's exit status for `path` against GitHub's workflow schema."""
    with pytest.raises(SystemExit) as exit_:
        check_jsonschema(["--builtin-schema", "vendor.github-workflows", str(path)])
    return exit_.value.code


def test_there_is_a_workflow_and_it_runs_the_fast_set_and_ci():
    text = "".join(path.read_text() for path in WORKFLOWS)
    assert '-m "not slow" tests' in text and "bash .ci/run" in text
    assert all(system in text for system in ("ubuntu-latest", "macos-latest", "windows-latest"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda path: path.name)
def test_each_workflow_passes_the_schema(path):
    assert lint(path) == 0


def test_the_schema_check_fails_a_misspelt_key(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(WORKFLOWS[0].read_text().replace("runs-on:", "runs_on:", 1))
    assert lint(broken) != 0


def ci_commands():
    """The commands .ci/run runs, less its shell set-up (comments, `set`, `cd`, the
    version line)."""
    lines = (line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines())
    return [line for line in lines if line and not line.startswith(("#", "set ", "cd "))
            and line != "python3 --version"]


def test_ci_runs_the_readmes_set_up_and_test_commands_and_nothing_else():
    """CI is the README's own commands, so a missing install step fails CI: `make setup`
    (which the README's `make recipe` runs first; CI cannot train on real data) and
    `make test`, each shown in the README."""
    readme = (ROOT / "README.md").read_text()
    assert ci_commands() == ["make setup", "make test"]
    assert "make setup" in readme and "\nmake test " in readme
