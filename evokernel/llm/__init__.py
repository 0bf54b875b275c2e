"""LLM access through litellm and the reply cache.

client (LLMClient), cache (LLMReply, ReplyCache, request_key), retry and tokens (litellm's lazy
import, retries, token counts and prices); the batch mode: batch (requests and their export),
batch_mode (BatchMode, the search's hook), batch_import (``evokernel llm import``) and submit
(litellm's Batch API). litellm is imported only when a call, a count or a submission needs it.
"""
