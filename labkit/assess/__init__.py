"""Assessment for the labs: concept quizzes and coding exercises with automatic feedback.

    from labkit.assess import MultipleChoice, Numeric, Quiz, Exercise
    from labkit.labs.exercises import exercise     # the labs' exercises, by name

Quizzes are ipywidgets (JupyterLab and Voila); exercises run the learner's code in a forked child
with a time limit. Why not otter-grader or jupyterquiz: see docs/assessment.md.
"""

from labkit.assess.exercise import CheckResult, Exercise, Hint
from labkit.assess.questions import Feedback, MultipleChoice, Numeric
from labkit.assess.quiz import Quiz

__all__ = ["CheckResult", "Exercise", "Feedback", "Hint", "MultipleChoice", "Numeric", "Quiz"]
