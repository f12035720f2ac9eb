"""Schemathesis against the running server: generated requests for every documented operation, valid
and invalid, must get no 5xx, and every response must be what the OpenAPI document says (status,
content type, headers, body schema). Bounded and derandomized: about 10 s, the same cases every run."""

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import APIOperation, GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
EXAMPLES = {GenerationMode.POSITIVE: 25, GenerationMode.NEGATIVE: 15}  # per operation


def fuzz(operation: APIOperation, mode: GenerationMode, url: str, key: str) -> None:
    @settings(
        max_examples=EXAMPLES[mode],
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def run(case):
        case.call_and_validate(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, checks=CHECKS, timeout=30
        )

    try:
        run()
    except Unsatisfiable:  # nothing in the request can be made invalid (GET /healthz)
        assert mode is GenerationMode.NEGATIVE, operation.label


def test_every_operation_conforms_to_the_openapi_and_never_fails(service):
    schema = schemathesis.openapi.from_url(f"{service.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 16
    for operation in operations:
        key = service.admin_key if "admin" in operation.tags else service.user_keys["sarah"]
        for mode in EXAMPLES:
            fuzz(operation, mode, service.url, key)
