"""Run parliament (in .venv-scan: it cannot live beside the project's packages) on IAM policy files and print its
findings as JSON, one object per finding: {"file", "issue", "detail", "line"}. Run by tests/test_scanners.py as
`.venv-scan/bin/python tests/parliament_findings.py FILE...`; standard library and parliament only.

Through parliament's Python API, not its CLI: `parliament --file` fails without a TTY. Community auditors included.
"""

import json
import sys

from parliament import analyze_policy_string


def main(paths: list[str]) -> None:
    out = []
    for path in paths:
        with open(path) as f:
            policy = analyze_policy_string(f.read(), path, include_community_auditors=True)
        for finding in policy.findings:
            location = finding.location if isinstance(finding.location, dict) else {}
            out.append(
                {"file": path, "issue": finding.issue, "detail": str(finding.detail), "line": location.get("line")}
            )
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
