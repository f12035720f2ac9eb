"""The real server of the interface tests (tests/interfaces/conftest.py) and the scripted LLM of the
consolidation tests, for the operations surface's tests."""

from tests.consolidation.conftest import fake_llm
from tests.interfaces.conftest import make_service

__all__ = ["fake_llm", "make_service"]
