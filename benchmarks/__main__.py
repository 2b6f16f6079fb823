"""`python -m benchmarks anchor|backends ...`: the kit's command line with these
two commands, from the repository's root (`make anchor`, `make benchmark-backends`)."""

from keras_course_recipes.__main__ import entry_point

TOOLS = {"anchor": "benchmarks.anchor", "backends": "benchmarks.backends"}

if __name__ == "__main__":
    entry_point(TOOLS, prog="python -m benchmarks")
