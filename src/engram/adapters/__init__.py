"""Engram inside agent frameworks, each module an optional extra over the public API (an embedded
``Engram`` or a ``Client``):

- ``engram.adapters.langgraph_store``: ``EngramStore``, a LangGraph ``BaseStore``
  (``pip install -e '.[langgraph]'``)
- ``engram.adapters.langchain``: ``EngramRetriever`` and ``EngramChatMessageHistory``
  (``pip install -e '.[langchain]'``)
- ``engram.adapters.llamaindex``: ``EngramMemoryBlock`` and ``EngramRetriever``
  (``pip install -e '.[llamaindex]'``)

Nothing is imported here, so ``import engram`` never needs a framework; import the module you use.
"""
