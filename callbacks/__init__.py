"""Keras callbacks this repository adds to what `keras.callbacks` provides,
one class per module: import the one you need
(`from keras_course_recipes.callbacks.timing import Timing`). This package imports nothing, so
that a recipe copied out of the repository takes only the callbacks it uses.
"""
