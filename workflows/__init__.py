"""Hera definitions of the Argo objects, built from `steps.pipeline`, and their rendering (`python -m workflows.render`)."""
