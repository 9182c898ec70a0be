"""Layer 6: the nbgrader pipeline, its sandboxed kernel, trusted re-extraction and re-scoring, and what notebook cells call."""

# The modules other layers (and the course) may import; the rest are this layer's own.
__all__ = ["kernel_side", "pipeline", "restore"]
