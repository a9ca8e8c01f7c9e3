"""Every server on the hub (hub/jupyterhub_config.py puts this folder on each account's JUPYTER_CONFIG_PATH).

A terminal runs bash as a plain, not a login, shell: a login shell would read /etc/profile, which resets PATH, and
`python3` would then be the system's Python instead of the class's environment (with which `python3 course.py grade`
runs in its sandbox).

The instructor's server lets pages of the hub's own origin frame it: Nbgrader > Formgrader shows formgrader in a frame
of JupyterLab, which JupyterHub's default for every server, `frame-ancestors 'none'`, leaves blank ("refused to
connect"). Students' servers keep JupyterHub's default.
"""
import os

c = get_config()  # noqa: F821  (provided by traitlets when the server loads this file)
c.ServerApp.terminado_settings = {"shell_command": ["/bin/bash"]}
if os.environ.get("COURSE_HUB_ROLE") == "instructor":
    c.ServerApp.tornado_settings = {"headers": {"Content-Security-Policy": "frame-ancestors 'self'"}}
