"""Hera definitions of the Argo objects, built from `steps.pipeline`; `python -m workflows.render` writes them."""
