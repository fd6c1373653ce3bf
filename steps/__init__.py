"""The pipeline's code: plain Python, grouped by what it serves. Nothing here imports hera; `workflows/` builds the Argo
templates from `steps.pipeline`.

Stages are modules with a command line, `python -m steps.<stage>` (the Argo templates and dvc.yaml run them by that
name), grouped by the loop they belong to; a stage that grows is a package (`steps/train/`). Shared packages hold
what more than one stage needs, named for what it is. `GROUPS` says which is which and `MAY_IMPORT` which group may
import which; tests/test_layout.py holds every module to it, and `workflows/` to importing only `steps.pipeline`,
the shared packages and the stages' `*Config` types.
"""

# The step modules (`python -m steps.<name>`), by the loop they belong to. The pipelines' stages are rows of
# `steps.pipeline` (each runs one of these; tests/test_workflows.py holds them to this list).
STEP_MODULES: dict[str, tuple[str, ...]] = {
    "distill": (
        "preflight",
        "check_parameters",
        "fetch_dataset",
        "kd_targets",
        "train",
        "convert_gguf",
        "evaluate",
        "register",
        "propose",
        "push_adapter",
    ),
    "dataset": ("ingest", "teacher", "filter_split", "feedback", "publish", "adversarial_suite"),
    "serving-loop": ("serve", "online_metrics", "promote", "check_triggers"),
}

# Shared packages (and the one pipeline definition), each with the groups it may import. A stage may import every
# one of them and nothing of another stage.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "contract": (),  # the serving contract, copied whole into the registered model: self-contained
    "core": ("contract",),
    "adversarial": ("core", "contract"),  # the adversarial families: a family's cases and its judge
    "gguf": ("core", "contract"),
    "sizing": ("gguf", "core", "contract"),
    "pipeline": ("sizing", "gguf", "core", "contract"),
}
