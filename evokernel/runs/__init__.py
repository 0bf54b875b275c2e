"""Stage: store. One directory per run (store) and the read-only view of it that show and report
use (view).
"""
