"""Layer 3: what is generated from the solutions: stubs, and notebooks (rubric, cells, lesson, contract, notebook)."""
