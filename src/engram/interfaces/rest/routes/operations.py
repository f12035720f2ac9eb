"""Verbs on a tenant's memory beside reading and writing rows: record a playbook's outcome, and run
consolidation on demand (``engram.interfaces.consolidation_runs``). The tenant is the API key's."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from fastapi.responses import JSONResponse

from engram.interfaces.rest.deps import ConsolidationRunsDep, UserMemoryDep, WriterMemoryDep
from engram.interfaces.rest.schemas import ConsolidationRunResponse, PlaybookOutcome, error_responses
from engram.models import ProceduralMemory

router = APIRouter(prefix="/v1", tags=["memories"], responses=error_responses(401, 403, 413, 422, 503))


@router.post(
    "/playbooks/{playbook_id}/outcome", response_model=ProceduralMemory, responses=error_responses(404, 409)
)
def record_outcome(playbook_id: str, body: PlaybookOutcome, mem: WriterMemoryDep) -> ProceduralMemory:
    """Count one use of one of your playbooks as a success or a failure (no LLM involved): its
    ``success_count`` or ``failure_count`` goes up by one at once, and with it the prior recall ranks
    it by. Another user's playbook is 404; an id that is not a playbook's is 422; a version superseded
    since is 409, naming the current one (recall shows only that one)."""
    return mem.record_outcome(playbook_id, body.success)


@router.post(
    "/consolidate",
    status_code=202,
    response_model=ConsolidationRunResponse,
    responses=error_responses(409),
)
def consolidate(mem: WriterMemoryDep, runs: ConsolidationRunsDep) -> JSONResponse:
    """Turn your waiting turns into facts and playbooks now, on the server's threads: 202 with the run's
    id at once; ``GET /v1/consolidate/{run_id}`` says how it went. While a run of yours is queued or
    running, this answers that run. 409 when the server has no LLM configured."""
    run = runs.trigger(mem.user_id)
    return JSONResponse(run.as_json(), status_code=202, headers={"Location": f"/v1/consolidate/{run.run_id}"})


@router.get("/consolidate/{run_id}", response_model=ConsolidationRunResponse, responses=error_responses(404))
def consolidation_status(
    run_id: Annotated[str, Path(max_length=100)], mem: UserMemoryDep, runs: ConsolidationRunsDep
) -> JSONResponse:
    """One of your consolidation runs: queued, running, succeeded (with counts) or failed (with the
    error). Runs are kept in the server process for an hour after they end."""
    return JSONResponse(runs.get(mem.user_id, run_id).as_json())
