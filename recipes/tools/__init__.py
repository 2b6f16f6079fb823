"""The commands that work on a recipe without being one: `python -m recipes`
compare, sweep, memory, graph, ... and what only they use (plots, tables,
the hand-written training loops)."""
