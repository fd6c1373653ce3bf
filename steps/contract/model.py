"""The served summariser as an MLflow pyfunc model: the GGUF through llama.cpp, with the training/evaluation prompt.

    import mlflow
    model = mlflow.pyfunc.load_model("models:/distillery-summariser@challenger")
    model.predict(["The ferry to Arlow is cancelled on Monday."])       # -> ["Monday's Arlow ferry is off."]
    model.predict(pd.DataFrame({"document": [...]}))                    # same, one summary per row

`register` logs this class as a model from code (MLflow's recommended form: no pickle) with the GGUF as its one
artifact (`artifacts={"gguf": ...}`), the serving configuration as its `model_config` and the whole
serving contract package (`steps.contract`) as its code, so `models:/<name>@<alias>` loads wherever
mlflow and llama-cpp-python are installed. Decoding is the evaluation's, from the one definition in
`serving_config`: the chat
template embedded in the GGUF, `prompting.messages`, greedy, a fixed seed, the
same token cap and context size — what was measured is what is served.

Not a pipeline step: no command line. Importing it imports mlflow (the class must subclass `PythonModel`), so steps
import it inside `run`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import mlflow.pyfunc

from steps.contract import serving_config
from steps.contract.prompting import messages
from steps.contract.threads import llama_threads

# How many cores llama.cpp may use is the serving box's business, so it is not in the serving configuration; 0: the
# CPUs this container may use (steps.contract.threads.cpu_threads).
N_THREADS = "n_threads"


def model_config() -> dict[str, Any]:
    """The `model_config` register logs: the serving configuration, and the thread count. Each key can be overridden
    per load with mlflow.pyfunc.load_model(uri, model_config={...})."""
    return {**serving_config.SERVING.record(), N_THREADS: 0}


def documents_of(model_input: Any) -> list[str]:
    """The documents in a pyfunc input: a DataFrame with a `document` column, a list of str, or one str."""
    import pandas as pd

    if isinstance(model_input, pd.DataFrame):
        if "document" in model_input.columns:
            docs = model_input["document"].tolist()
        elif len(model_input.columns) == 1:  # a list of str, as MLflow's schema enforcement hands it over
            docs = model_input.iloc[:, 0].tolist()
        else:
            raise ValueError(
                f"model input has columns {list(model_input.columns)}; it needs a 'document' column "
                "(one document to summarise per row)"
            )
    elif isinstance(model_input, pd.Series):
        docs = model_input.tolist()
    elif isinstance(model_input, str):
        docs = [model_input]
    elif isinstance(model_input, list | tuple):
        docs = list(model_input)
    else:
        raise ValueError(
            f"model input is a {type(model_input).__name__}; pass a DataFrame with a 'document' column or a list of str"
        )
    bad = [i for i, d in enumerate(docs) if not isinstance(d, str) or not d.strip()]
    if bad:
        raise ValueError(f"document(s) at position {bad[:10]} are not non-empty strings; every document needs text")
    return docs


class SummariserModel(mlflow.pyfunc.PythonModel):
    """One neutral sentence per document, from the GGUF in the model's artifacts."""

    def load_context(self, context: Any) -> None:
        from llama_cpp import Llama

        config = {**model_config(), **(context.model_config or {})}
        threads = int(config.pop(N_THREADS))
        self.serving = serving_config.ServingConfig.from_record(config)
        self.llm = Llama(
            model_path=context.artifacts[serving_config.GGUF_ARTIFACT],
            **llama_threads(threads),  # both llama.cpp thread counts; 0: the CPUs this container may use
            verbose=False,
            **self.serving.model_kwargs(),
        )

    # No type hints on purpose: MLflow would read them as the input schema; the logged signature is the schema.
    def predict(self, context, model_input, params=None):
        """One summary per document; `params` may override `max_tokens` (the signature declares it)."""
        serving = self.serving
        if params and params.get("max_tokens") is not None:
            serving = dataclasses.replace(serving, max_tokens=int(params["max_tokens"]))
        summaries = []
        for document in documents_of(model_input):
            reply = self.llm.create_chat_completion(messages=messages(document), **serving.completion_kwargs())
            summaries.append(reply["choices"][0]["message"]["content"].strip())
        return summaries
