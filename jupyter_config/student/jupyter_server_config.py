"""The student view of `python3 course.py start` (course.py puts this folder first on JUPYTER_CONFIG_PATH).

The file browser shows the course home, the lessons and the student's work: not the answer keys (solutions/), the
master notebooks (source/), the release copies, the grader or the tooling. This only tidies the view: the files stay
in the clone, and `python3 course.py start --instructor` shows everything, with formgrader.
nbgrader's instructor tools (formgrader, create assignment) and its Assignment List and Courses (which need a
JupyterHub exchange) are switched off here and in labconfig/page_config.json; Validate stays.
The lessons (notebooks/) are read-only: a lesson run or changed is never saved, so the course's own copy stays as `git
pull` expects it ("Save As…" keeps a changed lesson under another name). Opening a lesson leaves a mark for the
progress page.
"""
from pathlib import Path

from attention_grader.grading import known_steps
from attention_grader.selfcheck import opened_mark
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

SHOWN = {"HOME.md", "README.md", "notebooks", "work"}


def is_lesson(root, path):
    """notebooks/NN_step.ipynb of a step of the course (a copy saved as another name next to it is the learner's)."""
    return path.strip("/") in {f"notebooks/{step}.ipynb" for step in known_steps(root)}


class StudentContents(AsyncLargeFileManager):
    """Lists only the course home, the README, the licences, notebooks/ and work/ at the course root; lessons are
    read-only."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if is_lesson(self.root_dir, path):
            model["writable"] = False  # JupyterLab then neither autosaves the lesson nor keeps a checkpoint of it
            if content:
                mark = opened_mark(self.root_dir, Path(path).stem)
                mark.parent.mkdir(parents=True, exist_ok=True)
                mark.touch()
        return model

    async def save(self, model, path=""):
        if is_lesson(self.root_dir, path):  # Validate saves even a read-only notebook first: write nothing
            return await self.get(path, content=False)
        return await super().save(model, path)

    async def _dir_model(self, path, content=True):
        model = await super()._dir_model(path, content)
        if path.strip("/") == "" and model.get("content") is not None:
            model["content"] = [entry for entry in model["content"]
                                if entry["name"] in SHOWN or entry["name"].startswith("LICENSE")]
        return model


c = get_config()  # noqa: F821  (provided by traitlets when the server loads this file)
c.ServerApp.contents_manager_class = StudentContents
c.ServerApp.jpserver_extensions = {
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.assignment_list": False,
    "nbgrader.server_extensions.course_list": False,
}
