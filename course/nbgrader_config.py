# nbgrader configuration of the course directory (this folder). Run nbgrader
# from here (`cd course && nbgrader ...`), or use `attn-course nbgrader ...`,
# which does so and re-scores every grade cell outside the kernel.
#
# No server, JupyterHub or exchange: the gradebook is nbgrader's embedded
# default, an sqlite file in this folder.
import os

from autograder.core.manifest import load_course
from autograder.nbgrader.restore import RestoreCellMetadata

c = get_config()  # noqa: F821 - provided by traitlets

here = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.course_id = "attention-course"
c.CourseDirectory.root = here  # also when a copy of this folder is graded
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(here, "gradebook.db")

# The kernel: ipykernel's "python3" spec in the virtual environment that runs
# nbgrader (jupyter_client starts it with that same interpreter).
c.Execute.kernel_name = "python3"
# ...started inside a sandbox (bubblewrap): its own uid, no view of this folder, the
# gradebook, the solutions, the hidden tests or any other student's notebook, and every
# process a cell starts ends with the kernel. See autograder/nbgrader/kernel_manager.py.
# Only a plain `nbgrader autograde` starts kernels: `attn-course nbgrader autograde` grades
# outside any notebook and executes none.
c.Execute.kernel_manager_class = "autograder.nbgrader.kernel_manager.SandboxedKernelManager"
c.OverwriteKernelspec.enabled = True
# Per-cell time limit: an endless loop costs that cell, the kernel is interrupted
# and the next cells still run.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True
c.Execute.startup_timeout = 120
# The lessons' demo cells (plots) are for students; the grader's kernel skips them.
c.Execute.skip_cells_with_tag = load_course().brand.demo_tag

# Tamper evidence. Before nbgrader's own checks, restore every nbgrader cell's
# flags (grade, solution, locked, points, type) from the gradebook, so that a
# flipped flag no longer crashes the notebook with "Inconsistent checksums";
# OverwriteCells then restores the source of every locked cell, and deleted
# grade cells are added back.
c.Autograde.sanitize_preprocessors = [
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    RestoreCellMetadata,
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]
c.OverwriteCells.add_missing_cells = True

# Feedback: never the hidden tests' source. `attn-course nbgrader` also replaces
# every output of the autograded notebooks with the trusted grader's report (test
# cells) or nothing (other cells), so no output of the student's kernel (which
# could read this folder) reaches the feedback.
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "nbgrader.preprocessors.ClearHiddenTests",
]
