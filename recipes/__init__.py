"""The lessons: one file per recipe, each read top to bottom, as
`keras_course_recipes.recipes`. A recipe file copied anywhere the kit is
installed trains on its own (`python mnist_mlp.py key=value ...`); the kit it
runs on is the `keras_course_recipes` package beside this folder.
"""
