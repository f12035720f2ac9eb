"""The memory inspector: a small web UI at ``/inspector`` of ``engram serve`` (see ``routes``)."""
