"""qrag over a Chroma collection you already have, filled with all-MiniLM-L6-v2 (Chroma's default 'l2' space):
two lines, nothing re-embedded.

`qrag/hotpotqa-minilm`'s chunk tower is the untouched all-MiniLM-L6-v2 (mean pooling, normalised), so the vectors in
your collection are already the ones it hops over: `from_vector_store` checks a few of them against its own, turns
each L2 distance back into the exact Q-value, and builds the BM25 evidence the model weighs from the stored texts.

    python examples/existing_collection.py
    python examples/existing_collection.py --question "Which country was the first person up Everest from?"
"""

from __future__ import annotations

import argparse

import chromadb
from chromadb.config import Settings
from langchain_chroma import Chroma

from qrag import QRAGRetriever
from qrag.eval.existing_collections import MiniLMEmbeddings

PASSAGES = [
    "The Eiffel Tower is a wrought-iron lattice tower on the Champ de Mars in Paris, built for the 1889 World's Fair.",
    "Gustave Eiffel's engineering company designed and built the tower; the design came from Maurice Koechlin.",
    "Maurice Koechlin was a Swiss structural engineer, born in Buhl, Alsace, in 1856.",
    "Berlin is the capital of Germany and its largest city by population.",
    "The Brandenburg Gate is an 18th-century neoclassical monument in Berlin.",
    "Mount Everest is Earth's highest mountain above sea level, in the Mahalangur Himal of the Himalayas.",
    "Tenzing Norgay and Edmund Hillary made the first confirmed ascent of Everest on 29 May 1953.",
    "Edmund Hillary was a mountaineer, explorer and beekeeper from New Zealand.",
    "The Louvre in Paris is the world's most visited art museum.",
    "The Mona Lisa, painted by Leonardo da Vinci, has hung in the Louvre since the French Revolution.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--question", default="Where was the engineer who designed the 1889 World's Fair tower born?")
    parser.add_argument("--model", default="qrag/hotpotqa-minilm")
    args = parser.parse_args()

    # Your collection, as the tutorials build it: Chroma.from_texts(texts, HuggingFaceEmbeddings(model_name=
    # "sentence-transformers/all-MiniLM-L6-v2")). MiniLMEmbeddings computes those vectors from the copy of
    # all-MiniLM-L6-v2 that qrag ships, so this runs offline.
    client = chromadb.EphemeralClient(settings=Settings(anonymized_telemetry=False))
    store = Chroma.from_texts(PASSAGES, MiniLMEmbeddings(), client=client, collection_name="my_docs")

    # The two lines: qrag hops over the store as it is.
    retriever = QRAGRetriever.from_vector_store(store, args.model, k=3)
    docs = retriever.invoke(args.question)

    print(f"question: {args.question}")
    print("qrag over the existing Chroma collection:")
    for d in docs:
        print(f"  hop {d.metadata['hop']}  Q={d.metadata['q_value']:.3f}  {d.page_content[:90]}")


if __name__ == "__main__":
    main()
