"""qrag in a LlamaIndex query engine on paragraph text, with its recall beside LangChain's cosine vector store.

The corpus is real paragraphs: the Wikipedia summaries of the held-out `wiki` questions (pages no part of
training saw), one `TextNode` each. qrag (`--model`: by default `qrag/hotpotqa-minilm`, the shipped model for paragraph
text, trained on HotpotQA's questions, so these synthetic questions are off its domain; or your checkpoint) and LangChain's
`InMemoryVectorStore` (cosine over the same base MiniLM) each retrieve top-k paragraphs per question; the
script prints both recalls, then answers one question through a `RetrieverQueryEngine` (MockLLM: swap in yours).

    python examples/llama_index_query_engine.py                   # 30 questions, top-k 4
    python examples/llama_index_query_engine.py --model runs/my/best --questions 100
"""

from __future__ import annotations

import argparse

from langchain_core.vectorstores import InMemoryVectorStore
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import TextNode

from qrag import QRAGEmbeddings, QRAGLlamaIndexRetriever
from qrag.training.data import load_episodes


def positive(text: str) -> int:
    """An argparse type: a whole number >= 1 (a count of results or questions)."""
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return int(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qrag/hotpotqa-minilm",
                        help="a qrag checkpoint: shipped name or folder (default: the shipped paragraph-text model; "
                             "all-MiniLM-L6-v2: the untrained base encoder)")
    parser.add_argument("--encoder", default="all-MiniLM-L6-v2", help="base encoder of the cosine vector store")
    parser.add_argument("--top-k", type=positive, default=4, help="paragraphs per question")
    parser.add_argument("--questions", type=positive, default=30, help="held-out multi-hop questions to score")
    args = parser.parse_args()

    episodes = load_episodes("wiki", task="mix", split="test", num_samples=args.questions, seed=0)
    corpus = sorted({c for ep in episodes for c in ep.chunks})
    nodes = [TextNode(text=t, id_=f"p{i}") for i, t in enumerate(corpus)]
    retriever = QRAGLlamaIndexRetriever.from_defaults(nodes=nodes, model=args.model, similarity_top_k=args.top_k)
    cosine = InMemoryVectorStore.from_texts(corpus, QRAGEmbeddings(args.encoder))
    ours, theirs = [], []
    for ep in episodes:
        gold = {ep.chunks[i] for i in ep.supporting}
        got = {n.node.get_content() for n in retriever.retrieve(ep.question)}
        base = {d.page_content for d in cosine.similarity_search(ep.question, k=args.top_k)}
        ours.append(len(got & gold) / len(gold))
        theirs.append(len(base & gold) / len(gold))
    print(f"{len(episodes)} questions over {len(corpus)} paragraphs, top-k {args.top_k}: recall of the gold "
          f"paragraphs qrag {sum(ours) / len(ours):.3f}, cosine InMemoryVectorStore {sum(theirs) / len(theirs):.3f}")

    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM(max_tokens=8))  # any LlamaIndex LLM
    question = next(ep.question for ep in episodes if len(ep.supporting) > 1)
    response = engine.query(question)
    print(f"Q: {question}")
    for source in response.source_nodes:
        print(f"- {source.node.get_content()[:90]}...  (hop {source.node.metadata['hop']}, Q={source.score:.3f})")
    print("answer:", str(response).strip())


if __name__ == "__main__":
    main()
