"""Framework errors. Each says what was wrong and where, e.g. ``problems/x.py: no get_inputs()``.

A bad *candidate* never raises: evaluation returns an ``EvalResult`` with a named reason. These
errors are for bad problems, bad configuration, and LLM calls that cannot be completed.
"""


class EvokernelError(Exception):
    """Base class of every error evokernel raises on purpose."""


class ProblemError(EvokernelError):
    """A problem file or folder is malformed (missing ``Model``, ``get_inputs``, ...)."""


class ConfigError(EvokernelError):
    """A configuration value is invalid, or the machine cannot run what was asked."""


class LLMError(EvokernelError):
    """An LLM call failed for good (after retries, or with an error that is not retried)."""


class BudgetExceeded(LLMError):
    """The run's token or cost budget is spent; the search stops between generations."""


class SandboxError(ConfigError):
    """Candidate code cannot be contained as required (``--require-sandbox``): the message
    names each containment step this machine does not allow (evokernel.sandbox.support)."""


class NoGPUError(ConfigError):
    """The command needs a CUDA GPU and none is visible."""


class LLMPending(LLMError):
    """Batch mode (``--llm-batch``): the request was written out for a batch API instead of being
    sent, and its reply is not in the reply cache yet. The search stops cleanly before evaluating
    the generation; ``evokernel llm import`` fills the cache and ``--resume`` goes on."""


class ClusterError(EvokernelError):
    """The Dask cluster the evaluation runs on cannot be reached or went away (its scheduler's
    address named): the run store keeps every verdict that came back, so ``--resume`` goes on
    once a scheduler is up again (evokernel.cluster)."""


class EvaluationDeferred(EvokernelError):
    """Batch mode on a machine without a GPU (evokernel.engine.deferred): a round's candidates
    are ready to be evaluated, and evaluating needs a CUDA GPU. The search stops cleanly before
    anything of the round is evaluated; ``--resume`` on a machine with a GPU goes on."""


class WorkerClosed(EvokernelError):
    """The evaluator was closed (a shutdown: SIGTERM, a time limit) while a GPU worker was
    evaluating a candidate. No verdict: the candidate stays pending in the run store, and
    ``--resume`` evaluates it again (evokernel.engine.handle)."""
