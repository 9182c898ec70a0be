"""Layer 3: run a course's suites over subjects and collect the points (the pytest plugin, scoring,
failure messages, determinism), the grading processes a batch keeps (supervisor), the terminal report."""

# The modules other layers (and the course) may import; the rest are this layer's own.
__all__ = ["determinism", "grade", "messages", "parallel", "plugin", "prerequisites", "report", "repro",
           "session", "supervisor"]
