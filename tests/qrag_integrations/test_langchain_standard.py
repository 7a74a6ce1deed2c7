"""LangChain's standard retriever suite, unmodified, against QRAGRetriever on the tiny model."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_tests.integration_tests import RetrieversIntegrationTests

from qrag.integrations import QRAGRetriever
from qrag.training.search.searcher import MultiHopSearcher


class TestQRAGRetrieverStandard(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def _use_tiny_searcher(self, tiny_searcher: MultiHopSearcher) -> None:
        self.searcher = tiny_searcher

    @property
    def retriever_constructor(self) -> type[QRAGRetriever]:
        return QRAGRetriever

    @property
    def retriever_constructor_params(self) -> dict[str, Any]:
        return {"searcher": self.searcher, "max_hops": 3}

    @property
    def retriever_query_example(self) -> str:
        return "Where is the milk?"
