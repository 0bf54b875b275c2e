"""Stand-ins for demonstrations and tests, never for results: a fake evaluator whose numbers are
not measurements, a scripted LLM whose replies no model wrote, and a local fake OpenAI-compatible
server that serves them.
"""
