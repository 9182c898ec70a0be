"""Layer 5: submissions, class batches, due dates, Gradescope, GitHub Classroom, PrairieLearn, the
student bundle, CSV/JUnit/Markdown and the LMS gradebooks. Never imports the sandbox: it grades
through grading."""

# The modules other layers (and the course) may import; the rest are this layer's own.
__all__ = ["batch", "class_report", "classroom", "cluster", "due_dates", "formats", "gradescope", "lms",
           "lms_settings", "prairielearn", "release", "similarity", "submissions"]
