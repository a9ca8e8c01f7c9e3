"""A student's server on the hub (hub/jupyterhub_config.py puts this folder first on the student's
JUPYTER_CONFIG_PATH): the course home and Validate as in `course.py start`, the Assignment List to fetch and submit,
without nbgrader's instructor tools (formgrader, create assignment, courses). This tidies the view; what keeps a student
out of the answer keys and the grader is that their account cannot read them (docs/hub.md).
"""
c = get_config()  # noqa: F821  (provided by traitlets when the server loads this file)
c.ServerApp.jpserver_extensions = {
    "nbgrader.server_extensions.formgrader": False,
    "nbgrader.server_extensions.course_list": False,
}
