"""train's logit-level distillation term: the KL to the teacher's top-k (scored by the `kd-targets` stage,
steps/kd_targets.py, into the sidecar steps/core/kd_sidecar.py reads), added where `train_loop` computes its loss.

Per summary token, the KL divergence from the teacher's top-k distribution at temperature T (renormalised over its k
ids) to the student's at T, gathered at those ids, times T² (Hinton et al.), mixed as (1 - w)·CE + w·KL. It lines up
with the batch by label position: the summary tokens of the batch in layout order must be exactly the sidecar's label
ids of its examples in order, which is checked each step (a layout that reorders or drops summary tokens, e.g. a
packer that does, is refused with that message rather than trained on misaligned targets).
"""

from __future__ import annotations

from typing import Any

from steps.core.kd_sidecar import SCORE_COMMAND, KDError
from steps.core.switches import KD_ON
from steps.gguf.tokenizer_identity import require_same_tokenizer, tokenizer_identity


def settings_problems(weight: float, temperature: float, targets: str) -> list[str]:
    """What is wrong with `--kd-weight`, `--kd-temperature` and `--kd-targets` alone."""
    problems = []
    if not 0 <= weight <= 1:
        problems.append(f"--kd-weight {weight}: use a share between 0 (cross-entropy only, the default) and 1")
    if temperature <= 0:
        problems.append(f"--kd-temperature {temperature}: use a positive temperature (1 keeps the distributions)")
    if weight > 0 and not targets:
        problems.append(f"--kd-weight > 0 needs --kd-targets: the teacher's top-k log-probabilities ({SCORE_COMMAND})")
    return problems


def sparse_kl(student_logits: Any, teacher_ids: Any, teacher_logprobs: Any, temperature: float) -> Any:
    """Per token, KL(teacher ‖ student) over the teacher's top-k ids at `temperature`: the teacher's k log-probs
    renormalised, the student's full-vocabulary log-softmax gathered at those ids. Shapes [N, V], [N, k], [N, k]."""
    import torch

    student = torch.log_softmax(student_logits.float() / temperature, dim=-1).gather(-1, teacher_ids)
    teacher = torch.log_softmax(teacher_logprobs.float() / temperature, dim=-1)
    return (teacher.exp() * (teacher - student)).sum(-1)


class KDLoss:
    """(1 - w)·CE + w·T²·KL for one batch, where `train_loop` computes its loss; per-example targets by index."""

    def __init__(self, weight: float, temperature: float, targets: list[tuple[Any, Any, Any]]) -> None:
        self.weight, self.temperature, self.targets = weight, temperature, targets

    def __call__(self, ce_sum: Any, logits: Any, labels: Any, indices: list[int]) -> Any:
        """`ce_sum`: the batch's summed token cross-entropy; `logits` [B, P, V] and `labels` [B, P] as the loss saw
        them (-100 where no label); `indices`: the batch's examples in layout order."""
        import numpy as np
        import torch

        mask = labels != -100
        want = np.concatenate([self.targets[i][0] for i in indices])
        got = labels[mask]
        if got.numel() != len(want) or not torch.equal(got.cpu(), torch.from_numpy(want).long()):
            raise KDError(
                f"the teacher's targets do not line up with the batch's summary tokens ({got.numel()} in the batch, "
                f"{len(want)} in the sidecar for examples {indices[:4]}…): the batch layout reorders or cuts summary "
                "tokens (packing?) or the sidecar was scored with other settings; train with --kd-weight 0 there"
            )
        ids = torch.from_numpy(np.concatenate([self.targets[i][1] for i in indices])).long().to(logits.device)
        lps = torch.from_numpy(np.concatenate([self.targets[i][2] for i in indices]).astype(np.float32))
        kl = sparse_kl(logits[mask], ids, lps.to(logits.device), self.temperature).sum()
        return (1 - self.weight) * ce_sum + self.weight * self.temperature**2 * kl


def loss_hook(cfg: Any, tokenizer: Any, examples: list[dict], targets: dict | None) -> KDLoss | None:
    """The KD term for `train_loop` (None when --kd-weight is 0), after checking that the sidecar was scored for this
    student's tokenizer and these examples."""
    if not KD_ON.holds(cfg.kd_weight):
        return None
    if targets is None:
        raise KDError("--kd-weight > 0 but no --kd-targets were loaded")
    scored = targets["meta"]["student"]
    require_same_tokenizer(
        scored["tokenizer"],
        f"{cfg.kd_targets} (scored for {scored['base_model']}'s tokenizer)",
        tokenizer_identity(tokenizer),
        cfg.base_model,
    )
    for i, (ex, (labels, _, _)) in enumerate(zip(examples, targets["rows"], strict=True)):
        tail = ex["labels"][len(ex["labels"]) - len(labels) :]
        if tail != labels.tolist() or sum(t != -100 for t in ex["labels"]) != len(labels):
            raise KDError(
                f"--kd-targets {cfg.kd_targets}: training example {i} encodes its summary differently from when it "
                f"was scored (--max-seq-len {cfg.max_seq_len} vs {targets['meta']['max_seq_len']}?); score again"
            )
    return KDLoss(cfg.kd_weight, cfg.kd_temperature, targets["rows"])
