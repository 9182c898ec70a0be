"""Layer 2: what a course's suites import to compare outputs and gradients (on the trusted side)."""

# The modules other layers (and the course) may import; the rest are this layer's own.
__all__ = ["compare", "gradcheck", "memo"]
