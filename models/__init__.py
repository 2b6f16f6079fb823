"""Model builders, one module per family: arguments in, an uncompiled
`keras.Model` out. Import the one you need (`from keras_course_recipes.models.mlp import mlp`):
this package imports nothing, so that a recipe copied out of the repository
takes its model's file alone. A module's custom layers register for
serialization when it is imported, so a saved `.keras` file loads after
`import keras_course_recipes.models.<its module>`.
"""
