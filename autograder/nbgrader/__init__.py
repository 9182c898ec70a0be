"""Layer 4: the nbgrader pipeline, its sandboxed kernel, trusted re-extraction and re-scoring, and what notebook cells call."""
