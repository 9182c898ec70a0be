"""Layer 4: submissions and uploads, class batches, Gradescope, GitHub Classroom, PrairieLearn, the student bundle, CSV/JUnit/Markdown."""
