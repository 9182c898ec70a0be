"""Layer 4: what is generated from the solutions: stubs, and notebooks (rubric, cells, lesson, contract, notebook)."""

# The modules other layers (and the course) may import; the rest are this layer's own.
__all__ = ["answers", "catalogue", "contract", "lesson", "notebook", "rubric", "stubgen"]
