"""nbgrader configuration of the course "Attention, step by step" (course root = this folder)."""
import os

from nbconvert.preprocessors import ClearMetadataPreprocessor
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearOutput, Execute, IgnorePattern,
                                    LimitOutput, OverwriteKernelspec, SaveAutoGrades)

from attention_grader.feedback import (TEMPLATE_DIRS, TEMPLATE_PATHS, CourseCSS, FeedbackExporter, GetGradesOrPending,
                                      HideHiddenTests, SanitizeStudentHTML, clean_html, score_or_pending)
from attention_grader.forking import ForkingExecute
from attention_grader.judging import JudgeCells, PlanHiddenChecks
from attention_grader.sanitize import DropDuplicateIds, RestoreCells

c = get_config()  # noqa: F821  (provided by traitlets when nbgrader loads this file)

c.CourseDirectory.course_id = "attention-step-by-step"
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
# timeout: several graders may write at once; SQLite makes a writer wait instead of failing.
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(c.CourseDirectory.root, "gradebook.db") + "?timeout=60"

# generate_assignment registers each assignment in the gradebook and autograde registers each student,
# so nothing has to be added by hand.
c.GenerateAssignment.create_assignment = True
c.Autograde.create_student = True

# A copied or deleted test cell is graded once, as the instructor wrote it, instead of stopping autograde for that
# student (nbgrader issue 1083; attention_grader/sanitize.py).
c.Autograde.sanitize_preprocessors = [ClearOutput, DropDuplicateIds, OverwriteKernelspec, RestoreCells,
                                      CheckCellMetadata]

# Grading: the kernel runs the student's code and probes it; the grader decides (attention_grader/judging.py).
# PlanHiddenChecks turns each test cell's hidden region into a probe call carrying this student's hidden inputs
# (drawn from the instructor's secret); the notebook runs in a fresh fork of a warm, sandboxed process
# (attention_grader/forking.py), or with COURSE_EXECUTOR=kernel in nbgrader's own Execute (one Jupyter kernel per
# notebook, unsandboxed), which the tests use as the reference; JudgeCells compares the probes' records with the
# answer key outside the kernel and writes each test cell's verdict as its outputs, which SaveAutoGrades scores.
_execute = Execute if os.environ.get("COURSE_EXECUTOR") == "kernel" else ForkingExecute
c.Autograde.autograde_preprocessors = [PlanHiddenChecks, _execute, JudgeCells, IgnorePattern, ClearMetadataPreprocessor,
                                       LimitOutput, SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
c.ForkingExecute.timeout = c.Execute.timeout = 60

# The first cell imports torch: allow for a slow, cold machine; still stops an infinite loop.
c.ExecutePreprocessor.timeout = 180
c.ExecutePreprocessor.startup_timeout = 120
# No timestamps in executed notebooks, so that generated files only change when their content does.
c.ExecutePreprocessor.record_timing = False

c.ClearSolutions.code_stub = {
    "python": "# YOUR CODE HERE: replace the next line with your solution (the docstring says what to return)\n"
              "raise NotImplementedError(\"not written yet: replace this line with your solution\")",
}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE: replace this text with your answer in a few sentences."

# A warning on stderr would otherwise score a correct test cell as failed; tracebacks still count.
c.IgnorePattern.enabled = True
c.IgnorePattern.pattern = r"^(?:(?!Traceback)[\s\S])*Warning"

# A grade cell the student deleted is put back and graded, instead of waiting for manual grading.
c.OverwriteCells.add_missing_cells = True

# Feedback shows what failed and why, never the hidden checks (see attention_grader/feedback.py).
# Student markdown and outputs are shown without running any script, in feedback and in formgrader (whose view of a
# submission is an HTMLExporter built from this config): SanitizeStudentHTML (ammonia, in linear time), also applied to
# markdown syntax, and the same cleaner where the templates clean HTML again.
c.GenerateFeedback.preprocessors = [GetGradesOrPending, HideHiddenTests, SanitizeStudentHTML, CourseCSS]
# The course's feedback template names each part in the contents list; formgrader's HTMLExporter keeps its own.
c.GenerateFeedback.exporter_class = FeedbackExporter
c.FeedbackExporter.template_name = "course_feedback"
c.FeedbackExporter.extra_template_basedirs = TEMPLATE_DIRS
c.FeedbackExporter.extra_template_paths = TEMPLATE_PATHS
# "float" shows "not graded yet" where nbgrader's template says 0.0
c.HTMLExporter.filters = {"float": score_or_pending, "clean_html": clean_html}
c.HTMLExporter.preprocessors = [SanitizeStudentHTML]
c.HTMLExporter.sanitize_html = True

# Assignments go out and come back through an exchange folder inside the course (git-ignored); on a shared
# JupyterHub point this at the hub's exchange instead.
c.Exchange.root = os.path.join(c.CourseDirectory.root, "exchange")
