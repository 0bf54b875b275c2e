"""Stage: evaluation. Candidates in, EvalResults out: the evaluator (CPU builds, then one GPU
worker per GPU), the parent-side worker handle, the worker process and its message protocol, and
the in-process anti-tamper checks. The worker's order of checks lives in its pipeline of stages.
"""
