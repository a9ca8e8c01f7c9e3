"""The student view of `python3 course.py start` (course.py puts this folder first on JUPYTER_CONFIG_PATH).

The file browser shows the course home, the lessons and the student's work: not the answer keys (solutions/), the
master notebooks (source/), the release copies, the grader or the tooling. This only tidies the view: the files stay
in the clone, and `python3 course.py start --instructor` shows everything, with formgrader.
nbgrader's instructor tools (formgrader, create assignment) and its Assignment List and Courses (which need a
JupyterHub exchange) are switched off here and in labconfig/page_config.json; Validate stays.
"""
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

SHOWN = {"HOME.md", "README.md", "notebooks", "work"}


class StudentContents(AsyncLargeFileManager):
    """Lists only the course home, the README, the licences, notebooks/ and work/ at the course root."""

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
