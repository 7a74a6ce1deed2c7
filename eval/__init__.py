"""qrag.eval: the bundled benchmarks run against baselines and a reader LLM, with tables and plots (`qrag-eval`)."""
