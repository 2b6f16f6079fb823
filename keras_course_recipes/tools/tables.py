"""Result tables as CSV and Markdown, for `sweep`, `compare`, `backends` and `augment-benchmark`."""

import csv


def write_csv(path, columns, rows):
    """Writes `rows` (dicts) to `path`, one column per name in `columns`."""
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def markdown_table(columns, rows, cell=str):
    """Returns `rows` as a Markdown table; `cell` formats each value. (Four
    lines, where tabulate's "github" format would be one more package.)"""
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(column)) for column in columns) + " |"
              for row in rows]
    return "\n".join(lines)


def number_cell(value):
    """A table cell for a measured number: 3 significant decimals, '-' for None."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if abs(value) >= 1e6:
            return f"{value:.3g}"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)
