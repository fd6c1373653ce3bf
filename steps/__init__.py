"""The pipeline's steps: plain Python, one module per step, each runnable as `python -m steps.<name>`.

Nothing in this package imports hera; `workflows/` builds the Argo templates from `steps.pipeline`.
"""
