"""Your work: one module per unit, for you to write. Fill in every TODO; the docstrings give the
shapes. Generated from the course's reference by its `build`: instructors edit the reference,
never these files."""
