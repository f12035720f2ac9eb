"""The search-engine backend: OpenSearch with lucene k-NN, BM25 and document-level security (``_store``);
``migrate`` moves a store to this Engram's mapping version (``_migrate``)."""

from engram.storage.opensearch._client import OpenSearchOptions
from engram.storage.opensearch._layout import MAPPING_VERSION
from engram.storage.opensearch._migrate import Migrated, migrate
from engram.storage.opensearch._store import OpenSearchStore

__all__ = ["MAPPING_VERSION", "Migrated", "OpenSearchOptions", "OpenSearchStore", "migrate"]
