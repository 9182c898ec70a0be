"""The grader's own failure, kept light: the CLI maps it to exit code 3 before grading imports torch."""


class GraderError(Exception):
    """The grader itself failed (not the submission): exit code 3."""
