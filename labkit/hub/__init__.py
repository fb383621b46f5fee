"""A class on one server: JupyterHub for labkit's labs, one shared copy of the model, the instructor's view.

    make hub LEARNERS="ann bo"      # as root: learners as system users, the shared model, then the hub

What runs, and which file holds it::

    python -m labkit.hub  add-learners | instructor | prepare | start   __main__.py (settings.py: LABKIT_HUB_*)
                          push-update | reset-lab | export-csv         class_tools.py (results.py)
                          password-file (zero-to-jupyterhub's secret)  instructor.py
        │
        jupyterhub (root) ─ configurable-http-proxy (npm, build/hub/)  jupyterhub_setup.py, deploy/jupyterhub_config.py
        ├─ authenticator: first-use passwords for learners, the         jupyterhub_setup.py, instructor.py
        │    instructor's set before the start (or PAM)
        ├─ spawner: LabkitSpawner, one process tree per learner,        spawner.py
        │    in a cgroup with the learner's memory and CPU limits       limits.py
        │    └─ as the learner: copy new course notebooks into ~/work   learner_server.py, workspace.py
        │       then JupyterLab there; kernels map the shared weights   ($LABKIT_SHARED_CACHE)
        ├─ service idle-culler (jupyterhub-idle-culler)
        └─ service class-view: every learner's results, admins only     class_view.py

A learner is a local system user (learners.py) whose home is theirs alone (mode 0700): their copy of the
labs is in ``~/work`` and their results in ``~/work/results``. docs/hub.md walks through it, including
zero-to-jupyterhub on Kubernetes (deploy/z2jh-values.yaml) for a class past one machine.
"""
