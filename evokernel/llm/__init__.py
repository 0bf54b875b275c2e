"""LLM access through litellm (client: the only module that imports litellm) and the reply cache.
"""
