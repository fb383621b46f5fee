# JupyterHub's config file for labkit's class hub (`make hub`, `python -m labkit.hub start`).
# Every setting comes from LABKIT_HUB_* environment variables: labkit/hub/settings.py lists them,
# labkit/hub/jupyterhub_setup.py applies them. Add JupyterHub options of your own below the call.
from labkit.hub.jupyterhub_setup import configure

configure(get_config())  # noqa: F821  (JupyterHub defines get_config in a config file's namespace)
