"""Reference solutions for the lab exercises.

The checks in ``labkit.assess.exercises`` compare the learner's code with these. Labs never import
or print them; ``exercise.show_solution()`` displays one on purpose. Each is written the way we
would like the learner's answer to read.
"""
