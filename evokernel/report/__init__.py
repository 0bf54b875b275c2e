"""Stage: report. `evokernel show` (show), `evokernel report` (write, plots) and the problem-set
table with KernelBench's fast_p (suite).
"""
