"""Layer 1, the box's trust side: what a submission may name (``allowlist``, ``forbidden``), the
restricted builtins and loader that run it (``restricted``, ``loader``), the computations removed
from the worker (``enforce``) and the in-process subject that calls it (``subject``). Each module
imports only those before it in this order: source, forbidden, world, allowlist, restricted,
loader, enforce, subject. Imports only ``core`` besides.
"""

# The modules other layers (and the course) may import; the rest are this layer's own.
__all__ = ["allowlist", "enforce", "forbidden", "loader", "source", "subject", "uploads"]
