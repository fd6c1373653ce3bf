"""The serving contract: the prompt, the decoding settings, the thread count and the MLflow pyfunc model that serves
the GGUF. Self-contained (it imports nothing else of `steps`): `register` copies this package, as it is, into the
registered model's code, and training, evaluation and serving all read the same definitions from it.
"""
