"""How the summariser is served, and therefore how it is evaluated: the one definition.

    from steps.contract import serving_config
    serving_config.SERVING.max_tokens                   # 64
    Llama(model_path=..., n_threads=..., **serving_config.SERVING.model_kwargs())
    llm.create_chat_completion(messages=messages(doc), **serving_config.SERVING.completion_kwargs())

`steps.evaluate` generates with it (and writes its `record()` into `decision.json`), `steps.register` checks that the
evaluation was measured with it, records it on the model version (`serving.*` tags) and logs it as the pyfunc model's
`model_config`, and `steps.contract.model.SummariserModel` loads with it. Change a value here and all three follow
(tests/test_serving_config.py); evaluate's generation cache is keyed on it, so generations made with other settings
are not reused. Read it as `serving_config.SERVING` when it is used, not bound at import (`from … import SERVING`),
so that a test replacing it reaches every reader.

The prompt is not here: training builds the same messages (`steps.contract.prompting`), which every reader of this
config imports; the tags record the system prompt, and evaluate's cache key hashes the prompts as sent.

Light on purpose (no mlflow, no llama_cpp): evaluate's and register's `--help` import it.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from typing import Any

# The registered model's one artifact, its GGUF, by this name: register logs it (`artifacts={GGUF_ARTIFACT: …}`), the
# pyfunc model (steps.contract.model) loads it, and serve finds the file in the MLmodel by it.
GGUF_ARTIFACT = "gguf"


@dataclass(frozen=True)
class ServingConfig:
    max_tokens: int = field(
        # One sentence of at most 30 words is ~45 tokens: 64 leaves room, and a model that never stops is cut here
        # and shows up in evaluate's stop rate rather than running on.
        default=64,
        metadata={"help": "longest generated summary, in tokens"},
    )
    n_ctx: int = field(
        # The instructions, a document of at most steps.contract.prompting.MAX_DOCUMENT_CHARS (6000 characters, ~1500
        # tokens of English) and max_tokens of answer fit.
        default=2048,
        metadata={"help": "llama.cpp context size, in tokens: prompt + answer"},
    )
    temperature: float = field(
        default=0.0,
        metadata={"help": "0: greedy, so scores are reproducible and the served answer is the measured one"},
    )
    top_k: int = field(default=1, metadata={"help": "1: greedy (with temperature 0)"})
    seed: int = field(default=0, metadata={"help": "sampler seed; greedy decoding does not use it"})
    stop: tuple[str, ...] = field(
        default=(), metadata={"help": "strings that end a summary besides the chat template's end of turn"}
    )

    def record(self) -> dict[str, Any]:
        """As JSON holds it (decision.json, the pyfunc's model_config): `from_record(record())` is this config."""
        return {**dataclasses.asdict(self), "stop": list(self.stop)}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> ServingConfig:
        return cls(**{**record, "stop": tuple(record["stop"])})

    def model_kwargs(self) -> dict[str, Any]:
        """`llama_cpp.Llama(...)` arguments this config sets (the caller adds the file and the thread count)."""
        return {"n_ctx": self.n_ctx, "seed": self.seed}

    def completion_kwargs(self) -> dict[str, Any]:
        """`Llama.create_chat_completion(...)` arguments besides the messages."""
        return {
            "temperature": self.temperature,
            "top_k": self.top_k,
            "max_tokens": self.max_tokens,
            "seed": self.seed,
            "stop": list(self.stop) or None,
        }

    def tags(self) -> dict[str, str]:
        """What a model version records about how it is served: the prompt and these settings (`serving.*`)."""
        from steps.contract.prompting import SYSTEM_PROMPT

        return {
            "serving.system_prompt": SYSTEM_PROMPT,
            "serving.system_prompt_sha256": hashlib.sha256(SYSTEM_PROMPT.encode()).hexdigest(),
            "serving.decoding": "greedy" if self.temperature == 0 and self.top_k == 1 else "sampled",
            "serving.temperature": str(self.temperature),
            "serving.top_k": str(self.top_k),
            "serving.max_tokens": str(self.max_tokens),
            "serving.n_ctx": str(self.n_ctx),
            "serving.seed": str(self.seed),
            "serving.stop": ",".join(repr(s) for s in self.stop) or "none",
        }


# What evaluate measures and the registry serves.
SERVING = ServingConfig()
