"""qrag in a LangChain chain: retriever | format | prompt | llm, with no LLM call per hop.

Runs offline in seconds on the bundled encoder (untrained: it shows the plumbing, not trained quality)
and a fake LLM. For real use pass a trained checkpoint (`qrag-train` output) and any LangChain LLM:

    python examples/langchain_chain.py --model runs/qrag/best
"""

from __future__ import annotations

import argparse

from langchain_core.documents import Document
from langchain_core.language_models import FakeListLLM
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import PromptTemplate
from langchain_core.runnables import RunnablePassthrough

from qrag import QRAGRetriever

STORY = [
    "Mary moved to the bathroom.", "John went to the hallway.", "Mary took the milk there.",
    "Daniel travelled to the office.", "Mary went to the kitchen.", "Sandra journeyed to the garden.",
    "John picked up the football.", "Daniel went back to the bedroom.", "Sandra moved to the hallway.",
]
PROMPT = PromptTemplate.from_template(
    "Answer the question from the context only.\nContext:\n{context}\nQuestion: {question}\nAnswer:"
)


def format_docs(docs: list[Document]) -> str:
    """One line per retrieved chunk, already in story order (the retriever was built with order='document')."""
    return "\n".join(f"- {d.page_content}  (hop {d.metadata['hop']}, Q={d.metadata['q_value']:.3f})" for d in docs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="all-MiniLM-L6-v2", help="a qrag checkpoint folder or an encoder name")
    parser.add_argument("--k", type=int, default=3, help="chunks to retrieve (omit the stop rule: exact count)")
    parser.add_argument("--question", default="Where is the milk?")
    args = parser.parse_args()

    # An explicit k returns exactly k chunks; with a trained model use k=None to let the stop rule decide.
    retriever = QRAGRetriever.from_texts(STORY, model=args.model, k=args.k, max_hops=3, order="document")
    llm = FakeListLLM(responses=["In the kitchen."])  # swap in any LangChain LLM or chat model
    chain = {"context": retriever | format_docs, "question": RunnablePassthrough()} | PROMPT | llm | StrOutputParser()

    print("retrieved:\n" + format_docs(retriever.invoke(args.question)))
    print("answer:", chain.invoke(args.question))


if __name__ == "__main__":
    main()
