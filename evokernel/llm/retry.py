"""litellm's lazy import, the sampling settings as a provider takes them (for the batch mode's
raw request lines), and which failed calls are worth retrying (evokernel.llm.client).

litellm is imported only when a call, a count or a batch submission needs it
(``load_litellm``), so ``import evokernel`` stays fast and light.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable


class HardTimeout(Exception):
    """The provider did not answer within timeout_s (our own deadline, retried like a Timeout)."""


def call_with_deadline(call: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """``call()`` in a daemon thread, waited for at most ``timeout_s`` seconds (a hard deadline
    on top of the provider's own timeout). A daemon thread, not a pool: an abandoned hung call
    must not block the process's exit. Returns: what it returned.
    Raises: what it raised; HardTimeout naming ``what`` after the deadline."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["response"] = call()
        except BaseException as e:  # handed to the waiting caller, which raises it
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=work, name="evokernel-llm", daemon=True).start()
    if not done.wait(timeout_s):
        raise HardTimeout(f"{what}: no reply within {timeout_s} s")
    if "error" in box:
        raise box["error"]
    return box["response"]


def load_litellm() -> Any:
    """The litellm module, imported on first use with its bundled model-cost map."""
    # litellm fetches its model-cost map from the network at import unless told to use the copy
    # it ships; use that copy (costs stay reproducible, and offline machines do not stall).
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm  # lazy: importing litellm takes seconds; `import evokernel` must not
    litellm.suppress_debug_info = True
    return litellm


#: What get_optional_params adds that is not a sampling setting of a batch line's body.
_NOT_SAMPLING = ("stream", "extra_body")


def provider_params(model: str, temperature: float, max_tokens: int | None) -> dict[str, Any]:
    """``temperature`` and ``max_tokens`` in the names and limits the provider of ``model``
    (a litellm "provider/name") accepts, as litellm maps them for a live call with
    ``drop_params=True`` (litellm.utils.get_optional_params): e.g. gpt-5 and o3 take
    ``max_completion_tokens`` and no temperature other than 1, so the temperature is left out.
    A model litellm cannot map keeps both settings as they are, and so does every model where
    litellm is not installed (a batch export needs no litellm: a GPU machine that only
    evaluates and writes requests out need not carry it). Returns: a dict for a
    chat-completions body."""
    plain: dict[str, Any] = {"temperature": temperature}
    if max_tokens is not None:
        plain["max_tokens"] = max_tokens
    try:
        litellm = load_litellm()
        name, provider, _, _ = litellm.get_llm_provider(model)
        mapped = litellm.utils.get_optional_params(
            model=name, custom_llm_provider=provider, temperature=temperature,
            max_tokens=max_tokens, drop_params=True)
    except Exception:            # an unknown provider or model: send what the config says
        return plain
    out = {k: v for k, v in mapped.items() if k not in _NOT_SAMPLING and v is not None}
    return out if "max_tokens" in out or "max_completion_tokens" in out or max_tokens is None \
        else plain


def is_retryable(exc: BaseException) -> bool:
    """Whether a failed call is worth retrying: 429, 5xx, connection errors and timeouts are;
    a context-window overflow, authentication, bad requests and other 4xx errors are not."""
    if isinstance(exc, HardTimeout):
        return True
    litellm = load_litellm()
    never = (litellm.ContextWindowExceededError, litellm.AuthenticationError,
             litellm.BadRequestError, litellm.NotFoundError, litellm.PermissionDeniedError,
             litellm.UnprocessableEntityError)
    if isinstance(exc, never):
        return False
    always = (litellm.RateLimitError, litellm.Timeout, litellm.APIConnectionError,
              litellm.InternalServerError, litellm.ServiceUnavailableError,
              litellm.BadGatewayError)
    if isinstance(exc, always):
        return True
    status = getattr(exc, "status_code", None)
    return isinstance(status, int) and (status >= 500 or status in (408, 429))


def retry_after_s(exc: BaseException | None) -> float:
    """The server's Retry-After header in seconds, or 0.0 when absent or unreadable."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    try:
        return max(0.0, float(headers.get("retry-after", 0.0)))
    except (TypeError, ValueError, AttributeError):
        return 0.0
