"""JupyterHub for a class of the course, started by `sudo python3 course.py hub` (hub/classhub.py), which makes the
accounts and folders and writes the class to ROOT/hub/class.json; docs/hub.md.

Each account logs in with its Unix password (PAM) and gets its own JupyterLab, run as that account. Students see the
course home, the lessons, the Assignment List and Validate; the instructor's server runs in the course (their home),
with formgrader, and `python3 course.py grade` in its terminal.
"""
import json
import os

c = get_config()  # noqa: F821  (provided by traitlets when JupyterHub loads this file)
CLASS = json.loads(open(os.environ["COURSE_HUB_CLASS"]).read())
ROOT = CLASS["root"]

c.JupyterHub.bind_url = f"http://{CLASS['ip']}:{CLASS['port']}"
c.JupyterHub.hub_port = CLASS["hub_port"]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{CLASS['api_port']}"
c.ConfigurableHTTPProxy.command = [CLASS["proxy"]]
c.ConfigurableHTTPProxy.pid_file = f"{ROOT}/hub/proxy.pid"
c.JupyterHub.db_url = f"sqlite:///{ROOT}/hub/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{ROOT}/hub/jupyterhub_cookie_secret"

c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = {CLASS["instructor"], *CLASS["students"]}

c.Spawner.cmd = [f"{ROOT}/env/bin/python", "-m", "jupyterhub.singleuser"]
c.Spawner.default_url = "/lab/tree/HOME.md"


def config_path(spawner):
    """Jupyter settings: the student view (hub/student/, with the exchange), then every server's on the hub
    (hub/server/), then the course's own (jupyter_config/: the course home, Validate's words)."""
    views = [] if spawner.user.name == CLASS["instructor"] else [f"{ROOT}/public/student"]
    return os.pathsep.join(views + [f"{ROOT}/public/server", f"{ROOT}/public/jupyter_config"])


c.Spawner.environment = {"PATH": f"{ROOT}/env/bin:/usr/local/bin:/usr/bin:/bin", "JUPYTER_CONFIG_PATH": config_path,
                         # hub/server/: the instructor's JupyterLab shows formgrader in a frame
                         "COURSE_HUB_ROLE": lambda spawner: "instructor" if spawner.user.name == CLASS["instructor"]
                         else "student"}
# A busy machine: importing torch in the first kernels of a class takes a while.
c.Spawner.start_timeout = c.Spawner.http_timeout = 120
