"""Assessment for the labs: concept quizzes and coding exercises with automatic feedback.

    from labkit.assess import MultipleChoice, Numeric, Ordering, WhichFigure, Quiz, Exercise
    from labkit.labs.exercises import exercise     # the labs' exercises, by name
    from labkit.assess import progress             # per lab: quiz, exercises, predictions vs measured

Quizzes are ipywidgets (JupyterLab and Voila), shuffled per learner and scored on first answers;
exercises run the learner's code in a forked child with a time and a memory limit, which holds no
expected value and sends back plain data only. Why not otter-grader or jupyterquiz, and how the
sandbox is hardened: see docs/assessment.md.
"""

from labkit.assess.exercise import CheckResult, Exercise, Hint
from labkit.assess.progress import class_upload, class_view, export_progress, progress
from labkit.assess.questions import Feedback, MultipleChoice, Numeric, Ordering, WhichFigure
from labkit.assess.quiz import Quiz

__all__ = ["CheckResult", "Exercise", "Feedback", "Hint", "MultipleChoice", "Numeric", "Ordering", "Quiz", "WhichFigure", "class_upload",
           "class_view", "export_progress", "progress"]
