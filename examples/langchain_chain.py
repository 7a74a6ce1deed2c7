"""qrag in a LangChain chain on paragraph text, with its recall beside a cosine vector store and the BM25 hybrid.

The corpus is real paragraphs: the Wikipedia summaries of the held-out `wiki` questions (pages no part of
training saw). qrag (`--model`: by default `qrag/hotpotqa-minilm`, the shipped model for paragraph text,
trained on HotpotQA's questions, so these synthetic questions are off its domain; or your checkpoint), an
`InMemoryVectorStore` (cosine over the same base MiniLM) and the hybrid practitioners run (BM25 and that store fused
by reciprocal rank, c = 60, as `EnsembleRetriever` does) each retrieve k paragraphs per question; the script prints
the three recalls of the gold paragraphs, then runs one question through retriever | format | prompt | LLM (a fake
LLM: swap in yours).

    python examples/langchain_chain.py                       # 30 questions, k=4
    python examples/langchain_chain.py --model runs/my/best --questions 100
"""

from __future__ import annotations

import argparse

import torch
from langchain_core.documents import Document
from langchain_core.language_models import FakeListLLM
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import RunnablePassthrough
from langchain_core.vectorstores import InMemoryVectorStore

from qrag import QRAGEmbeddings, QRAGRetriever
from qrag.training.data import load_episodes
from qrag.training.search.lexical import LexicalIndex, reciprocal_rank_fusion

PROMPT = PromptTemplate.from_template(
    "Answer the question from the context only.\nContext:\n{context}\nQuestion: {question}\nAnswer:"
)


def format_docs(docs: list[Document]) -> str:
    return "\n".join(f"- {d.page_content[:90]}...  (hop {d.metadata['hop']}, Q={d.metadata['q_value']:.3f})"
                     for d in docs)


def recall(docs: list[Document], gold: set[str]) -> float:
    return len({d.page_content for d in docs} & gold) / len(gold)


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
    parser.add_argument("--k", type=positive, default=4, help="paragraphs per question")
    parser.add_argument("--questions", type=positive, default=30, help="held-out multi-hop questions to score")
    args = parser.parse_args()

    episodes = load_episodes("wiki", task="mix", split="test", num_samples=args.questions, seed=0)
    corpus = sorted({c for ep in episodes for c in ep.chunks})  # the questions' pages and distractors, pooled
    qrag = QRAGRetriever.from_texts(corpus, model=args.model, k=args.k)
    store = InMemoryVectorStore.from_texts(corpus, QRAGEmbeddings(args.encoder))
    cosine = store.as_retriever(search_kwargs={"k": args.k})
    bm25 = LexicalIndex.from_texts(corpus)

    def hybrid(question: str) -> list[Document]:
        """BM25 and the cosine store, each ranking every paragraph, fused by reciprocal rank."""
        dense = {d.page_content: s for d, s in store.similarity_search_with_score(question, k=len(corpus))}
        fused = reciprocal_rank_fusion([bm25.scores([question])[0], torch.tensor([dense[t] for t in corpus])])
        return [Document(page_content=corpus[i]) for i in fused.topk(args.k).indices.tolist()]

    ours, theirs, fused = [], [], []
    for ep in episodes:
        gold = {ep.chunks[i] for i in ep.supporting}
        ours.append(recall(qrag.invoke(ep.question), gold))
        theirs.append(recall(cosine.invoke(ep.question), gold))
        fused.append(recall(hybrid(ep.question), gold))
    print(f"{len(episodes)} questions over {len(corpus)} paragraphs, k={args.k}: recall of the gold paragraphs "
          f"qrag {sum(ours) / len(ours):.3f}, cosine InMemoryVectorStore {sum(theirs) / len(theirs):.3f}, "
          f"BM25 + cosine hybrid {sum(fused) / len(fused):.3f}")

    llm = FakeListLLM(responses=["(your LLM's answer)"])  # swap in any LangChain LLM or chat model
    chain = {"context": qrag | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()
    question = next(ep.question for ep in episodes if len(ep.supporting) > 1)
    print(f"Q: {question}\nretrieved:\n" + format_docs(qrag.invoke(question)))
    print("answer:", chain.invoke(question))


if __name__ == "__main__":
    main()
