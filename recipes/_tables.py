"""Result tables as CSV and Markdown, for `sweep` and `compare`."""

import csv


def write_csv(path, columns, rows):
    """Writes `rows` (dicts) to `path`, one column per name in `columns`."""
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def markdown_table(columns, rows, cell=str):
    """Returns `rows` as a Markdown table; `cell` formats each value."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(column)) for column in columns) + " |"
              for row in rows]
    return "\n".join(lines)
