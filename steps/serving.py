"""The served summariser as an MLflow pyfunc model: the GGUF through llama.cpp, with the training/evaluation prompt.

    import mlflow
    model = mlflow.pyfunc.load_model("models:/distillery-summariser@challenger")
    model.predict(["The ferry to Arlow is cancelled on Monday."])       # -> ["Monday's Arlow ferry is off."]
    model.predict(pd.DataFrame({"document": [...]}))                    # same, one summary per row

`register` logs this class as a model from code (MLflow's recommended form: no pickle) with the GGUF as its one
artifact (`artifacts={"gguf": ...}`), the decoding settings as its `model_config` and this module (with
`steps.prompting`) as its code, so `models:/<name>@<alias>` loads wherever mlflow and llama-cpp-python are installed.
Decoding is the evaluation's: the chat template embedded in the GGUF, `steps.prompting.messages`, greedy
(temperature 0, top-k 1), a fixed seed and a token cap — what was measured is what is served.

Not a pipeline step: no command line. Importing it imports mlflow (the class must subclass `PythonModel`), so steps
import it inside `run`.
"""

from __future__ import annotations

import os
from typing import Any

import mlflow.pyfunc

from steps.prompting import SYSTEM_PROMPT, messages

GGUF_ARTIFACT = "gguf"
# Defaults of the model_config `register` logs; each can be overridden per load with
# mlflow.pyfunc.load_model(uri, model_config={...}).
DEFAULT_CONFIG: dict[str, Any] = {
    "max_tokens": 64,  # evaluate's --max-new-tokens default: the cap the scores were measured with
    "temperature": 0.0,  # greedy: the scores were measured greedily
    "top_k": 1,
    "seed": 0,
    "n_ctx": 2048,  # evaluate's context size
    "n_threads": 0,  # 0: every core the process may use
}


def decoding_tags(config: dict[str, Any]) -> dict[str, str]:
    """What a model version records about how it is served: the prompt and the decoding settings."""
    import hashlib

    return {
        "serving.system_prompt": SYSTEM_PROMPT,
        "serving.system_prompt_sha256": hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest(),
        "serving.decoding": "greedy" if config["temperature"] == 0 and config["top_k"] == 1 else "sampled",
        "serving.temperature": str(config["temperature"]),
        "serving.top_k": str(config["top_k"]),
        "serving.max_tokens": str(config["max_tokens"]),
        "serving.seed": str(config["seed"]),
    }


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

        self.config = {**DEFAULT_CONFIG, **(context.model_config or {})}
        self.llm = Llama(
            model_path=context.artifacts[GGUF_ARTIFACT],
            n_ctx=int(self.config["n_ctx"]),
            n_threads=int(self.config["n_threads"]) or os.cpu_count() or 1,
            seed=int(self.config["seed"]),
            verbose=False,
        )

    # No type hints on purpose: MLflow would read them as the input schema; the logged signature is the schema.
    def predict(self, context, model_input, params=None):
        """One summary per document; `params` may override `max_tokens` (the signature declares it)."""
        cfg = {**self.config, **(params or {})}
        summaries = []
        for document in documents_of(model_input):
            reply = self.llm.create_chat_completion(
                messages=messages(document),
                temperature=float(cfg["temperature"]),
                top_k=int(cfg["top_k"]),
                max_tokens=int(cfg["max_tokens"]),
                seed=int(cfg["seed"]),
            )
            summaries.append(reply["choices"][0]["message"]["content"].strip())
        return summaries
