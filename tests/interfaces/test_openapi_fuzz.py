"""Schemathesis against the running server, with every check it has: generated requests for every
documented operation, valid and invalid, in each of its phases (coverage: boundary values, missing
parameters, methods the document does not list and the Allow header of their 405; fuzzing; stateful
sequences along the document's links). No request may get a 5xx, and every response must be what the
OpenAPI document says (status, content type, headers, body schema); data the schema allows must be
accepted and data it forbids refused. Derandomized and bounded: the same cases every run, about a
minute in all (issue 26, item 22).

The two import routes run without ``positive_data_acceptance``: a record's ``supersedes`` must name
an earlier record's key and keys must be unique within the document, rules between records that JSON
Schema cannot state, so the schema lets such documents through and the server refuses them (422).
One rule of POST /v1/memories is of that kind too (``valid_from`` not after ``valid_to``, documented
on the fields), one of POST /v1/recall (``time_from`` not after ``time_to``), and one of POST /v1/turns,
POST /v1/memories (``created_at``) and the import (a time at most a day past the server's clock): this
run's fixed cases do not hit them, a long random run can.
"""

from __future__ import annotations

import subprocess
import sys

EXAMPLES = 10  # per operation and phase


def schemathesis(url: str, key: str, *selection: str, exclude_checks: str = "") -> str:
    """Run the schemathesis CLI over the operations ``selection`` picks; its report if it failed."""
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        f"{url}/openapi.json",
        "--checks",
        "all",
        "--generation-deterministic",
        "--max-examples",
        str(EXAMPLES),
        "--continue-on-failure",
        "--request-timeout",
        "60",
        # generating these documents is slow on a loaded machine ("Data generation is too slow" on
        # POST /v1/import stopped a newcomer's run): a property of the machine, not of the API
        "--suppress-health-check",
        "too_slow",
        "--header",
        f"Authorization: Bearer {key}",
        *selection,
        *(["--exclude-checks", exclude_checks] if exclude_checks else []),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    return "" if done.returncode == 0 else done.stdout[-20_000:] + done.stderr[-5_000:]


def test_every_operation_conforms_to_the_openapi_and_never_fails(service):
    user, admin = service.user_keys["sarah"], service.admin_key
    runs = {
        "memories": schemathesis(
            service.url, user, "--include-tag", "memories", "--exclude-path", "/v1/import"
        ),
        "admin": schemathesis(
            service.url,
            admin,
            "--include-tag",
            "admin",
            "--include-tag",
            "health",
            "--exclude-path",
            "/v1/catalog/import",
        ),
        "import": schemathesis(
            service.url, user, "--include-path", "/v1/import", exclude_checks="positive_data_acceptance"
        ),
        "catalog import": schemathesis(
            service.url,
            admin,
            "--include-path",
            "/v1/catalog/import",
            exclude_checks="positive_data_acceptance",
        ),
    }
    failed = {name: report for name, report in runs.items() if report}
    assert not failed, "\n\n".join(f"== {name}\n{report}" for name, report in failed.items())
