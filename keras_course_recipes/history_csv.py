"""history.csv, the table Keras' CSVLogger appends a row to after each epoch,
as the run directory, the harness and the tools read it: whole rows only, a row
that a kill tore while it was written left out and said so, and the file cut
back to the epochs a resumed run keeps."""

import csv
from pathlib import Path

from keras_course_recipes.errors import UserError


def history_rows(path):
    """(whole rows as dicts of strings, torn lines) of history.csv: a kill while
    CSVLogger writes leaves a last line that does not parse to the header's numbers."""
    if not path.exists():
        return [], []
    try:
        lines = path.read_text().splitlines(keepends=True)
    except UnicodeDecodeError:
        raise UserError(f"{path} is not text, so not the history CSVLogger wrote: restore it, "
                        "or start a new run.dir.") from None
    if not lines or not lines[0].endswith("\n"):  # no header yet, or a torn one
        return [], lines
    header, rows, torn = next(csv.reader(lines[:1])), [], []
    for line in lines[1:]:
        fields = next(csv.reader([line]), [])
        if len(fields) == len(header) and fields[0] and all(map(_is_number, fields)):
            rows.append(dict(zip(header, fields)))
        elif line.strip():
            torn.append(line)
    return rows, torn


def _is_number(text):
    try:
        float(text)
        return True
    except ValueError:
        return text in ("", "NA")


def keep_rows(path, epochs):
    """Rewrites history.csv with its header and the rows of the epochs before
    `epochs`: the later ones train again, and a torn row goes."""
    rows = history_rows(path)[0]
    with path.open(newline="", errors="replace") as file:
        first = file.readline()
    with path.open("w", newline="") as file:
        if first.endswith("\n"):  # else a kill tore the header: CSVLogger writes it again
            writer = csv.DictWriter(file, fieldnames=next(csv.reader([first])),
                                    lineterminator="\n")
            writer.writeheader()
            writer.writerows(row for row in rows if int(float(row["epoch"])) < epochs)


def torn_note(path, torn):
    return (f"{path}: left out {len(torn)} incomplete row(s), what a kill during a write "
            f"leaves: {' | '.join(line.strip() for line in torn)}")


def read_rows(path, announce=None):
    """history.csv's whole rows as dicts of strings; [] if there is none yet. A
    row a kill tore while CSVLogger wrote it is left out, and `announce`
    (e.g. `print`), if given, told so in one line."""
    rows, torn = history_rows(Path(path))
    if torn and announce:
        announce(torn_note(path, torn))
    return rows


def read_history(path):
    """history.csv's epochs as dicts of the model's metrics, each with its `epoch`."""
    return as_history(read_rows(path))


def read_column(path, column):
    """One column of history.csv as floats, for the epochs that have a number there."""
    values = []
    for row in read_rows(path):
        try:
            values.append(float(row.get(column)))
        except (TypeError, ValueError):
            continue  # no value: "" or NA
    return values


def as_history(rows):
    return [{k: (int(float(v)) if k == "epoch" else float(v)) for k, v in row.items()
             if not k.startswith("time_") and v not in ("", "NA")}
            for row in rows]
