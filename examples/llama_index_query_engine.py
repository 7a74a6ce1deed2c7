"""qrag in a LlamaIndex query engine: multi-hop retrieval with no LLM call per hop, then one LLM call.

Runs offline in seconds on the bundled encoder (untrained: it shows the plumbing, not trained quality)
and LlamaIndex's MockLLM. For real use pass a trained checkpoint and any LlamaIndex LLM:

    python examples/llama_index_query_engine.py --model runs/qrag/best
"""

from __future__ import annotations

import argparse

from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import TextNode

from qrag import QRAGLlamaIndexRetriever

STORY = [
    "Mary moved to the bathroom.", "John went to the hallway.", "Mary took the milk there.",
    "Daniel travelled to the office.", "Mary went to the kitchen.", "Sandra journeyed to the garden.",
    "John picked up the football.", "Daniel went back to the bedroom.", "Sandra moved to the hallway.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="a qrag checkpoint folder or an encoder name")
    parser.add_argument("--top-k", type=int, default=3, help="nodes to retrieve (exact count)")
    parser.add_argument("--question", default="Where is the milk?")
    args = parser.parse_args()

    nodes = [TextNode(text=t, id_=f"story-{i}", metadata={"line": i}) for i, t in enumerate(STORY)]
    retriever = QRAGLlamaIndexRetriever.from_defaults(
        nodes=nodes, model=args.model, similarity_top_k=args.top_k, max_hops=3, order="document"
    )
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM(max_tokens=8))  # any LlamaIndex LLM
    response = engine.query(args.question)
    for source in response.source_nodes:
        meta = source.node.metadata
        print(f"- {source.node.get_content()}  (hop {meta['hop']}, Q={source.score:.3f})")
    print("answer:", str(response).strip())


if __name__ == "__main__":
    main()
