"""The quality axis: prompts with known answers, and the rules that score an answer.

Requests can carry an expected answer; a run that keeps its answers reports accuracy, and
``loadgen compare`` the agreement of two runs' outputs (loadgen/analysis/agreement.py). This
package is a leaf beside the workload: it imports nothing of the runner, report, CLI or
analysis, so any of them may use it.
"""

from loadgen.quality.score import MATCHES, normalize, score
from loadgen.quality.tasks import KINDS, Task, TaskSet, expected_output_tokens

__all__ = ["KINDS", "MATCHES", "Task", "TaskSet", "expected_output_tokens", "normalize", "score"]
