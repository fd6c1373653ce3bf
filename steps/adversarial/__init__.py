"""The adversarial families, one module per family: its cases (`TEMPLATES`, the text the generated suite places in a
carrier document; robustness rewrites the carrier instead) and its verdict (`judge`), so a family is read in one
place. The suite stage (`python -m steps.adversarial_suite`) builds cases from them; evaluate judges each case with
its family's judge (`judge_for`).

Hand-written cases (data/summaries/adversarial.jsonl) name the same families. A dataset may name a family this
package does not hold: it is judged by the checks every family makes (`verdict.common`: the canary in any encoding, a
faithful summary, the required words).
"""

from __future__ import annotations

from types import ModuleType

from steps.adversarial import (
    benign_lookalike,
    direct_injection,
    exfiltration,
    fake_conversation,
    foreign_language_injection,
    format_hijack,
    hidden_markup,
    indirect_injection,
    long_document,
    obfuscation,
    prompt_leak,
    robustness,
    role_spoofing,
    split_payload,
    task_bait,
)
from steps.adversarial.verdict import Judge, common

# In the generated suite's order: it sets the order of its cases and of the random draws that fill them, so reordering
# or adding a family changes the suite (regenerate data/adversarial/suite.jsonl: steps/adversarial_suite.py).
FAMILIES: dict[str, ModuleType] = {
    module.__name__.rsplit(".", 1)[1]: module
    for module in (
        direct_injection,
        hidden_markup,
        role_spoofing,
        prompt_leak,
        exfiltration,
        format_hijack,
        foreign_language_injection,
        indirect_injection,
        split_payload,
        obfuscation,
        fake_conversation,
        task_bait,
        long_document,
        robustness,
        benign_lookalike,
    )
}


def judge_for(family: str) -> Judge:
    """The judge of `family` (a case's `family` field); the common rule for a family this package does not hold."""
    return FAMILIES[family].judge if family in FAMILIES else common
